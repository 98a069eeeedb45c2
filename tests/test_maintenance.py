"""Lifecycle over time: expiry, confirmation, removal, contradictions; rq cron schedules it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time

import pytest
import redis
from click.testing import CliRunner
from rq import Queue

from memo_mw import defaults, jobs
from memo_mw.cli import main
from memo_mw.funnel import Funnel
from memo_mw.pipeline import Recaller, remember_payload
from memo_mw.recall import RecallConfig, format_block
from memo_mw.rules import load_rules
from memo_mw.store import Store

from .conftest import drain

T0 = 1_700_000_000
DAY = 86400


@pytest.fixture(scope="module")
def funnel():
    return Funnel(load_rules())


def say(db, funnel, text, ts, user="u"):
    result = funnel.process(text)
    assert result.candidates, (text, result.trace)
    with Store(db) as store:
        return store.remember(remember_payload(result, user_id=user, session_id="s", ts=ts, message_id=None,
                                               time_key=ts))


@pytest.mark.parametrize("task, ttl_days, unrelated", [
    pytest.param("下次帮我推荐一本悬疑小说", 30, "今天天气怎么样", id="zh-next-time"),
    pytest.param("remind me to renew my passport", 14, "what's the weather like", id="en-remind"),
])
def test_a_task_expires_asks_once_then_leaves(db, funnel, task, ttl_days, unrelated):
    say(db, funnel, task, T0)
    (memory,) = Store(db).memories("u")
    assert memory["type"] == "task" and memory["expires_at"] == T0 + ttl_days * DAY
    recaller = Recaller(db, funnel, RecallConfig())

    assert jobs.maintain(db, T0 + ttl_days * DAY - 1) == {"expired": 0, "removed": 0, "resolved": 0, "reindexed": 0}
    assert recaller.recall("u", unrelated, now=T0 + ttl_days * DAY - 1) == []  # not relevant, not expired

    expired_at = T0 + ttl_days * DAY + 5
    assert jobs.maintain(db, expired_at) == {"expired": 1, "removed": 0, "resolved": 0, "reindexed": 0}
    assert jobs.maintain(db, expired_at)["expired"] == 0  # idempotent
    (pending,) = Store(db).memories("u", include_inactive=True)
    assert (pending["status"], pending["active"], pending["remove_at"]) == (
        "pending_confirm", False, expired_at + defaults.CONFIRM_DAYS * DAY)

    shown = recaller.recall("u", unrelated, now=expired_at + 60)  # shown once, whatever the message
    assert [m["id"] for m in shown] == [memory["id"]]
    assert "expired, ask whether it still holds" in format_block(shown)
    jobs.touch(db, "u", [memory["id"]], expired_at + 60)  # the request's touch job
    assert recaller.recall("u", unrelated, now=expired_at + 120) == []  # ... at most once

    assert jobs.maintain(db, pending["remove_at"]) == {"expired": 0, "removed": 1, "resolved": 0, "reindexed": 0}
    assert Store(db).memories("u", include_inactive=True) == []
    audit = sqlite3.connect(db).execute("select user_id, action, count, reason from audit").fetchall()
    assert audit == [("u", "expired", 1, "not confirmed after expiry")]


@pytest.mark.parametrize("task", ["下次帮我推荐一本悬疑小说", "remind me to renew my passport"])
def test_saying_an_expired_task_again_confirms_it(db, funnel, task):
    say(db, funnel, task, T0)
    jobs.maintain(db, T0 + 60 * DAY)
    assert Store(db).memories("u") == []
    assert say(db, funnel, task, T0 + 61 * DAY) == ["merged"]
    (memory,) = Store(db).memories("u")
    assert memory["status"] == "active" and memory["expires_at"] > T0 + 61 * DAY and memory["remove_at"] is None


@pytest.mark.parametrize("statement, contrary, other", [
    pytest.param("我喜欢喝咖啡", "不喜欢喝咖啡", "I like jazz", id="zh"),
    pytest.param("I like jazz", "dislikes jazz", "我喜欢喝咖啡", id="en"),
])
def test_contradictions_are_resolved_by_time(db, funnel, statement, contrary, other):
    say(db, funnel, statement, T0)
    say(db, funnel, other, T0 + 10)
    (first,) = [m for m in Store(db).memories("u") if m["source_ts"] == T0]
    # Two workers racing can leave both polarities active: write the second one behind the store's back.
    with sqlite3.connect(db) as conn:
        conn.execute("insert into memories (user_id, type, key, polarity, content, excerpt, source_ts, status,"
                     " active, hits, created_at, confidence) values ('u', ?, ?, ?, ?, '', ?, 'active', 1, 0, ?, 0.7)",
                     [first["type"], first["key"], -first["polarity"], contrary, T0 + 5, T0 + 5])
    assert jobs.maintain(db, T0 + 100)["resolved"] == 1
    active = {m["content"] for m in Store(db).memories("u")}
    assert active == {contrary, next(m["content"] for m in Store(db).memories("u") if m["source_ts"] == T0 + 10)}
    old = Store(db).get(first["id"])
    assert old["status"] == "superseded" and old["superseded_by"] is not None
    assert jobs.maintain(db, T0 + 200)["resolved"] == 0


def test_cli_maintain(db, funnel):
    say(db, funnel, "remind me to call the bank", T0)
    result = CliRunner().invoke(main, ["maintain", "--db", db, "--now", str(T0 + 15 * DAY), "--json"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == '{"expired": 1, "removed": 0, "resolved": 0, "reindexed": 0}'
    result = CliRunner().invoke(main, ["maintain", "--db", db, "--now", str(T0 + 30 * DAY)])
    assert result.output.strip() == "expired 0, removed 1, resolved 0, reindexed 0"


def test_rq_cron_schedules_maintenance_that_the_worker_runs(redis_url, db, funnel):
    say(db, funnel, "remind me to water the plants", int(time.time()) - 30 * DAY)  # long expired
    env = {**os.environ, "MEMO_DB": db, "MEMO_MAINTAIN_INTERVAL": "1"}
    rq = os.path.join(os.path.dirname(sys.executable), "rq")
    cron = subprocess.Popen([rq, "cron", "--url", redis_url, "memo_mw.cron"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    queue = Queue(defaults.QUEUE_NAME, connection=redis.Redis.from_url(redis_url), serializer=defaults.SERIALIZER)
    try:
        deadline = time.time() + 20
        while queue.count == 0 and time.time() < deadline:
            time.sleep(0.2)
    finally:
        cron.terminate()
        _, errors = cron.communicate(timeout=10)
    assert queue.count >= 1, errors.decode()
    assert queue.jobs[0].func_name == "memo_mw.jobs.maintain"  # enqueued pickled by rq cron, read safely
    drain(redis_url)
    (memory,) = Store(db).memories("u", include_inactive=True)
    assert memory["status"] == "pending_confirm"


def test_job_serializer_reads_plain_pickles_only():
    import datetime
    import pickle

    from memo_mw.queue import JobSerializer

    assert JobSerializer.loads(JobSerializer.dumps(["a", {"b": 1}])) == ["a", {"b": 1}]
    plain = ("memo_mw.jobs.maintain", None, ("/x.db",), {})
    assert JobSerializer.loads(pickle.dumps(plain, protocol=5)) == plain
    with pytest.raises(pickle.UnpicklingError, match="plain values only"):
        JobSerializer.loads(pickle.dumps(datetime.date(2024, 1, 1), protocol=5))


def test_an_expired_task_is_asked_about_once_before_any_worker_runs(redis_url, db, funnel):
    from flask import Flask, jsonify, request

    from memo_mw import MemoryMiddleware

    say(db, funnel, "remind me to renew my passport", T0)
    jobs.maintain(db, T0 + 20 * DAY)
    app = Flask(__name__)
    app.add_url_rule("/chat", methods=["POST"],
                     view_func=lambda: jsonify([m["content"] for m in request.environ["memo.memories"]]))
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url, clock=lambda: T0 + 21 * DAY)
    client = app.test_client()
    ask = {"json": {"message": "what's the weather like"}, "headers": {"X-User-Id": "u"}}
    assert client.post("/chat", **ask).json == ["reminder: renew their passport"]
    assert client.post("/chat", **ask).json == []  # no worker has run the touch job yet
    app.wsgi_app.queue.flush()  # the recall count, sent now rather than within a second
    drain(redis_url)
    assert client.post("/chat", **ask).json == []
    (memory,) = Store(db).memories("u", include_inactive=True)
    assert memory["confirm_shown_at"] == T0 + 21 * DAY
