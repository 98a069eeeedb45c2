"""Redis down at start or mid-traffic: the chat goes on, captured memories wait in the outbox
and reach the store once each when Redis is back. Against the private redis-server, stopped
and restarted by the tests, and a real rq worker."""

from __future__ import annotations

import socket
import threading

import pytest
import redis
from flask import Flask, jsonify, request

from memo_mw import MemoryMiddleware
from memo_mw.breaker import CircuitBreaker
from memo_mw.outbox import Outbox, ResilientBackend
from memo_mw.queue import REMEMBER, RQBackend
from memo_mw.store import Store

from .conftest import drain, wait_until

WORDS = ["kalimba", "oolong", "bossa nova", "sourdough", "haiku", "origami", "tango", "kombucha",
         "sudoku", "ukulele", "bonsai", "tempura"]


@pytest.fixture(autouse=True)
def quick_recovery(monkeypatch):
    """Seconds, not the production cooldown, before Redis is tried again."""
    from memo_mw import defaults

    monkeypatch.setattr(defaults, "REDIS_COOLDOWN", 0.3)
    monkeypatch.setattr(defaults, "OUTBOX_DRAIN_INTERVAL", 0.1)


def chat_app() -> Flask:
    app = Flask(__name__)

    @app.post("/chat")
    def chat():
        return jsonify(reply="app's own answer", got=request.get_json()["message"])

    return app


OPENED = []


@pytest.fixture(autouse=True)
def close_middlewares():
    """Each test's outbox threads end with it, pass or fail: none may send into the next test's Redis."""
    yield
    while OPENED:
        OPENED.pop().queue.close()


def wrap(db, redis_url, **options):
    app = chat_app()
    middleware = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url, **options)
    app.wsgi_app = middleware
    OPENED.append(middleware)
    return app, middleware


def say(client, user, message):
    response = client.post("/chat", json={"message": message, "session_id": "s"}, headers={"X-User-Id": user})
    assert response.status_code == 200
    assert response.json["reply"] == "app's own answer"
    return response


def stored(db):
    with Store(db) as store:
        return sorted((row["user_id"], row["content"]) for row in store.db.query(
            "select user_id, content from memories where status = 'active'"))


def test_redis_down_at_start_then_back(db, redis_server, redis_url):
    redis_server.stop()
    app, middleware = wrap(db, redis_url)
    client = app.test_client()
    for word in WORDS[:6]:
        say(client, "alice", f"I like {word}")
    say(client, "bob", "I like jazz")
    assert isinstance(middleware.queue, ResilientBackend)
    assert middleware.queue.outbox.count() == 7
    # What alice just said is recalled from the outbox while Redis is down.
    recalled = say(client, "alice", "any kalimba tips?").json["got"]
    assert "kalimba" in recalled.split("[MEMORY_END]")[0]

    redis_server.start()
    assert wait_until(lambda: middleware.queue.outbox.count() == 0), "the outbox was not sent when Redis came back"
    drain(redis_url)
    assert stored(db) == sorted([("alice", f"likes {w}") for w in WORDS[:6]] + [("bob", "likes jazz")])
    middleware.queue.close()


def test_redis_down_mid_traffic_loses_and_doubles_nothing(db, redis_server, redis_url):
    app, middleware = wrap(db, redis_url)
    client = app.test_client()
    for word in WORDS[:4]:
        say(client, "alice", f"I like {word}")
    # What Redis holds when it stops is Redis's to keep (this private server has no
    # persistence; production runs Redis with appendonly): the worker takes it first.
    drain(redis_url)
    redis_server.stop()
    for word in WORDS[4:8]:
        say(client, "alice", f"I like {word}")
    say(client, "alice", "forget that I like tango")  # a forget waits in the outbox too, in order
    redis_server.start()
    for word in WORDS[8:]:
        say(client, "alice", f"I like {word}")
    assert wait_until(lambda: middleware.queue.outbox.count() == 0)
    drain(redis_url)
    expected = [("alice", f"likes {w}") for w in WORDS if w != "tango"]
    assert stored(db) == sorted(expected)
    middleware.queue.close()


