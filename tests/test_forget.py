"""Forgetting for real, through the middleware and a real worker, in both languages."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
import redis

from memo_mw import MemoryMiddleware
from memo_mw.outbox import send_waiting
from memo_mw.store import Store

from .conftest import all_redis_text, drain
from .test_loop import chat_app, plain


def database_bytes(db: str) -> bytes:
    return b"".join(p.read_bytes() for p in Path(db).parent.iterdir() if p.name.startswith(Path(db).name))


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
    app = chat_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url)
    client = app.test_client()
    for i, text in enumerate(statements):
        client.post("/chat", **plain(text, message_id=f"a{i}"))
        client.post("/chat", **plain(text, user="bob", message_id=f"b{i}"))
    drain(redis_url)

    reply = client.post("/chat", **plain(forget)).json
    recalled = " ".join(m["content"] for m in reply["memories"])
    for word in gone:  # from the request that asks, before any job has run
        assert word not in recalled
    drain(redis_url)

    assert [m["content"] for m in Store(db).memories("alice", include_inactive=True)] == kept
    assert len(Store(db).memories("bob")) == len(statements)  # another user is never touched
    client.post("/chat", **plain("bob's memories are his own", user="bob"))
    for word in gone:
        assert word.encode() in database_bytes(db)  # bob still has them ...
    client.post("/chat", **plain(forget, user="bob"))
    drain(redis_url)
    for word in gone:  # ... and once he forgets too, the text is in no database file, nor in Redis
        assert word.encode() not in database_bytes(db)
        assert word.encode() not in all_redis_text(redis_url)
    audit = sqlite3.connect(db).execute("select user_id, action, count from audit order by id").fetchall()
    action = "forget_all" if not kept else "forget_match"
    assert audit == [("alice", action, len(gone)), ("bob", action, len(gone))]
    columns = [r[1] for r in sqlite3.connect(db).execute("PRAGMA table_info(audit)")]
    assert columns == ["id", "user_id", "action", "count", "at", "reason"]  # no content column


def middleware_client(db, redis_url):
    app = chat_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url)
    return app.test_client()


def recalled(client, text, user="alice"):
    return [m["content"] for m in client.post("/chat", **plain(text, user=user)).json["memories"]]


@pytest.mark.parametrize("statement, forget, question", [
    pytest.param("我喜欢看恐怖片", "忘了我吧", "推荐几部恐怖片", id="zh-all"),
    pytest.param("我喜欢看恐怖片", "把我喜欢看恐怖片这条删掉", "推荐几部恐怖片", id="zh-match"),
    pytest.param("I play tennis every sunday", "forget everything you know about me", "any tennis tips?",
                 id="en-all"),
    pytest.param("I play tennis every sunday", "forget that I play tennis", "any tennis tips?", id="en-match"),
])
def test_forgotten_stays_forgotten_before_the_job_runs(redis_url, db, statement, forget, question):
    client = middleware_client(db, redis_url)
    client.post("/chat", **plain(statement))
    drain(redis_url)
    assert recalled(client, question)
    client.post("/chat", **plain(forget))
    assert recalled(client, question) == []  # the next request too, no worker has run
    assert recalled(client, question) == []
    drain(redis_url)
    assert recalled(client, question) == []
    assert statement.split()[-1].encode() not in all_redis_text(redis_url)  # markers hold hashes only


@pytest.mark.parametrize("forget", ["forget everything you know about me", "forget that I love zanzibarian oolong"])
def test_a_remember_job_overtaken_by_a_forget_stores_nothing(redis_url, db, forget):
    """The forget job runs before a remember job that was queued (or running) earlier."""
    from rq import Queue, Worker

    from memo_mw import defaults

    client = middleware_client(db, redis_url)
    client.post("/chat", **plain("I love zanzibarian oolong"))
    send_waiting()  # written behind: in Redis within milliseconds, now for the test
    queue = Queue(defaults.QUEUE_NAME, connection=redis.Redis.from_url(redis_url), serializer=defaults.SERIALIZER)
    (remember,) = queue.jobs
    queue.remove(remember)  # as if a worker had taken it and were still busy with it
    client.post("/chat", **plain(forget))
    send_waiting()
    Worker([queue], connection=queue.connection, serializer=defaults.SERIALIZER).work(burst=True)
    queue.enqueue_job(remember)  # ... and only now gets to write
    drain(redis_url)
    assert Store(db).memories("alice", include_inactive=True) == []


def test_a_targeted_forget_keeps_the_other_statements_of_a_message(redis_url, db):
    client = middleware_client(db, redis_url)
    client.post("/chat", **plain("I like golf. I play tennis every sunday."))
    client.post("/chat", **plain("forget that I play tennis"))
    assert recalled(client, "golf or tennis?") == ["likes golf"]  # pending: golf kept, tennis gone
    drain(redis_url)
    assert [m["content"] for m in Store(db).memories("alice")] == ["likes golf"]


def test_cli_forget_with_url_reaches_pending_memories_and_waiting_jobs(redis_url, db):
    from click.testing import CliRunner

    from memo_mw.cli import main

    client = middleware_client(db, redis_url)
    for text in ("I love jazz", "I live in Springfield", "我喜欢看恐怖片"):
        client.post("/chat", **plain(text))
        client.post("/chat", **plain(text, user="bob"))
    send_waiting()  # the jobs are in Redis (written behind: within milliseconds)
    result = CliRunner().invoke(main, ["forget", "--db", db, "--user", "alice", "--url", redis_url])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "deleted 0 memories of alice; 3 waiting jobs changed in Redis"
    assert recalled(client, "jazz in Springfield?") == []
    drain(redis_url)
    assert Store(db).memories("alice") == []
    assert len(Store(db).memories("bob")) == 3  # never another user


def test_forget_reads_a_long_queue_in_a_few_round_trips(redis_url, db):
    """forget_waiting reads the waiting jobs in pipelined chunks, not one round trip per job."""
    from rq import Queue

    from memo_mw import defaults, jobs
    from memo_mw.userstate import forget_marker

    client = middleware_client(db, redis_url)
    for i in range(600):  # no worker runs: every job waits
        client.post("/chat", **plain(f"I like band number {i}", user="bob", message_id=f"b{i}"))
    client.post("/chat", **plain("I live in Springfield", message_id="a0"))
    send_waiting()

    trips = []

    class Counted(redis.Connection):
        def send_packed_command(self, command, check_health=True):
            trips.append(1)
            return super().send_packed_command(command, check_health)

    connection = redis.Redis(connection_pool=redis.ConnectionPool.from_url(redis_url, connection_class=Counted))
    queue = Queue(defaults.QUEUE_NAME, connection=connection, serializer=defaults.SERIALIZER)
    assert len(queue.job_ids) == 601
    trips.clear()
    assert jobs.forget_waiting(queue, "alice", forget_marker(None, time.time() + 1)) == 1
    assert len(trips) < 30  # 601 jobs: two chunks, and the few reads and writes around them (one per job: 600+)
    assert len(queue.job_ids) == 600  # bob's jobs stay, alice's is gone
    assert b"Springfield" not in all_redis_text(redis_url)


def test_an_edited_waiting_job_that_ran_meanwhile_is_not_made_again(redis_url, db):
    """forget_waiting saves a changed job only while it is still there as read: a job that ran
    and was deleted between the read and the save is not re-created (with no expiry)."""
    from rq import Queue

    from memo_mw import defaults, jobs

    client = middleware_client(db, redis_url)
    client.post("/chat", **plain("I live in Springfield and I like jazz", message_id="a0"))
    send_waiting()
    connection = redis.Redis.from_url(redis_url)
    queue = Queue(defaults.QUEUE_NAME, connection=connection, serializer=defaults.SERIALIZER)
    [(job_id, job)] = list(jobs._fetch_many(queue, queue.job_ids))
    job.delete()  # as the worker does when it has run it
    assert jobs._save_unchanged(connection, job) is False
    assert not connection.exists(job.key)
    # One still waiting is saved.
    client.post("/chat", **plain("I live in Shelbyville", message_id="a1"))
    send_waiting()
    [(job_id, job)] = list(jobs._fetch_many(queue, queue.job_ids))
    assert jobs._save_unchanged(connection, job) is True and connection.exists(job.key)


def test_a_pending_entry_whose_job_ran_is_not_put_back(redis_url):
    from memo_mw.userstate import RedisUserState

    state = RedisUserState(redis.Redis.from_url(redis_url), "t")
    entry = {"job_key": "k1", "user_id": "alice", "ts": 1, "candidates": [{"key": "tea", "content": "likes tea"}]}
    state.put_pending("alice", entry)
    state.replace_pending("alice", {**entry, "candidates": [{"key": "tea", "content": "likes green tea"}]})
    assert [c["content"] for p in state.read("alice").pending for c in p["candidates"]] == ["likes green tea"]
    state.drop_pending("alice", "k1")  # its job ran
    state.replace_pending("alice", entry)  # a rewrite that read it before
    assert state.read("alice").pending == []


def test_a_local_pending_entry_whose_job_ran_is_not_put_back():
    from memo_mw.userstate import LocalUserState

    state = LocalUserState()
    entry = {"job_key": "k1", "user_id": "alice", "ts": 1, "candidates": [{"key": "tea", "content": "likes tea"}]}
    state.put_pending("alice", entry)
    state.replace_pending("alice", {**entry, "candidates": []})  # nothing left: dropped
    assert state.read("alice").pending == []
    state.replace_pending("alice", entry)  # gone: not put back
    assert state.read("alice").pending == []
