"""Shared fixtures: a private redis-server, a real rq worker, a SQLite file in a temp folder."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis

REDIS_BINARY = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server this test session started, in its own folder, on a free port.

    Tests may stop and restart it; it is the only Redis the tests ever flush.
    """

    def __init__(self, folder: Path):
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [REDIS_BINARY, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.folder)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        for _ in range(200):
            try:
                client.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.025)
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


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

    connection = redis.Redis.from_url(redis_url)
    queue = Queue(defaults.QUEUE_NAME, connection=connection, serializer=defaults.SERIALIZER)
    waiting = queue.count
    worker = Worker([queue], connection=connection, serializer=defaults.SERIALIZER)
    worker.work(burst=True, logging_level="WARNING")
    assert queue.failed_job_registry.count == 0, "a memo job failed"
    assert queue.count == 0
    return waiting  # finished jobs keep no result (result_ttl=0), so count what was waiting
