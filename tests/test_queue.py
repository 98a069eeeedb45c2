"""The queue (memo_mw.queue) when Redis is down at start, goes down mid-traffic, hangs or
refuses writes: the chat answers every request, captured memories wait in the spool and reach
the store once each when Redis is back. Against the private redis-server, stopped and restarted
by the tests, a real rq worker and real SQLite files."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

import pytest
import redis
from flask import Flask, jsonify, request

from memo_mw import MemoryMiddleware
from memo_mw.forgetting import forget_marker
from memo_mw.queue import REMEMBER
from memo_mw.spool import Spool
from memo_mw.store import Store

from .conftest import wait_until
from .loadgen import drain, opened_queues

WORDS = ["kalimba", "oolong", "bossa nova", "sourdough", "haiku", "origami", "tango", "kombucha",
         "sudoku", "ukulele", "bonsai", "tempura"]


@pytest.fixture
def make_queue():
    """Queues that retry within a test's time: a 0.2 s cooldown, the spool tried every 50 ms."""
    with opened_queues(cooldown=0.2, spool_interval=0.05) as make:
        yield lambda url, spool, **options: make(url, spool=spool, **options)


def wrap(db, queue):
    app = Flask(__name__)

    @app.post("/chat")
    def chat():
        return jsonify(reply="app's own answer", got=request.get_json()["message"])

    app.wsgi_app = MemoryMiddleware(app.wsgi_app, trust_user_header=True, db=db, queue=queue)
    return app.test_client()


def say(client, user, message, **extra):
    response = client.post("/chat", json={"message": message, "session_id": "s", **extra},
                           headers={"X-User-Id": user})
    assert response.status_code == 200
    assert response.json["reply"] == "app's own answer"
    assert response.json["got"].endswith(message)  # the body reached the app
    return response


def stored(db):
    with Store(db) as store:
        return sorted((m["user_id"], m["content"]) for m in store.list())


def spooled(queue, user=None):
    """The summaries of the capture jobs waiting in the spool, per job."""
    return [[c["content"] for c in job["args"][1]["candidates"]] for _, job in queue.spool.peek()
            if job["func"] == REMEMBER and user in (None, job["user_id"])]


def test_redis_down_at_start_then_back(db, redis_server, redis_url, make_queue):
    redis_server.stop()
    queue = make_queue(redis_url, db + ".spool")
    client = wrap(db, queue)
    for word in WORDS[:6]:
        say(client, "alice", f"I like {word}")
    say(client, "bob", "I like jazz")
    assert spooled(queue) == [[f"likes {w}"] for w in WORDS[:6]] + [["likes jazz"]]
    assert queue.stats["spooled"] == 7

    redis_server.start()
    assert wait_until(lambda: len(queue.spool) == 0), "the spool was not sent when Redis came back"
    assert drain(redis_url) == 7
    assert stored(db) == sorted([("alice", f"likes {w}") for w in WORDS[:6]] + [("bob", "likes jazz")])
    assert queue.stats["sent_from_spool"] == 7 and queue.stats["lost"] == 0


def test_redis_down_mid_traffic_loses_and_doubles_nothing(db, redis_server, redis_url, make_queue):
    queue = make_queue(redis_url, db + ".spool")
    client = wrap(db, queue)
    for word in WORDS[:4]:
        say(client, "alice", f"I like {word}")
    # What Redis holds when it stops is Redis's to keep (this private server has no
    # persistence; production runs Redis with appendonly): the worker takes it first.
    assert drain(redis_url) == 4
    redis_server.stop()
    for word in WORDS[4:8]:
        say(client, "alice", f"I like {word}")
    say(client, "alice", "forget that I like tango")  # takes tango out of the spool at once
    assert ["likes tango"] not in spooled(queue)
    redis_server.start()
    for word in WORDS[8:]:  # while the spool is sent, these queue behind it
        say(client, "alice", f"I like {word}")
    assert wait_until(lambda: len(queue.spool) == 0)
    drain(redis_url)
    assert stored(db) == sorted(("alice", f"likes {w}") for w in WORDS if w != "tango")  # once each
    assert queue.stats["lost"] == 0


def test_after_an_outage_new_jobs_queue_behind_the_spooled_ones(db, redis_server, redis_url, make_queue):
    """The later of two statements on one slot is stored last, so it wins."""
    redis_server.stop()
    queue = make_queue(redis_url, db + ".spool", spool_interval=0.5)
    client = wrap(db, queue)
    say(client, "alice", "I live in Berlin", ts=1_700_000_000)
    redis_server.start()
    time.sleep(0.25)  # past the cooldown: Redis would be tried again, the spool not sent yet
    say(client, "alice", "I live in Paris", ts=1_700_000_100)
    assert wait_until(lambda: len(queue.spool) == 0)
    drain(redis_url)
    assert stored(db) == [("alice", "lives in Paris")]


