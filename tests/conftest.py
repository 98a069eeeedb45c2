"""Shared fixtures: a private redis-server, a private PostgreSQL server, a real rq worker, a store.

``db`` is a SQLite file in a temporary folder; in a test marked ``both_engines`` (a module's
``pytestmark``), it is that and, as a second case, a fresh schema of the private PostgreSQL server:
the store's behaviour suites run on both engines (but a test marked ``sqlite_only``: of SQLite's files)."""

from __future__ import annotations

import json
import os
import time
import zlib
from pathlib import Path

import psycopg
import pytest
import redis

from .loadgen import drain  # noqa: F401 (for the tests: a real rq worker, burst=True)
from memo_mw import defaults, postgres

from .servers import POSTGRES_BIN, REDIS_BINARY, PostgresServer, RedisServer, free_port  # noqa: F401 (free_port)

ENGINES = ("sqlite", "postgresql")


def pytest_generate_tests(metafunc):
    marked = metafunc.definition.get_closest_marker
    if "db" in metafunc.fixturenames and marked("both_engines") and not marked("sqlite_only"):
        metafunc.parametrize("db", ENGINES, indirect=True)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    if not os.path.exists(REDIS_BINARY):
        if os.environ.get("CI"):
            pytest.fail("redis-server is not installed; `make test` installs it with apt-get")
        pytest.skip("redis-server is not installed (make test installs it with apt-get)")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server):
    """The private server's URL, emptied before each test (it is ours: flushing it is safe)."""
    if redis_server.process is None:
        redis_server.start()
    redis.Redis.from_url(redis_server.url).flushdb()
    return redis_server.url


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    """The session's private PostgreSQL server (tests/servers.py): skipped without initdb and pg_ctl,
    failed under CI."""
    if POSTGRES_BIN is None:
        reason = ("PostgreSQL (initdb, pg_ctl) is not installed and could not be installed: "
                  "the PostgreSQL half of the store tests is skipped")
        if os.environ.get("CI"):
            pytest.fail(reason + " (`make test` installs Debian's postgresql)")
        pytest.skip(reason)
    server = PostgresServer(tmp_path_factory.mktemp("postgres"))
    server.start()
    yield server
    postgres.close_pools()
    server.stop()


@pytest.fixture
def postgres_url(postgres_server):
    """A fresh schema of the private server, dropped after the test (with this process's pools)."""
    url = postgres_server.new_schema_url()
    yield url
    postgres.close_pools()
    postgres_server.drop_schema(url)


@pytest.fixture
def db(request, tmp_path) -> str:
    if getattr(request, "param", "sqlite") == "postgresql":
        # The web process's spool is then var/memo.spool of the working folder: one of the test's own instead.
        request.getfixturevalue("monkeypatch").setattr(defaults, "SPOOL", str(tmp_path / "memo.spool"))
        return request.getfixturevalue("postgres_url")
    return str(tmp_path / "memo.db")


def database_bytes(db: str) -> bytes:
    """Everything the store holds. SQLite: every byte of its files (the .db, its -wal and -shm): deleted
    text must not be found there. PostgreSQL: every row of every table of its schema, as JSON text (what
    PostgreSQL keeps of deleted rows until VACUUM and in its WAL is the server's: docs/reliability.md)."""
    if not postgres.is_url(db):
        return b"".join(Path(db + s).read_bytes() for s in ("", "-wal", "-shm") if Path(db + s).exists())
    with psycopg.connect(db, autocommit=True) as conn:
        tables = [t for (t,) in conn.execute("select tablename from pg_tables where schemaname = current_schema()")]
        return b"\n".join(json.dumps(row, ensure_ascii=False).encode() for table in tables
                          for (row,) in conn.execute(f"select row_to_json(t) from {table} t"))


def all_redis_text(url: str, skip_jobs_of_other_queues: str | None = None) -> bytes:
    """Every value in the private Redis, job payloads decompressed (rq compresses them); with
    ``skip_jobs_of_other_queues``, not the jobs of another queue than the one it names."""
    client = redis.Redis.from_url(url)
    out = []
    for key in client.keys("*"):
        if skip_jobs_of_other_queues and key.startswith(b"rq:job:") \
                and client.hget(key, "origin") != skip_jobs_of_other_queues.encode():
            continue
        kind = client.type(key)
        values = client.hvals(key) if kind == b"hash" else client.lrange(key, 0, -1) if kind == b"list" \
            else [client.get(key)] if kind == b"string" else []
        for value in values:
            out.append(value or b"")
            try:
                out.append(zlib.decompress(value))
            except (zlib.error, TypeError):
                pass
    client.close()
    return b"\n".join(out)


def wait_until(condition, timeout: float = 15.0) -> bool:
    """Poll ``condition()`` until it is true (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False
