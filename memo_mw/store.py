"""The SQLite store, through sqlite-utils: schema, writes with dedup and supersession, reads.

The worker owns every write (``remember``, ``touch``, ``forget``); the web process only
reads (recall). The database runs in WAL mode so readers never wait for the writer,
with a busy timeout so two writers queue instead of failing.

A memory is one row of ``memories``; its fields are listed in ``docs/design.md``.
Times are integer epoch seconds. ``active`` is 1 only while ``status`` is ``active``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import sqlite_utils

from . import defaults
from .exceptions import StoreError
from .index import memory_terms
from .text import normalize, tokens
from .userstate import MATCH_SHARE, forget_marker, receipt, received_at, without_forgotten

log = logging.getLogger(__name__)
T = TypeVar("T")

migrations = sqlite_utils.Migrations("memo_mw")


@migrations()
def m001_memories(db: sqlite_utils.Database) -> None:
    db["memories"].create(
        {
            "id": int, "user_id": str, "type": str, "key": str, "polarity": int,
            "content": str, "excerpt": str, "source_session": str, "source_ts": int,
            "source_ids": str, "confidence": float, "status": str, "active": int,
            "hits": int, "last_accessed": int, "created_at": int, "updated_at": int,
            "expires_at": int, "rule_id": str, "topics": str, "superseded_by": int,
            "language": str,
        },
        pk="id",
        not_null={"user_id", "type", "key", "polarity", "content", "status", "active", "hits", "created_at"},
        defaults={"hits": 0, "active": 1, "status": "active", "source_ids": "[]", "topics": "[]"},
    )
    db["memories"].create_index(["user_id", "active"])
    db["memories"].create_index(["user_id", "key", "polarity"])
    # Job keys already applied: a replayed job (RQ retry, a re-sent request) changes nothing.
    db["processed_jobs"].create({"job_key": str, "processed_at": int}, pk="job_key")
    # Deletions, without their content: who, how many, when, why.
    db["audit"].create(
        {"id": int, "user_id": str, "action": str, "count": int, "at": int, "reason": str}, pk="id"
    )


@migrations()
def m002_confirmation(db: sqlite_utils.Database) -> None:
    # An expired task waits for confirmation: shown once by recall, removed at remove_at.
    db["memories"].add_column("confirm_shown_at", int)
    db["memories"].add_column("remove_at", int)
    db["memories"].create_index(["status", "expires_at"])


@migrations()
def m003_memory_terms(db: sqlite_utils.Database) -> None:
    # The term index recall uses for users with many memories (see memo_mw.index): a plain
    # table rather than FTS5, whose deletes leave terms in its segments until a merge (SQLite
    # 3.40 has no FTS5 secure-delete); these rows are overwritten on delete like the memory's.
    db.execute("create table memory_terms (user_id text not null, term text not null,"
               " memory_id integer not null, primary key (user_id, term, memory_id)) without rowid")
    db.execute("create index memory_terms_memory on memory_terms (memory_id)")
    # The memory's token weight; NULL: not indexed (written by other code), always loaded.
    db["memories"].add_column("terms_norm", float)
    db.execute("create index memories_unindexed on memories (user_id) where terms_norm is null")
    # Always shown by recall, so always loaded: style memories, expired ones awaiting confirmation.
    db.execute("create index memories_always on memories (user_id) where type = 'style' or status = 'pending_confirm'")
    db.execute("create index memories_hits on memories (user_id, hits)")
    # A memory's terms go with it, whatever deletes it. A change to what they are made of
    # un-indexes the memory (recall then loads it) until Store.reindex() runs.
    db.execute("create trigger memory_terms_delete after delete on memories begin"
               " delete from memory_terms where memory_id = old.id; end")
    db.execute("create trigger memory_terms_stale after update of content, key, topics, user_id on memories"
               " when old.content is not new.content or old.key is not new.key"
               " or old.topics is not new.topics or old.user_id is not new.user_id begin"
               " delete from memory_terms where memory_id = old.id;"
               " update memories set terms_norm = null where id = new.id; end")
    reindex(db)


@migrations()
def m004_user_versions(db: sqlite_utils.Database) -> None:
    # A version per user, changed by every change to the user's memories: the web process keeps
    # each user's memories in memory for recall, and this one-row read tells it they changed.
    # Versions come from one counter, so a version is never reused, whatever is deleted.
    db.execute("create table memo_clock (id integer primary key check (id = 1), n integer not null)")
    db.execute("insert into memo_clock (id, n) values (1, 0)")
    db.execute("create table user_versions (user_id text primary key, version integer not null) without rowid")
    _version_triggers_on(db, "memories", "user_versions")


#: The statements that move a user's version (``{who}``: ``new`` or ``old``, the row's).
_BUMP_VERSION = ("update memo_clock set n = n + 1 where id = 1;"
                 " insert into user_versions (user_id, version) values ({who}.user_id, (select n from memo_clock))"
                 " on conflict (user_id) do update set version = excluded.version;")


def _version_triggers_on(db: sqlite_utils.Database, table: str, prefix: str) -> None:
    """Triggers ``<prefix>_insert``/``_delete``/``_update`` moving the user's version on every
    change to ``table``'s rows of the user."""
    for event, who in (("insert", "new"), ("delete", "old"), ("update", "new")):
        db.execute(f"create trigger {prefix}_{event} after {event} on {table} begin {_BUMP_VERSION.format(who=who)} end")


