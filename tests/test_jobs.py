"""The jobs (memo_mw.jobs) under a real rq worker: idempotent captures, a worker killed mid-job,
retries through rq's scheduler, forget requests reaching waiting jobs, and the periodic jobs.
Real redis-server, real rq workers (forked work horses), real SQLite files."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time

import psycopg
import pytest
from flask import Flask, jsonify
from rq import Queue
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry

from memo_mw import MemoryMiddleware, counters, defaults, jobs, postgres, sqlite
from memo_mw.forgetting import forget_marker
from memo_mw.queue import REMEMBER, RETRY_INTERVALS
from memo_mw.reload import make_funnel
from memo_mw.store import Store, check_writable

from .conftest import all_redis_text, wait_until
from .loadgen import BurstSimpleWorker, BurstWorker, drain, opened_queues, word

pytestmark = pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)


@pytest.fixture
def make_queue(db):
    with opened_queues(spool=db + ".spool") as make:
        yield make


def chat(db, queue):
    app = Flask(__name__)
    app.post("/chat")(lambda: jsonify(ok=True))
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, trust_user_header=True, db=db, queue=queue)
    client = app.test_client()

    def say(message, user="alice", **extra):
        response = client.post("/chat", json={"message": message, **extra}, headers={"X-User-Id": user})
        assert response.status_code == 200

    return say


def contents(db, user="alice"):
    with Store(db) as store:
        return sorted(m["content"] for m in store.list(user))


def lock_database(db) -> sqlite3.Connection | psycopg.Connection:
    """Another writer holding the write lock until it commits or rolls back: SQLite's, or on PostgreSQL
    the advisory lock of a write for every user (memo_mw.postgres.ALL_USERS)."""
    if postgres.is_url(db):
        conn = psycopg.connect(db)  # (a transaction begins with the first statement)
        conn.execute("select pg_advisory_xact_lock(%s)", [postgres.ALL_USERS])
        return conn
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def the_job(queue) -> Job:
    (job_id,) = set(queue.rq.job_ids)  # a job id enqueued again is listed again: it runs once
    return queue.rq.fetch_job(job_id)


def test_the_same_capture_twice_is_stored_once(db, redis_url, make_queue):
    queue = make_queue(redis_url)
    say = chat(db, queue)
    for _ in range(3):  # a client retrying one message: one job id
        say("I like green tea", message_id="msg-7")
    job = the_job(queue)
    payload = job.args[1]
    assert drain(redis_url) >= 1
    assert contents(db) == ["likes green tea"]
    # The job run again (a second worker, a resent spool): its key is in processed_jobs.
    queue.enqueue(job.func_name, job.args)
    drain(redis_url)
    assert jobs.remember(db, payload) == ["duplicate_job"]
    with Store(db) as store:
        assert [(m["content"], m["source_ids"]) for m in store.list("alice")] == [("likes green tea", ["msg-7"])]
        assert store.db.execute("select count(*) from memories").fetchone()[0] == 1
    assert b"green tea" not in all_redis_text(redis_url)  # finished jobs leave nothing behind


def test_enqueued_jobs_carry_the_production_retries(db, redis_url, make_queue):
    say = chat(db, make_queue(redis_url))
    say("I like kalimba")
    job = the_job(make_queue(redis_url))
    assert job.retries_left == len(RETRY_INTERVALS) == 3 and job.retry_intervals == list(RETRY_INTERVALS)
    assert job.failure_ttl == defaults.JOB_FAILURE_TTL and job.result_ttl == 0


def run_due_retries(redis_url, queue, timeout=15.0):
    """What `memo-mw worker` does (rq's scheduler on): move retries that are due back to the
    queue and run them, until none waits."""
    def done():
        drain(redis_url, scheduler=True)
        return queue.rq.scheduled_job_registry.count == 0 and queue.rq.count == 0
    assert wait_until(done, timeout), "a retry was never run"


def test_a_locked_database_makes_the_job_retry_through_the_scheduler(db, redis_url, make_queue, monkeypatch):
    monkeypatch.setattr(defaults, "BUSY_TIMEOUT_MS", 200)  # the forked work horse inherits it
    check_writable(db)
    queue = make_queue(redis_url, retry_intervals=[1, 2, 3])
    chat(db, queue)("I like kalimba music")
    job = the_job(queue)
    holder = lock_database(db)
    drain(redis_url, scheduler=True)
    job = queue.rq.fetch_job(job.id)
    assert job.get_status() == JobStatus.SCHEDULED  # waited for the lock, failed, will retry
    assert job.retries_left == 2 and queue.rq.failed_job_registry.count == 0
    holder.execute("COMMIT")  # the other writer is done
    holder.close()
    run_due_retries(redis_url, queue)
    assert contents(db) == ["likes kalimba music"]


def on_a_full_disk(monkeypatch, db, room_pages=0):
    """The disk of ``db`` has room for ``room_pages`` more pages: every connection memo-mw opens
    (the forked work horse inherits this) is capped by ``PRAGMA max_page_count``, so a write that
    needs room fails with SQLite's own "database or disk is full" (a real file, a real limit; only
    the cap is set from here, as no test can fill a real disk)."""
    with Store(db) as opened:
        pages = opened.db.execute("PRAGMA page_count").fetchone()[0] + room_pages
    opened_by_memo = sqlite.connect

    def connect(path, *, readonly=False):
        conn = opened_by_memo(path, readonly=readonly)
        conn.execute(f"PRAGMA max_page_count = {pages}")
        return conn

    monkeypatch.setattr(sqlite, "connect", connect)


@pytest.mark.sqlite_only  # (a full file)
def test_a_full_disk_keeps_the_captures_retrying_until_there_is_room(db, redis_url, make_queue, monkeypatch):
    """Issue 33, item 1: with the database's disk full and Redis up, every capture the chat
    answered is stored once the disk has room, none left in the failed registry."""
    queue = make_queue(redis_url, retry_intervals=[0])  # its own retry spent at once, in the burst
    say = chat(db, queue)
    on_a_full_disk(monkeypatch, db)
    users = [f"user-{n}" for n in range(60)]
    for n, user in enumerate(users):
        say(f"I like {word(n + 1)}", user=user)
    drain(redis_url)  # (asserts that no job failed)
    waiting = queue.rq.scheduled_job_registry.get_job_ids()
    assert waiting, "the disk was never full"
    assert all(queue.rq.fetch_job(i).get_status() == JobStatus.SCHEDULED for i in waiting)
    stored_while_full = sum(len(contents(db, user)) for user in users)
    assert stored_while_full < len(users)

    monkeypatch.undo()  # the disk has room again
    for job_id in waiting:  # their retry is due (in RETRY_INTERVALS[-1] s, as rq's scheduler would)
        queue.rq.scheduled_job_registry.requeue(job_id)
    drain(redis_url)
    assert [contents(db, user) for user in users] == [[f"likes {word(n + 1)}"] for n in range(len(users))]
    assert queue.rq.failed_job_registry.count == 0 and queue.rq.scheduled_job_registry.count == 0


def test_a_job_that_keeps_failing_ends_in_the_failed_registry(db, tmp_path, redis_url, make_queue):
    (tmp_path / "plain-file").write_text("a file where the database folder should be")
    queue = make_queue(redis_url, retry_intervals=[0, 0])  # 0: requeued at once, no scheduler needed
    queue.enqueue("memo_mw.jobs.touch", [str(tmp_path / "plain-file" / "memo.db"), "alice", [1], 0])
    BurstWorker([queue.rq], connection=queue.connection, serializer=queue.rq.serializer).work(
        burst=True, logging_level="CRITICAL")
    (job_id,) = queue.rq.failed_job_registry.get_job_ids()
    assert queue.rq.fetch_job(job_id).retries_left == 0  # tried three times, then kept for a person


def test_a_worker_killed_mid_job_leaves_nothing_half_done(db, redis_url, make_queue):
    check_writable(db)
    # Two retries (production has three): the clock moved below hands the dead worker's job to its retry,
    # and the drain's own maintenance may hand it over once more; with one retry, that second hand-over
    # could fail the job rq is finishing (seen as "Failed to retrieve status for job" after it stored).
    queue = make_queue(redis_url, retry_intervals=[1, 1])
    chat(db, queue)("I like kalimba music")
    job = the_job(queue)
    holder = lock_database(db)  # the job will wait for the lock: a moment to kill it in
    worker = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "rq"), "worker", "--url", redis_url,
                               "--serializer", "json", defaults.QUEUE_NAME],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait_until(lambda: job.get_status() == JobStatus.STARTED, 30), "the worker never started the job"
        os.killpg(worker.pid, signal.SIGKILL)  # the worker and its work horse, mid-job
    finally:
        worker.wait(timeout=10)
    holder.execute("ROLLBACK")
    holder.close()
    assert contents(db) == []  # nothing half-written
    with Store(db) as store:
        assert store.db.execute("select count(*) from processed_jobs").fetchone()[0] == 0
    assert job.get_status() == JobStatus.STARTED  # abandoned: nobody will finish it
    # A worker's maintenance round (every WORKER_MAINTENANCE_INTERVAL s) hands the jobs of a dead
    # worker to their retries once its heartbeat has expired; here the clock is moved past it.
    registry = StartedJobRegistry(queue=queue.rq)
    assert job.id in registry.get_job_ids()
    registry.cleanup(timestamp=time.time() + 600)
    assert job.get_status() == JobStatus.SCHEDULED
    run_due_retries(redis_url, queue)
    assert contents(db) == ["likes kalimba music"]


def capture(queue, db, user, message, ts=1_700_000_000):
    """Enqueue the capture of one message as the middleware does, for the database ``db``."""
    candidates = [c.as_dict() for c in make_funnel(None, reload_interval=None).process(message).candidates]
    assert candidates, message
    payload = {"job_key": f"memo-remember-{user}-{ts}", "user_id": user, "session_id": "s", "ts": ts,
               "message_id": None, "candidates": candidates, "received": float(ts)}
    queue.enqueue(REMEMBER, [db, payload], job_id=payload["job_key"], user_id=user, pending=payload)


def test_forget_waiting_reaches_queued_scheduled_and_failed_jobs(db, tmp_path, redis_url, make_queue):
    (tmp_path / "plain-file").write_text("a file where the database folder should be")
    broken = str(tmp_path / "plain-file" / "memo.db")  # jobs on it fail
    # A queue of this test's own: a job another test's thread saves late is neither counted nor read.
    failing = make_queue(redis_url, retry_intervals=[], name="forget-waiting")  # no retry: to the failed registry
    retrying = make_queue(redis_url, retry_intervals=[600], name="forget-waiting")  # to the scheduled registry
    capture(failing, broken, "alice", "I live in Springfield", ts=1)
    capture(retrying, broken, "alice", "I like kalimba", ts=2)
    capture(retrying, broken, "bob", "I live in Shelbyville", ts=3)
    BurstWorker([failing.rq], connection=failing.connection, serializer=failing.rq.serializer).work(
        burst=True, logging_level="CRITICAL")
    # (Counted by this test's job ids: a job another test left to a thread of its own must not count.)
    assert ours(failing.rq.failed_job_registry) == {"memo-remember-alice-1"}
    assert ours(failing.rq.scheduled_job_registry) == {"memo-remember-alice-2", "memo-remember-bob-3"}
    capture(failing, db, "alice", "I like oolong tea. I like kalimba music. I like sitar.", ts=4)  # queued
    assert ours(failing.rq) == {"memo-remember-alice-4"}

    later = 2_000_000_000
    changed = jobs.forget_waiting(failing.rq, "alice", forget_marker("kalimba", later, float(later)))
    assert changed == 2  # the scheduled kalimba job (deleted) and the queued one (cut)
    text = all_redis_text(redis_url, "forget-waiting")
    assert b"likes kalimba" not in text and b"likes sitar" in text and b"Springfield" in text
    assert jobs.forget_waiting(failing.rq, "alice", forget_marker(None, later, float(later))) == 2
    text = all_redis_text(redis_url, "forget-waiting")
    assert b"Springfield" not in text and b"sitar" not in text and b"oolong" not in text
    assert b"Shelbyville" in text  # another user's job is not touched
    assert not ours(failing.rq.failed_job_registry) and ours(failing.rq.scheduled_job_registry) == {
        "memo-remember-bob-3"}
    assert not ours(failing.rq)


def ours(registry) -> set[str]:
    """The ids of this module's capture jobs (``capture``) a queue or registry holds."""
    ids = registry.job_ids if isinstance(registry, Queue) else registry.get_job_ids()
    return {i for i in ids if i.startswith("memo-remember-") and i.rsplit("-", 1)[-1].isdigit()}


