"""What the store holds about one user, for that user to see, correct and delete.

The reads and writes behind the web page and the JSON API (:mod:`memo_mw.admin`), kept
free of Flask like the store itself. Every function takes the user id and touches that
user's rows only: a memory id of another user is the same as an id that does not exist.

Writes go through the store (:class:`memo_mw.store.Store`), so an edit or a deletion from the
page is the same as one made by a job: edits are PII-masked and merged into an equal memory
(the store's dedup), deletions are physical (``secure_delete``, WAL checkpoint) and leave an
``audit`` row with a count, never content.

What the user said and the queue still holds (:mod:`memo_mw.state`, :mod:`memo_mw.queue`) follows
a deletion or an edit too, by :func:`forget_waiting` and :func:`drop_pending_slot`: recall shows
pending statements until their jobs run, and a waiting job must not bring back deleted text.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from . import counters
from . import insights as profile
from .forgetting import forget_marker, without_slot
from .jobs import forget_waiting as forget_waiting_jobs
from .privacy import mask_pii
from .queue import LocalQueue, RedisQueue
from .store import ACTIVE, PENDING_CONFIRM, Store, index_terms, memory_words
from .text import memory_key, nfkc, normalize

log = logging.getLogger(__name__)

#: Memory types and statuses, in the order the page shows them.
TYPES = ("style", "preference", "fact", "task", "commitment")
STATUSES = ("active", "pending_confirm", "superseded")


def memories(store: Store, user_id: str, *, type: str | None = None, status: str | None = None,
             q: str | None = None) -> list[dict[str, Any]]:
    """The user's memories of every status, oldest first; ``type``/``status`` narrow them,
    ``q`` keeps those whose content, excerpt or key contains it (case and width folded)."""
    narrowing = [(f"{name} = ?", value) for name, value in (("type", type), ("status", status)) if value is not None]
    where = " and ".join(["user_id = ?", *(sql for sql, _ in narrowing)])
    rows = store.rows(f"where {where} order by id", [user_id, *(value for _, value in narrowing)])
    if q:
        needle = nfkc(q).casefold().strip()
        rows = [m for m in rows if any(needle in nfkc(m[f] or "").casefold() for f in ("content", "excerpt", "key"))]
    return rows


def one_line(text: str) -> str:
    """NFKC, on one line, spaces collapsed."""
    return " ".join(nfkc(text).split())


def clean_content(text: str) -> str:
    """An edited line as the store would hold it: :func:`one_line`, PII masked."""
    return mask_pii(one_line(text))


def edit(store: Store, user_id: str, memory_id: int, content: str, *, at: float, reason: str,
         topics: list[str] | None = None) -> tuple[str, dict[str, Any]] | None:
    """Replace a memory's line with ``content`` (masked here); None when the user has no such memory.

    ``at`` is the server's time of the edit, to the fraction of a second: a statement on the old
    slot that the server read before it and that still waits for its job is not stored when the
    job runs (:meth:`Store.edit <memo_mw.store.Store.edit>` leaves the marker). Returns
    ``(outcome, memory)``:

    * ``unchanged``: the line is the same;
    * ``merged``: the new line equals another memory of the user (active or awaiting
      confirmation): as when a statement is said again, that memory stays, confirmed, with
      the hits and message ids of both, and the edited one is deleted (audit ``edit_merge``);
    * ``edited``: the line (and the excerpt, so the old wording is kept nowhere) is replaced
      and tagged with ``topics``. The slot (``key``) stays while the new line still names it,
      else it becomes the line.

    The old text is overwritten in the database files (``secure_delete`` and a checkpoint).
    """
    content = clean_content(content)
    with store.write():
        row = store.get(user_id, memory_id)
        if row is None:
            return None
        if content == row["content"]:
            return "unchanged", row
        store.edit(user_id, memory_id, content, at)  # the marker goes on the slot the user corrected
        others = store.rows("where user_id = ? and id != ? and (active = 1 or status = ?) order by id",
                            [user_id, memory_id, PENDING_CONFIRM])
        duplicate = next((m for m in others if normalize(m["content"]) == normalize(content)), None)
        if duplicate is not None:
            _merge(store, row, duplicate, ts=int(at), reason=reason)
            outcome, result_id = "merged", duplicate["id"]
        else:
            _rewrite(store, row, content, topics, ts=int(at), reason=reason)
            outcome, result_id = "edited", memory_id
        result = store.get(user_id, result_id)
    store.vacuum_deleted()
    return outcome, result


def _rewrite(store: Store, row: dict[str, Any], content: str, topics: list[str] | None, *, ts: int,
             reason: str) -> None:
    """The fields Store.edit leaves as they were: the excerpt (the old wording), the slot and the
    topics, and the index terms that follow from them; and the audit row."""
    key = row["key"] if normalize(row["key"]) in normalize(content) else memory_key(content)
    topics = row["topics"] if topics is None else sorted(topics)
    terms = " ".join(index_terms(row["user_id"], memory_words(content, key, topics)))
    store.db.execute("update memories set excerpt = ?, key = ?, topics = ?, terms = ? where id = ?",
                     [content, key, json.dumps(topics), terms, row["id"]])
    store.db.execute("insert into audit (user_id, action, count, at, reason) values (?, 'edit', 1, ?, ?)",
                     [row["user_id"], ts, reason])


def _merge(store: Store, row: dict[str, Any], duplicate: dict[str, Any], *, ts: int, reason: str) -> None:
    """Fold the edited memory into its equal: confirmed, with the hits and message ids of both."""
    ids = duplicate["source_ids"] + [i for i in row["source_ids"] if i not in duplicate["source_ids"]]
    store.db.execute(
        "update memories set status = ?, active = 1, confirm_shown_at = null, remove_at = null, hits = ?,"
        " confidence = ?, source_ids = ?, updated_at = ? where id = ?",
        [ACTIVE, duplicate["hits"] + row["hits"] + 1, max(duplicate["confidence"] or 0, row["confidence"] or 0),
         json.dumps(ids), ts, duplicate["id"]])
    # Memories the edited one had replaced now point at the one that stays.
    store.db.execute("update memories set superseded_by = ? where user_id = ? and superseded_by = ?",
                     [duplicate["id"], row["user_id"], row["id"]])
    store.delete(row["user_id"], [row["id"]], ts=ts, action="edit_merge", reason=reason)


def delete(store: Store, user_id: str, memory_id: int, *, ts: int, reason: str) -> dict[str, Any] | None:
    """Physically delete one memory of the user (audit ``delete``); the deleted memory, or None."""
    with store.write():
        row = store.get(user_id, memory_id)
        if row is None:
            return None
        store.delete(user_id, [memory_id], ts=ts, reason=reason)
    store.vacuum_deleted()  # skipped inside the transaction above: the old text leaves the files now
    return row


def export(store: Store, user_id: str, *, now: int) -> dict[str, Any]:
    """Everything stored about the user: every memory (all statuses), the audit rows, the
    insights and the topic counts they are made from."""
    return {
        "user_id": user_id,
        "generated_at": now,
        "memories": memories(store, user_id),
        "audit": store.audit(user_id),
        "insights": profile.read(store, user_id),
        "topic_counts": counters.rows(store, user_id),
    }


def forget_waiting(queue: RedisQueue | LocalQueue | None, user_id: str, match: str | None, ts: int,
                   at: float) -> bool:
    """Take what a deletion names (``match``; None: everything) out of the user's pending
    memories and waiting capture jobs said before ``at``, the server's time of the deletion.

    Call it before the deletion itself, so a job that starts meanwhile already sees the marker.
    False when the queue could not be reached (the deletion in SQLite still happens).
    """
    if queue is None:
        return True
    marker = forget_marker(match, ts, at, pending_only=True)  # the store deletes at once
    try:
        if isinstance(queue, RedisQueue):
            queue.forget_spooled(user_id, marker)
            forget_waiting_jobs(queue.rq, user_id, marker)  # the state's marker, and the rq jobs
        else:
            queue.state.add_forget(user_id, marker)
            # The job thread does not read the markers: let it run what it holds, then delete.
            queue.join()
    except Exception:
        log.exception("memo-mw: could not reach the queue to drop the user's waiting jobs")
        return False
    return True


def drop_pending_slot(queue: RedisQueue | LocalQueue | None, user_id: str, key: str, at: float) -> None:
    """Take the statements on slot ``key`` read by ``at`` (an edit's time) out of the user's
    pending memories: the store will not store them over the edit, so recall must not show them."""
    if queue is None:
        return
    try:
        for payload in queue.state.read(user_id).pending:
            kept = without_slot(payload, key, at)
            if kept["candidates"] == payload.get("candidates"):
                continue
            if kept["candidates"]:
                queue.state.put_pending(user_id, kept)
            else:
                queue.state.drop_pending(user_id, [payload["job_key"]])
    except Exception:
        log.exception("memo-mw: could not take an edited slot out of the user's pending memories")


def pending(queue: RedisQueue | LocalQueue | None, user_id: str) -> list[dict[str, Any]]:
    """The user's captured memories still waiting for their job (for the export)."""
    try:
        return [] if queue is None else list(queue.state.read(user_id).pending)
    except Exception:
        log.exception("memo-mw: could not read the user's pending memories")
        return []
