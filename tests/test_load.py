"""Concurrent load through a real server: 20 threads x 500 requests from 200 users to the
middleware under gunicorn (2 gthread workers), with a real rq worker storing as the load
runs. Every expected memory is stored once, none crosses users, no request fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import redis
from rq import Queue, SimpleWorker

from memo_mw import defaults
from memo_mw.outbox import Outbox, ResilientBackend
from memo_mw.queue import RQBackend
from memo_mw.store import check_writable

from .loadgen import expected_memories, gunicorn, plan, run_load, stored_memories


def stop(worker: subprocess.Popen) -> None:
    """Stop a worker as an operator would: SIGTERM, a warm shutdown (it finishes the job in hand).
    rq's warm shutdown with the scheduler on sometimes waits minutes with nothing in hand
    (rq/rq#2201): then a second SIGTERM, rq's cold shutdown, and at last SIGKILL, so that no
    worker outlives the test and takes the next tests' jobs. A job cut short shows below, as a
    memory missing."""
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGTERM, 20), (signal.SIGKILL, 20)):
        try:
            os.killpg(worker.pid, sig)
        except ProcessLookupError:  # already gone
            pass
        try:
            worker.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def test_twenty_threads_of_five_hundred_requests(db, redis_url):
    check_writable(db)
    work = plan(threads=20, per_thread=500, users=200)
    expected = expected_memories(work)
    worker = subprocess.Popen([sys.executable, "-m", "memo_mw", "worker", "--url", redis_url],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        with gunicorn(db, redis_url) as server:
            result = run_load(server.port, work)
        # The web processes send what they wrote behind as they stop; one stopped while the
        # other held the send lease leaves its last rows in the outbox file, for the next
        # process on the database to send: that next process.
        leftover = ResilientBackend(RQBackend(redis_url), Outbox(db + ".outbox"))
        leftover.send_now(timeout=60)
        assert leftover.outbox.count() == 0
        leftover.close()
    finally:
        stop(worker)
    # What the worker had not reached yet: a real rq worker (no fork, for speed) drains it.
    connection = redis.Redis.from_url(redis_url)
    queue = Queue(defaults.QUEUE_NAME, connection=connection, serializer=defaults.SERIALIZER)
    SimpleWorker([queue], connection=connection, serializer=defaults.SERIALIZER).work(
        burst=True, logging_level="WARNING")
    failed = queue.failed_job_registry.count
    connection.close()

    assert result.sent == 10_000
    assert not result.errors, (f"{len(result.errors)} requests failed, first {result.errors[:3]};"
                               f" gunicorn logged:\n{server.log_text()[-20_000:]}")
    assert result.statuses == {200: 10_000}  # zero 5xx, zero anything else
    assert result.wrong_replies == 0  # every reply was the app's answer to that request
    assert failed == 0
    stored = stored_memories(db)
    assert len(expected) > 2_500 and all(count == 1 for count in expected.values())
    missing = expected - stored
    assert not missing, f"{sum(missing.values())} memories missing, e.g. {list(missing)[:3]}"
    assert stored == expected  # nothing doubled, nothing else, and each under its own user
