"""Concurrent load through a real server: 12 threads x 50 requests from 60 users to the
middleware under gunicorn (2 gthread workers), with a real rq worker storing as the load
runs. Every expected memory is stored once, none crosses users, no request fails. The same
on PostgreSQL with two web processes and two ``memo-mw worker`` processes (bench/cluster.py,
whose longer run is the benchmark's cluster_pg). (The benchmarks in bench/ run the same load
generator for longer.)"""

from __future__ import annotations

import os
import subprocess
import sys

import redis
from rq import Queue

from memo_mw import defaults
from memo_mw.spool import Spool
from memo_mw.store import check_writable

from .conftest import wait_until
from .loadgen import WORKER_STOP, drain, expected_memories, gunicorn, plan, run_load, stop_group, stored_memories

THREADS, PER_THREAD, USERS = 12, 50, 60


def stop(worker: subprocess.Popen) -> None:
    """Stop a worker as an operator would: SIGTERM, a warm shutdown (it finishes the job in hand).
    rq 3.0.0's warm shutdown sometimes waits a minute with nothing in hand (rq/rq#2201; its
    command channel's thread, rq/rq#1613): the test stops it only once it has nothing in hand,
    so after a few seconds a second SIGTERM, rq's cold shutdown, and at last SIGKILL, so that no
    worker outlives the test and takes the next tests' jobs. A job cut short would show below,
    as a memory missing."""
    stop_group(worker, WORKER_STOP)


def test_concurrent_requests_store_each_memory_once(db, redis_url):
    check_writable(db)
    work = plan(threads=THREADS, per_thread=PER_THREAD, users=USERS)
    expected = expected_memories(work)
    # rq's own command line, as `memo-mw worker --simple` runs it: JSON jobs, the scheduler on,
    # jobs run in the worker process (a fork per job would make this test about fork's speed).
    rq = os.path.join(os.path.dirname(sys.executable), "rq")
    worker = subprocess.Popen([rq, "worker", "--url", redis_url, "--serializer", "json", "--with-scheduler",
                               "--worker-class", "rq.SimpleWorker", defaults.QUEUE_NAME],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        with gunicorn(db, redis_url) as server:
            result = run_load(server.port, work)
        queue = Queue(defaults.QUEUE_NAME, connection=redis.Redis.from_url(redis_url))
        # (A job retried after a passing fault, a lock held past the busy timeout under load, waits in the
        # scheduled registry until the worker's scheduler runs it: stored late is not lost.)
        assert wait_until(lambda: queue.count == 0 and queue.started_job_registry.count == 0
                          and queue.scheduled_job_registry.count == 0, 60)
    finally:
        stop(worker)
    assert drain(redis_url) == 0  # the worker took every job (and none failed)

    total = THREADS * PER_THREAD
    assert result.sent == total
    assert not result.errors, (f"{len(result.errors)} requests failed, first {result.errors[:3]};"
                               f" gunicorn logged:\n{server.log_text()[-20_000:]}")
    assert result.statuses == {200: total}  # zero 5xx, zero anything else
    assert result.wrong_replies == 0  # every reply was the app's answer to that request
    assert len(Spool(db + ".spool")) == 0  # Redis answered throughout: nothing waited in the spool
    stored = stored_memories(db)
    assert len(expected) > total // 5 and all(count == 1 for count in expected.values())
    missing = expected - stored
    assert not missing, f"{sum(missing.values())} memories missing, e.g. {list(missing)[:3]}"
    assert stored == expected  # nothing doubled, nothing else, and each under its own user


def test_two_web_processes_and_two_workers_on_postgresql(postgres_url, redis_url, tmp_path):
    """Two gunicorn servers and two ``memo-mw worker`` processes on one PostgreSQL and one Redis, as on
    separate hosts: the same guarantees, and every user's recall shows only that user's memories."""
    from bench import cluster

    result = cluster.run(postgres_url, redis_url, str(tmp_path), threads=THREADS, per_thread=PER_THREAD, users=USERS)
    assert result["requests"] == THREADS * PER_THREAD and result["failed_requests"] == 0, result
    assert result["failed_jobs"] == 0, result  # none failed, none left waiting
    assert result["expected"] > THREADS * PER_THREAD // 5, result
    assert result["lost"] == 0 and result["doubled"] == 0, result
    assert result["cross_user"] == 0 and result["own_recalled"] > 0, result
    assert result["met"], result  # (and nothing waited in a spool)
