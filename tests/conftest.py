"""Shared fixtures: a private redis-server, a real rq worker, a SQLite file in a temp folder."""

from __future__ import annotations

import os
import time
import zlib

import pytest
import redis

from .loadgen import drain  # noqa: F401 (for the tests: a real rq worker, burst=True)
from .servers import REDIS_BINARY, RedisServer, free_port  # noqa: F401 (free_port: for the tests)


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


def all_redis_text(url: str) -> bytes:
    """Every value in the private Redis, job payloads decompressed (rq compresses them)."""
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
