"""What the store holds about one user, for that user to see, correct and delete.

The reads and writes behind the web page and the JSON API (:mod:`memo_mw.admin`), kept
free of Flask like the store itself. Every function takes the user id and touches that
user's rows only: a memory id of another user is the same as an id that does not exist.

Writes go through the store's own transaction, deletion and audit helpers, so an edit or a
deletion from the page is the same as one made by a job: edits are PII-masked and merged
into an equal memory (the store's dedup), deletions are physical (``secure_delete``, WAL
checkpoint) and leave an ``audit`` row with a count, never content.
"""

from __future__ import annotations

import json
from typing import Any

from .privacy import mask_pii
from .store import _SELECT, ACTIVE, PENDING_CONFIRM, Store, _index_memory, row_to_memory
from .text import memory_key, nfkc, normalize

#: Memory types and statuses, in the order the page shows them.
TYPES = ("style", "preference", "fact", "task", "commitment")
STATUSES = ("active", "pending_confirm", "superseded")


def memories(store: Store, user_id: str, *, type: str | None = None, status: str | None = None,
             q: str | None = None) -> list[dict[str, Any]]:
    """The user's memories of every status, oldest first; ``type``/``status`` narrow them,
    ``q`` keeps those whose content, excerpt or key contains it (case and width folded)."""
    where, args = ["user_id = ?"], [user_id]
    if type is not None:
        where.append("type = ?")
        args.append(type)
    if status is not None:
        where.append("status = ?")
        args.append(status)
    rows = [row_to_memory(r) for r in store.db.execute(
        _SELECT + " where " + " and ".join(where) + " order by id", args).fetchall()]
    if q:
        needle = nfkc(q).casefold().strip()
        rows = [m for m in rows if any(needle in nfkc(m[f] or "").casefold() for f in ("content", "excerpt", "key"))]
    return rows


def memory(store: Store, user_id: str, memory_id: int) -> dict[str, Any] | None:
    """One memory of the user; None when there is none with this id, or it is another user's."""
    row = store.db.execute(_SELECT + " where id = ? and user_id = ?", [memory_id, user_id]).fetchone()
    return row_to_memory(row) if row else None


def audit(store: Store, user_id: str) -> list[dict[str, Any]]:
    """The user's audit rows (deletions and edits: action, count, time, reason), oldest first."""
    cursor = store.db.execute("select id, action, count, at, reason from audit where user_id = ? order by id",
                              [user_id])
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def one_line(text: str) -> str:
    """NFKC, on one line, spaces collapsed."""
    return " ".join(nfkc(text).split())


def clean_content(text: str) -> str:
    """An edited line as the store would hold it: :func:`one_line`, PII masked."""
    return mask_pii(one_line(text))


def edit(store: Store, user_id: str, memory_id: int, content: str, *, ts: int, reason: str,
         topics: list[str] | None = None, at: float | None = None) -> tuple[str, dict[str, Any]] | None:
    """Replace a memory's line with ``content`` (masked here); None when the user has no such memory.

    Returns ``(outcome, memory)``:

    * ``unchanged``: the line is the same;
    * ``merged``: the new line equals another memory of the user (active or awaiting
      confirmation): as when a statement is said again, that memory stays, confirmed, with
      the hits and message ids of both, and the edited one is deleted (audit ``edit_merge``);
    * ``edited``: the line (and the excerpt, so the old wording is kept nowhere) is replaced.
      The slot (``key``) stays while the new line still names it, else it becomes the line.

    Either way a statement of the old slot whose message the server read before ``at`` (the
    edit's time to the fraction of a second; ``ts`` if not given) and that is still waiting for
    its job is not stored when the job runs (Store.mark_edited): the edit is the newer word.

    The old text is overwritten in the database files (``secure_delete`` and a checkpoint).
    """
    content = clean_content(content)
    with store.write():
        row = memory(store, user_id, memory_id)
        if row is None:
            return None
        if content == row["content"]:
            return "unchanged", row
        # A statement of the old slot read before now, still waiting for its job, must not undo this.
        store.mark_edited(user_id, row["key"], ts if at is None else at)
        same = [row_to_memory(r) for r in store.db.execute(
            _SELECT + " where user_id = ? and id != ? and (active = 1 or status = ?) order by id",
            [user_id, memory_id, PENDING_CONFIRM]).fetchall()]
        duplicate = next((m for m in same if normalize(m["content"]) == normalize(content)), None)
        if duplicate is not None:
            ids = duplicate["source_ids"] + [i for i in row["source_ids"] if i not in duplicate["source_ids"]]
            store._update(duplicate["id"], {
                "status": ACTIVE, "active": 1, "confirm_shown_at": None, "remove_at": None,
                "hits": duplicate["hits"] + row["hits"] + 1,
                "confidence": max(duplicate["confidence"] or 0, row["confidence"] or 0),
                "source_ids": json.dumps(ids), "updated_at": ts,
            })
            # Memories the edited one had replaced now point at the one that stays.
            store.db.execute("update memories set superseded_by = ? where user_id = ? and superseded_by = ?",
                             [duplicate["id"], user_id, memory_id])
            store._delete(user_id, [memory_id], ts=ts, action="edit_merge", reason=reason)
            outcome, result_id = "merged", duplicate["id"]
        else:
            key = row["key"] if normalize(row["key"]) in normalize(content) else memory_key(content)
            topics = row["topics"] if topics is None else sorted(topics)
            store._update(memory_id, {"content": content, "excerpt": content, "key": key,
                                      "topics": json.dumps(topics), "updated_at": ts})
            _index_memory(store.db, memory_id, user_id, content, key, topics)
            store.db.execute("insert into audit (user_id, action, count, at, reason) values (?, 'edit', 1, ?, ?)",
                             [user_id, ts, reason])
            outcome, result_id = "edited", memory_id
        result = memory(store, user_id, result_id)
    store._checkpoint(1)
    return outcome, result


def delete(store: Store, user_id: str, memory_id: int, *, ts: int, reason: str,
           at: float | None = None) -> dict[str, Any] | None:
    """Physically delete one memory of the user (audit ``delete``); the deleted memory, or None.
    ``at``: the server's time of the deletion, to the fraction of a second (Store.mark_forgotten)."""
    with store.write():
        row = memory(store, user_id, memory_id)
        if row is None:
            return None
        store._delete(user_id, [memory_id], ts=ts, action="delete", reason=reason)
        # A statement of it still waiting in a queue (Redis down, a retry) must not bring it back.
        store.mark_forgotten(user_id, row["content"], ts, at=at)
    store._checkpoint(1)
    return row


def insights(store: Store, user_id: str) -> list[dict[str, Any]]:
    """The user's insights (memo_mw.insights), best first."""
    from . import insights as profile

    return profile.read(store, user_id)


def export(store: Store, user_id: str, *, now: int) -> dict[str, Any]:
    """Everything stored about the user: every memory (all statuses), the audit rows, the
    insights and the topic counts they are made from."""
    from . import counters

    return {
        "user_id": user_id,
        "generated_at": now,
        "memories": memories(store, user_id),
        "audit": audit(store, user_id),
        "insights": insights(store, user_id),
        "topic_counts": counters.rows(store, user_id),
    }
