"""Maintenance: expiry of tasks, removal after the confirmation period, and consistency.

Run by the ``maintain`` job, which ``rq cron memo_mw.cron`` schedules, or by
``memo-mw maintain``. Idempotent: running it twice at the same ``now`` changes nothing more.

* An active memory whose ``expires_at`` has passed (tasks, "next time" notes) becomes
  ``pending_confirm``: recall shows it once more, marked as needing confirmation, and the
  user may say it again (which makes it active again).
* A ``pending_confirm`` memory still unconfirmed at ``remove_at`` (expiry plus the
  confirmation period) is deleted, physically, with an audit row.
* Contradictions: two active memories of one user on the same key with opposite polarity
  (which concurrent workers or an import can leave) are resolved by time: the newer
  statement stays, the older is superseded.
"""

from __future__ import annotations

from typing import Any

from . import defaults
from .store import ACTIVE, PENDING_CONFIRM, Store


def maintain(store: Store, *, now: int, confirm_days: float = defaults.CONFIRM_DAYS) -> dict[str, int]:
    """Apply expiry, removal and consistency to every user; return how many memories each step changed."""
    db = store.db
    with store.write():
        expired = db.execute(
            "update memories set status = ?, active = 0, remove_at = ?, confirm_shown_at = null, updated_at = ? "
            "where status = ? and expires_at is not null and expires_at <= ?",
            [PENDING_CONFIRM, int(now + confirm_days * 86400), now, ACTIVE, now]).rowcount
        resolved = _resolve_contradictions(store, now)
    removed = 0
    due = db.execute("select user_id, count(*) from memories where status = ? and remove_at <= ? group by user_id",
                     [PENDING_CONFIRM, now]).fetchall()
    for user_id, _ in due:
        ids = [m["id"] for m in store.rows("where user_id = ? and status = ? and remove_at <= ?",
                                          [user_id, PENDING_CONFIRM, now])]
        removed += store.delete(user_id, ids, ts=now, action="expired", reason="not confirmed after expiry")
    return {"expired": expired, "removed": removed, "resolved": resolved}


def _resolve_contradictions(store: Store, now: int) -> int:
    rows = store.db.execute(
        "select m.id, m.user_id, m.key, m.source_ts from memories m join ("
        "  select user_id, key from memories where active = 1 group by user_id, key"
        "  having min(polarity) <> max(polarity)) c on m.user_id = c.user_id and m.key = c.key "
        "where m.active = 1 order by m.user_id, m.key, m.source_ts desc, m.id desc").fetchall()
    resolved, newest = 0, {}
    for memory_id, user_id, key, _ in rows:
        slot = (user_id, key)
        if slot not in newest:
            newest[slot] = memory_id  # the newest statement stays
            continue
        store.supersede(memory_id, newest[slot], now)
        resolved += 1
    return resolved


def summary(counts: dict[str, Any]) -> str:
    return ", ".join(f"{name} {value}" for name, value in counts.items())