def reindex(db: sqlite_utils.Database, batch: int = 5000) -> int:
    """Index the memories not indexed (every one, on migration); returns how many."""
    done = 0
    while True:
        rows = db.execute("select id, user_id, content, key, topics from memories where terms_norm is null"
                          " order by id limit ?", [batch]).fetchall()
        if not rows:
            return done
        for memory_id, user_id, content, key, topics_json in rows:
            _index_memory(db, memory_id, user_id, content, key, json.loads(topics_json or "[]"))
        done += len(rows)


def _index_memory(db: sqlite_utils.Database, memory_id: int, user_id: str, content: str, key: str,
                  topics: list[str]) -> None:
    terms, norm = memory_terms(content, key, topics)
    db.conn.executemany("insert or ignore into memory_terms (user_id, term, memory_id) values (?, ?, ?)",
                        [(user_id, t, memory_id) for t in terms])
    db.execute("update memories set terms_norm = ? where id = ?", [norm, memory_id])


#: Statuses. Only ``active`` memories are ``active = 1``.
ACTIVE, SUPERSEDED, PENDING_CONFIRM = "active", "superseded", "pending_confirm"

MEMORY_COLUMNS = (
    "id", "user_id", "type", "key", "polarity", "content", "excerpt", "active", "status",
    "source_session", "source_ts", "source_ids", "confidence", "hits", "last_accessed",
    "created_at", "updated_at", "expires_at", "rule_id", "topics", "superseded_by", "language",
    "confirm_shown_at", "remove_at",
)


def connect(path: str | Path, *, readonly: bool = False) -> sqlite_utils.Database:
    """Open the database file with the pragmas memo-mw relies on; apply migrations unless read-only."""
    path = str(path)
    try:
        if path != ":memory:" and not readonly:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: no implicit transactions; every write is in an explicit
        # Store.write() block or is a single statement.
        # Read-only opens never create the file: the web process must not write, not even that.
        target = f"{Path(path).resolve().as_uri()}?mode=ro" if readonly and path != ":memory:" else path
        conn = sqlite3.connect(target, timeout=defaults.SQLITE_BUSY_TIMEOUT_MS / 1000,
                               check_same_thread=False, isolation_level=None, uri=readonly)
        conn.execute(f"PRAGMA busy_timeout = {int(defaults.SQLITE_BUSY_TIMEOUT_MS)}")
        db = sqlite_utils.Database(conn)
        if not readonly:
            # Safe with WAL: a power cut may lose the last commits, never corrupt the file.
            conn.execute("PRAGMA synchronous = NORMAL")
            # Deleted content is overwritten, not left in free pages: forgetting is physical.
            conn.execute("PRAGMA secure_delete = ON")
            _prepare(db, path)
        else:
            conn.execute("PRAGMA query_only = ON")
        return db
    except (sqlite3.DatabaseError, OSError) as exc:
        raise StoreError(f"cannot use {path!r} as the memory database: {exc}") from exc


