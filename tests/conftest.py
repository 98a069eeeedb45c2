"""Shared fixtures: a private redis-server, a real rq worker, a SQLite file in a temp folder."""

from __future__ import annotations

import os
import time
import zlib

import pytest
import redis

from .servers import REDIS_BINARY, RedisServer, free_port  # noqa: F401 (free_port: for the tests)


@pytest.fixture(autouse=True)
def counts_sent_when_asked(monkeypatch):
    """Recall and topic counts are sent by a thread every second in production; a test sends
    them when it means to (``backend.flush()``), so a drain never races with a send."""
    from memo_mw import defaults

    monkeypatch.setattr(defaults, "COUNTS_SEND_INTERVAL", 3600.0)


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


@pytest.fixture
def db(tmp_path) -> str:
    return str(tmp_path / "memo.db")


def drain(redis_url: str) -> int:
    """Run a real rq worker in burst mode on the memo queue; return how many jobs it finished."""
    from rq import Worker

    from memo_mw import defaults

    from rq import Queue

    from memo_mw.outbox import send_waiting

    send_waiting()  # jobs the middlewares of this process wrote behind, not yet sent
    connection = redis.Redis.from_url(redis_url)
    queue = Queue(defaults.QUEUE_NAME, connection=connection, serializer=defaults.SERIALIZER)
    waiting = queue.count
    worker = Worker([queue], connection=connection, serializer=defaults.SERIALIZER)
    worker.work(burst=True, logging_level="WARNING")
    assert queue.failed_job_registry.count == 0, "a memo job failed"
    assert queue.count == 0
    return waiting  # finished jobs keep no result (result_ttl=0), so count what was waiting


def all_redis_text(url: str) -> bytes:
    """Every value in the private Redis, job payloads decompressed (rq compresses them); what the
    middlewares of this process wrote behind is sent first."""
    from memo_mw.outbox import send_waiting

    send_waiting()
    client = redis.Redis.from_url(url)
    out = []
    for key in client.keys("*"):
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


def observe_reads(monkeypatch, middleware, note) -> bool:
    """Have ``note(got)`` see what the one-call read gives each request from here on: that of
    memo_mw._speedups.read_request, and that of the Reader the middleware keeps of its arguments
    (made again: the first request after this makes it). False without the extension."""
    from memo_mw import middleware as middleware_module

    real, reader = middleware_module._read_request, middleware_module._Reader
    if real is None:
        return False

    def seen(got):
        note(got)
        return got

    monkeypatch.setattr(middleware_module, "_read_request", lambda *args: seen(real(*args)))
    if reader is not None:
        monkeypatch.setattr(middleware_module, "_Reader",
                            lambda *args: (lambda kept: lambda environ: seen(kept(environ)))(reader(*args)))
    middleware._reader = None
    return True


def answered(got) -> bool:
    """Whether the one-call read answered the request (the user's view: nothing to recall or capture)."""
    return got is True or type(got) is tuple and len(got) == 5
