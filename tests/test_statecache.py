"""The users' state kept in the web process (memo_mw.statecache): served from memory while
unchanged, dropped as soon as any process changes it, never served while the listener is away."""

from __future__ import annotations

import os


import pytest
import redis

from memo_mw.statecache import CachedUserState
from memo_mw.userstate import RedisUserState

from .conftest import answered, observe_reads, wait_until


def payload(job_key, content="likes tea"):
    return {"job_key": job_key, "user_id": "alice", "session_id": "s", "ts": 1, "message_id": None,
            "candidates": [{"type": "preference", "key": content, "polarity": 1, "content": content,
                            "excerpt": content, "rule_id": "t", "confidence": 0.8, "ttl_days": None}]}


@pytest.fixture
def connection(redis_url):
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def listening(cache):
    cache.read("nobody")  # starts the listener once Redis has answered
    assert wait_until(lambda: cache.listening), "the listener did not subscribe"
    return cache


def test_reads_are_served_from_memory_until_another_process_writes(connection):
    web = listening(CachedUserState(RedisUserState(connection, "memo")))
    worker = RedisUserState(connection, "memo")  # another process: the rq worker, say
    assert web.read("alice").pending == []
    misses = web.stats["miss"]
    for _ in range(5):
        assert web.read("alice").pending == []
    assert web.stats["miss"] == misses  # no round trip
    worker.put_pending("alice", payload("k1"))
    assert wait_until(lambda: [p["job_key"] for p in web.read("alice").pending] == ["k1"])
    worker.drop_pending("alice", "k1")
    assert wait_until(lambda: web.read("alice").pending == [])
    web.close()


WRITES = {  # each write method, with how the state read next shows it
    "add_forget": (({"tokens": None, "ts": 5},), lambda state: state.forgets == [{"tokens": None, "ts": 5}]),
    "put_pending": ((payload("k1"),), lambda state: [p["job_key"] for p in state.pending] == ["k1"]),
    "add_shown": (([7, 8],), lambda state: set(state.shown) == {7, 8}),
}


@pytest.mark.parametrize("method", sorted(WRITES))
def test_a_process_sees_its_own_write_at_once(connection, method):
    web = listening(CachedUserState(RedisUserState(connection, "memo")))
    web.send_interval = 3600
    args, shows = WRITES[method]
    assert not shows(web.read("alice"))
    getattr(web, method)("alice", *args)
    assert shows(web.read("alice"))  # no waiting for the change message
    web.close()


def test_a_process_sees_its_own_replacement_and_drop_at_once(connection):
    web = listening(CachedUserState(RedisUserState(connection, "memo")))
    web.put_pending("alice", payload("k1"))
    assert [p["candidates"][0]["content"] for p in web.read("alice").pending] == ["likes tea"]
    web.replace_pending("alice", payload("k1", "likes coffee"))
    assert [p["candidates"][0]["content"] for p in web.read("alice").pending] == ["likes coffee"]
    web.drop_pending("alice", "k1")
    assert web.read("alice").pending == []
    assert web.channel == RedisUserState(connection, "memo").channel
    web.close()


def test_nothing_is_served_while_the_listener_is_away(redis_server, redis_url, connection):
    web = listening(CachedUserState(RedisUserState(connection, "memo")))
    web.read("alice")
    stamp = web.stamp("alice")
    assert stamp is not None and web._trusted[0] == (stamp[0], os.getpid())
    redis_server.stop()
    assert wait_until(lambda: not web.listening), "the listener did not notice"
    # No stamp either: no view kept under one is trusted (stamp(), and read_request in C, which
    # reads _trusted), whatever it holds.
    assert web.stamp("alice") is None and web._trusted[0] is None
    with pytest.raises(redis.ConnectionError):
        web.read("alice")  # not the copy: a change made meanwhile could not be heard
    redis_server.start()
    RedisUserState(redis.Redis.from_url(redis_url), "memo").put_pending("alice", payload("k2"))
    assert wait_until(lambda: web.listening)
    assert [p["job_key"] for p in web.read("alice").pending] == ["k2"]
    assert web.stamp("alice")[0] > stamp[0] and web._trusted[0] == (web.stamp("alice")[0], os.getpid())
    web.close()


def reconnect(web, user_id):
    web._listening(False)  # as the listener does when Redis goes away, then when it is back
    web._listening(True)