#: What a process that starts beside others on a new file can meet: a journal mode switch
#: that does not wait on the busy timeout, or a migration another process just made.
_SETUP_RACES = ("locked", "already exists", "duplicate column")


#: How long a start-up step is retried (seconds): past a migration another process is applying
#: to a large file. Under gunicorn a worker slower than its timeout to boot is restarted; one
#: whose boot raises stops the server.
SETUP_DEADLINE = 60.0


def retry_setup(setup: Callable[[], T], *, deadline: float | None = None) -> T:
    """Run ``setup`` (a journal mode switch, a schema) until it does not lose a start-up race.

    Processes that start together on a new file (web workers, job workers) race: switching
    the journal mode does not wait on the busy timeout, and two may try the same migration,
    or one waits out the busy timeout behind another's. The loser tries again and finds it
    done, for up to ``deadline`` seconds (SETUP_DEADLINE) in all; any other error is raised
    at once, and the last one when the time is up."""
    ends = time.monotonic() + (SETUP_DEADLINE if deadline is None else deadline)
    attempt = 0
    while True:
        try:
            return setup()
        except sqlite3.OperationalError as exc:
            if not any(race in str(exc) for race in _SETUP_RACES) or time.monotonic() >= ends:
                raise
            attempt += 1
            time.sleep(min(0.02 * attempt, 0.5, max(0.0, ends - time.monotonic())))


def _prepare(db: sqlite_utils.Database, path: str) -> None:
    """WAL mode and the schema (see :func:`retry_setup`)."""

    def prepare() -> None:
        if db.journal_mode != "wal" and path != ":memory:":
            db.enable_wal()
        if not migrations.pending(db):
            return  # the usual start: nothing to write
        # Under the write lock, taken before reading what is pending: a process that starts
        # meanwhile waits here (busy timeout, then retry_setup), then finds the migrations applied,
        # rather than applying one again beside this one (each runs in a savepoint of this
        # transaction, with its record).
        db.execute("begin immediate")
        try:
            migrations.apply(db)
        except BaseException:
            if db.conn.in_transaction:
                db.execute("rollback")
            raise
        db.execute("commit")

    retry_setup(prepare)


#: How long the start-up write check waits for another writer's lock (milliseconds).
_CHECK_BUSY_MS = 500


def check_writable(path: str | Path) -> None:
    """A start-up check: the file opens as a memo-mw database (migrated) and takes a write.

    Raises :class:`StoreError` naming the path: a wrong, corrupt or read-only database is
    found when the app or worker starts, not by the first job that tries to store a memory.
    A database that another process holds the write lock of past the busy timeout (a long
    transaction of a worker) passes with a warning: it is a database, and being written. A
    start-up that failed on it would stop more than this process: under gunicorn, a worker
    that fails to boot stops the whole server.
    """
    db = connect(path)
    try:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        db.execute(f"PRAGMA busy_timeout = {_CHECK_BUSY_MS}")  # a held lock answers the question too
        db.execute(f"PRAGMA user_version = {int(version)}")  # a write that changes nothing
    except sqlite3.DatabaseError as exc:
        if not isinstance(exc, sqlite3.OperationalError) or not ("locked" in str(exc) or "busy" in str(exc)):
            raise StoreError(f"cannot write the memory database {str(path)!r}: {exc}") from exc
        log.warning("memo-mw: %r is locked by another writer; starting without the write check", str(path))
    finally:
        db.close()


_SELECT = f"select {', '.join(MEMORY_COLUMNS)} from memories"


def row_to_memory(row: dict[str, Any] | tuple) -> dict[str, Any]:
    """A row (a dict, or a tuple in MEMORY_COLUMNS order) as the public memory dict:
    JSON columns decoded, ``active`` a bool."""
    memory = dict(zip(MEMORY_COLUMNS, row)) if isinstance(row, tuple) else {n: row.get(n) for n in MEMORY_COLUMNS}
    memory["active"] = bool(memory["active"])
    memory["polarity"] = int(memory["polarity"])
    for name in ("source_ids", "topics"):
        value = memory[name]
        memory[name] = json.loads(value) if value and value != "[]" else []
    return memory


