"""Forgetting: the markers' pure functions, then forgetting for real through the middleware and a
real rq worker (and in embedded mode), in both languages."""

from __future__ import annotations

import pytest
import redis
from flask import Flask, jsonify, request
from rq import Queue
from rq.serializers import JSONSerializer

from memo_mw import MemoryMiddleware, defaults, jobs
from memo_mw.forgetting import (
    forget_marker,
    forgotten,
    names,
    said_by,
    slot_hash,
    stored_markers,
    without_forgotten,
    without_slot,
)
from memo_mw.store import Store

from .conftest import all_redis_text, drain
from .test_store import database_bytes, payload

pytestmark = pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)

T0 = 1_700_000_000


# -- markers --------------------------------------------------------------------------------------

def test_a_marker_keeps_hashes_of_the_words_never_the_words():
    marker = forget_marker("forget that I play tennis", T0 + 0.7, at=T0 + 1.5)
    assert marker["ts"] == T0 and marker["at"] == T0 + 1.5 and marker["tokens"]
    assert "tennis" not in repr(marker)
    assert forget_marker(None, T0)["tokens"] is None  # everything
    assert "at" not in forget_marker(None, T0) and forget_marker(None, T0, pending_only=True)["pending_only"]


@pytest.mark.parametrize("phrase, memory, named", [
    pytest.param("I play tennis", {"content": "plays tennis every sunday", "key": "tennis"}, True, id="en"),
    pytest.param("Maria's flat", {"content": "Maria's flat is in Porto", "key": "maria's flat"}, True,
                 id="en-clitic"),
    pytest.param("Maria's flat", {"content": "Maria lives in Porto", "key": "maria"}, False, id="en-other"),
    pytest.param("John's car", {"content": "John＇s car is blue", "key": "john＇s car"}, True, id="full-width"),
    pytest.param("我喜欢看恐怖片", {"content": "喜欢看恐怖片", "key": "恐怖片"}, True, id="zh"),
    pytest.param("我喜欢看恐怖片", {"content": "住在杭州西湖区", "key": "杭州西湖区"}, False, id="zh-other"),
    pytest.param(None, {"content": "anything at all", "key": "x"}, True, id="everything"),
])
def test_a_marker_names_the_memories_that_share_most_of_its_words(phrase, memory, named):
    assert names(forget_marker(phrase, T0), memory) is named


def test_statements_are_ordered_by_server_times_when_both_are_known():
    marker = forget_marker(None, T0, at=T0 + 0.5)
    assert said_by({"received": T0 + 0.4, "source_ts": T0 + 86400}, marker)  # its client a day ahead
    assert not said_by({"received": T0 + 0.6, "source_ts": T0 - 86400}, marker)
    assert said_by({"source_ts": T0}, marker) and not said_by({"source_ts": T0 + 1}, marker)  # client times
    assert said_by({"created_at": T0 - 5}, forget_marker(None, T0))


def test_only_what_a_later_request_names_is_forgotten():
    memory = {"content": "likes jazz", "key": "jazz", "source_ts": T0}
    assert forgotten(memory, [forget_marker("likes jazz", T0 + 1)])
    assert not forgotten(memory, [forget_marker("likes jazz", T0 - 1)])  # said after the request
    assert not forgotten(memory, [forget_marker("likes tea", T0 + 1)])
    assert not forgotten(memory, [])


def test_a_payload_loses_the_candidates_a_later_request_names():
    said = {**payload("plays tennis", "tennis", ts=T0), "received": T0 + 0.5}
    said["candidates"].append(payload("likes golf", "golf")["candidates"][0])
    kept = without_forgotten(said, [forget_marker("I play tennis", T0, at=T0 + 1)])
    assert [c["key"] for c in kept["candidates"]] == ["golf"] and len(said["candidates"]) == 2
    assert without_forgotten(said, [forget_marker("I play tennis", T0, at=T0 + 0.1)]) == said  # read after it
    assert without_forgotten(said, []) is said


def test_an_edit_drops_the_slot_of_what_was_read_before_it():
    said = {**payload("likes green tea", "tea"), "received": T0 + 5.0}
    assert without_slot(said, "tea", T0 + 5.5)["candidates"] == []
    assert without_slot(said, "tea", T0 + 4.5) == said
    assert without_slot(said, "jazz", T0 + 5.5) == said
    assert slot_hash("tea") == slot_hash("tea") != slot_hash("teas") and "tea" not in slot_hash("tea")