@pytest.mark.parametrize("meanwhile", [
    lambda web, user_id: web.invalidate(user_id),  # the change's message arrives while the read is in flight
    reconnect,  # the listener lost Redis and subscribed again: a change's message may have gone unheard
], ids=["a change", "a lost and regained listener"])
def test_a_read_racing_with_a_change_is_not_kept(connection, meanwhile):
    web = listening(CachedUserState(RedisUserState(connection, "memo")))
    inner_read = web.inner.read

    def read_then_changed(user_id):
        state = inner_read(user_id)
        meanwhile(web, user_id)
        return state

    web.inner.read = read_then_changed
    web.read("alice")
    web.inner.read = inner_read
    misses = web.stats["miss"]
    web.read("alice")
    assert web.stats["miss"] == misses + 1  # fetched again, the raced copy was not kept
    web.read("alice")
    assert web.stats["miss"] == misses + 1  # (and the one after it is)
    web.close()


def test_recall_reads_a_users_version_again_only_when_told_or_after_a_while(redis_url, db, monkeypatch):
    """With Redis, recall keeps each user's version while the state listener hears nothing about
    the user (and for at most RECALL_VERSION_MAX_AGE): a stored memory (its pending entry dropped
    by the job) is recalled on the next request all the same."""
    from flask import Flask, jsonify, request

    from memo_mw import MemoryMiddleware, defaults
    from memo_mw import pipeline
    from memo_mw.outbox import send_waiting

    from .conftest import drain

    monkeypatch.setattr(defaults, "RECALL_VERSION_MAX_AGE", 3600)
    app = Flask(__name__)
    app.post("/chat")(lambda: jsonify(memories=[m["content"] for m in request.environ.get("memo.memories", [])]))
    middleware = app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url)
    client = app.test_client()
    reads = []
    original = pipeline._versions
    monkeypatch.setattr(pipeline, "_versions", lambda store, user: reads.append(user) or original(store, user))

    def ask(text, user="alice"):
        return client.post("/chat", json={"message": text}, headers={"X-User-Id": user}).json["memories"]

    assert wait_until(lambda: ask("hello?") == [] and middleware.queue.backend.state.listening)
    ask("hello?")  # made while listening: the version it reads is kept (an earlier one may have read it before)
    reads.clear()
    for _ in range(3):
        assert ask("any kalimba songs?") == []
    assert reads == []  # nothing changed: no SQLite read of the version
    ask("I like kalimba music", user="bob")  # another user's capture tells nothing about alice
    send_waiting()
    assert ask("any kalimba songs?") == [] and "alice" not in reads
    client.post("/chat", json={"message": "I like kalimba music"}, headers={"X-User-Id": "alice"})
    drain(redis_url)  # stored, and the job dropped the pending entry: the listener hears of alice
    assert wait_until(lambda: ask("any kalimba songs?") == ["likes kalimba music"])
    assert "alice" in reads
    middleware.queue.close()


def test_a_users_stamp_never_comes_back_after_the_user_was_evicted(connection):
    """Recall trusts a version it read while the user's stamp is the same: a user dropped from
    the cache (and their change counter with it) must not get an old stamp again."""
    web = listening(CachedUserState(RedisUserState(connection, "memo"), max_users=1))
    web.read("alice")
    before = web.stamp("alice")
    RedisUserState(connection, "memo").put_pending("alice", payload("k1"))  # another process writes
    assert wait_until(lambda: web.stamp("alice") != before)
    web.read("alice")
    web.read("bob")  # alice is evicted, her counter dropped
    web.read("alice")
    assert web.stamp("alice") != before
    web.close()


def test_a_request_reads_the_user_as_the_last_one_did_until_the_user_changes(redis_url, db, monkeypatch):
    """The middleware keeps what a request read of a user (the state, the recaller's copy of the
    memories, the insights) for the next requests while the listener hears nothing of the user and
    for at most RECALL_VERSION_MAX_AGE: they read none of it again; a change by another process is
    seen as soon as its message comes, and a copy the memory cache let go is read again."""
    from flask import Flask, jsonify, request

    from memo_mw import MemoryMiddleware, defaults

    monkeypatch.setattr(defaults, "RECALL_VERSION_MAX_AGE", 3600)
    app = Flask(__name__)
    app.post("/chat")(lambda: jsonify(memories=[m["content"] for m in request.environ.get("memo.memories", [])]))
    middleware = app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url)
    client = app.test_client()
    state_reads, cache_reads = [], []
    state, cache = middleware.queue.state, middleware.recaller.cache
    monkeypatch.setattr(state, "read", lambda user, read=state.read: state_reads.append(user) or read(user))
    monkeypatch.setattr(cache, "get", lambda user, version, get=cache.get: cache_reads.append(user) or get(user, version))

    def ask(text, user="alice"):
        return client.post("/chat", json={"message": text}, headers={"X-User-Id": user}).json["memories"]

    assert wait_until(lambda: ask("any tea tips?") == [] and middleware.queue.backend.state.listening)
    ask("any tea tips?")  # read while listening: kept
    state_reads.clear(), cache_reads.clear()
    for _ in range(3):
        assert ask("any tea tips?") == []
    assert state_reads == [] and cache_reads == []
    assert ask("any tea tips?", user="bob") == [] and state_reads == ["bob"]  # each user has their own

    RedisUserState(redis.Redis.from_url(redis_url), middleware.queue.backend.state.inner.namespace).put_pending(
        "alice", payload("k1", "likes green tea"))  # another process writes alice's state
    # (A read racing with the change message is not kept: wait for one that is.)
    assert wait_until(lambda: ask("any tea tips?") == ["likes green tea"] and "alice" in middleware._views)
    assert "alice" in state_reads
    state_reads.clear(), cache_reads.clear()
    assert ask("any tea tips?") == ["likes green tea"] and state_reads == []

    cache.clear()  # the copy is gone (evicted): read again, not kept alive by the view
    assert ask("any tea tips?") == ["likes green tea"] and cache_reads == ["alice"]

    monkeypatch.setattr(defaults, "RECALL_VERSION_MAX_AGE", 0)  # no view outlives its request
    state_reads.clear()
    for _ in range(3):
        ask("any tea tips?", user="carol")
    assert state_reads == ["carol"] * 3
    middleware.queue.close()