class Store:
    """Reads and writes memories in one SQLite file. One instance per thread."""

    def __init__(self, path: str | Path, *, readonly: bool = False):
        self.path = str(path)
        self.db = connect(path, readonly=readonly)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- reads -----------------------------------------------------------------------

    def memories(self, user_id: str | None = None, *, include_inactive: bool = False) -> list[dict[str, Any]]:
        """Memories of one user (or every user), oldest first; active ones only unless asked."""
        where, args = [], []
        if user_id is not None:
            where.append("user_id = ?")
            args.append(user_id)
        if not include_inactive:
            where.append("active = 1")
        sql = _SELECT + (" where " + " and ".join(where) if where else "") + " order by id"
        return [row_to_memory(r) for r in self.db.execute(sql, args).fetchall()]

    def recall_candidates(self, user_id: str) -> list[dict[str, Any]]:
        """What recall may show: active memories, and expired ones awaiting a confirmation not yet asked."""
        return [row_to_memory(r) for r in self.db.execute(
            _SELECT + " where user_id = ? and (active = 1 or (status = ? and confirm_shown_at is null))"
                      " order by id", [user_id, PENDING_CONFIRM]).fetchall()]

    def get(self, memory_id: int) -> dict[str, Any] | None:
        row = self.db.execute(_SELECT + " where id = ?", [memory_id]).fetchone()
        return row_to_memory(row) if row else None

    # -- writes (the worker's) -------------------------------------------------------

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        """A write transaction that takes the write lock up front (BEGIN IMMEDIATE).

        A deferred transaction that reads, then writes, fails at once with "database is
        locked" when another writer got there first; an immediate one waits out the busy
        timeout instead. Inside an open transaction (a replay batch) it is a savepoint.
        """
        if self.db.conn.in_transaction:
            with self.db.atomic():
                yield
            return
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.conn.rollback()
            raise
        self.db.execute("COMMIT")

    def remember(self, payload: dict[str, Any]) -> list[str]:
        """Apply one captured message: each candidate is stored, merged or supersedes an older memory.

        Returns one outcome per candidate (``stored``, ``merged``, ``superseded``), or
        ``["duplicate_job"]`` when this job key was applied before.
        """
        job_key = payload.get("job_key")
        with self.write():
            if job_key and self.db.execute(
                "select 1 from processed_jobs where job_key = ?", [job_key]
            ).fetchone():
                return ["duplicate_job"]
            # Said before the user asked to forget everything (a job that was slow, retried or
            # replayed late): the user's wish wins.
            # A payload the server timed (``received``) meets the forget markers below, which
            # carry the server's time too; the audit's client-time test is for older payloads.
            if receipt(payload) is None:
                forgot_all = self.db.execute(
                    "select max(at) from audit where user_id = ? and action = 'forget_all'",
                    [payload["user_id"]]).fetchone()[0]
                if forgot_all is not None and forgot_all >= int(payload["ts"]):
                    return ["discarded"] * len(payload.get("candidates", []))
            # ... and what a later "forget that ..." names, likewise (userstate.said_by orders them).
            markers = [{"tokens": json.loads(t), "ts": at, "at": server_at}
                       for t, at, server_at in self.db.execute(
                           "select tokens, at, server_at from forget_markers where user_id = ? and at >= ?"
                           " union select tokens, at, server_at from forget_markers"
                           " where user_id = ? and server_at >= ?",
                           [payload["user_id"], int(payload["ts"]), payload["user_id"], received_at(payload)])]
            candidates = without_forgotten(payload, markers)["candidates"] if markers else payload.get("candidates", [])
            # ... and a slot the user edited afterwards (the web page): the edit is the newer word.
            edited = {slot for (slot,) in self.db.execute(
                "select slot from edit_markers where user_id = ? and at >= ?", [payload["user_id"], received_at(payload)])}
            if edited:
                candidates = [c for c in candidates if slot_hash(c["key"]) not in edited]
            outcomes = [self._remember_one(payload, c) for c in candidates]
            outcomes += ["discarded"] * (len(payload.get("candidates", [])) - len(candidates))
            if job_key:
                self.db.execute("insert into processed_jobs (job_key, processed_at) values (?, ?)",
                                [job_key, int(payload["ts"])])
        return outcomes

    def _remember_one(self, payload: dict[str, Any], candidate: dict[str, Any]) -> str:
        # Plain SQL on the connection sqlite-utils holds: this runs once per captured
        # message, and replay imports thousands of them a second.
        user_id, ts = payload["user_id"], int(payload["ts"])
        message_ids = [str(payload["message_id"])] if payload.get("message_id") is not None else []
        # The slot's current memories: active ones, and an expired one awaiting confirmation
        # (saying it again confirms it; saying something new replaces it).
        same_slot = [row_to_memory(r) for r in self.db.execute(
            _SELECT + " where user_id = ? and key = ? and (active = 1 or status = ?) order by id",
            [user_id, candidate["key"], PENDING_CONFIRM])]
        for row in same_slot:
            if row["polarity"] == candidate["polarity"] and normalize(row["content"]) == normalize(candidate["content"]):
                ids = row["source_ids"] + [i for i in message_ids if i not in row["source_ids"]]
                expires_at = _expiry(candidate, ts)
                self._update(row["id"], {
                    "status": ACTIVE, "active": 1, "confirm_shown_at": None, "remove_at": None,
                    "hits": row["hits"] + 1,
                    "confidence": round(min(1.0, max(row["confidence"], candidate["confidence"])
                                            + defaults.CONFIDENCE_STEP), 3),
                    "excerpt": candidate["excerpt"], "source_session": payload.get("session_id"),
                    "source_ts": ts, "source_ids": json.dumps(ids), "updated_at": ts,
                    "expires_at": expires_at if expires_at is not None else row["expires_at"],
                })
                return "merged"
        values = {
            "user_id": user_id, "type": candidate["type"], "key": candidate["key"],
            "polarity": candidate["polarity"], "content": candidate["content"],
            "excerpt": candidate["excerpt"], "source_session": payload.get("session_id"),
            "source_ts": ts, "source_ids": json.dumps(message_ids),
            "confidence": candidate["confidence"], "status": "active", "active": 1, "hits": 0,
            "last_accessed": None, "created_at": ts, "updated_at": ts,
            "expires_at": _expiry(candidate, ts), "rule_id": candidate.get("rule_id"),
            "topics": json.dumps(candidate.get("topics", [])), "superseded_by": None,
            "language": candidate.get("language"),
        }
        terms, values["terms_norm"] = memory_terms(values["content"], values["key"], candidate.get("topics", []))
        new_id = self.db.execute(
            f"insert into memories ({', '.join(values)}) values ({', '.join('?' * len(values))})",
            list(values.values())).lastrowid
        self.db.conn.executemany("insert into memory_terms (user_id, term, memory_id) values (?, ?, ?)",
                                 [(user_id, t, new_id) for t in terms])
        # A newer statement on the same slot wins: the opposite polarity ("不喜欢" after
        # "喜欢") or a new value for the slot ("lives in Paris" after "lives in Berlin").
        for row in same_slot:
            self._update(row["id"], {"status": SUPERSEDED, "active": 0, "superseded_by": new_id, "updated_at": ts})
        return "superseded" if same_slot else "stored"

    def _update(self, memory_id: int, values: dict[str, Any]) -> None:
        assignments = ", ".join(f"{name} = ?" for name in values)
        self.db.execute(f"update memories set {assignments} where id = ?", [*values.values(), memory_id])

    def reindex(self) -> int:
        """Index the memories written without their terms (by other code); returns how many."""
        with self.write():
            return reindex(self.db)

    def reindex_due(self, *, batch: int = 1000, budget: float = 30.0) -> int:
        """Index again the memories a migration marked stale (m011: those with an apostrophe), oldest
        first, ``batch`` rows a transaction, for at most ``budget`` seconds (what is left waits for the
        next call: maintenance calls it every run); returns how many."""
        done, ends = 0, time.monotonic() + budget
        while time.monotonic() < ends:
            with self.write():
                due = self.db.execute("select name, after_id, until_id from reindex_due limit 1").fetchone()
                if due is None:
                    break
                name, after, until = due
                rows = self.db.execute(
                    "select id, user_id, content, key, topics from memories where id > ? and id <= ?"
                    f" and ({_WITH_APOSTROPHE}) order by id limit ?", [after, until, batch]).fetchall()
                if not rows:
                    self.db.execute("delete from reindex_due where name = ?", [name])
                    continue
                for memory_id, user_id, content, key, topics_json in rows:
                    self.db.execute("delete from memory_terms where memory_id = ?", [memory_id])
                    _index_memory(self.db, memory_id, user_id, content, key, json.loads(topics_json or "[]"))
                self.db.execute("update reindex_due set after_id = ? where name = ?", [rows[-1][0], name])
                done += len(rows)
        return done

    def touch(self, user_id: str, ids: Iterable[int] | dict[int, int], ts: int) -> int:
        """Count recalls of these memories (hotness) and refresh ``last_accessed`` (recency).

        ``ids`` is the memories recalled once each, or a mapping of id to how many times
        (batched recalls). Returns how many memories were updated.
        """
        counts = {int(i): int(n) for i, n in ids.items()} if isinstance(ids, dict) else {int(i): 1 for i in ids}
        if not counts:
            return 0
        marks = ",".join("?" * len(counts))
        with self.write():
            updated = sum(self.db.execute(
                "update memories set hits = hits + ?, last_accessed = max(coalesce(last_accessed, 0), ?)"
                " where user_id = ? and id = ?", [n, int(ts), user_id, i]).rowcount for i, n in counts.items())
            # An expired memory awaiting confirmation is shown once: this was the once.
            self.db.execute(
                f"update memories set confirm_shown_at = ? where user_id = ? and status = ? "
                f"and confirm_shown_at is null and id in ({marks})", [int(ts), user_id, PENDING_CONFIRM, *counts])
        return updated

    def forget(self, user_id: str, *, match: str | None = None, ts: int, reason: str,
               at: float | None = None, now: bool = False) -> int:
        """Physically delete the user's memories (all, or those matching ``match``); audit the count.

        ``at``: when the server read the request (its clock; see userstate.said_by), for the
        marker that keeps a statement said before it, still waiting for its job, from being
        stored afterwards. ``now``: the request is carried out as it is made (the web page, the
        CLI), so every memory stored so far goes, whatever time its client gave it; a job, which
        may run late, leaves those said after its request (by the same client's times)."""
        with self.write():
            rows = self.memories(user_id, include_inactive=True)
            if not now:  # what was said after the request is not what it asked to forget
                rows = [r for r in rows if (r["source_ts"] or r["created_at"] or 0) <= ts]
            if match is not None:
                rows = [r for r in rows if matches(r, match)]
            self.mark_forgotten(user_id, match, ts, at=at)
            count = self._delete(user_id, [r["id"] for r in rows], ts=ts,
                                 action="forget_all" if match is None else "forget_match", reason=reason)
            # Forget me: the profile made from the user's messages goes too (memo_mw.insights).
            profile = 0 if match is not None else sum(self.db.execute(
                f"delete from {table} where user_id = ?", [user_id]).rowcount for table in ("insights", "topic_counts"))
        self._checkpoint(count + profile)
        return count

    def mark_forgotten(self, user_id: str, match: str | None, ts: int, at: float | None = None) -> None:
        """Record "forget that <match>" (hashed words and time) so no waiting job stores it again;
        ``match`` None: everything (tokens ``null``; the audit's forget_all orders only payloads
        without a receipt time). ``at``: the server's time of the request, when known.

        Call inside a write transaction. Markers older than FORGET_MARKER_DAYS go at the same
        time, by this process's clock (a client's may be far ahead or behind).
        """
        marker = forget_marker(match, ts)
        if marker["tokens"] or match is None:
            self.db.execute("delete from forget_markers where coalesce(server_at, at) < ?",
                            [time.time() - defaults.FORGET_MARKER_DAYS * 86400])
            self.db.execute("insert into forget_markers (user_id, tokens, at, server_at) values (?, ?, ?, ?)",
                            [user_id, json.dumps(marker["tokens"]), int(ts), None if at is None else float(at)])

    def mark_edited(self, user_id: str, key: str, at: float) -> None:
        """Record that the user edited the memory on slot ``key`` at ``at`` (the server's clock, to the
        fraction of a second; a hash of the slot, never its words), so a statement of that slot
        whose message the server read before, still waiting for its job, does not undo the edit
        (statements are ordered by their ``received`` time, the server's too). Call inside a
        write transaction; markers older than FORGET_MARKER_DAYS go."""
        self.db.execute("delete from edit_markers where at < ?", [float(at) - defaults.FORGET_MARKER_DAYS * 86400])
        self.db.execute("insert into edit_markers (user_id, slot, at) values (?, ?, ?)",
                        [user_id, slot_hash(key), float(at)])

    def delete_where(self, user_id: str, where: str, args: list, *, ts: int, action: str, reason: str) -> int:
        """Physically delete the user's memories matching an SQL condition; audit the count.

        The condition is read and acted on in one transaction: a memory confirmed meanwhile stays.
        """
        with self.write():
            ids = [r[0] for r in self.db.execute(f"select id from memories where user_id = ? and ({where})",
                                                  [user_id, *args])]
            count = self._delete(user_id, ids, ts=ts, action=action, reason=reason)
        self._checkpoint(count)
        return count

    def _delete(self, user_id: str, ids: list[int], *, ts: int, action: str, reason: str) -> int:
        if ids:
            marks = ",".join("?" * len(ids))
            self.db.execute(f"delete from memories where user_id = ? and id in ({marks})", [user_id, *ids])
        self.db.execute("insert into audit (user_id, action, count, at, reason) values (?, ?, ?, ?, ?)",
                        [user_id, action, len(ids), int(ts), reason])
        return len(ids)

    def _checkpoint(self, deleted: int, attempts: int = 20) -> None:
        """Copy the WAL into the database and truncate it, so deleted text is in no file.

        A reader in the middle of a transaction can hold the checkpoint back: try again
        briefly, and say so if the WAL still holds old pages.
        """
        if not deleted or self.db.conn.in_transaction:
            return
        for _ in range(attempts):
            busy, _, _ = self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            if not busy:
                return
            time.sleep(0.05)
        log.warning("memo-mw: the WAL of %s could not be truncated after a deletion (a reader held it); "
                    "the next checkpoint will clear it", self.path)