def test_stored_markers_order_a_payload_without_a_server_time_by_client_times():
    rows = [(None, T0, T0 + 0.5), ('["a1"]', T0 + 1, None)]
    timed = stored_markers({"ts": T0, "received": T0 + 0.1}, rows)
    assert timed == [{"tokens": None, "ts": T0, "at": T0 + 0.5}, {"tokens": ["a1"], "ts": T0 + 1, "at": None}]
    assert [m["at"] for m in stored_markers({"ts": T0}, rows)] == [None, None]


# -- through the middleware -------------------------------------------------------------------------

def chat_app() -> Flask:
    """A stand-in for the user's chat app: it echoes what the middleware gave it."""
    app = Flask(__name__)
    app.add_url_rule("/chat", methods=["POST"], view_func=lambda: jsonify(
        memories=request.environ.get("memo.memories"), profile=request.environ.get("memo.profile"),
        block=request.environ.get("memo.block")))
    return app


def chat_client(db, redis_url=None, **options):
    app = chat_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url, rules_reload_interval=None,
                                    trust_user_header=True, **options)
    return app.test_client(), app.wsgi_app


def say(client, message, user="alice", **extra):
    response = client.post("/chat", json={"message": message, "session_id": "s1", **extra},
                           headers={"X-User-Id": user})
    assert response.status_code == 200
    return response.json


def recalled(client, message, user="alice"):
    return [m["content"] for m in say(client, message, user)["memories"]]


def memories_of(db, user):
    with Store(db) as store:
        return [m["content"] for m in store.list(user, include_inactive=True)]


def rq_queue(redis_url):
    return Queue(defaults.QUEUE_NAME, connection=redis.Redis.from_url(redis_url), serializer=JSONSerializer)


@pytest.mark.parametrize("statements, forget, gone, kept", [
    pytest.param(["我喜欢看恐怖片", "我住在杭州西湖区"], "清除你记住的关于我的一切",
                 ["恐怖片", "杭州西湖区"], [], id="zh-all"),
    pytest.param(["I play tennis every sunday", "I love zanzibarian oolong"], "erase everything you know about me",
                 ["tennis", "zanzibarian"], [], id="en-all"),
    pytest.param(["我喜欢看恐怖片", "我住在杭州西湖区"], "把我喜欢看恐怖片这条删掉",
                 ["恐怖片"], ["住在杭州西湖区"], id="zh-match"),
    pytest.param(["I play tennis every sunday", "I love zanzibarian oolong"], "forget that I play tennis",
                 ["tennis"], ["likes zanzibarian oolong"], id="en-match"),
])
def test_forget_through_the_middleware(redis_url, db, statements, forget, gone, kept):
    client, _ = chat_client(db, redis_url)
    for i, text in enumerate(statements):
        say(client, text, message_id=f"a{i}")
        say(client, text, user="bob", message_id=f"b{i}")
    drain(redis_url)

    recalled_now = " ".join(recalled(client, forget))
    for word in gone:  # from the request that asks, before any job has run
        assert word not in recalled_now
    drain(redis_url)

    assert memories_of(db, "alice") == kept
    assert len(memories_of(db, "bob")) == len(statements)  # another user is never touched
    for word in gone:
        assert word.encode() in database_bytes(db)  # bob still has them ...
    say(client, forget, user="bob")
    drain(redis_url)
    for word in gone:  # ... and once he forgets too, the text is in no database file, nor in Redis
        assert word.encode() not in database_bytes(db)
        assert word.encode() not in all_redis_text(redis_url)
    action = "forget_all" if not kept else "forget_match"
    with Store(db) as store:
        # The messages that said them leave the chat history too.
        assert [(a["action"], a["count"]) for a in store.audit("alice")] == [(action, len(gone)), ("forget_history", len(gone))]
        assert [(a["action"], a["count"]) for a in store.audit("bob")] == [(action, len(gone)), ("forget_history", len(gone))]


@pytest.mark.parametrize("statement, forget, question", [
    pytest.param("我喜欢看恐怖片", "忘了我吧", "推荐几部恐怖片", id="zh-all"),
    pytest.param("我喜欢看恐怖片", "把我喜欢看恐怖片这条删掉", "推荐几部恐怖片", id="zh-match"),
    pytest.param("I play tennis every sunday", "forget everything you know about me", "any tennis tips?",
                 id="en-all"),
    pytest.param("I play tennis every sunday", "forget that I play tennis", "any tennis tips?", id="en-match"),
])
def test_forgotten_stays_forgotten_before_the_job_runs(redis_url, db, statement, forget, question):
    client, _ = chat_client(db, redis_url)
    say(client, statement)
    drain(redis_url)
    assert recalled(client, question)
    say(client, forget)
    assert recalled(client, question) == []  # the next request too, no worker has run
    drain(redis_url)
    assert recalled(client, question) == []
    assert statement.split()[-1].encode() not in all_redis_text(redis_url)  # markers hold hashes only


