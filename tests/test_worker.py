"""``memo-mw worker`` outlives Redis: a real redis-server this test starts, kills and restarts on
the same port, and a real worker process (memo_mw/worker.py), in both its modes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from rq import Queue
from rq.serializers import JSONSerializer
from werkzeug.test import Client

from memo_mw import MemoryMiddleware, defaults
from memo_mw.store import Store

from .conftest import wait_until
from .servers import REDIS_BINARY, RedisServer

MEMO_MW = shutil.which("memo-mw", path=str(Path(sys.executable).parent))


def chat(url: str, db: str, text: str, message_id: str) -> None:
    """One chat turn through the middleware on Redis at ``url``: its capture job waits on the queue."""
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    response = Client(MemoryMiddleware(app, trust_user_header=True, db=db, redis_url=url)).post(
        "/chat", json={"message": text, "session_id": "s1", "message_id": message_id}, headers={"X-User-Id": "carol"})
    assert response.status_code == 200


def stored(db: str) -> list[str]:
    with Store(db) as store:
        return [m["content"] for m in store.list("carol")]


def waits(log: Path) -> list[str]:
    """The waits the worker logged while Redis was down, in order."""
    return [line.split("next try in ")[1] for line in log.read_text().splitlines() if "waiting for Redis at" in line]


def stop_redis_during_a_job(server: RedisServer, log: Path) -> None:
    """Stop Redis while the worker runs a job (rq runs time.sleep itself), until the worker says it waits."""
    connection = redis.Redis.from_url(server.url)
    job = Queue(defaults.QUEUE_NAME, connection=connection, serializer=JSONSerializer).enqueue(time.sleep, 1.0)
    assert wait_until(lambda: job.get_status(refresh=True) == "started", timeout=10), log.read_text()
    connection.close()
    before = len(waits(log))
    server.stop()
    assert wait_until(lambda: len(waits(log)) > before, timeout=10), log.read_text()


@pytest.mark.skipif(not os.path.exists(REDIS_BINARY), reason="redis-server is not installed")
@pytest.mark.parametrize("mode", ["--simple", "--fork"])
def test_the_worker_waits_for_redis_and_outlives_its_restarts(tmp_path, db, mode):
    server = RedisServer(tmp_path)
    Store(db).close()
    log = tmp_path / "worker.log"
    with open(log, "w") as out:  # a file, not a pipe: nothing reads the log until the end
        proc = subprocess.Popen([MEMO_MW, "worker", mode, "--url", server.url, "--db", db], stdout=out,
                                stderr=subprocess.STDOUT, env={**os.environ, "MEMO_WORKER_RETRY_MAX": "2"})
    try:
        assert wait_until(lambda: waits(log) == ["1 s", "2 s"], timeout=10), log.read_text()  # Redis down at start
        server.start()
        chat(server.url, db, "I like jazz", "w1")
        assert wait_until(lambda: stored(db) == ["likes jazz"], timeout=20), log.read_text()

        stop_redis_during_a_job(server, log)
        assert proc.poll() is None, log.read_text()
        server.start()  # on the same port, empty
        chat(server.url, db, "I like green tea", "w2")
        assert wait_until(lambda: sorted(stored(db)) == ["likes green tea", "likes jazz"], timeout=20), \
            log.read_text()

        stop_redis_during_a_job(server, log)
        proc.terminate()  # while it waits for Redis: it stops at once
        assert proc.wait(timeout=5) == -signal.SIGTERM, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.stop()
    assert f"waiting for Redis at {server.url} (Error 111 connecting" in log.read_text()
    # From 1 s, doubling, capped at MEMO_WORKER_RETRY_MAX; from 1 s again each time Redis went away.
    assert set(waits(log)) == {"1 s", "2 s"} and waits(log).count("1 s") == 3, log.read_text()


@pytest.mark.skipif(not os.path.exists(REDIS_BINARY), reason="redis-server is not installed")
def test_a_stop_signal_while_rq_waits_for_redis_stops_the_worker(tmp_path):
    server = RedisServer(tmp_path)
    server.start()
    log = tmp_path / "worker.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([MEMO_MW, "worker", "--url", server.url], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "MEMO_WORKER_RETRY_MAX": "2"})
    try:
        assert wait_until(lambda: "Listening on" in log.read_text(), timeout=10), log.read_text()
        server.stop()  # while idle: rq's own loop waits for Redis
        assert wait_until(lambda: "could not connect to Redis" in log.read_text(), timeout=10), log.read_text()
        proc.terminate()
        code = proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.stop()
    # Either way it stops at once: in rq's own wait, with rq's warm shutdown (0); or, when Redis went away in
    # the middle of a command (connection reset) and rq's loop ended, in memo-mw's wait, where a stop signal
    # ends the process (SIGTERM's default action). Which one depends on when the server closed the socket.
    assert code == 0 and waits(log) == [] or code == -signal.SIGTERM and waits(log), log.read_text()
