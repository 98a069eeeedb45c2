"""The users' short-lived state (memo_mw.state): the same behaviour in Redis and in the process.

Then read-your-own-writes through the middleware: what a request captured is recalled by the next
one before any worker ran, with Redis (a real server, a real rq worker) and in embedded mode.
"""

from __future__ import annotations

import pytest
import redis

from memo_mw import MemoryMiddleware, defaults
from memo_mw.forgetting import forget_marker
from memo_mw.state import EMPTY, LocalState, RedisState

from .conftest import drain
from .test_middleware import Clock, contents, echo_app


@pytest.fixture(params=["redis", "local"])
def state(request):
    if request.param == "redis":
        connection = redis.Redis.from_url(request.getfixturevalue("redis_url"))
        yield RedisState(connection)
        connection.close()
    else:
        yield LocalState(Clock())


def payload(job_key, *contents_, user="alice", received=1_700_000_000.0):
    return {"job_key": job_key, "user_id": user, "session_id": "s1", "ts": int(received), "message_id": None,
            "received": received,
            "candidates": [{"type": "preference", "key": c.split(" ", 1)[1], "polarity": 1, "content": c,
                            "excerpt": c, "rule_id": "t", "confidence": 0.7, "ttl_days": None, "language": "en"}
                           for c in contents_]}


def test_a_user_without_state_reads_empty(state):
    assert state.read("nobody") == EMPTY
    state.drop_pending("nobody", ["k"])  # dropping what is not there is harmless
    state.add_shown("nobody", [])
    assert state.read("nobody") == EMPTY


def test_pending_payloads_oldest_first_until_dropped(state):
    state.put_pending("alice", payload("k2", "likes jazz", received=1_700_000_002.0))
    state.put_pending("alice", payload("k1", "likes tea", received=1_700_000_001.0))
    assert [p["job_key"] for p in state.read("alice").pending] == ["k1", "k2"]
    assert state.read("alice").pending[1] == payload("k2", "likes jazz", received=1_700_000_002.0)
    state.put_pending("alice", payload("k1", "likes tea", received=1_700_000_001.0))  # a retry: still one
    assert len(state.read("alice").pending) == 2
    state.drop_pending("alice", ["k1", "unknown"])
    assert [p["job_key"] for p in state.read("alice").pending] == ["k2"]
    assert state.read("bob") == EMPTY  # one user's state is not another's


def test_a_forget_marker_takes_what_it_names_out_of_the_pending_payloads(state):
    state.put_pending("alice", payload("k1", "likes jazz", "likes green tea"))
    state.put_pending("alice", payload("k2", "likes jazz"))
    state.put_pending("bob", payload("k3", "likes jazz", user="bob"))
    marker = forget_marker("jazz", 1_700_000_100, 1_700_000_100.0)
    state.add_forget("alice", marker)
    read = state.read("alice")
    assert read.forgets == (marker,)
    assert [(p["job_key"], [c["content"] for c in p["candidates"]]) for p in read.pending] == [
        ("k1", ["likes green tea"])]  # k2 had nothing else: gone
    assert [p["job_key"] for p in state.read("bob").pending] == ["k3"]


def test_a_forget_marker_spares_what_was_said_after_it(state):
    state.put_pending("alice", payload("k1", "likes jazz", received=1_700_000_200.0))
    state.add_forget("alice", forget_marker("jazz", 1_700_000_100, 1_700_000_100.0))
    assert [p["job_key"] for p in state.read("alice").pending] == ["k1"]


def test_shown_ids(state):
    state.add_shown("alice", [3, 5])
    state.add_shown("alice", [5, 8])
    assert state.read("alice").shown == {3, 5, 8}


def test_state_expires_after_its_last_write(state):
    state.put_pending("alice", payload("k1", "likes jazz"))
    if isinstance(state, RedisState):
        assert 0 < state.connection.ttl(state.key("alice")) <= defaults.PENDING_TTL
        state.connection.expire(state.key("alice"), 0)  # time passing, as Redis keeps it
    else:
        state.clock.now += defaults.PENDING_TTL - 1
        state.add_shown("alice", [1])  # a write renews the expiry
        state.clock.now += defaults.PENDING_TTL - 1
        assert [p["job_key"] for p in state.read("alice").pending] == ["k1"]
        state.clock.now += 2
    assert state.read("alice") == EMPTY