def matches(memory: dict[str, Any], phrase: str) -> bool:
    """Whether a targeted forget phrase ("我喜欢看恐怖片", "I play tennis") names this memory."""
    wanted = tokens(phrase)
    if not wanted:
        return False
    have = tokens(" ".join(str(memory.get(f) or "") for f in ("content", "key", "excerpt")))
    return len(wanted & have) / len(wanted) >= MATCH_SHARE


def _expiry(candidate: dict[str, Any], ts: int) -> int | None:
    ttl = candidate.get("ttl_days")
    return int(ts + float(ttl) * 86400) if ttl else None


@migrations()
def m005_insights(db: sqlite_utils.Database) -> None:
    # The weekly profile (memo_mw.insights, memo_mw.counters): topic hits per user and ISO week
    # ('YYYY-Www'), and the insight lines made from them. Names and counts only, never chat text.
    db.execute("create table topic_counts (user_id text not null, week text not null, topic text not null,"
               " count integer not null, primary key (user_id, week, topic)) without rowid")
    db["insights"].create(
        {"id": int, "user_id": str, "rank": int, "topic": str, "text": str, "count": int, "weeks": int,
         "first_seen": str, "last_seen": str, "confidence": str, "language": str, "created_at": int},
        pk="id", not_null={"user_id", "rank", "topic", "text", "count", "confidence", "created_at"})
    db["insights"].create_index(["user_id", "rank"])


