"""The SQLite engine: the file's schema and pragmas, clear errors for unusable files, one writer at a time."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from memo_mw.exceptions import StoreError
from memo_mw.sqlite import SCHEMA_VERSION
from memo_mw.store import Store

from .test_store import payload


def test_schema_and_pragmas(db):
    Store(db).close()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    columns = {row[1] for row in conn.execute("PRAGMA table_info(memories)")}
    assert {"id", "user_id", "type", "key", "polarity", "content", "excerpt", "source_session", "source_ts",
            "confidence", "status", "active", "hits", "last_accessed", "expires_at", "rule_id",
            "topics", "superseded_by", "created_at"} <= columns
    audit = [r[1] for r in conn.execute("PRAGMA table_info(audit)")]
    assert audit == ["id", "user_id", "action", "count", "at", "reason"]  # no content column
    conn.close()
    with Store(db) as store:  # opening again changes nothing
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert store.db.execute("PRAGMA secure_delete").fetchone()[0] == 1


@pytest.mark.parametrize("make", [
    pytest.param(lambda path: path.write_bytes(b"this is not sqlite" * 100), id="not-a-database"),
    pytest.param(lambda path: path.mkdir(), id="a-directory"),
    pytest.param(lambda path: sqlite3.connect(path).execute("PRAGMA user_version = 99"), id="another-version"),
])
def test_an_unusable_database_is_a_clear_error(tmp_path, make):
    path = tmp_path / "x.db"
    make(path)
    with pytest.raises(StoreError, match="memory database|schema version 99"):
        Store(path)


def test_busy_timeout_on_every_connection(db):
    Store(db).close()
    for readonly in (False, True):
        with Store(db, readonly=readonly) as store:
            assert store.db.execute("PRAGMA busy_timeout").fetchone()[0] == 5000


def test_a_read_only_store_refuses_writes(db):
    Store(db).close()
    with Store(db, readonly=True) as store, pytest.raises(sqlite3.OperationalError):
        store.remember(payload("likes tea", "tea"))


def test_a_writer_waits_for_another_instead_of_failing(db):
    Store(db).close()
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # another worker in the middle of a write
    threading.Timer(0.4, lambda: holder.execute("COMMIT")).start()
    started = time.monotonic()
    with Store(db) as store:
        assert store.remember(payload("likes tea", "tea")) == ["stored"]
    assert time.monotonic() - started >= 0.3  # it waited (busy timeout) rather than raising
    holder.close()