def test_a_spool_sent_twice_is_stored_once_and_outlives_its_process(db, redis_server, redis_url, make_queue):
    """A process that died after Redis took its spool but before it removed the jobs leaves them
    for the next process, which sends them again: the job ids make the second copy a no-op."""
    redis_server.stop()
    first = make_queue(redis_url, db + ".spool")
    say(wrap(db, first), "alice", "I like oolong")
    jobs = [job for _, job in first.spool.peek()]
    first.close()  # the web process ends with its job in the spool
    redis_server.start()
    restarted = make_queue(redis_url, db + ".spool")  # the next one sends it at start
    assert wait_until(lambda: len(restarted.spool) == 0)
    assert drain(redis_url) == 1
    for job in jobs:  # as if the remove had not happened
        Spool(db + ".spool").put(job)
    again = make_queue(redis_url, db + ".spool")
    assert wait_until(lambda: len(again.spool) == 0)
    assert drain(redis_url) == 1
    assert stored(db) == [("alice", "likes oolong")]
    with Store(db) as store:
        assert store.db.execute("select count(*) from memories").fetchone()[0] == 1


def unwritable_spool(tmp_path, kind):
    if kind == "parent-is-a-file":
        (tmp_path / "plain-file").write_text("x")
        return str(tmp_path / "plain-file" / "memo.spool")
    if kind == "path-is-a-directory":
        (tmp_path / "folder.spool").mkdir()
        return str(tmp_path / "folder.spool")
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only folder")
    (tmp_path / "read-only").mkdir(mode=0o555)
    return str(tmp_path / "read-only" / "memo.spool")


@pytest.mark.parametrize("kind", ["parent-is-a-file", "path-is-a-directory", "read-only-folder"])
def test_an_unwritable_spool_falls_back_to_redis_and_counts_what_neither_took(
        db, tmp_path, redis_server, redis_url, make_queue, caplog, kind):
    caplog.set_level(logging.ERROR, logger="memo_mw.queue")
    # A long cooldown: after the outage below, requests skip Redis and go to the spool first.
    queue = make_queue(redis_url, unwritable_spool(tmp_path, kind), cooldown=60)
    client = wrap(db, queue)
    say(client, "carol", "I like tango")  # Redis answers: the spool is never needed
    redis_server.stop()
    say(client, "alice-7", "I like kalimba")  # neither Redis nor the spool takes it
    assert queue.stats["lost"] == 1
    lost = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and "lost" in r.getMessage()]
    assert len(lost) == 1 and "'alice-7'" in lost[0] and REMEMBER in lost[0]
    redis_server.start()
    say(client, "bob", "I like oolong")  # the circuit is open, the spool refuses: Redis takes it
    assert queue.stats["lost"] == 1 and queue.stats["spooled"] == 0
    assert drain(redis_url) == 1
    assert stored(db) == [("bob", "likes oolong")]


def command_round_trips(admin, action):
    """Replies the server wrote while ``action()`` ran: one per round trip of a client that waits
    for each reply (INFO's total_writes_processed, less the first INFO's own reply)."""
    before = admin.info("stats")["total_writes_processed"]
    action()
    return admin.info("stats")["total_writes_processed"] - before - 1


def test_the_hand_off_of_a_captured_message_takes_at_most_four_round_trips(db, redis_url, make_queue, capsys):
    admin = redis.Redis.from_url(redis_url)
    queue = make_queue(redis_url, db + ".spool")
    client = wrap(db, queue)
    # The first request also connects and asks the server's version (rq, once): not counted here.
    cold = command_round_trips(admin, lambda: say(client, "bob", "I like jazz"))
    warm = command_round_trips(admin, lambda: say(client, "alice", "I like kalimba"))
    none = command_round_trips(admin, lambda: say(client, "alice", "what's the weather like?"))
    admin.close()
    with capsys.disabled():
        print(f"\nRedis round trips per request: first {cold}, a capture {warm}, no capture {none}")
    assert warm <= 4
    # The job and its pending payload: one pipeline; a message that is only chat history: its job, the same.
    assert warm == none
    assert drain(redis_url) == 3  # and it was a real hand-off
    assert stored(db) == [("alice", "likes kalimba"), ("bob", "likes jazz")]