def test_a_job_sent_twice_is_stored_once(db, redis_url):
    """An enqueue that reached Redis but timed out on the reply is also put in the outbox:
    the job id and the store's processed_jobs make the second copy a no-op."""

    class TimesOutAfterSending(RQBackend):  # a fault injector around the real backend
        def enqueue(self, func, args, *, job_id=None, pending=None):
            super().enqueue(func, args, job_id=job_id, pending=pending)
            raise redis.TimeoutError("reply lost")

    # No drain thread rounds here (an hour apart): the test sends the outbox itself.
    backend = ResilientBackend(TimesOutAfterSending(redis_url), Outbox(db + ".outbox"), drain_interval=3600)
    app, middleware = wrap(db, redis_url, backend=backend)
    say(app.test_client(), "alice", "I like kalimba")
    assert backend.outbox.count() == 1
    drain(redis_url)  # the first copy runs
    backend.backend.__class__ = RQBackend  # the fault is gone
    backend.breaker.success()
    assert backend.drain() == 1  # the second copy is sent...
    drain(redis_url)
    assert stored(db) == [("alice", "likes kalimba")]  # ...and stored nothing new
    backend.close()


def test_the_outbox_outlives_the_process(db, redis_server, redis_url):
    redis_server.stop()
    app, middleware = wrap(db, redis_url)
    say(app.test_client(), "alice", "I like oolong")
    middleware.queue.close()  # the web process ends with a job in the outbox
    redis_server.start()
    _, restarted = wrap(db, redis_url)  # the next one sends it at start
    assert wait_until(lambda: restarted.queue.outbox.count() == 0)
    drain(redis_url)
    assert stored(db) == [("alice", "likes oolong")]
    restarted.queue.close()


