"""The store: memories, chat history, insights and counters behind one narrow interface (``remember``,
``supersede``, ``touch``, ``forget``, ``delete``, ``edit``, ``list``, ``get``, ``search``), on one of two
engines: a SQLite file (:mod:`memo_mw.sqlite`, the default) or a PostgreSQL database for more than one host
(:mod:`memo_mw.postgres`, ``db="postgresql://..."``). The SQL here is written once for both.

Jobs, the memories page and the CLI write; the chat request only reads. Index terms are hashed with
the user id; forgetting is physical (docs/design.md, "The store")."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import defaults, history, postgres
from .forgetting import forget_marker, forgotten, received_at, slot_hash, stored_markers, without_forgotten
from .sqlite import SQLite
from .text import index_terms, normalize, tokens

ACTIVE, SUPERSEDED, PENDING_CONFIRM, EXPIRED = "active", "superseded", "pending_confirm", "expired"

#: The memory fields as the package hands them out (``terms`` is the index's, not the user's).
COLUMNS = ("id", "user_id", "type", "key", "polarity", "content", "excerpt", "source_session", "source_ts",
           "source_ids", "confidence", "status", "active", "hits", "last_accessed", "created_at", "updated_at",
           "expires_at", "rule_id", "topics", "superseded_by", "language", "confirm_shown_at", "remove_at", "words")
SELECT = f"select {', '.join('memories.' + c for c in COLUMNS)} from memories"
#: What recall may show: active memories, and an expired one awaiting a confirmation not yet asked.
RECALLABLE = f"(active = 1 or (status = '{PENDING_CONFIRM}' and confirm_shown_at is null))"


def indexed(user_id: str, content: str, key: str, topics: Iterable[str]) -> dict[str, str]:
    """The columns that follow from a memory's text: ``terms`` for the full-text index (hashed),
    and ``words``, its tokens as recall scores them (made once here, not on every recall)."""
    words = tokens(f"{content} {key}")
    return {"terms": " ".join(index_terms(user_id, set(words) | {f"topic:{t}" for t in topics})),
            "words": " ".join(sorted(words))}


def engine(db: str | Path, *, readonly: bool = False) -> SQLite | postgres.PostgreSQL:
    """The engine ``db`` names: a PostgreSQL URL, or else the path of a SQLite file."""
    return postgres.PostgreSQL(db, readonly=readonly) if postgres.is_url(db) else SQLite(db, readonly=readonly)


def located(db: str | Path) -> str:
    """``db`` as every process can use it: a PostgreSQL URL as it is, a file path made absolute (the
    worker may run in another folder)."""
    return str(db) if postgres.is_url(db) else os.path.abspath(db)


def spool_for(db: str) -> str:
    """The default spool of the web process (where jobs wait while Redis is down): beside the SQLite
    file, or for PostgreSQL a file of this host (``defaults.SPOOL``, made absolute)."""
    return os.path.abspath(defaults.SPOOL) if postgres.is_url(db) else f"{db}.spool"


def check_writable(db: str | Path) -> None:
    """A start-up check: the store opens as a memo-mw database and takes a write. A wrong, corrupt
    or read-only file, or a database that cannot be reached, is found when the app starts, not by the
    first job that stores a memory; :func:`memo_mw.exceptions.passing_fault` tells a fault that passes
    by itself from a configuration mistake."""
    conn = engine(db)
    try:
        conn.check_writable()
    finally:
        conn.close()


class Store(contextlib.AbstractContextManager):
    """Memories in a SQLite file or a PostgreSQL database (``db``: a path, or a ``postgresql://`` URL).
    One instance per thread; ``with Store(db) as store`` closes it (on PostgreSQL: gives its connection
    back to the pool). ``store.db`` runs SQL written for both engines (``?`` placeholders)."""

    def __init__(self, db: str | Path, *, readonly: bool = False):
        self.path = str(db)
        self.db = engine(db, readonly=readonly)

    def close(self) -> None:
        self.db.close()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def rows(self, sql: str, args: Iterable[Any] = ()) -> list[dict[str, Any]]:
        """Memories selected by SQL after ``select ... from memories``: JSON decoded, ``active`` a bool."""
        found = [dict(zip(COLUMNS, row)) for row in self.db.execute(f"{SELECT} {sql}", list(args))]
        for memory in found:
            memory["active"] = bool(memory["active"])
            memory["source_ids"] = json.loads(memory["source_ids"] or "[]")
            memory["topics"] = json.loads(memory["topics"] or "[]")
        return found

    def list(self, user_id: str | None = None, *, include_inactive: bool = False) -> list[dict[str, Any]]:
        where = [w for w, on in (("user_id = ?", user_id is not None), ("active = 1", not include_inactive)) if on]
        return self.rows(("where " + " and ".join(where) if where else "") + " order by id",
                         [user_id] if user_id is not None else [])

    def get(self, user_id: str, memory_id: int) -> dict[str, Any] | None:
        """One of the user's memories; another user's id is the same as one that does not exist."""
        return next(iter(self.rows("where user_id = ? and id = ?", [user_id, memory_id])), None)

    def search(self, user_id: str, words: Iterable[str], *, limit: int = defaults.RECALL_CANDIDATES,
               everything: bool = False) -> list[dict[str, Any]]:
        """Recall's candidates: the user's recallable memories that share a word (a token or
        ``topic:<name>``) with the message, best matches first, and those always shown (style,
        expired ones awaiting a confirmation). ``everything``: the most recent ones instead."""
        found = []
        if everything:
            found = self.rows(f"where user_id = ? and {RECALLABLE} order by id desc limit ?", [user_id, limit])
        elif terms := index_terms(user_id, sorted(set(words))):
            # Filtered inside the limit: superseded memories keep their terms and must not crowd out the rest.
            join, join_args, best_first = self.db.match("memories", "memories", terms)
            found = self.rows(f"{join} where user_id = ? and {RECALLABLE} order by {best_first} limit ?",
                              [*join_args, user_id, limit])
        seen = {m["id"] for m in found}
        # (The condition of the partial index memories_always, written as it is there, so it is used.)
        always = self.rows(f"where user_id = ? and (type = 'style' or status = 'pending_confirm') and {RECALLABLE}",
                           [user_id])
        return found + [m for m in always if m["id"] not in seen]

    def write(self, user_id: str | None = None) -> contextlib.AbstractContextManager[None]:
        """A write transaction (inside an open one, a savepoint) holding the write lock: of one user, or of
        the whole store; a second writer waits for it instead of failing."""
        return self.db.transaction(user_id)

    def remember(self, payload: dict[str, Any]) -> list[str]:
        """Apply one captured message: each candidate is ``stored``, ``merged`` into the same memory,
        ``superseded`` an older one on its slot, ``outdated`` by a newer one there (a late job), or
        ``discarded`` (a later forget request or edit names it); ``["duplicate_job"]``: applied before."""
        job_key, user_id = payload.get("job_key"), payload["user_id"]
        with self.write(user_id):
            if job_key and self.db.execute("select 1 from processed_jobs where job_key = ?", [job_key]).fetchone():
                return ["duplicate_job"]
            markers = stored_markers(payload, self.db.execute(
                "select tokens, at, server_at from forget_markers where user_id = ? and (at >= ? or server_at >= ?)",
                [user_id, int(payload["ts"]), received_at(payload)]))
            kept = without_forgotten(payload, markers)
            history.add(self.db, kept)
            edited = {slot for (slot,) in self.db.execute(
                "select slot from edit_markers where user_id = ? and at >= ?", [user_id, received_at(payload)])}
            candidates = [c for c in kept["candidates"] if slot_hash(c["key"]) not in edited]
            outcomes = [self._remember_one(payload, c) for c in candidates]
            if job_key:
                self.db.execute("insert into processed_jobs values (?, ?, ?)", [job_key, user_id, int(payload["ts"])])
        return outcomes + ["discarded"] * (len(payload.get("candidates", [])) - len(candidates))

    def _remember_one(self, payload: dict[str, Any], candidate: dict[str, Any]) -> str:
        user_id, ts = payload["user_id"], int(payload["ts"])
        message_ids = [str(payload["message_id"])] if payload.get("message_id") is not None else []
        expires_at = int(ts + float(candidate["ttl_days"]) * 86400) if candidate.get("ttl_days") else None
        same_slot = self.rows("where user_id = ? and key = ? and (active = 1 or status = ?) order by id",
                              [user_id, candidate["key"], PENDING_CONFIRM])
        for row in same_slot:
            if row["polarity"] == candidate["polarity"] and normalize(row["content"]) == normalize(candidate["content"]):
                self.update(row["id"], {
                    "status": ACTIVE, "active": 1, "confirm_shown_at": None, "remove_at": None,
                    "hits": row["hits"] + 1, "excerpt": candidate["excerpt"], "updated_at": ts,
                    "confidence": round(min(1.0, max(row["confidence"] or 0, candidate["confidence"])
                                            + defaults.CONFIDENCE_STEP), 3),
                    "source_session": payload.get("session_id"), "source_ts": ts,
                    "source_ids": json.dumps(row["source_ids"] + [i for i in message_ids if i not in row["source_ids"]]),
                    "expires_at": expires_at if expires_at is not None else row["expires_at"]})
                return "merged"
        topics = list(candidate.get("topics") or [])
        values = {
            "user_id": user_id, "type": candidate["type"], "key": candidate["key"],
            "polarity": candidate["polarity"], "content": candidate["content"], "excerpt": candidate["excerpt"],
            "source_session": payload.get("session_id"), "source_ts": ts, "source_ids": json.dumps(message_ids),
            "confidence": candidate["confidence"], "created_at": ts, "updated_at": ts, "expires_at": expires_at,
            "rule_id": candidate.get("rule_id"), "topics": json.dumps(topics), "language": candidate.get("language"),
            **indexed(user_id, candidate["content"], candidate["key"], topics),
        }
        new_id = self.db.insert(f"insert into memories ({', '.join(values)}) values ({', '.join('?' * len(values))})",
                                list(values.values()))
        # The newer statement on the slot wins, whichever job runs last (a retry, a spooled job).
        if newer := [row for row in same_slot if (row["source_ts"] or 0) > ts]:
            self.supersede(new_id, newer[-1]["id"], ts)
            return "outdated"
        for row in same_slot:
            self.supersede(row["id"], new_id, ts)
        return "superseded" if same_slot else "stored"

    def supersede(self, old_id: int, new_id: int | None, ts: int) -> None:
        """Make a memory inactive in favour of a newer one (kept, with the source of the change)."""
        self.update(old_id, {"status": SUPERSEDED, "active": 0, "superseded_by": new_id, "updated_at": int(ts)})

    def update(self, memory_id: int, values: dict[str, Any]) -> None:
        assignments = ", ".join(f"{name} = ?" for name in values)
        self.db.execute(f"update memories set {assignments} where id = ?", [*values.values(), memory_id])

    def edit(self, user_id: str, memory_id: int, content: str, at: float) -> dict[str, Any] | None:
        """The user's own correction of a memory's line (the web page): indexed again, and marked
        so that a statement on its slot read before the edit does not undo it."""
        with self.write(user_id):
            memory = self.get(user_id, memory_id)
            if memory is None:
                return None
            self.update(memory_id, {"content": content, "updated_at": int(at),
                                     **indexed(user_id, content, memory["key"], memory["topics"])})
            self._forget_history(user_id, forget_marker(f"{memory['content']} {memory['key']}", at), ts=int(at),
                                 now=True, reason="memory edited")
            self.db.execute("delete from edit_markers where at < ?", [at - defaults.FORGET_MARKER_DAYS * 86400])
            self.db.execute("insert into edit_markers values (?, ?, ?)", [user_id, slot_hash(memory["key"]), at])
        self.vacuum_deleted()  # the old wording leaves the files too (skipped inside a caller's transaction)
        return self.get(user_id, memory_id)

    def touch(self, user_id: str, ids: Iterable[int], ts: int) -> int:
        """Count a recall of these memories; an expired one awaiting confirmation was shown its once.
        Returns how many memories were updated."""
        with self.write(user_id):
            return self.db.executemany(
                "update memories set hits = hits + 1,"
                " last_accessed = case when last_accessed > ? then last_accessed else ? end,"
                " confirm_shown_at = case when status = ? then coalesce(confirm_shown_at, ?) end"
                " where user_id = ? and id = ?",
                [(int(ts), int(ts), PENDING_CONFIRM, int(ts), user_id, i) for i in {int(i) for i in ids}]).rowcount

    def forget(self, user_id: str, *, match: str | None = None, ts: int, reason: str,
               at: float | None = None, now: bool = False) -> int:
        """Delete the user's memories (all, with the profile; or those ``match`` names) and leave a marker:
        nothing said before the request and still waiting is stored afterwards. ``now``: done as it is
        made (the web page, the CLI); a job, which may run late, spares what was said after the request."""
        marker = forget_marker(match, ts, at)
        with self.write(user_id):
            rows = [m for m in self.list(user_id, include_inactive=True)
                    if (now or (m["source_ts"] or m["created_at"] or 0) <= ts)
                    and (match is None or forgotten(m, [{**marker, "at": None, "ts": float("inf")}]))]
            if marker["tokens"] is None or marker["tokens"]:
                self._mark_forgotten(user_id, marker)
            if match is None:  # forget me: the profile and the job keys go too (the same words again are new)
                for table in ("insights", "topic_counts", "processed_jobs"):
                    self.db.execute(f"delete from {table} where user_id = ?", [user_id])
            count = self._delete(user_id, [m["id"] for m in rows], ts=ts,
                                 action="forget_all" if match is None else "forget_match", reason=reason)
            self._forget_history(user_id, marker, ts=ts, now=now, reason=reason)
        self.vacuum_deleted()
        return count

    def delete(self, user_id: str, ids: Iterable[int], *, ts: int, action: str = "delete",
               reason: str = "user request") -> int:
        """Delete these memories of the user physically; another user's ids are ignored."""
        ids = [int(i) for i in ids]
        with self.write(user_id):
            mine = self.rows(f"where user_id = ? and id in ({','.join('?' * len(ids))})", [user_id, *ids]) if ids else []
            count = self._delete(user_id, [m["id"] for m in mine], ts=ts, action=action, reason=reason)
            if action == "delete":  # the user's own deletion: a statement of it still waiting is not stored,
                for memory in mine:  # and the messages that state it leave the history
                    marker = forget_marker(f"{memory['content']} {memory['key']}", ts, time.time())
                    self._mark_forgotten(user_id, marker)
                    self._forget_history(user_id, marker, ts=ts, now=True, reason=reason)
        self.vacuum_deleted()
        return count

    def _forget_history(self, user_id: str, marker: dict[str, Any], *, ts: int, now: bool, reason: str) -> None:
        """Delete the history messages a marker names (memo_mw.history.forget), audited by count."""
        if count := history.forget(self.db, user_id, marker, ts=ts, now=now):
            self.audit_row(user_id, "forget_history", count, ts=ts, reason=reason)

    def _mark_forgotten(self, user_id: str, marker: dict[str, Any]) -> None:
        """Keep a forget marker for as long as a job can wait (older ones go)."""
        self.db.execute("delete from forget_markers where coalesce(server_at, at) < ?",
                        [time.time() - defaults.FORGET_MARKER_DAYS * 86400])
        words = None if marker["tokens"] is None else json.dumps(marker["tokens"])
        self.db.execute("insert into forget_markers values (?, ?, ?, ?)", [user_id, words, marker["ts"], marker.get("at")])

    def _delete(self, user_id: str, ids: list[int], *, ts: int, action: str, reason: str) -> int:
        self.db.executemany("delete from memories where user_id = ? and id = ?", [(user_id, i) for i in ids])
        self.audit_row(user_id, action, len(ids), ts=ts, reason=reason)
        return len(ids)

    def audit_row(self, user_id: str, action: str, count: int, *, ts: int, reason: str) -> None:
        """Record a deletion: what, how many, when, why (never the content)."""
        self.db.execute("insert into audit (user_id, action, count, at, reason) values (?, ?, ?, ?, ?)",
                        [user_id, action, count, int(ts), reason])

    def vacuum_deleted(self) -> None:
        """Leave no deleted text behind, as far as the engine can at once (:meth:`memo_mw.sqlite.SQLite.erase`,
        :meth:`memo_mw.postgres.PostgreSQL.erase`); inside a caller's transaction, after its commit."""
        self.db.erase()

    def audit(self, user_id: str) -> list[dict[str, Any]]:
        """The user's deletions, without their content: what, how many, when, why."""
        return [dict(zip(("action", "count", "at", "reason"), r)) for r in self.db.execute(
            "select action, count, at, reason from audit where user_id = ? order by id", [user_id])]