# -- read-your-own-writes through the middleware ------------------------------------------

def wrapped(db, redis_url=None):
    app = echo_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url, spool=db + ".spool",
                                    trust_user_header=True)
    return app.test_client()


def say(client, message, user="alice", path="/chat", **extra):
    if path == "/chat":
        body = {"message": message, "session_id": "s1", **extra}
    else:
        body = {"model": "m", "messages": [{"role": "user", "content": message}]}
    return client.post(path, json=body, headers={"X-User-Id": user}).json


def run_jobs(client, redis_url):
    """What the worker does: rq in Redis mode, the process's own thread in embedded mode."""
    if redis_url:
        drain(redis_url)
    else:
        client.application.wsgi_app.queue.join()


@pytest.fixture(params=["redis", "embedded"])
def mode(request):
    return request.getfixturevalue("redis_url") if request.param == "redis" else None


def test_next_request_sees_a_memory_no_worker_has_stored(redis_url, db):
    client = wrapped(db, redis_url)
    say(client, "我从不吃香菜")
    reply = say(client, "这道菜要放香菜吗")
    assert [(m["content"], m["id"], m["status"]) for m in reply["memories"]] == [("从不吃香菜", None, "pending")]
    assert "从不吃香菜" in reply["received"]["message"]
    assert contents(db, "alice") == []  # nothing written yet
    state = client.application.wsgi_app.queue.state
    assert len(state.read("alice").pending) == 1

    drain(redis_url)
    assert state.read("alice").pending == ()  # dropped once stored
    reply = say(client, "这道菜要放香菜吗", path="/v1/chat/completions")
    assert [(m["content"], m["status"]) for m in reply["memories"]] == [("从不吃香菜", "active")]
    assert isinstance(reply["memories"][0]["id"], int)


def test_embedded_mode_reads_its_own_writes(db):
    client = wrapped(db)
    queue = client.application.wsgi_app.queue
    say(client, "I like bossa nova")
    assert [m["content"] for m in say(client, "bossa nova tonight?")["memories"]] == ["likes bossa nova"]
    queue.join()
    assert queue.state.read("alice").pending == ()  # dropped once the job stored it
    assert [m["id"] is not None for m in say(client, "bossa nova?")["memories"]] == [True]


def test_a_pending_statement_replaces_the_stored_one_on_its_slot(mode, db):
    client = wrapped(db, mode)
    say(client, "I like green tea")
    run_jobs(client, mode)
    say(client, "I hate green tea")
    assert [m["content"] for m in say(client, "should I order green tea?")["memories"]] == ["dislikes green tea"]
    run_jobs(client, mode)
    # Said again (a new message id: within the same minute, the same words without one count as a
    # retried request): already stored, so the pending copy adds nothing to recall.
    say(client, "I hate green tea", message_id="m3")
    memories = say(client, "should I order green tea?")["memories"]
    assert [(m["content"], m["status"]) for m in memories] == [("dislikes green tea", "active")]
    run_jobs(client, mode)
    assert contents(db, "alice") == ["dislikes green tea"]


def test_other_users_do_not_see_pending_memories(mode, db):
    client = wrapped(db, mode)
    say(client, "I love jazz", user="alice")
    assert say(client, "any jazz tips?", user="bob")["memories"] == []
    assert [m["content"] for m in say(client, "any jazz tips?", user="alice")["memories"]] == ["likes jazz"]


def test_forget_drops_pending_memories_in_the_same_request(mode, db):
    client = wrapped(db, mode)
    say(client, "I love jazz")
    say(client, "I play the cello every day")
    recalled = say(client, "forget that I love jazz")["memories"]
    assert "likes jazz" not in [m["content"] for m in recalled]  # the cello may come back (topic: music)
    left = say(client, "jazz or cello tonight?")["memories"]
    assert [m["content"] for m in left] == ["plays the cello every day"]
    say(client, "forget everything you know about me")
    assert say(client, "jazz or cello tonight?")["memories"] == []
    run_jobs(client, mode)  # the jobs run in order: the remembers, then the forgets
    assert contents(db, "alice") == []
