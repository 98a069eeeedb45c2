"""Faults on the worker side: a worker killed mid-job, a database locked by another writer,
a bad database path at start-up. Real redis-server, real rq workers, real SQLite files."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from flask import Flask, jsonify
from rq import Queue, Worker
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry

from memo_mw import MemoryMiddleware, defaults
from memo_mw.exceptions import StoreError
from memo_mw.outbox import send_waiting
from memo_mw.store import Store, check_writable


def capture_one(db, redis_url, message="I like kalimba music"):
    app = Flask(__name__)
    app.post("/chat")(lambda: jsonify(ok=True))
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url)
    response = app.test_client().post("/chat", json={"message": message}, headers={"X-User-Id": "alice"})
    assert response.status_code == 200
    send_waiting()  # written behind: in Redis within milliseconds, now for the test
    queue = Queue(defaults.QUEUE_NAME, connection=redis.Redis.from_url(redis_url), serializer=defaults.SERIALIZER)
    (job_id,) = queue.job_ids
    return queue, job_id


def lock_database(db) -> sqlite3.Connection:
    """Another writer holding SQLite's write lock until it commits."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def contents(db):
    with Store(db) as store:
        return [m["content"] for m in store.memories("alice")]


def run_due_retries(queue):
    """What the scheduler of `memo-mw worker` does once a retry is due: move it back to the queue
    (and the worker runs it). The first retry interval is 1 s; rq keeps due times in whole seconds."""
    deadline = time.monotonic() + 10
    while True:
        time.sleep(0.5)
        worker = Worker([queue], connection=queue.connection, serializer=defaults.SERIALIZER)
        worker.work(burst=True, with_scheduler=True, logging_level="WARNING")
        if queue.scheduled_job_registry.count == 0 or time.monotonic() > deadline:
            return


def test_a_locked_database_makes_the_job_retry_with_backoff(db, redis_url, monkeypatch):
    monkeypatch.setattr(defaults, "SQLITE_BUSY_TIMEOUT_MS", 200)  # the forked work horse inherits it
    queue, job_id = capture_one(db, redis_url)
    holder = lock_database(db)
    Worker([queue], connection=queue.connection, serializer=defaults.SERIALIZER).work(
        burst=True, logging_level="CRITICAL")
    job = Job.fetch(job_id, connection=queue.connection, serializer=defaults.SERIALIZER)
    assert job.get_status() == JobStatus.SCHEDULED  # waited for the lock, failed, and will retry
    assert job.retries_left == 2 and job.retry_intervals == [1, 10, 60]  # backing off
    assert queue.failed_job_registry.count == 0
    holder.execute("COMMIT")  # the other writer is done
    holder.close()
    run_due_retries(queue)
    assert contents(db) == ["likes kalimba music"]


def test_a_worker_killed_mid_job_is_retried_and_stores_once(db, redis_url, tmp_path):
    queue, job_id = capture_one(db, redis_url)
    holder = lock_database(db)  # the job will wait inside SQLite: a moment to kill it in
    worker = subprocess.Popen([sys.executable, "-m", "memo_mw", "worker", "--url", redis_url],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        job = Job.fetch(job_id, connection=queue.connection, serializer=defaults.SERIALIZER)
        deadline = time.monotonic() + 30
        while job.get_status() != JobStatus.STARTED:
            assert time.monotonic() < deadline, "the worker never started the job"
            time.sleep(0.05)
        os.killpg(worker.pid, signal.SIGKILL)  # the worker and its work horse, mid-job
    finally:
        worker.wait(timeout=10)
    holder.execute("ROLLBACK")
    holder.close()
    assert contents(db) == []  # nothing half-written
    assert job.get_status() == JobStatus.STARTED  # abandoned: nobody will finish it

    # A worker's maintenance round (every WORKER_MAINTENANCE_INTERVAL s) retries the jobs of
    # a dead worker once their heartbeat has expired; here the clock is moved past it.
    registry = StartedJobRegistry(queue=queue)
    assert job_id in registry.get_job_ids()
    registry.cleanup(timestamp=time.time() + 600)
    # The dead worker's scheduler lock lapses after about a minute too; here it is let go now.
    queue.connection.delete(f"rq:scheduler-lock:{queue.name}")
    assert job.get_status() == JobStatus.SCHEDULED
    run_due_retries(queue)
    assert contents(db) == ["likes kalimba music"]
    # A retry of a job that had already stored its memory stores nothing new.
    queue.enqueue(job.func_name, *job.args)  # the same payload, run again
    Worker([queue], connection=queue.connection, serializer=defaults.SERIALIZER).work(burst=True)
    assert contents(db) == ["likes kalimba music"]
    with Store(db) as store:
        assert store.db.execute("select count(*) from memories").fetchone()[0] == 1


def corrupt_file(tmp_path):
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"this is not a database, " * 100)
    return str(path)


