"""What the store holds about one user, for that user to see, correct and delete, without Flask:
memories and chat history. Every function touches one user's rows only: another user's memory or
message id is the same as one that does not exist. Edits are PII-masked; deletions are physical and
audited by count, never content."""

import json
import logging
from collections.abc import Callable
from typing import Any

from . import counters
from . import history as chat
from . import insights as profile
from .forgetting import forget_marker, without_slot
from .jobs import forget_waiting as forget_waiting_jobs
from .privacy import mask_pii
from .queue import LocalQueue, RedisQueue
from .store import ACTIVE, PENDING_CONFIRM, Store, indexed
from .text import memory_key, nfkc, normalize

log = logging.getLogger(__name__)

#: Memory types and statuses, in the order the page shows them.
TYPES = ("style", "preference", "fact", "task", "commitment")
STATUSES = ("active", "pending_confirm", "superseded")
#: A history message's fields as the user sees and exports them.
HISTORY_FIELDS = ("id", "session_id", "message_id", "ts", "text")


def memories(store: Store, user_id: str, *, type: str | None = None, status: str | None = None,
             q: str | None = None) -> list[dict[str, Any]]:
    """The user's memories of every status, oldest first; ``type``/``status`` narrow them,
    ``q`` keeps those whose content, excerpt or key contains it (case and width folded)."""
    narrowing = [(f"{name} = ?", value) for name, value in (("type", type), ("status", status)) if value is not None]
    where = " and ".join(["user_id = ?", *(sql for sql, _ in narrowing)])
    rows = store.rows(f"where {where} order by id", [user_id, *(value for _, value in narrowing)])
    if q:
        rows = [m for m in rows if any(_contains(m[f], q) for f in ("content", "excerpt", "key"))]
    return rows


def _contains(text: str | None, q: str) -> bool:
    return nfkc(q).casefold().strip() in nfkc(text or "").casefold()


def history(store: Store, user_id: str, *, q: str | None = None) -> list[dict[str, Any]]:
    """The user's chat history (masked messages), oldest first; ``q`` as for :func:`memories`."""
    return [{f: m[f] for f in HISTORY_FIELDS} for m in chat.rows(store.db, user_id) if not q or _contains(m["text"], q)]


def history_enabled(store: Store, user_id: str) -> bool:
    return chat.enabled(store.db, user_id)


def delete_history(store: Store, user_id: str, message_id: int | None = None, *, ts: int, reason: str) -> int:
    """Physically delete one of the user's history messages (None: all); how many went (audit ``delete_history``)."""
    ids = None if message_id is None else [message_id]
    return _drop_history(store, user_id, lambda: chat.delete(store.db, user_id, ids), ts=ts, reason=reason)


def set_history(store: Store, user_id: str, on: bool, *, ts: int, reason: str) -> int:
    """Turn the user's chat history on or off; off deletes what is kept, as :func:`delete_history`."""
    return _drop_history(store, user_id, lambda: chat.set_enabled(store.db, user_id, on, ts=ts), ts=ts, reason=reason)


def _drop_history(store: Store, user_id: str, drop: Callable[[], int], *, ts: int, reason: str) -> int:
    with store.write():
        if count := drop():
            store.audit_row(user_id, "delete_history", count, ts=ts, reason=reason)
    store.vacuum_deleted()
    return count


def one_line(text: str) -> str:
    return " ".join(nfkc(text).split())


def clean_content(text: str) -> str:
    """An edited line as the store would hold it: :func:`one_line`, PII masked."""
    return mask_pii(one_line(text))


def edit(store: Store, user_id: str, memory_id: int, content: str, *, at: float, reason: str,
         topics: list[str] | None = None) -> tuple[str, dict[str, Any]] | None:
    """Replace a memory's line with ``content`` (masked here): ``(outcome, memory)``, or None when the user has
    no such memory. ``at`` is the server's time: a statement on the old slot read before it and still waiting
    for its job is not stored. Outcomes: ``unchanged``; ``merged`` into an equal memory, which stays (audit
    ``edit_merge``); ``edited`` (the excerpt too: the old wording is kept nowhere; the slot stays while named)."""
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
    """What Store.edit leaves as it was (the excerpt, the slot, the topics and their index); the audit row."""
    key = row["key"] if normalize(row["key"]) in normalize(content) else memory_key(content)
    topics = row["topics"] if topics is None else sorted(topics)
    store.update(row["id"], {"excerpt": content, "key": key, "topics": json.dumps(topics),
                             **indexed(row["user_id"], content, key, topics)})
    store.audit_row(row["user_id"], "edit", 1, ts=ts, reason=reason)


def _merge(store: Store, row: dict[str, Any], duplicate: dict[str, Any], *, ts: int, reason: str) -> None:
    """Fold the edited memory into its equal: confirmed, with the hits and message ids of both."""
    ids = duplicate["source_ids"] + [i for i in row["source_ids"] if i not in duplicate["source_ids"]]
    store.update(duplicate["id"], {
        "status": ACTIVE, "active": 1, "confirm_shown_at": None, "remove_at": None, "updated_at": ts,
        "hits": duplicate["hits"] + row["hits"] + 1, "source_ids": json.dumps(ids),
        "confidence": max(duplicate["confidence"] or 0, row["confidence"] or 0)})
    # Memories the edited one had replaced now point at the one that stays.
    store.db.execute("update memories set superseded_by = ? where user_id = ? and superseded_by = ?",
                     [duplicate["id"], row["user_id"], row["id"]])
    store.delete(row["user_id"], [row["id"]], ts=ts, action="edit_merge", reason=reason)


def delete(store: Store, user_id: str, memory_id: int, *, ts: int, reason: str) -> dict[str, Any] | None:
    """Physically delete one memory of the user (audit ``delete``); the deleted memory, or None."""
    row = store.get(user_id, memory_id)  # (0 deleted: someone else deleted it meanwhile)
    return row if row is not None and store.delete(user_id, [memory_id], ts=ts, reason=reason) else None


def export(store: Store, user_id: str, *, now: int) -> dict[str, Any]:
    """Everything stored about the user: memories of every status, chat history, audit rows, insights
    and topic counts."""
    return {"user_id": user_id, "generated_at": now, "memories": memories(store, user_id),
            "history": history(store, user_id), "history_enabled": history_enabled(store, user_id),
            "audit": store.audit(user_id), "insights": profile.read(store, user_id),
            "topic_counts": counters.rows(store, user_id)}


def forget_waiting(queue: RedisQueue | LocalQueue | None, user_id: str, match: str | None, ts: int,
                   at: float) -> bool:
    """Take what a deletion names (``match``; None: everything), said before ``at`` (the server's time),
    out of the user's pending memories and waiting jobs. Call it before the deletion, so a job that
    starts meanwhile sees the marker. False when the queue could not be reached."""
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
            if kept["candidates"] and kept["candidates"] != payload.get("candidates"):
                queue.state.put_pending(user_id, kept)
            elif not kept["candidates"]:
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