def test_a_users_view_holds_only_what_the_listener_vouches_for(redis_url, db, monkeypatch):
    """A state made up while Redis did not answer (stored memories only) is not kept as the user's
    view, nor trusted past the time recall reads the user's version again; a forget request drops
    the view at once (nothing it names stays in the process)."""
    from flask import Flask, jsonify, request

    from memo_mw import MemoryMiddleware, defaults

    monkeypatch.setattr(defaults, "RECALL_VERSION_MAX_AGE", 3600)
    app = Flask(__name__)
    app.post("/chat")(lambda: jsonify(memories=[m["content"] for m in request.environ.get("memo.memories", [])]))
    middleware = app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url)
    client = app.test_client()
    cached = middleware.queue.backend.state

    def ask(text, user="alice"):
        return client.post("/chat", json={"message": text}, headers={"X-User-Id": user}).json["memories"]

    assert wait_until(lambda: ask("any tea tips?") == [] and cached.listening)
    RedisUserState(redis.Redis.from_url(redis_url), cached.inner.namespace).put_pending(
        "alice", payload("k1", "likes green tea"))
    # The read that first shows the write may have raced with its change message (then it is not
    # kept as the view); a later one, after the message, is.
    assert wait_until(lambda: ask("any tea tips?") == ["likes green tea"] and "alice" in middleware._views)
    view = middleware._views["alice"]
    assert view.until <= middleware.recaller.version_read_at("alice", view.stamp) + defaults.RECALL_VERSION_MAX_AGE

    def unreachable(user_id):
        raise redis.ConnectionError("no answer")

    with monkeypatch.context() as outage:
        outage.setattr(cached.inner, "read", unreachable)
        cached.invalidate("alice")  # the next read asks Redis, which does not answer
        assert ask("any tea tips?") == []  # stored memories only, while Redis does not answer
    middleware.queue.breaker.success()
    assert ask("any tea tips?") == ["likes green tea"]  # read again: the outage's state was not kept

    ask("forget that I like green tea")
    assert "alice" not in middleware._views
    middleware.queue.close()


def test_a_capture_waiting_in_the_outbox_is_recalled_though_the_view_held(redis_url, db, monkeypatch):
    """While a captured message waits in the outbox (Redis not answering the web process, the
    listener still subscribed, so the user's stamp does not move), the user's view answers nothing:
    the next request reads the state with the outbox's rows and recalls what waits there."""
    from flask import Flask, jsonify, request

    from memo_mw import MemoryMiddleware, defaults

    monkeypatch.setattr(defaults, "RECALL_VERSION_MAX_AGE", 3600)
    app = Flask(__name__)
    app.post("/chat")(lambda: jsonify(memories=[m["content"] for m in request.environ.get("memo.memories", [])]))
    middleware = app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url)
    client = app.test_client()

    def ask(text, user="alice"):
        return client.post("/chat", json={"message": text}, headers={"X-User-Id": user}).json["memories"]

    assert wait_until(lambda: ask("any tea tips?") == [] and middleware.queue.backend.state.listening
                      and "alice" in middleware._views)
    seen = []
    built = observe_reads(monkeypatch, middleware, lambda got: seen.append(answered(got)))
    assert ask("any tea tips?") == [] and seen == [built]  # the view answered
    stamp = middleware.recaller.changes.stamp("alice")
    middleware.queue.breaker.failure()  # Redis skipped: the capture waits in the outbox
    ask("I like green tea")
    assert middleware.queue.spooled and middleware.recaller.changes.stamp("alice") == stamp
    seen.clear()
    assert ask("any tea tips?") == ["likes green tea"] and seen == [False]
    middleware.queue.breaker.success()
    middleware.queue.close()