def test_a_forget_request_takes_what_it_names_out_of_the_spool(db, redis_server, redis_url, make_queue):
    redis_server.stop()
    queue = make_queue(redis_url, db + ".spool")
    client = wrap(db, queue)
    say(client, "alice", "I like kalimba. I like oolong.")
    say(client, "alice", "I like sitar")
    say(client, "bob", "I like kalimba")
    say(client, "alice", "forget that I like kalimba")
    assert spooled(queue, "alice") == [["likes oolong"], ["likes sitar"]]
    assert spooled(queue, "bob") == [["likes kalimba"]]  # another user's job is not touched
    # A job left with nothing to store leaves the spool.
    assert queue.forget_spooled("alice", forget_marker("sitar", 2_000_000_000, 2_000_000_000.0)) == 1
    assert spooled(queue, "alice") == [["likes oolong"]]
    redis_server.start()
    assert wait_until(lambda: len(queue.spool) == 0)
    drain(redis_url)
    assert stored(db) == [("alice", "likes oolong"), ("bob", "likes kalimba")]


def test_a_redis_that_refuses_writes_loses_nothing(db, redis_url, make_queue):
    admin = redis.Redis.from_url(redis_url)
    admin.config_set("min-replicas-to-write", 1)  # every write is refused: NOREPLICAS
    try:
        queue = make_queue(redis_url, db + ".spool", spool_interval=3600)  # the test sends the spool
        say(wrap(db, queue), "alice", "I like kalimba")
        assert spooled(queue) == [["likes kalimba"]]
    finally:
        admin.config_set("min-replicas-to-write", 0)
        admin.close()
    resumed = make_queue(redis_url, db + ".spool")  # a process that starts on a spool sends it
    assert wait_until(lambda: len(resumed.spool) == 0)
    drain(redis_url)
    assert stored(db) == [("alice", "likes kalimba")]


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


def test_a_hung_redis_is_skipped_after_one_timeout(db, make_queue):
    server = SilentServer()
    try:
        queue = make_queue(server.url, db + ".spool", cooldown=30)
        client = wrap(db, queue)
        started = time.monotonic()
        for word in WORDS:
            say(client, "alice", f"I like {word}")
        elapsed = time.monotonic() - started
        # One call waited out the 0.5 s timeout and opened the circuit; every later one skipped Redis.
        assert server.accepted == 1
        assert elapsed < 0.5 * 3, f"{len(WORDS)} requests took {elapsed:.1f} s"
        assert len(spooled(queue)) == len(WORDS)
        queue.close()
    finally:
        server.close()


def test_embedded_mode_counts_and_logs_each_capture_the_database_cannot_take(db, monkeypatch, caplog):
    """No Redis: the job thread writes SQLite, and does not retry; a capture a full disk refuses
    is not lost silently: counted in stats["failed"] and logged with its user id."""
    from memo_mw.queue import LocalQueue

    from .loadgen import word
    from .test_jobs import on_a_full_disk

    queue = LocalQueue()
    client = wrap(db, queue)
    on_a_full_disk(monkeypatch, db)
    for n in range(60):
        say(client, f"user-{n}", f"I like {word(n + 1)}")
    queue.join()
    lost = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and "is lost" in r.getMessage()]
    assert queue.stats["failed"] == len(lost) > 0
    assert all(f"{REMEMBER} job of user 'user-" in line for line in lost if REMEMBER in line)
    assert any(REMEMBER in line for line in lost)


# A web process that starts on a spool while Redis is up and the spool's disk is full
# (RLIMIT_FSIZE: SQLite cannot write the journal a deletion needs; reading still works).
SPOOL_ON_A_FULL_DISK = """
import json, logging, resource, signal, sys, time
from memo_mw.queue import RedisQueue
logging.basicConfig(level=logging.WARNING)
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
queue = RedisQueue(sys.argv[1], spool=sys.argv[2], spool_interval=0.05)  # sends what the spool holds
time.sleep(1)  # twenty rounds of the spool thread
queue.enqueue("memo_mw.jobs.touch", [sys.argv[3], "bob", [1], 0], user_id="bob")
queue.close()
print(json.dumps(queue.stats))
"""


def test_a_spool_that_cannot_delete_what_it_sent_sends_it_once_and_stops(db, tmp_path, redis_url):
    """Jobs without an id (touch, topic counts) sent again every round would count again; and
    while the spool thread runs, each new job tries the spool first."""
    import json
    import subprocess
    import sys

    from .loadgen import ROOT

    spool = Spool(str(tmp_path / "memo.spool"))
    for n in range(3):
        spool.put({"func": "memo_mw.jobs.touch", "args": [db, "alice", [n], 0], "job_id": None,
                   "user_id": "alice", "pending": None})
    done = subprocess.run([sys.executable, "-c", SPOOL_ON_A_FULL_DISK, redis_url, spool.path, db], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"sent_from_spool": 3}
    assert "could not spool" not in done.stderr  # the new job went straight to Redis
    assert drain(redis_url) == 4  # the three spooled jobs once, and the new one
    assert len(spool) == 3  # still in the file (a full disk): the next process sends them again
