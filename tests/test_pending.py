"""Read-your-own-writes: what a request captured is recalled by the next one before any worker runs."""

from __future__ import annotations

import redis

from memo_mw.outbox import send_waiting
from memo_mw import MemoryMiddleware
from memo_mw.store import Store

from .conftest import drain
from .test_loop import chat_app, openai, plain


def wrapped(db, redis_url):
    app = chat_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url)
    return app.test_client()


def test_next_request_sees_a_memory_no_worker_has_stored(redis_url, db):
    client = wrapped(db, redis_url)
    client.post("/chat", **plain("我从不吃香菜"))
    reply = client.post("/chat", **plain("这道菜要放香菜吗")).json
    assert [(m["content"], m["id"], m["status"]) for m in reply["memories"]] == [("从不吃香菜", None, "pending")]
    assert "从不吃香菜" in reply["received"]["message"]
    assert Store(db).memories("alice") == []  # nothing written yet
    send_waiting()  # written behind: in Redis within milliseconds, now for the test
    connection = redis.Redis.from_url(redis_url)
    assert connection.hlen("memo:pending:memo:alice") == 1

    drain(redis_url)
    assert connection.exists("memo:pending:memo:alice") == 0  # dropped once stored
    reply = client.post("/chat", **openai("这道菜要放香菜吗")).json
    assert [(m["content"], m["status"]) for m in reply["memories"]] == [("从不吃香菜", "active")]
    assert isinstance(reply["memories"][0]["id"], int)


def test_a_pending_statement_replaces_the_stored_one_on_its_slot(redis_url, db):
    client = wrapped(db, redis_url)
    client.post("/chat", **plain("I like green tea"))
    drain(redis_url)
    client.post("/chat", **plain("I hate green tea"))
    memories = client.post("/chat", **plain("should I order green tea?")).json["memories"]
    assert [m["content"] for m in memories] == ["dislikes green tea"]
    drain(redis_url)
    # Said again (a new message id: within the same minute, the same words without one count
    # as a retried request): already stored, so the pending copy adds nothing to recall.
    client.post("/chat", **plain("I hate green tea", message_id="m3"))
    memories = client.post("/chat", **plain("should I order green tea?")).json["memories"]
    assert [(m["content"], m["status"]) for m in memories] == [("dislikes green tea", "active")]
    client.application.wsgi_app.queue.flush()  # the recall counts, sent now rather than within a second
    drain(redis_url)
    (memory,) = Store(db).memories("alice")
    # hits: restated once, and recalled by the two requests after it was stored.
    assert (memory["content"], memory["hits"]) == ("dislikes green tea", 3)


def test_other_users_do_not_see_pending_memories(redis_url, db):
    client = wrapped(db, redis_url)
    client.post("/chat", **plain("I love jazz", user="alice"))
    assert client.post("/chat", **plain("any jazz tips?", user="bob")).json["memories"] == []


def test_forget_drops_pending_memories_in_the_same_request(redis_url, db):
    client = wrapped(db, redis_url)
    client.post("/chat", **plain("I love jazz"))
    client.post("/chat", **plain("I play the cello every day"))
    recalled = client.post("/chat", **plain("forget that I love jazz")).json["memories"]
    assert "likes jazz" not in [m["content"] for m in recalled]  # the cello may come back (topic: music)
    left = client.post("/chat", **plain("jazz or cello tonight?")).json["memories"]
    assert [m["content"] for m in left] == ["plays the cello every day"]
    client.post("/chat", **plain("forget everything you know about me"))
    assert client.post("/chat", **plain("jazz or cello tonight?")).json["memories"] == []
    drain(redis_url)  # the jobs run in order: the remembers, then the forgets
    assert Store(db).memories("alice", include_inactive=True) == []


def test_embedded_mode_reads_its_own_writes(db):
    app = chat_app()
    middleware = MemoryMiddleware(app.wsgi_app, db=db)
    app.wsgi_app = middleware
    client = app.test_client()
    client.post("/chat", **plain("I like bossa nova"))
    assert [m["content"] for m in client.post("/chat", **plain("bossa nova tonight?")).json["memories"]] \
        == ["likes bossa nova"]
    middleware.queue.join()
    assert middleware.queue.state.read("alice").pending == []  # dropped once the job stored it
    assert [m["id"] is not None for m in client.post("/chat", **plain("bossa nova?")).json["memories"]] == [True]


def test_pending_statements_meet_forget_requests_by_the_servers_time():
    """recall's view (pipeline.visible): a pending statement is left out by a forget request
    the server read after it, and kept when the server read it after the request, whatever
    the clients' times say; a stored memory is ordered by its source time."""
    from memo_mw.pipeline import visible
    from memo_mw.userstate import UserState, forget_marker

    def pending(content, key, ts, received):
        return {"user_id": "u", "session_id": "s", "ts": ts, "message_id": None, "received": received,
                "candidates": [{"type": "preference", "key": key, "polarity": 1, "content": content,
                                "excerpt": content, "confidence": 0.7, "ttl_days": None}]}

    at = 1_700_000_000.5
    page = forget_marker("likes oolong tea", int(at), at, pending_only=True)  # a page deletion
    state = UserState([pending("likes oolong tea", "oolong tea", int(at) + 86400, at - 1),  # before, clock ahead
                       pending("likes oolong tea", "oolong tea", int(at) - 86400, at + 1),  # after, clock behind
                       pending("likes jazz", "jazz", int(at) + 86400, at - 1)], [page], set())
    shown = visible([], state)
    assert sorted((m["content"], m["source_ts"]) for m in shown) == [
        ("likes jazz", int(at) + 86400), ("likes oolong tea", int(at) - 86400)]
    # A stored memory carries only its client's time: the page's marker (its deletion done in
    # the store) does not hide one said after it from a clock behind; a chat's own "forget
    # that" (the same client's times) hides what that client said before it.
    stored = [{"id": 1, "user_id": "u", "key": "green tea", "polarity": 1, "content": "likes oolong tea",
               "excerpt": "", "status": "active", "active": True, "source_ts": int(at) - 86400,
               "created_at": int(at) - 86400}]
    page = forget_marker("likes oolong tea", int(at), at, pending_only=True)
    assert [m["id"] for m in visible(stored, UserState([], [page], set()))] == [1]
    chat = forget_marker("likes oolong tea", int(at) - 80000, at)
    assert visible(stored, UserState([], [chat], set())) == []