@migrations()
def m006_forget_markers(db: sqlite_utils.Database) -> None:
    # "Forget that ...": the request's marker (hashed tokens, never the words, see
    # memo_mw.userstate.forget_marker) and its time, so a job that was waiting anywhere (in Redis,
    # in an outbox, in a retry) when the user asked cannot store it again. Kept as long as a job
    # can wait (FORGET_MARKER_DAYS). "Forget everything" is the audit row of action forget_all
    # (and, from m010 on, a marker with tokens null too).
    db.execute("create table forget_markers (user_id text not null, tokens text not null, at integer not null)")
    db.execute("create index forget_markers_user on forget_markers (user_id, at)")


def slot_hash(key: str) -> str:
    """A one-way form of a memory's slot (``key``), for markers that outlive what they name."""
    return hashlib.blake2b(key.encode("utf-8"), digest_size=12).hexdigest()


#: The columns of ``memories`` a recall count changes (Store.touch): nothing else.
TOUCH_COLUMNS = ("hits", "last_accessed")


@migrations()
def m007_touch_versions(db: sqlite_utils.Database) -> None:
    # Recall counts (hits, last_accessed) change an active user's memories about once a second
    # (flush_touches): they move the user's `touched`, not its `version`, so a web process keeps
    # its copy of a large user's memories and patches the counts into it instead of loading
    # them all again (memo_mw.memcache). Any other change moves `version`, as before.
    db.execute("alter table user_versions add column touched integer not null default 0")
    version_triggers(db)