def under_a_file(tmp_path):
    (tmp_path / "plain-file").write_text("x")
    return str(tmp_path / "plain-file" / "memo.db")


def a_directory(tmp_path):
    (tmp_path / "folder.db").mkdir()
    return str(tmp_path / "folder.db")


BAD_PATHS = [pytest.param(corrupt_file, "file is not a database", id="corrupt"),
             pytest.param(under_a_file, "memo.db", id="parent-is-a-file"),
             pytest.param(a_directory, "unable to open", id="directory")]


@pytest.mark.parametrize("make_path, reason", BAD_PATHS)
def test_a_bad_database_path_is_a_clear_error_at_start_up(tmp_path, make_path, reason):
    path = make_path(tmp_path)
    before = Path(path).read_bytes() if os.path.isfile(path) else None
    with pytest.raises(StoreError, match="memory database") as error:
        MemoryMiddleware(lambda environ, start_response: [], db=path)
    assert path in str(error.value) and reason in str(error.value)
    if before is not None:
        assert Path(path).read_bytes() == before  # nothing written to a file that is not ours


@pytest.mark.parametrize("make_path, reason", BAD_PATHS)
def test_the_worker_refuses_a_bad_database_at_start_up(tmp_path, make_path, reason, redis_url):
    path = make_path(tmp_path)
    result = subprocess.run([sys.executable, "-m", "memo_mw", "worker", "--burst", "--url", redis_url,
                             "--db", path], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert path in result.stderr and reason in result.stderr
    assert "Traceback" not in result.stderr


def test_a_read_only_database_is_refused_at_start_up(tmp_path):
    """Root may write any file: as root, the check runs without the capability that allows it."""
    import shutil

    path = str(tmp_path / "memo.db")
    check_writable(path)  # creates it, writable
    for name in os.listdir(tmp_path):
        os.chmod(tmp_path / name, 0o444)
    code = f"from memo_mw.store import check_writable; check_writable({path!r})"
    command = [sys.executable, "-c", code]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("running as root without setpriv: root writes read-only files")
        command = ["setpriv", "--inh-caps=-dac_override", "--bounding-set=-dac_override", *command]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "StoreError" in result.stderr and path in result.stderr and "readonly" in result.stderr


def test_the_worker_stores_waiting_jobs_in_batches_once_each(db, redis_url):
    app = Flask(__name__)
    app.post("/chat")(lambda: jsonify(ok=True))
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url)
    client = app.test_client()
    things = [f"kalimba {chr(97 + i)}{chr(97 + j)}" for i in range(5) for j in range(6)]
    for n, thing in enumerate(things):
        client.post("/chat", json={"message": f"I like {thing}"}, headers={"X-User-Id": f"user-{n % 3}"})
    send_waiting()  # written behind: in Redis within milliseconds, now for the test
    connection = redis.Redis.from_url(redis_url)
    queue = Queue(defaults.QUEUE_NAME, connection=connection, serializer=defaults.SERIALIZER)
    assert queue.count == 30
    copy = Job.fetch(queue.job_ids[5], connection=connection, serializer=defaults.SERIALIZER)
    queue.enqueue(copy.func_name, *copy.args)  # as if another worker ran one of the batch again
    result = subprocess.run([sys.executable, "-m", "memo_mw", "worker", "--burst", "--url", redis_url],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert queue.count == 0 and queue.failed_job_registry.count == 0
    with Store(db) as store:
        rows = store.db.execute("select user_id, content from memories order by id").fetchall()
    assert sorted(content for _, content in rows) == sorted(f"likes {thing}" for thing in things)  # once each
    assert {user for user, _ in rows} == {"user-0", "user-1", "user-2"}
    assert not [k for k in connection.keys("memo:pending:*") if connection.hlen(k)]  # none left pending
    assert connection.keys("rq:job:memo-remember-*") == []  # the batched jobs are gone too
    connection.close()
