"""The SQLite store: one file, one schema, and the narrow interface another engine would implement
(``remember``, ``supersede``, ``touch``, ``forget``, ``delete``, ``edit``, ``list``, ``get``, ``search``).

Jobs, the memories page and the CLI write; the chat request only reads (WAL mode). Index terms are hashed with
the user id; forgetting is physical (docs/design.md, "The store")."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from . import defaults, history
from .exceptions import StoreError
from .forgetting import forget_marker, forgotten, received_at, slot_hash, stored_markers, without_forgotten
from .text import index_terms, normalize, tokens

log = logging.getLogger(__name__)

ACTIVE, SUPERSEDED, PENDING_CONFIRM, EXPIRED = "active", "superseded", "pending_confirm", "expired"

#: Bump when SCHEMA changes; a file made by another version is refused with a clear error, but
#: one made by version 1 (before the chat history) gets the history tables when opened for writing.
SCHEMA_VERSION = 2

SCHEMA = """
create table if not exists memories (
  id integer primary key, user_id text not null, type text not null, key text not null,
  polarity integer not null, content text not null, excerpt text, source_session text,
  source_ts integer, source_ids text not null default '[]', confidence real,
  status text not null default 'active', active integer not null default 1,
  hits integer not null default 0, last_accessed integer, created_at integer not null,
  updated_at integer, expires_at integer, rule_id text, topics text not null default '[]',
  superseded_by integer, language text, confirm_shown_at integer, remove_at integer,
  terms text not null default '', words text not null default '');
create index if not exists memories_user on memories (user_id, active);
create index if not exists memories_slot on memories (user_id, key, polarity);
create index if not exists memories_expiry on memories (status, expires_at);
create index if not exists memories_always on memories (user_id) where type = 'style' or status = 'pending_confirm';
create virtual table if not exists memories_fts using fts5 (terms, content='memories', content_rowid='id');
create trigger if not exists memories_fts_insert after insert on memories begin
  insert into memories_fts (rowid, terms) values (new.id, new.terms); end;
create trigger if not exists memories_fts_delete after delete on memories begin
  insert into memories_fts (memories_fts, rowid, terms) values ('delete', old.id, old.terms); end;
create trigger if not exists memories_fts_update after update of terms on memories begin
  insert into memories_fts (memories_fts, rowid, terms) values ('delete', old.id, old.terms);
  insert into memories_fts (rowid, terms) values (new.id, new.terms); end;
create table if not exists processed_jobs (job_key text primary key, user_id text, processed_at integer);
create index if not exists processed_jobs_user on processed_jobs (user_id);
create table if not exists audit (id integer primary key, user_id text, action text, count integer,
  at integer, reason text);
create table if not exists forget_markers (user_id text not null, tokens text, at integer not null, server_at real);
create index if not exists forget_markers_user on forget_markers (user_id, at);
create table if not exists edit_markers (user_id text not null, slot text not null, at real not null);
create index if not exists edit_markers_user on edit_markers (user_id, at);
create table if not exists topic_counts (user_id text not null, week text not null, topic text not null,
  count integer not null, primary key (user_id, week, topic)) without rowid;
create table if not exists insights (id integer primary key, user_id text not null, rank integer not null,
  topic text not null, text text not null, count integer not null, weeks integer, first_seen text,
  last_seen text, confidence text not null, language text, created_at integer not null);