@pytest.mark.parametrize("forget", ["forget everything you know about me", "forget that I love zanzibarian oolong"])
def test_a_remember_job_overtaken_by_a_forget_stores_nothing(redis_url, db, forget):
    """The forget job runs before a remember job that was queued (or running) earlier."""
    client, _ = chat_client(db, redis_url)
    say(client, "I love zanzibarian oolong")
    queue = rq_queue(redis_url)
    (remember,) = queue.jobs
    queue.remove(remember)  # as if a worker had taken it and were still busy with it
    say(client, forget)
    drain(redis_url)
    queue.enqueue_job(remember)  # ... and only now gets to write
    drain(redis_url)
    assert memories_of(db, "alice") == []


def test_a_forget_changes_the_users_waiting_jobs_only(redis_url, db):
    client, _ = chat_client(db, redis_url)
    for user in ("alice", "bob"):
        say(client, "I live in Springfield. I like jazz.", user=user)
    queue = rq_queue(redis_url)
    marker = forget_marker("I live in Springfield", T0 * 2)
    assert jobs.forget_waiting(queue, "alice", marker) == 1
    assert jobs.forget_waiting(queue, "alice", marker) == 0  # nothing left that it names
    drain(redis_url)
    assert memories_of(db, "alice") == ["likes jazz"]
    assert sorted(memories_of(db, "bob")) == ["likes jazz", "lives in Springfield"]


def test_a_targeted_forget_keeps_the_other_statements_of_a_message(redis_url, db):
    client, _ = chat_client(db, redis_url)
    say(client, "I like golf. I play tennis every sunday.")
    say(client, "forget that I play tennis")
    assert recalled(client, "golf or tennis?") == ["likes golf"]  # pending: golf kept, tennis gone
    drain(redis_url)
    assert memories_of(db, "alice") == ["likes golf"]


def test_forget_in_embedded_mode(db):
    client, middleware = chat_client(db)
    say(client, "I play tennis every sunday")
    say(client, "I love zanzibarian oolong", user="bob")
    middleware.queue.join()
    assert recalled(client, "any tennis tips?") == ["plays tennis every sunday"]
    say(client, "forget everything you know about me")
    assert recalled(client, "any tennis tips?") == []
    middleware.queue.join()
    assert memories_of(db, "alice") == [] and memories_of(db, "bob") == ["likes zanzibarian oolong"]
    assert b"tennis every sunday" not in database_bytes(db)  # (the question after it is new history)


@pytest.mark.parametrize("message", [
    pytest.param("Forget that I play tennis. I like golf now.", id="en"),
    pytest.param("忘掉我喜欢打网球。我现在喜欢打高尔夫。", id="zh"),
])
def test_a_statement_said_with_a_forget_request_is_kept(redis_url, db, message):
    client, _ = chat_client(db, redis_url)
    say(client, "I play tennis" if message.isascii() else "我喜欢打网球", message_id="m1")
    drain(redis_url)
    say(client, message, message_id="m2")
    drain(redis_url)
    stored = memories_of(db, "alice")
    assert len(stored) == 1 and ("golf" in stored[0] or "高尔夫" in stored[0]), stored


def test_forget_me_drops_the_topic_counts_not_sent_yet(db, monkeypatch):
    monkeypatch.setattr(defaults, "COUNTS_SEND_INTERVAL", 3600)
    client, middleware = chat_client(db)
    say(client, "any coffee tips?")  # counted (drink), kept in the process until the interval is over
    say(client, "forget everything you know about me")
    monkeypatch.setattr(defaults, "COUNTS_SEND_INTERVAL", 0)
    say(client, "hello there", user="bob")  # sends whatever is noted
    middleware.queue.join()
    with Store(db) as store:
        users = {row[0] for row in store.db.execute("select user_id from topic_counts")}
    assert users == {"bob"}


def test_forget_me_takes_the_job_keys_so_the_same_words_again_are_stored(db):
    """Without a client time or message id, a job's key is its user, words and minute: after "forget me",
    the same words again are a new statement, not a replay of the forgotten one."""
    client, middleware = chat_client(db)
    say(client, "I like jazz")
    say(client, "I like tea", user="bob")
    middleware.queue.join()
    say(client, "forget everything about me")
    middleware.queue.join()
    with Store(db) as store:
        assert [u for (u,) in store.db.execute("select user_id from processed_jobs")] == ["bob"]
    say(client, "I like jazz")
    middleware.queue.join()
    assert memories_of(db, "alice") == ["likes jazz"]