class SilentServer:
    """A TCP server that accepts connections and never answers: a hung Redis."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.accepted = 0
        self.conns = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return f"redis://127.0.0.1:{self.sock.getsockname()[1]}/0"

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.conns.append(conn)

    def close(self):
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(timeout=5)
        for conn in self.conns:
            conn.close()


def test_a_hung_redis_is_skipped_after_one_timeout(db):
    server = SilentServer()
    try:
        app, middleware = wrap(db, server.url)
        client = app.test_client()
        for word in WORDS:
            say(client, "alice", f"I like {word}")
        # One connection timed out and opened the circuit; every later request skipped Redis.
        assert server.accepted == 1
        assert middleware.queue.outbox.count() == len(WORDS)
        middleware.queue.close()
    finally:
        server.close()


def test_breaker_opens_skips_and_half_opens():
    now = [0.0]
    breaker = CircuitBreaker(threshold=2, cooldown=5.0, clock=lambda: now[0])
    breaker.failure()
    assert breaker.allow()  # one failure is under the threshold
    breaker.failure()
    assert not breaker.allow()  # open
    now[0] = 5.0
    assert breaker.allow()  # half-open: one caller tries...
    assert not breaker.allow()  # ...the others skip while it does
    breaker.failure()
    now[0] = 9.0
    assert not breaker.allow()  # the failed trial opened it for another cooldown
    now[0] = 10.0
    assert breaker.allow()
    breaker.success()
    assert breaker.closed and breaker.allow() and breaker.allow()
    with pytest.raises(ValueError):
        CircuitBreaker(threshold=0)


def test_outbox_drain_stops_at_the_first_failure_and_keeps_the_rest(tmp_path):
    outbox = Outbox(str(tmp_path / "x.outbox"))
    for n in range(5):
        outbox.put(REMEMBER, ["db", {"user_id": "u", "n": n}], f"job-{n}", "u")
    sent = []

    def send(func, args, job_id):
        if len(sent) == 3:
            raise redis.ConnectionError("gone again")
        sent.append(job_id)

    with pytest.raises(redis.ConnectionError):
        outbox.drain(send)
    assert sent == ["job-0", "job-1", "job-2"]
    assert outbox.count() == 2
    assert outbox.drain(lambda func, args, job_id: sent.append(job_id)) == 2
    assert sent[3:] == ["job-3", "job-4"] and outbox.count() == 0


def outbox_text(middleware):
    with open(middleware.queue.outbox.path, "rb") as f:
        data = f.read()
    wal = middleware.queue.outbox.path + "-wal"
    try:
        with open(wal, "rb") as f:
            data += f.read()
    except FileNotFoundError:
        pass
    return data


def test_a_forget_request_empties_the_outbox_at_once(db, redis_server, redis_url):
    redis_server.stop()
    app, middleware = wrap(db, redis_url)
    client = app.test_client()
    say(client, "alice", "I like kalimba. I like oolong.")
    say(client, "bob", "I like kalimba")
    say(client, "alice", "forget that I like kalimba")
    rows = middleware.queue.outbox.user_rows("alice")
    remembered = [args[1]["candidates"] for func, args in rows if func == REMEMBER]
    assert [[c["content"] for c in cands] for cands in remembered] == [["likes oolong"]]
    assert middleware.queue.outbox.user_rows("bob")[0][1][1]["candidates"][0]["content"] == "likes kalimba"
    redis_server.start()
    assert wait_until(lambda: middleware.queue.outbox.count() == 0)
    drain(redis_url)
    assert stored(db) == [("alice", "likes oolong"), ("bob", "likes kalimba")]
    middleware.queue.close()


def test_forget_me_on_the_memories_api_reaches_the_outbox(db, redis_server, redis_url):
    from memo_mw.admin import blueprint_for

    redis_server.stop()
    app, middleware = wrap(db, redis_url)
    app.register_blueprint(blueprint_for(middleware))
    client = app.test_client()
    say(client, "alice", "I like zanzibarian oolong")
    assert b"zanzibarian" in outbox_text(middleware)
    response = client.delete("/memo/api/memories", headers={"X-User-Id": "alice", "X-Requested-With": "fetch"})
    assert response.status_code == 200
    assert middleware.queue.outbox.user_rows("alice") == []
    assert b"zanzibarian" not in outbox_text(middleware)  # deleted for real (secure_delete)
    middleware.queue.close()


def test_processes_sharing_an_outbox_forget_and_send_each_others_rows(db, redis_server, redis_url):
    """Two web processes on one database (two middlewares here): the rows one spooled are
    forgotten by a request the other serves, and sent by the other when the first is gone."""
    redis_server.stop()
    app_a, a = wrap(db, redis_url)
    app_b, b = wrap(db, redis_url)
    say(app_a.test_client(), "alice", "I like kalimba. I like oolong.")
    say(app_a.test_client(), "bob", "I like sitar")
    say(app_b.test_client(), "alice", "forget that I like kalimba")  # served by b, not a
    rows = [args[1]["candidates"] for func, args in b.queue.outbox.user_rows("alice") if func == REMEMBER]
    assert [[c["content"] for c in cands] for cands in rows] == [["likes oolong"]]
    a.queue.close()  # a's process ends before Redis is back
    redis_server.start()
    assert wait_until(lambda: b.queue.outbox.count() == 0), "b did not send a's rows"
    drain(redis_url)
    assert stored(db) == [("alice", "likes oolong"), ("bob", "likes sitar")]
    b.queue.close()


def test_a_redis_that_refuses_writes_loses_nothing(db, redis_url):
    admin = redis.Redis.from_url(redis_url)
    admin.config_set("min-replicas-to-write", 1)  # every write is refused: NOREPLICAS
    try:
        app, middleware = wrap(db, redis_url)
        say(app.test_client(), "alice", "I like kalimba")
        assert middleware.queue.outbox.count() == 1
    finally:
        admin.config_set("min-replicas-to-write", 0)
        admin.close()
    assert wait_until(lambda: middleware.queue.outbox.count() == 0)
    drain(redis_url)
    assert stored(db) == [("alice", "likes kalimba")]
    middleware.queue.close()


def test_after_an_outage_new_jobs_queue_behind_the_spooled_ones(db, redis_server, redis_url):
    redis_server.stop()
    app, middleware = wrap(db, redis_url)
    client = app.test_client()
    client.post("/chat", json={"message": "I live in Berlin", "ts": 1_700_000_000}, headers={"X-User-Id": "alice"})
    redis_server.start()
    # Redis is back, the outbox not yet sent: the newer statement must not overtake the older.
    client.post("/chat", json={"message": "I live in Paris", "ts": 1_700_000_100}, headers={"X-User-Id": "alice"})
    assert wait_until(lambda: middleware.queue.outbox.count() == 0)
    drain(redis_url)
    assert stored(db) == [("alice", "lives in Paris")]
    middleware.queue.close()


def test_a_memory_deleted_while_redis_is_down_does_not_come_back(db, redis_server, redis_url):
    """A restatement waits in Redis; Redis goes down; the user deletes the memory on the page
    (the queue cannot be reached); Redis comes back and the job runs: it stores nothing."""
    from memo_mw.admin import blueprint_for

    app, middleware = wrap(db, redis_url, clock=lambda: 1_700_000_100.0)
    app.register_blueprint(blueprint_for(middleware))
    client = app.test_client()
    client.post("/chat", json={"message": "I like kalimba", "ts": 1_700_000_000}, headers={"X-User-Id": "alice"})
    drain(redis_url)
    client.post("/chat", json={"message": "I like kalimba", "ts": 1_700_000_050}, headers={"X-User-Id": "alice"})
    with Store(db) as store:
        (memory,) = store.memories("alice")
    redis_server.stop()  # the restatement's job waits in Redis (persisted across the restart below)
    headers = {"X-User-Id": "alice", "X-Requested-With": "fetch"}
    response = client.delete(f"/memo/api/memories/{memory['id']}", headers=headers)
    assert response.status_code == 200 and response.json["queue_reached"] is False
    middleware.queue.close()
    assert stored(db) == []
    # The job that was waiting runs now (as it would once Redis is back with its data).
    from memo_mw import jobs

    payload = {"job_key": "k2", "user_id": "alice", "session_id": "s", "ts": 1_700_000_050, "message_id": None,
               "candidates": [c.as_dict() for c in middleware.funnel.process("I like kalimba").candidates]}
    redis_server.start()
    assert jobs.remember(db, payload) == ["discarded"]
    assert stored(db) == []


def test_a_late_forget_leaves_what_was_said_after_it(db):
    from memo_mw import jobs
    from memo_mw.funnel import Funnel
    from memo_mw.rules import load_rules

    funnel = Funnel(load_rules(None))
    for ts, text in ((100, "I like kalimba"), (300, "I like kalimba music too")):
        result = funnel.process(text)
        with Store(db) as store:
            store.remember({"job_key": f"k{ts}", "user_id": "alice", "session_id": "s", "ts": ts, "message_id": None,
                            "candidates": [c.as_dict() for c in result.candidates]})
    jobs.forget(db, "alice", "kalimba", 200, "user request")  # asked at 200, run late
    assert stored(db) == [("alice", "likes kalimba music")]


def test_spooled_forgets_keep_the_servers_time_when_their_job_carries_it():
    """A forget job waiting in the outbox is read back as a marker with the server's time (its
    sixth argument), or with the client's time alone for a job queued without it."""
    from memo_mw.outbox import _with_outbox
    from memo_mw.queue import FORGET
    from memo_mw.userstate import EMPTY

    state = _with_outbox(EMPTY, [(FORGET, ["db", "alice", None, 1_700_000_000, "user request", 1_700_000_000.25]),
                                 (FORGET, ["db", "alice", "kalimba", 1_700_000_100, "user request"])])
    assert [(f["tokens"] is None, f["ts"], f.get("at")) for f in state.forgets] == [
        (True, 1_700_000_000, 1_700_000_000.25), (False, 1_700_000_100, None)]