def version_triggers(db: sqlite_utils.Database) -> None:
    """(Re)create the update triggers of ``user_versions`` from the columns ``memories`` has now:
    a migration that adds a column to ``memories`` calls this again."""
    columns = [c.name for c in db["memories"].columns if c.name not in TOUCH_COLUMNS]
    only_counts = " and ".join(f"old.{c} is new.{c}" for c in columns)
    db.execute("drop trigger if exists user_versions_update")
    db.execute("drop trigger if exists user_versions_touch")
    db.execute(f"create trigger user_versions_update after update on memories when not ({only_counts}) begin "
               f"{_BUMP_VERSION.format(who='new')} end")
    db.execute(f"create trigger user_versions_touch after update on memories when ({only_counts}) begin "
               "update memo_clock set n = n + 1 where id = 1; insert into user_versions (user_id, version, touched)"
               " values (new.user_id, (select n from memo_clock), (select n from memo_clock))"
               " on conflict (user_id) do update set touched = excluded.touched; end")


@migrations()
def m008_insight_versions(db: sqlite_utils.Database) -> None:
    # A user's insights move the user's version too (they change weekly): the web process keeps
    # each user's insights with its copy of the memories' version, and reads them again only
    # when it moves (memo_mw.insights.ProfileReader).
    _version_triggers_on(db, "insights", "insight_versions")


