"""The request path's enqueue (RQBackend.enqueue_many) writes rq's job hash itself, from a
template taken from rq: the job must be the one rq would have saved, and rq must run it.
Real redis-server, real rq workers (in this process and the `rq` and `memo-mw` commands)."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from rq import Queue, Retry, Worker
from rq.job import Job, JobStatus
from rq.utils import str_to_date

from memo_mw import defaults
from memo_mw.queue import FORGET, REMEMBER, JobSerializer, RQBackend, job_data, utcnow
from memo_mw.store import Store

from .conftest import drain

TIMES = {b"created_at", b"enqueued_at"}


def payload(user="alice", key="memo-remember-fast-1", thing="kalimba music"):
    return {"job_key": key, "user_id": user, "session_id": None, "ts": int(time.time()), "message_id": None,
            "candidates": [{"type": "preference", "key": thing, "polarity": 1, "content": f"likes {thing}",
                            "excerpt": f"I like {thing}", "confidence": 0.9, "topics": [], "sensitive": False}]}


def rq_saved(connection, func, args, job_id):
    """The hash rq itself saves for the job memo-mw enqueues (the call the request path made before)."""
    queue = Queue(defaults.QUEUE_NAME, connection=connection, serializer=defaults.SERIALIZER)
    queue.enqueue(func, *args, job_id=job_id, unique=True, description=func, result_ttl=0,
                  failure_ttl=defaults.JOB_FAILURE_TTL, retry=Retry(max=3, interval=[1, 10, 60]))
    return connection.hgetall("rq:job:" + job_id)


@pytest.fixture
def backend(redis_url):
    backend = RQBackend(redis_url)
    yield backend
    backend.close()


@pytest.mark.parametrize("func, make_args", [
    (REMEMBER, lambda db: [db, payload()]),
    (REMEMBER, lambda db: [db, payload(user="用户 ü \"quoted\"", thing="茉莉花茶 and \\ slashes\n")]),
    (FORGET, lambda db: [db, "alice", "kalimba", 1700000000, "user request"]),
])
def test_the_job_is_the_one_rq_saves_field_for_field(backend, db, func, make_args):
    args = make_args(db)
    pending = args[1] if func == REMEMBER else None
    before = datetime.datetime.now(datetime.timezone.utc)
    assert backend.enqueue(func, args, job_id="fast", pending=pending) is True
    after = datetime.datetime.now(datetime.timezone.utc)
    ours = backend.connection.hgetall("rq:job:fast")
    theirs = rq_saved(backend.connection, func, args, "reference")
    assert set(ours) == set(theirs)
    assert {k: v for k, v in ours.items() if k not in TIMES} == {k: v for k, v in theirs.items() if k not in TIMES}
    for field in TIMES:  # rq's format, and the time of the enqueue
        assert before - datetime.timedelta(milliseconds=1) <= str_to_date(ours[field]) <= after
    assert zlib.decompress(ours[b"data"]) == JobSerializer.dumps((func, None, args, {}))
    assert ours[b"description"] == func.encode()  # never the memory text


def test_rq_reads_the_job_as_its_own(backend, db):
    args = [db, payload()]
    backend.enqueue(REMEMBER, args, job_id="fast", pending=args[1])
    job = Job.fetch("fast", connection=backend.connection, serializer=defaults.SERIALIZER)
    assert (job.func_name, job.args, job.kwargs) == (REMEMBER, args, {})
    assert job.get_status() == JobStatus.QUEUED and job.origin == defaults.QUEUE_NAME
    assert (job.retries_left, job.retry_intervals) == (3, [1, 10, 60])
    assert (job.result_ttl, job.failure_ttl, job.ttl, job.timeout) == (0, defaults.JOB_FAILURE_TTL, None, 180)
    assert job.description == REMEMBER
    queue = Queue(defaults.QUEUE_NAME, connection=backend.connection, serializer=defaults.SERIALIZER)
    assert queue.job_ids == ["fast"]
    assert queue.key.encode() in backend.connection.smembers("rq:queues")


def test_the_pending_entry_and_its_message_go_with_the_job(backend, db):
    subscriber = backend.connection.pubsub(ignore_subscribe_messages=True)
    subscriber.subscribe(backend.state.inner.channel)
    subscriber.get_message(timeout=1.0)
    entry = payload(user="bob")
    backend.enqueue(REMEMBER, [db, entry], job_id=entry["job_key"], pending=entry)
    message = subscriber.get_message(timeout=2.0)
    subscriber.close()
    assert message is not None and message["data"] == b"bob"
    key = backend.state.inner._key("pending", "bob")
    assert json.loads(backend.connection.hget(key, entry["job_key"])) == entry
    assert 0 < backend.connection.ttl(key) <= defaults.PENDING_TTL
    assert backend.state.read("bob").pending == [entry]


def test_a_job_id_is_queued_once(backend, db):
    entry = payload()
    assert backend.enqueue(REMEMBER, [db, entry], job_id=entry["job_key"], pending=entry) is True
    assert backend.enqueue(REMEMBER, [db, entry], job_id=entry["job_key"], pending=entry) is False
    assert backend.connection.llen(backend.queue.key) == 1
    assert backend.state.read("alice").pending == [entry]  # pending again (as a replay makes it), once


def test_a_redis_that_forgot_the_script_gets_it_again(backend, db):
    backend.enqueue(FORGET, [db, "alice", None, 1, "user request"], job_id="one")
    backend.connection.script_flush()
    assert backend.enqueue(FORGET, [db, "alice", None, 2, "user request"], job_id="two") is True
    assert backend.queue.job_ids == ["one", "two"]


def test_job_data_is_the_serializers_output():
    shared = {"text": "茉莉 \"x\" \\ \n", "n": [1, 2.5, None, True], "nested": {"a": []}}
    for args in ([], ["db"], ["db", shared], ["db", shared, 3, None, ["x", {"y": 1}]], [(1, 2)]):
        expected = JobSerializer.dumps(("memo_mw.jobs.x", None, args, {}))
        assert job_data("memo_mw.jobs.x", args) == expected
        assert job_data("memo_mw.jobs.x", args, shared, json.dumps(shared)) == expected


def test_utcnow_is_rqs_format_of_now():
    for _ in range(3):
        before = datetime.datetime.now(datetime.timezone.utc)
        stamp = utcnow()
        after = datetime.datetime.now(datetime.timezone.utc)
        assert len(stamp) == len("2026-11-30T07:10:35.128800Z") and stamp.endswith("Z")
        assert before - datetime.timedelta(milliseconds=1) <= str_to_date(stamp) <= after
        time.sleep(0.3)


def test_rqs_worker_runs_it_and_the_memory_is_stored(backend, db, redis_url):
    entries = [payload(key=f"memo-remember-fast-{n}", thing=f"kalimba {n}") for n in range(3)]
    for entry in entries:
        backend.enqueue(REMEMBER, [db, entry], job_id=entry["job_key"], pending=entry)
    assert drain(redis_url) == 3  # rq's forking Worker, burst; asserts nothing failed
    with Store(db) as store:
        assert sorted(m["content"] for m in store.memories("alice")) == [f"likes kalimba {n}" for n in range(3)]
    assert backend.connection.hlen(backend.state.inner._key("pending", "alice")) == 0  # stored: not pending


@pytest.mark.parametrize("command", [
    [str(Path(sys.executable).parent / "rq"), "worker", "--burst", "--serializer", defaults.SERIALIZER,
     "--url", "{url}", defaults.QUEUE_NAME],
    [sys.executable, "-m", "memo_mw", "worker", "--burst", "--url", "{url}"],
])
def test_the_rq_and_memo_mw_commands_run_it(backend, db, redis_url, command):
    entry = payload(thing="kalimba tunes")
    backend.enqueue(REMEMBER, [db, entry], job_id=entry["job_key"], pending=entry)
    result = subprocess.run([part.format(url=redis_url) for part in command], capture_output=True, text=True,
                            timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stderr
    assert backend.queue.count == 0 and backend.queue.failed_job_registry.count == 0
    with Store(db) as store:
        assert [m["content"] for m in store.memories("alice")] == ["likes kalimba tunes"]


def fails_until(marker: str, times: int) -> str:
    """A job that fails ``times`` times (counted in the file ``marker``), then succeeds."""
    path = Path(marker)
    runs = int(path.read_text()) if path.exists() else 0
    path.write_text(str(runs + 1))
    if runs < times:
        raise RuntimeError(f"failure {runs + 1}")
    return "done"


def test_a_failing_job_is_retried_by_rq_and_then_fails_for_good(backend, tmp_path):
    queue = Queue(defaults.QUEUE_NAME, connection=backend.connection, serializer=defaults.SERIALIZER)
    marker = str(tmp_path / "runs")
    backend.enqueue(f"{__name__}.fails_until", [marker, 1], job_id="flaky")
    Worker([queue], connection=queue.connection, serializer=defaults.SERIALIZER).work(
        burst=True, logging_level="CRITICAL")
    job = Job.fetch("flaky", connection=queue.connection, serializer=defaults.SERIALIZER)
    assert job.get_status() == JobStatus.SCHEDULED  # failed once, retry scheduled (1 s)
    assert (job.retries_left, job.retry_intervals) == (2, [1, 10, 60])
    assert "flaky" in queue.scheduled_job_registry.get_job_ids()
    deadline = time.monotonic() + 15
    while Path(marker).read_text() == "1" and time.monotonic() < deadline:  # the scheduler moves it back
        time.sleep(0.5)
        Worker([queue], connection=queue.connection, serializer=defaults.SERIALIZER).work(
            burst=True, with_scheduler=True, logging_level="CRITICAL")
    assert Path(marker).read_text() == "2"  # the retry ran, and succeeded
    assert queue.failed_job_registry.count == 0 and queue.count == 0
    assert not backend.connection.exists("rq:job:flaky")  # result_ttl=0: nothing kept

    backend.enqueue(f"{__name__}.fails_until", [str(tmp_path / "never"), 99], job_id="broken")
    job = Job.fetch("broken", connection=queue.connection, serializer=defaults.SERIALIZER)
    job.retries_left = 0  # no retries left: the next failure is final
    job.save()
    Worker([queue], connection=queue.connection, serializer=defaults.SERIALIZER).work(
        burst=True, logging_level="CRITICAL")
    assert queue.failed_job_registry.get_job_ids() == ["broken"]
    assert 0 < backend.connection.ttl("rq:job:broken") <= defaults.JOB_FAILURE_TTL  # kept failure_ttl
