"""The SQLite engine: one file, WAL mode, FTS5 indexes, deleted text overwritten. The default, embedded
choice. :class:`memo_mw.store.Store` runs its SQL (``?`` placeholders) through :class:`SQLite`; the
PostgreSQL engine (:mod:`memo_mw.postgres`) offers the same methods."""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from . import defaults
from .exceptions import StoreError

log = logging.getLogger(__name__)

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
create table if not exists history (
  id integer primary key, user_id text not null, session_id text, message_id text, ts integer not null,
  expires_at integer, text text not null, terms text not null default '', words text not null default '');
create index if not exists history_user on history (user_id, session_id, ts);
create index if not exists history_expiry on history (expires_at);
create virtual table if not exists history_fts using fts5 (terms, content='history', content_rowid='id');
create trigger if not exists history_fts_insert after insert on history begin
  insert into history_fts (rowid, terms) values (new.id, new.terms); end;
create trigger if not exists history_fts_delete after delete on history begin
  insert into history_fts (history_fts, rowid, terms) values ('delete', old.id, old.terms); end;
create table if not exists history_off (user_id text primary key, at integer not null) without rowid;
"""

#: FTS5 drops deleted entries at once only from SQLite 3.42 on; before, an 'optimize' does.
SECURE_FTS = sqlite3.sqlite_version_info >= (3, 42, 0)
FTS_TABLES = ("memories_fts", "history_fts")


class SQLite:
    """One connection to the file (one per thread), with the pragmas memo-mw relies on; the schema
    is made unless ``readonly``. A file that is not a memo-mw database, or of another schema
    version, is a :class:`StoreError`."""

    def __init__(self, path: str | Path, *, readonly: bool = False):
        self.name = str(path)
        self.conn = connect(self.name, readonly=readonly)

    def execute(self, sql: str, args: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, list(args))

    def executemany(self, sql: str, rows: Any) -> sqlite3.Cursor:
        """(Its ``rowcount``: the rows changed, all statements together.)"""
        return self.conn.executemany(sql, rows)

    def insert(self, sql: str, args: Sequence[Any]) -> int:
        """Run an ``insert`` of one row; the new row's id."""
        return self.conn.execute(sql, list(args)).lastrowid

    @contextlib.contextmanager
    def transaction(self, user_id: str | None = None) -> Iterator[None]:
        """A write transaction that takes the write lock up front (BEGIN IMMEDIATE): a second writer waits
        out the busy timeout instead of failing. Inside an open one, a savepoint. (SQLite has one writer
        at a time: ``user_id`` changes nothing here.)"""
        nested = self.conn.in_transaction
        self.conn.execute("savepoint nested" if nested else "begin immediate")
        try:
            yield
        except BaseException:
            if nested:
                self.conn.execute("rollback to nested")
                self.conn.execute("release nested")
            else:
                self.conn.rollback()
            raise
        self.conn.execute("release nested" if nested else "commit")

    def match(self, table: str, alias: str, terms: list[str]) -> tuple[str, list[Any], str]:
        """Full-text search on ``table`` (``memories`` or ``history``, named ``alias`` in the query): a
        join that keeps the rows holding any of the index ``terms``, its arguments, and an ``order by``
        expression, best match first."""
        return (f"join {table}_fts on {table}_fts.rowid = {alias}.id and {table}_fts match ?",
                [" OR ".join(f'"{t}"' for t in terms)], f"{table}_fts.rank")

    def count_matching(self, table: str, term: str) -> int:
        """How many rows of ``table`` hold the index term (a term is one user's: it is hashed with the id)."""
        found = self.conn.execute(f"select count(*) from {table}_fts where {table}_fts match ?", [f'"{term}"'])
        return found.fetchone()[0]

    def erase(self) -> None:
        """After a deletion: leave no deleted text in any file. FTS5 drops deleted entries, and the WAL is
        truncated. (Skipped inside a transaction: its caller erases after the commit.)"""
        if self.conn.in_transaction:
            return
        for table in FTS_TABLES:
            secure = self.conn.execute(f"select v from {table}_config where k = 'secure-delete'").fetchone()
            if not (secure and secure[0]):  # SQLite before 3.42, or a file made by one: merge deleted entries out
                with self.transaction():
                    self.conn.execute(f"insert into {table} ({table}) values ('optimize')")
                    if SECURE_FTS:  # and from now on, FTS5 drops them as they are deleted
                        self.conn.execute(f"insert into {table} ({table}, rank) values ('secure-delete', 1)")
        for _ in range(20):  # a reader mid-transaction can hold the checkpoint back for a moment
            if not self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
                return
            time.sleep(0.05)
        log.warning("memo-mw: the WAL of %s was not truncated after a deletion; the next checkpoint will", self.name)

    def columns(self, table: str) -> list[str]:
        return [row[1] for row in self.conn.execute(f"pragma table_info({table})")]

    def stream(self, sql: str, size: int) -> Iterator[list[tuple[Any, ...]]]:
        """The rows of a query, ``size`` at a time (``memo-mw migrate``)."""
        cursor = self.conn.execute(sql)
        while rows := cursor.fetchmany(size):
            yield rows

    def ids_follow(self, table: str) -> None:
        """After rows were copied in with their ids: (SQLite gives a new row the next id by itself)."""

    def reclaim(self) -> None:
        """The maintenance job's pass: as :meth:`erase` (SQLite leaves nothing to reclaim later)."""
        self.erase()

    def check_writable(self) -> None:
        """The file takes a write (a held lock is no fault here: the writer has it)."""
        try:
            self.conn.execute("PRAGMA busy_timeout = 500")
            self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")  # a write that changes nothing
        except sqlite3.DatabaseError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise StoreError(f"cannot write the memory database {self.name!r}: {exc}") from exc
            log.warning("memo-mw: %r is locked by another writer; starting without the write check", self.name)

    def close(self) -> None:
        self.conn.close()


def connect(path: str, *, readonly: bool) -> sqlite3.Connection:
    """Open the file with the pragmas memo-mw relies on; make the schema unless ``readonly``."""
    if os.path.isdir(path):
        raise StoreError(f"cannot use {path!r} as the memory database: it is a directory, not a file")
    try:
        if not readonly and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro" if readonly else path, uri=readonly,
                               check_same_thread=False, isolation_level=None,
                               timeout=defaults.BUSY_TIMEOUT_MS / 1000)
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