@migrations()
def m009_edit_markers(db: sqlite_utils.Database) -> None:
    # A user's edit of a memory's line (the web page): the slot it was on (hashed, as forget
    # markers are) and when (server time, fractional), so a statement of that slot that was
    # waiting somewhere when the user edited it cannot undo the edit. Kept as long as a job can
    # wait (FORGET_MARKER_DAYS).
    db.execute("create table edit_markers (user_id text not null, slot text not null, at real not null)")
    db.execute("create index edit_markers_user on edit_markers (user_id, at)")


@migrations()
def m010_forget_marker_server_time(db: sqlite_utils.Database) -> None:
    # When the server read a forget request (its own clock, fractional): a waiting statement
    # is ordered against it by its own receipt time (a payload's ``received``), not by the two
    # client times, which a deletion on the web page (server time) cannot be compared with.
    # Null for markers made before, and for requests whose receipt time is not known.
    db.execute("alter table forget_markers add column server_at real")
    db.execute("create index forget_markers_user_server_at on forget_markers (user_id, server_at)")


#: The memories whose index terms m011 made stale: an apostrophe in their text (ASCII, typographic
#: or full-width, which NFKC makes ASCII).
_WITH_APOSTROPHE = " or ".join(f"{column} like '%{mark}%'" for column in ("content", "key")
                               for mark in ("''", "’", "＇"))


@migrations()
def m011_reindex_apostrophes(db: sqlite_utils.Database) -> None:
    # An English word's clitic is no longer part of its token ("John's" is john, not john'): the
    # memories written before with an apostrophe are indexed again, by maintenance in batches
    # (Store.reindex_due), not here: on a large file that takes minutes, and a process starting
    # meanwhile waits for the migration. Until then the term index (read for a user the web
    # process does not cache: above RECALL_CACHE_USER_MEMORIES) may miss such a memory for a
    # question naming its word.
    db.execute("create table reindex_due (name text primary key, after_id integer not null,"
               " until_id integer not null)")
    db.execute("insert into reindex_due (name, after_id, until_id) select 'clitics', 0, max(id) from memories"
               f" where {_WITH_APOSTROPHE} having count(*) > 0")
