"""Maintenance, run by the ``maintain`` job (scheduled by ``python -m memo_mw.cron``) or ``memo-mw
maintain``, idempotent at a given ``now``: an expired task waits as ``pending_confirm`` (recall shows it
once more, saying it again confirms it) and is deleted, audited, if still unconfirmed at ``remove_at``;
of two active memories on one key with opposite polarity (racing workers, an import), the newer stays;
chat history past its retention is deleted."""

from typing import Any

from . import defaults, history
from .store import ACTIVE, PENDING_CONFIRM, Store


def maintain(store: Store, *, now: int, confirm_days: float = defaults.CONFIRM_DAYS) -> dict[str, int]:
    """Apply expiry, removal, consistency and history retention to every user; how many rows each step changed."""
    with store.write():
        expired = store.db.execute(
            "update memories set status = ?, active = 0, remove_at = ?, confirm_shown_at = null, updated_at = ? "
            "where status = ? and expires_at is not null and expires_at <= ?",
            [PENDING_CONFIRM, int(now + confirm_days * 86400), now, ACTIVE, now]).rowcount
        resolved = _resolve_contradictions(store, now)
        pruned = history.prune(store.db, now)
    removed = 0
    due = store.db.execute("select distinct user_id from memories where status = ? and remove_at <= ? order by 1",
                           [PENDING_CONFIRM, now]).fetchall()
    for (user_id,) in due:
        ids = [m["id"] for m in store.rows("where user_id = ? and status = ? and remove_at <= ?",
                                          [user_id, PENDING_CONFIRM, now])]
        removed += store.delete(user_id, ids, ts=now, action="expired", reason="not confirmed after expiry")
    store.db.reclaim()  # the pruned and deleted text leaves the files too
    return {"expired": expired, "removed": removed, "resolved": resolved, "history_pruned": pruned}


def _resolve_contradictions(store: Store, now: int) -> int:
    rows = store.db.execute(
        "select m.id, m.user_id, m.key from memories m join ("
        "  select user_id, key from memories where active = 1 group by user_id, key"
        "  having min(polarity) <> max(polarity)) c on m.user_id = c.user_id and m.key = c.key "
        "where m.active = 1 order by m.user_id, m.key, m.source_ts desc, m.id desc").fetchall()
    newest: dict[tuple[str, str], int] = {}
    for memory_id, user_id, key in rows:
        if (user_id, key) in newest:
            store.supersede(memory_id, newest[user_id, key], now)
        else:
            newest[user_id, key] = memory_id  # the first, newest statement stays
    return len(rows) - len(newest)


def summary(counts: dict[str, Any]) -> str:
    return ", ".join(f"{name} {value}" for name, value in counts.items())