create index if not exists insights_user on insights (user_id, rank);
""" + history.SCHEMA

#: The memory fields as the package hands them out (``terms`` is the index's, not the user's).
COLUMNS = ("id", "user_id", "type", "key", "polarity", "content", "excerpt", "source_session", "source_ts",
           "source_ids", "confidence", "status", "active", "hits", "last_accessed", "created_at", "updated_at",
           "expires_at", "rule_id", "topics", "superseded_by", "language", "confirm_shown_at", "remove_at", "words")
SELECT = f"select {', '.join(COLUMNS)} from memories"
#: What recall may show: active memories, and an expired one awaiting a confirmation not yet asked.
RECALLABLE = f"(active = 1 or (status = '{PENDING_CONFIRM}' and confirm_shown_at is null))"
#: FTS5 drops deleted entries at once only from SQLite 3.42 on; before, an 'optimize' does.
SECURE_FTS = sqlite3.sqlite_version_info >= (3, 42, 0)
FTS_TABLES = ("memories_fts", "history_fts")


def indexed(user_id: str, content: str, key: str, topics: Iterable[str]) -> dict[str, str]:
    """The columns that follow from a memory's text: ``terms`` for the full-text index (hashed),
    and ``words``, its tokens as recall scores them (made once here, not on every recall)."""
    words = tokens(f"{content} {key}")
    return {"terms": " ".join(index_terms(user_id, set(words) | {f"topic:{t}" for t in topics})),
            "words": " ".join(sorted(words))}


def connect(path: str | Path, *, readonly: bool = False) -> sqlite3.Connection:
    """Open the file with the pragmas memo-mw relies on; create the schema unless read-only."""
    path = str(path)
    try:
        if not readonly and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro" if readonly else path, uri=readonly,
                               check_same_thread=False, isolation_level=None,
                               timeout=defaults.SQLITE_BUSY_TIMEOUT_MS / 1000)
        if readonly:
            conn.execute("PRAGMA query_only = ON")
        else:
            conn.execute("PRAGMA synchronous = NORMAL")  # with WAL: a power cut loses commits, never the file
            conn.execute("PRAGMA secure_delete = ON")  # deleted text is overwritten, not left in free pages
            _create(conn, path)
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            upgrade = " (opening it once for writing, e.g. with `memo-mw maintain`, upgrades it)" if version == 1 else ""
            raise StoreError(f"{path!r} holds schema version {version}, this memo-mw reads version {SCHEMA_VERSION}"
                             + upgrade)
        return conn
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"cannot use {path!r} as the memory database: {exc}") from exc
    except OSError as exc:
        raise StoreError(f"cannot open the memory database {path!r}: {exc}") from exc


def _create(conn: sqlite3.Connection, path: str) -> None:
    """WAL mode and the schema. Processes starting together on a new file race for the write lock:
    the loser waits (busy timeout) and then finds everything made."""
    for attempt in range(50):
        try:
            if path != ":memory:" and conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            if conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:
                return
            conn.execute("begin immediate")
            try:
                if conn.execute("PRAGMA user_version").fetchone()[0] in (0, 1):
                    conn.executescript(SCHEMA.replace("\n", " ") + f"; PRAGMA user_version = {SCHEMA_VERSION};")
                    for table in FTS_TABLES if SECURE_FTS else ():
                        conn.execute(f"insert into {table} ({table}, rank) values ('secure-delete', 1)")
            finally:
                if conn.in_transaction:
                    conn.execute("commit")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc):
                raise
            time.sleep(0.02 * (attempt + 1))
    raise StoreError(f"{path!r} stayed locked while memo-mw tried to create its schema")


def check_writable(path: str | Path) -> None:
    """A start-up check: the file opens as a memo-mw database and takes a write. A wrong, corrupt
    or read-only file is found when the app starts, not by the first job that stores a memory;
    :func:`memo_mw.exceptions.passing_fault` tells a fault that passes by itself from a configuration mistake."""
    if os.path.isdir(path):
        raise StoreError(f"{str(path)!r} is a directory, not the memory database file")
    with contextlib.closing(connect(path)) as conn:
        try:
            conn.execute("PRAGMA busy_timeout = 500")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")  # a write that changes nothing
        except sqlite3.DatabaseError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise StoreError(f"cannot write the memory database {str(path)!r}: {exc}") from exc
            log.warning("memo-mw: %r is locked by another writer; starting without the write check", str(path))


class Store(contextlib.AbstractContextManager):
    """Memories in one SQLite file. One instance per thread; ``with Store(path) as store`` closes it."""

    def __init__(self, path: str | Path, *, readonly: bool = False):
        self.path = str(path)
        self.db = connect(path, readonly=readonly)

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
        if everything:
            found = self.rows(f"where user_id = ? and {RECALLABLE} order by id desc limit ?", [user_id, limit])
        else:
            terms = index_terms(user_id, sorted(set(words)))
            # Filtered inside the limit: superseded memories keep their terms and must not crowd out the rest.
            found = [] if not terms else self.rows(
                f"join memories_fts on memories.id = memories_fts.rowid where memories_fts match ? and user_id = ?"
                f" and {RECALLABLE} order by memories_fts.rank limit ?",
                [" OR ".join(f'"{t}"' for t in terms), user_id, limit])
        seen = {m["id"] for m in found}
        # (The condition of the partial index memories_always, written as it is there, so it is used.)
        always = self.rows(f"where user_id = ? and (type = 'style' or status = 'pending_confirm') and {RECALLABLE}",
                           [user_id])
        return found + [m for m in always if m["id"] not in seen]

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        """A transaction that takes the write lock up front (BEGIN IMMEDIATE): a second writer
        waits out the busy timeout instead of failing. Inside an open one, a savepoint."""
        nested = self.db.in_transaction
        self.db.execute("savepoint nested" if nested else "begin immediate")
        try:
            yield
        except BaseException:
            if nested:
                self.db.execute("rollback to nested")
                self.db.execute("release nested")
            else:
                self.db.rollback()
            raise
        self.db.execute("release nested" if nested else "commit")

    def remember(self, payload: dict[str, Any]) -> list[str]:
        """Apply one captured message: each candidate is ``stored``, ``merged`` into the same memory,
        ``superseded`` an older one on its slot, ``outdated`` by a newer one there (a late job), or
        ``discarded`` (a later forget request or edit names it); ``["duplicate_job"]``: applied before."""
        job_key, user_id = payload.get("job_key"), payload["user_id"]
        with self.write():
            if job_key and self.db.execute("select 1 from processed_jobs where job_key = ?", [job_key]).fetchone():
                return ["duplicate_job"]
            markers = stored_markers(payload, self.db.execute(
                "select tokens, at, server_at from forget_markers where user_id = ? and (at >= ? or server_at >= ?)",
                [user_id, int(payload["ts"]), received_at(payload)]))
            kept = without_forgotten(payload, markers)
            history.add(self.db, kept)
            candidates = kept["candidates"]
            edited = {slot for (slot,) in self.db.execute(
                "select slot from edit_markers where user_id = ? and at >= ?", [user_id, received_at(payload)])}
            candidates = [c for c in candidates if slot_hash(c["key"]) not in edited]
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
        new_id = self.db.execute(f"insert into memories ({', '.join(values)}) values ({', '.join('?' * len(values))})",
                                 list(values.values())).lastrowid
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
        with self.write():
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
        with self.write():
            return self.db.executemany(
                "update memories set hits = hits + 1, last_accessed = max(coalesce(last_accessed, 0), ?),"
                " confirm_shown_at = case when status = ? then coalesce(confirm_shown_at, ?) end"
                " where user_id = ? and id = ?",
                [(int(ts), PENDING_CONFIRM, int(ts), user_id, i) for i in {int(i) for i in ids}]).rowcount

    def forget(self, user_id: str, *, match: str | None = None, ts: int, reason: str,
               at: float | None = None, now: bool = False) -> int:
        """Delete the user's memories (all, with the profile; or those ``match`` names) and leave a marker:
        nothing said before the request and still waiting is stored afterwards. ``now``: done as it is
        made (the web page, the CLI); a job, which may run late, spares what was said after the request."""
        marker = forget_marker(match, ts, at)
        with self.write():
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
        with self.write():
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
        """Leave no deleted text in any file: FTS5 drops deleted entries, and the WAL is truncated."""
        if self.db.in_transaction:
            return
        for table in FTS_TABLES:
            secure = self.db.execute(f"select v from {table}_config where k = 'secure-delete'").fetchone()
            if not (secure and secure[0]):  # SQLite before 3.42, or a file made by one: merge deleted entries out
                with self.write():
                    self.db.execute(f"insert into {table} ({table}) values ('optimize')")
                    if SECURE_FTS:  # and from now on, FTS5 drops them as they are deleted
                        self.db.execute(f"insert into {table} ({table}, rank) values ('secure-delete', 1)")
        for _ in range(20):  # a reader mid-transaction can hold the checkpoint back for a moment
            if not self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
                return
            time.sleep(0.05)
        log.warning("memo-mw: the WAL of %s was not truncated after a deletion; the next checkpoint will", self.path)

    def audit(self, user_id: str) -> list[dict[str, Any]]:
        """The user's deletions, without their content: what, how many, when, why."""
        return [dict(zip(("action", "count", "at", "reason"), r)) for r in self.db.execute(
            "select action, count, at, reason from audit where user_id = ? order by id", [user_id])]
