"""Lifecycle over time: expiry, confirmation, removal, contradictions (the cron process: test_cron)."""

from __future__ import annotations

import pytest

from memo_mw import defaults, jobs
from memo_mw.adapters import Turn
from memo_mw.funnel import Funnel
from memo_mw.maintenance import maintain, summary
from memo_mw.middleware import remember_payload
from memo_mw.recall import Recaller, format_block
from memo_mw.rules import load_rules
from memo_mw.store import Store

from .conftest import drain
from .test_forgetting import chat_client, recalled
from .test_store import database_bytes, payload

pytestmark = pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)

T0 = 1_700_000_000
DAY = 86400
NOTHING = {"expired": 0, "removed": 0, "resolved": 0, "history_pruned": 0}


@pytest.fixture(scope="module")
def funnel():
    return Funnel(load_rules())


def say(db, funnel, text, ts, user="u"):
    """One message through the shipped rules into the store, as the worker writes it."""
    result = funnel.process(text)
    assert result.candidates, (text, result.trace)
    turn = Turn(shape="plain", message=text, body_user=None, session_id="s", message_id=None, ts=ts)
    with Store(db) as store:
        return store.remember(remember_payload(result, user_id=user, turn=turn, ts=ts, received=ts))


def every_memory(db, user="u"):
    with Store(db) as store:
        return store.list(user, include_inactive=True)


@pytest.mark.parametrize("task, ttl_days, unrelated", [
    pytest.param("下次帮我推荐一本悬疑小说", 30, "今天天气怎么样", id="zh-next-time"),
    pytest.param("remind me to renew my passport", 14, "what's the weather like", id="en-remind"),
])
def test_a_task_expires_asks_once_then_leaves(db, funnel, task, ttl_days, unrelated):
    say(db, funnel, task, T0)
    (memory,) = every_memory(db)
    assert memory["type"] == "task" and memory["expires_at"] == T0 + ttl_days * DAY
    recaller = Recaller(db, funnel)

    assert jobs.maintain(db, T0 + ttl_days * DAY - 1) == NOTHING
    assert recaller.recall("u", unrelated, now=T0 + ttl_days * DAY - 1) == []  # not relevant, not expired

    expired_at = T0 + ttl_days * DAY + 5
    assert jobs.maintain(db, expired_at) == {**NOTHING, "expired": 1}
    assert jobs.maintain(db, expired_at) == NOTHING  # idempotent
    (pending,) = every_memory(db)
    assert (pending["status"], pending["active"], pending["remove_at"]) == (
        "pending_confirm", False, expired_at + defaults.CONFIRM_DAYS * DAY)

    shown = recaller.recall("u", unrelated, now=expired_at + 60)  # shown once, whatever the message
    assert [m["id"] for m in shown] == [memory["id"]]
    assert "expired, ask whether it still holds" in format_block(shown)
    jobs.touch(db, "u", [memory["id"]], expired_at + 60)  # the request's touch job
    assert recaller.recall("u", unrelated, now=expired_at + 120) == []  # ... at most once

    assert jobs.maintain(db, pending["remove_at"] - 1) == NOTHING
    assert jobs.maintain(db, pending["remove_at"]) == {**NOTHING, "removed": 1}
    assert every_memory(db) == []
    with Store(db) as store:
        assert [(a["action"], a["count"], a["reason"]) for a in store.audit("u")] == [
            ("expired", 1, "not confirmed after expiry")]
    assert memory["content"].encode() not in database_bytes(db)


@pytest.mark.parametrize("task", ["下次帮我推荐一本悬疑小说", "remind me to renew my passport"])
def test_saying_an_expired_task_again_confirms_it(db, funnel, task):
    say(db, funnel, task, T0)
    jobs.maintain(db, T0 + 60 * DAY)
    with Store(db) as store:
        assert store.list("u") == []
    assert say(db, funnel, task, T0 + 61 * DAY) == ["merged"]
    (memory,) = every_memory(db)
    assert memory["status"] == "active" and memory["expires_at"] > T0 + 61 * DAY and memory["remove_at"] is None
    assert jobs.maintain(db, T0 + 62 * DAY) == NOTHING


@pytest.mark.parametrize("statement, contrary, other", [
    pytest.param("我喜欢喝咖啡", "不喜欢喝咖啡", "I like jazz", id="zh"),
    pytest.param("I like jazz", "dislikes jazz", "我喜欢喝咖啡", id="en"),
])
def test_contradictions_are_resolved_by_time(db, funnel, statement, contrary, other):
    say(db, funnel, statement, T0)
    say(db, funnel, other, T0 + 10)
    (first,) = [m for m in every_memory(db) if m["source_ts"] == T0]
    # Two workers racing can leave both polarities active: write the second one behind the store's back.
    with Store(db) as store:
        store.db.execute(
            "insert into memories (user_id, type, key, polarity, content, excerpt, source_ts, status, active, hits,"
            " created_at, confidence) values ('u', ?, ?, ?, ?, '', ?, 'active', 1, 0, ?, 0.7)",
            [first["type"], first["key"], -first["polarity"], contrary, T0 + 5, T0 + 5])
        assert maintain(store, now=T0 + 100) == {**NOTHING, "resolved": 1}
        assert sorted(m["content"] for m in store.list("u")) == sorted([contrary, other_content(store)])
        old = store.get("u", first["id"])
        assert old["status"] == "superseded" and old["superseded_by"] is not None
        assert maintain(store, now=T0 + 200) == NOTHING


def other_content(store):
    (other,) = [m for m in store.list("u") if m["source_ts"] == T0 + 10]
    return other["content"]


def test_maintenance_runs_for_every_user_and_says_what_it_did(db):
    with Store(db) as store:
        for user in ("a", "b"):
            store.remember(payload("call the bank", "bank", user=user, type_="task", ttl_days=1))
        store.remember(payload("likes jazz", "jazz", user="a"))
        counts = maintain(store, now=T0 + DAY)
        assert counts == {**NOTHING, "expired": 2}
        assert summary(counts) == "expired 2, removed 0, resolved 0, history_pruned 0"
        assert [m["content"] for m in store.list("a")] == ["likes jazz"]
        assert maintain(store, now=T0 + DAY + defaults.CONFIRM_DAYS * DAY) == {**NOTHING, "removed": 2}
        assert [len(store.list(u, include_inactive=True)) for u in ("a", "b")] == [1, 0]


def test_an_expired_task_is_asked_about_once_before_any_worker_runs(redis_url, db, funnel):
    say(db, funnel, "remind me to renew my passport", T0)
    jobs.maintain(db, T0 + 20 * DAY)
    client, _ = chat_client(db, redis_url, clock=lambda: T0 + 21 * DAY)
    assert recalled(client, "what's the weather like", user="u") == ["reminder: renew their passport"]
    assert recalled(client, "what's the weather like", user="u") == []  # no worker has run the touch job yet
    drain(redis_url)
    assert recalled(client, "what's the weather like", user="u") == []
    (memory,) = every_memory(db)
    assert memory["confirm_shown_at"] == T0 + 21 * DAY