def test_count_topics_skips_users_who_forgot_everything_after_the_counts(db):
    check_writable(db)
    counts = {"alice": {"2024-W10|lang.python": 4}, "bob": {"2024-W10|lang.python": 2}}
    jobs.forget(db, "alice", None, 1_700_000_100, received=1_700_000_100.5)
    assert jobs.count_topics(db, counts, at=1_700_000_000) == 1  # noted before alice's forget: bob's only
    with Store(db) as store:
        assert counters.rows(store, "alice") == []
        assert counters.rows(store, "bob") == [{"week": "2024-W10", "topic": "lang.python", "count": 2}]
    assert jobs.count_topics(db, counts, at=1_700_000_200) == 2  # noted after it: counted


def test_maintain_and_insights_run_under_rq(db, redis_url, make_queue):
    check_writable(db)
    queue = make_queue(redis_url)
    chat(db, queue)("remind me to call the dentist tomorrow", ts=1_700_000_000)
    weeks = [counters.week_of(1_700_000_000 - w * 7 * 86400) for w in range(4)]
    queue.enqueue("memo_mw.jobs.count_topics", [db, {"alice": {f"{w}|lang.python": 4 for w in weeks}}, 1_700_000_000])
    queue.enqueue("memo_mw.jobs.maintain", [db, 1_700_000_000 + 30 * 86400])  # past the task's 14 days
    queue.enqueue("memo_mw.jobs.insights", [db, 1_700_000_000])
    assert drain(redis_url) == 4
    with Store(db) as store:
        (task,) = store.list("alice", include_inactive=True)
        assert task["content"] == "reminder: call the dentist tomorrow" and task["status"] == "pending_confirm"
        (line,) = [row[0] for row in store.db.execute("select * from insights where user_id = 'alice'")]
    assert line


