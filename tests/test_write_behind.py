"""Write-behind: a captured message is written to the local outbox (one SQLite transaction) and
sent to Redis by the outbox thread at once, off the request path. Against the private
redis-server and a real rq worker; a process that dies before sending is a real process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import redis
from rq import Queue

from memo_mw import MemoryMiddleware, defaults
from memo_mw.outbox import Outbox
from memo_mw.store import Store

from .conftest import drain, wait_until
from .test_loop import chat_app, plain

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def opened():
    middlewares = []
    yield middlewares
    for middleware in middlewares:
        held = getattr(middleware.queue, "_held", None)
        if held is not None:
            held.release()
        middleware.queue.close()


def wrap(db, redis_url, opened, **options):
    app = chat_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url, **options)
    opened.append(app.wsgi_app)
    return app.test_client(), app.wsgi_app


def queued(redis_url) -> list:
    return Queue(defaults.QUEUE_NAME, connection=redis.Redis.from_url(redis_url), serializer=defaults.SERIALIZER).jobs


class Held:
    """While held, this middleware's outbox sends nothing (neither its thread nor a flush), as if
    the process had stopped right after writing; release() lets it send again."""

    def __init__(self, backend):
        self.held = True
        self._drain = backend.drain
        backend.drain = self.drain  # the thread and send_now both send through it
        backend._held = self

    def drain(self):
        return 0 if self.held else self._drain()

    def release(self):
        self.held = False


def hold(middleware, monkeypatch):
    """The outbox thread of this middleware sends nothing until released."""
    monkeypatch.setattr(middleware.queue, "drain_interval", 3600)
    return Held(middleware.queue)


def held_capture(db, redis_url, opened, monkeypatch):
    """A middleware whose thread is held, and one capture it wrote: the row waits in the outbox."""
    client, middleware = wrap(db, redis_url, opened)
    hold(middleware, monkeypatch)
    client.post("/chat", **plain("I like kalimba music"))
    return client, middleware


def test_the_outbox_thread_sends_a_capture_at_once_without_being_asked(db, redis_url, opened):
    client, middleware = wrap(db, redis_url, opened)
    assert middleware.queue.write_behind
    client.post("/chat", **plain("I like kalimba music"))
    # No flush, no drain: the thread was woken by the write and sends within milliseconds.
    assert wait_until(lambda: [j.func_name for j in queued(redis_url)] == ["memo_mw.jobs.remember"], timeout=5)
    assert Outbox(db + ".outbox").count() == 0
    drain(redis_url)
    assert [m["content"] for m in Store(db).memories("alice")] == ["likes kalimba music"]


def test_what_was_just_said_is_recalled_before_it_is_sent(db, redis_url, opened, monkeypatch):
    client, middleware = held_capture(db, redis_url, opened, monkeypatch)
    assert queued(redis_url) == [] and Outbox(db + ".outbox").count() == 1
    reply = client.post("/chat", **plain("any kalimba songs for tonight?")).json
    assert [m["content"] for m in reply["memories"]] == ["likes kalimba music"]


def test_a_forget_reaches_a_capture_still_in_the_outbox(db, redis_url, opened, monkeypatch):
    client, middleware = held_capture(db, redis_url, opened, monkeypatch)
    client.post("/chat", **plain("forget that I like kalimba music"))
    assert client.post("/chat", **plain("kalimba?")).json["memories"] == []
    middleware.queue._held.release()
    middleware.queue.flush()
    drain(redis_url)
    assert Store(db).memories("alice", include_inactive=True) == []


def test_a_process_that_dies_before_sending_loses_nothing(db, redis_url, opened):
    """A web process writes a capture and is killed before its thread sends it: the row is in the
    outbox file, and the next process on the database sends it; stored once."""
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {ROOT!r})
        from tests.test_write_behind import Held, chat_app, plain
        from memo_mw import MemoryMiddleware
        app = chat_app()
        app.wsgi_app = middleware = MemoryMiddleware(app.wsgi_app, db={db!r}, redis_url={redis_url!r})
        Held(middleware.queue)
        reply = app.test_client().post("/chat", **plain("I like kalimba music"))
        assert reply.status_code == 200
        os._exit(0)  # no close, no flush: as a killed process
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60, cwd=ROOT)
    assert queued(redis_url) == [] and Outbox(db + ".outbox").count() == 1
    wrap(db, redis_url, opened)  # another process starts on the same database ...
    assert wait_until(lambda: len(queued(redis_url)) == 1, timeout=10)  # ... and its thread sends the row
    drain(redis_url)
    assert [m["content"] for m in Store(db).memories("alice")] == ["likes kalimba music"]


def test_closing_sends_what_waits(db, redis_url, opened, monkeypatch):
    client, middleware = held_capture(db, redis_url, opened, monkeypatch)
    assert queued(redis_url) == []
    middleware.queue._held.release()  # its thread sleeps (nothing wakes it): close sends
    middleware.queue.close()
    opened.remove(middleware)
    assert [j.func_name for j in queued(redis_url)] == ["memo_mw.jobs.remember"]


def test_without_write_behind_the_request_sends_the_job_itself(db, redis_url, opened, monkeypatch):
    monkeypatch.setattr(defaults, "WRITE_BEHIND", False)
    client, middleware = wrap(db, redis_url, opened)
    hold(middleware, monkeypatch)  # no thread sends: what is in Redis, the request sent
    client.post("/chat", **plain("I like kalimba music"))
    assert [j.func_name for j in queued(redis_url)] == ["memo_mw.jobs.remember"]
    assert Outbox(db + ".outbox").count() == 0


def test_a_forked_child_writes_even_when_the_parent_held_the_outbox_lock(db):
    """gunicorn --preload forks workers from a process whose outbox thread may be writing: the
    child must not inherit a lock that nobody will ever release."""
    outbox = Outbox(db + ".outbox")
    with outbox._turn():  # the parent's thread is mid-write at the fork
        pid = os.fork()
        if pid == 0:  # the child
            try:
                outbox.put("memo_mw.jobs.remember", [db, {"user_id": "u"}], "memo-remember-x", "u")
                os._exit(0)
            except BaseException:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert Outbox(db + ".outbox").count() == 1


def test_a_sender_that_lost_its_lease_stops(db):
    """A stalled sender whose lease lapsed, and another process took over, sends no more rows."""
    outbox = Outbox(db + ".outbox")
    for i in range(3):
        outbox.put("memo_mw.jobs.touch", [db, "u", [i], 0], None, "u")
    sent = []

    def send(func, args, job_id):
        sent.append(args[2])
        if len(sent) == 1:  # meanwhile the lease lapsed and another process took it
            outbox._connect().execute("update drain_lease set holder = 'another', until = ?", [10**10])

    assert outbox.drain(send, batch=1) == 1
    assert sent == [[0]] and outbox.count() == 2


def test_a_forget_does_not_wait_on_readers_for_its_checkpoint(db):
    outbox = Outbox(db + ".outbox")
    outbox.put("memo_mw.jobs.remember", [db, {"user_id": "u", "ts": 1, "candidates": []}], None, "u")
    reader = __import__("sqlite3").connect(db + ".outbox")
    reader.execute("begin")
    reader.execute("select count(*) from outbox").fetchone()  # a read transaction holds the WAL
    outbox.put("memo_mw.jobs.touch", [db, "u", [1], 0], None, "u")
    import time

    started = time.monotonic()
    outbox.forget("u", {"tokens": None, "ts": 10**10})
    assert time.monotonic() - started < 1.0  # not the busy timeout
    assert outbox.checkpoint_due  # left for the outbox thread
    reader.execute("rollback")
    assert outbox._checkpoint() and not outbox.checkpoint_due


def test_a_gathered_batch_goes_in_one_round_trip_in_order(db, redis_url, opened, monkeypatch):
    client, middleware = wrap(db, redis_url, opened)
    held = hold(middleware, monkeypatch)
    for i, thing in enumerate(["kalimba", "oolong", "tango"]):
        client.post("/chat", **plain(f"I like {thing} music", message_id=f"m{i}"))
    client.post("/chat", **plain("forget that I like tango music"))  # also takes tango out of the outbox
    assert Outbox(db + ".outbox").count() == 3
    redis.Redis.from_url(redis_url).script_flush()  # as after a Redis restart: the script is gone
    rounds = []
    backend = middleware.queue.backend
    send_many = backend._send_many
    monkeypatch.setattr(backend, "_send_many", lambda commands: rounds.append(len(commands)) or send_many(commands))
    held.release()
    middleware.queue.flush()
    assert [j.func_name for j in queued(redis_url)] == ["memo_mw.jobs.remember"] * 2 + ["memo_mw.jobs.forget"]
    assert rounds == [3, 3]  # the batch in one round trip; once more after loading the script
    pending = redis.Redis.from_url(redis_url).hvals("memo:pending:memo:alice")
    assert len(pending) == 2  # each remember job's pending entry went with it
    drain(redis_url)
    assert sorted(m["content"] for m in Store(db).memories("alice")) == ["likes kalimba music", "likes oolong music"]


def test_a_middleware_built_before_a_fork_works_in_the_child(db, redis_url, opened):
    """gunicorn --preload builds the app, then forks: in the child the middleware notices it is a
    new process (its id, asked on each request: a server may fork without Python's at-fork hooks)
    and starts its own outbox sender and state listener; what the child captures reaches Redis and
    the store."""
    client, middleware = wrap(db, redis_url, opened)
    client.post("/chat", **plain("I like oolong tea"))  # the parent's threads run
    assert wait_until(lambda: Outbox(db + ".outbox").count() == 0)
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            response = client.post("/chat", **plain("I like bossa nova"))
            if response.status_code == 200 and wait_until(lambda: Outbox(db + ".outbox").count() == 0, timeout=10):
                code = 0 if middleware.queue._thread_pid == os.getpid() else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    drain(redis_url)
    assert sorted(m["content"] for m in Store(db).memories("alice")) == ["likes bossa nova", "likes oolong tea"]


def test_a_capture_holding_a_lone_surrogate_reaches_the_store(db, redis_url, opened):
    """A ``\\ud800`` escape in the body is valid JSON but has no UTF-8 form: the message and the
    ids read it as U+FFFD, and the worker stores the memory."""
    client, middleware = wrap(db, redis_url, opened)
    body = b'{"message": "I like kalimba \\ud800 music", "message_id": "m\\ud800", "session_id": "s\\uDFFF"}'
    reply = client.post("/chat", data=body, content_type="application/json", headers={"X-User-Id": "alice"})
    assert reply.status_code == 200
    assert wait_until(lambda: [j.func_name for j in queued(redis_url)] == ["memo_mw.jobs.remember"], timeout=5)
    drain(redis_url)
    [memory] = Store(db).memories("alice")
    assert "kalimba" in memory["content"] and memory["source_session"] == "s\ufffd"