def test_a_capture_job_stores_the_capture_jobs_waiting_behind_it_in_one_go(db, tmp_path, redis_url, make_queue,
                                                                           caplog):
    """One job takes the captures for its file queued behind it; a forget request still holds."""
    queue = make_queue(redis_url)
    other_db = str(tmp_path / "other.db")
    check_writable(other_db)
    say, say_elsewhere = chat(db, queue), chat(other_db, queue)
    for i in range(30):
        say("I like bossa nova" if i == 3 else f"I like jazz number {i}", user=f"u{i % 3}")
    say_elsewhere("I like tea")
    queue.state.add_forget("u0", forget_marker("bossa nova", time.time(), time.time()))
    worker = BurstSimpleWorker([queue.rq], connection=queue.rq.connection, serializer=queue.rq.serializer)
    with caplog.at_level(logging.INFO, logger="rq.worker"):
        worker.work(burst=True, logging_level="INFO")
    ran = [r for r in caplog.records if "Job OK" in r.getMessage()]
    assert len(ran) == 2  # a capture job with the 29 behind it; the other file's
    stored = [c for u in ("u0", "u1", "u2") for c in contents(db, u)]
    assert len(stored) == 29 and "likes bossa nova" not in stored
    assert contents(other_db) == ["likes tea"]
    assert queue.rq.count == 0 and queue.rq.failed_job_registry.count == 0


def test_a_batch_stops_at_a_forget_request_queued_behind_it(db, redis_url, make_queue):
    """like jazz, forget jazz, like jazz again: the forget runs in its turn (the first statement was
    never stored: the request's marker reached its job first), and the last statement stays."""
    queue = make_queue(redis_url)
    say = chat(db, queue)
    say("I like tea", message_id="m0")
    say("I like jazz", message_id="m1")
    say("forget that I like jazz", message_id="m2")
    say("I like jazz", message_id="m3")
    drain(redis_url)
    with Store(db) as store:
        (jazz,) = [m for m in store.list("alice") if "jazz" in m["content"]]
        audit = store.audit("alice")
    assert jazz["source_ids"] == ["m3"] and jazz["hits"] == 0
    assert [(a["action"], a["count"]) for a in audit] == [("forget_match", 0)]
