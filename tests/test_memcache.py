"""The recall cache (memo_mw.memcache): the same answers as reading the database every time, and
never a stale one after a write, whoever makes it."""

from __future__ import annotations

import pytest

from memo_mw.funnel import Funnel
from memo_mw.memcache import MemoryCache, UserMemories
from memo_mw.pipeline import Recaller, remember_payload
from memo_mw.recall import RecallConfig, score
from memo_mw.rules import load_rules
from memo_mw.store import Store
from memo_mw.userstate import EMPTY, UserState, forget_marker

NOW = 1_750_000_000
STATEMENTS = ["I like green tea", "I play tennis every weekend", "I hate horror movies", "from now on answer briefly",
              "I live in Lisbon", "我喜欢喝乌龙茶", "我不吃香菜", "以后回答简短一点", "I always take the bus to work",
              "I love bossa nova", "我住在杭州", "remember that I prefer window seats"]
QUERIES = ["any tea tips?", "what should I cook tonight?", "weekend plans?", "推荐一部电影", "晚饭吃什么",
           "what do you remember about me?", "tell me about Lisbon", "hello", "杭州有什么好玩的", "music for tonight"]


@pytest.fixture(scope="module")
def funnel():
    return Funnel(load_rules(None))


def say(db, funnel, user, text, ts):
    result = funnel.process(text)
    assert result.candidates, text
    with Store(db) as store:
        store.remember(remember_payload(result, user_id=user, session_id="s", ts=ts, message_id=None, time_key=ts))


def answers(recaller, user, state=EMPTY):
    return [[(m["id"], m["content"], m["score"]) for m in recaller.recall(user, q, now=NOW, state=state)]
            for q in QUERIES]


def test_cached_and_uncached_recall_agree(db, funnel):
    for i, text in enumerate(STATEMENTS):
        say(db, funnel, "alice", text, NOW - 86400 * i)
    cached = Recaller(db, funnel, RecallConfig())
    plain = Recaller(db, funnel, RecallConfig(), cache_bytes=0)
    assert answers(cached, "alice") == answers(plain, "alice")
    assert answers(cached, "alice") == answers(plain, "alice")  # and again, from the cache
    assert cached.cache.stats["hit"] >= len(QUERIES)
    pending = {"job_key": "k", "user_id": "alice", "session_id": "s", "ts": NOW, "message_id": None,
               "candidates": [c.as_dict() for c in funnel.process("I like jasmine tea").candidates]}
    state = UserState([pending], [forget_marker("tennis", NOW)], set())
    assert answers(cached, "alice", state) == answers(plain, "alice", state)
    assert any("jasmine" in m[1] for m in answers(cached, "alice", state)[0])


def test_a_write_is_seen_on_the_next_recall(db, funnel):
    say(db, funnel, "alice", "I like green tea", NOW - 100)
    recaller = Recaller(db, funnel, RecallConfig())
    assert [m["content"] for m in recaller.recall("alice", "any tea tips?", now=NOW)] == ["likes green tea"]
    say(db, funnel, "alice", "I like jasmine tea", NOW - 50)  # another connection writes
    assert {m["content"] for m in recaller.recall("alice", "any tea tips?", now=NOW)} == {
        "likes green tea", "likes jasmine tea"}
    with Store(db) as store:
        store.forget("alice", match="green tea", ts=NOW, reason="test")
    assert [m["content"] for m in recaller.recall("alice", "any tea tips?", now=NOW)] == ["likes jasmine tea"]
    with Store(db) as store:
        store.forget("alice", ts=NOW, reason="test")
    assert recaller.recall("alice", "any tea tips?", now=NOW) == []
    say(db, funnel, "alice", "I like black tea", NOW + 1)  # versions never repeat, even after forget-all
    assert [m["content"] for m in recaller.recall("alice", "any tea tips?", now=NOW)] == ["likes black tea"]


def test_users_are_cached_apart_and_evicted_least_recent_first(funnel):
    def entry(n):
        return UserMemories.build(1, [{"content": f"likes thing {i}", "key": f"thing {i}", "type": "preference"}
                                      for i in range(n)], funnel.topics.tag)

    cache = MemoryCache(max_bytes=entry(10).cost, max_user=6)
    cache.put("a", entry(4))
    cache.put("b", entry(4))
    assert cache.get("a", 1) is not None  # a is now the most recent
    cache.put("c", entry(4))  # 12 memories' worth > 10: b, the least recently used, goes
    assert cache.get("b", 1) is None and cache.get("a", 1) is not None and cache.get("c", 1) is not None
    assert cache.bytes == entry(8).cost
    cache.put("d", entry(7))  # more than max_user: not cached
    assert cache.get("d", 1) is None
    cache.put("a", entry(7))  # grown above max_user: the old copy must not be served
    assert cache.get("a", 1) is None and cache.bytes == entry(4).cost
    assert cache.get("c", 2) is None  # another version: the stale copy goes at once
    assert cache.bytes == 0 and cache.get("c", 1) is None


def test_hiding_the_hottest_memory_changes_every_score(db, funnel):
    """Hotness is normalised by the hottest memory the request sees: when a forget request hides
    the hottest one, the cache must score as loading everything does."""
    for i, text in enumerate(STATEMENTS):
        say(db, funnel, "alice", text, NOW - 86400 * i)
    with Store(db) as store:
        tea = next(m for m in store.memories("alice") if "green tea" in m["content"])
        store.touch("alice", {tea["id"]: 60}, NOW)
        store.touch("alice", {m["id"]: 12 for m in store.memories("alice") if m["id"] != tea["id"]}, NOW - 86400)
    cached = Recaller(db, funnel, RecallConfig())
    plain = Recaller(db, funnel, RecallConfig(), cache_bytes=0)
    state = UserState([], [forget_marker("green tea", NOW)], set())
    assert answers(cached, "alice", state) == answers(plain, "alice", state)
    assert answers(cached, "alice") == answers(plain, "alice")


def test_with_pending_statements_the_cache_scores_candidates_and_agrees(db, funnel):
    """A pending statement replaces the stored ones on its slot (or repeats one): the cache then
    scores only the candidates and those slots, and answers as scoring every memory does, also
    when the statement would hide the hottest memory."""
    import random

    rng = random.Random(3)
    for i, text in enumerate(STATEMENTS):
        say(db, funnel, "alice", text, NOW - 86400 * i)
    with Store(db) as store:
        memories = store.memories("alice")
        store.touch("alice", {m["id"]: rng.randrange(1, 30) for m in memories[:6]}, NOW - 3600)
        # The hottest of all on the green tea slot, which "I hate green tea" replaces.
        store.touch("alice", {next(m["id"] for m in memories if m["key"] == "green tea"): 90}, NOW - 3600)
    cached = Recaller(db, funnel, RecallConfig())
    plain = Recaller(db, funnel, RecallConfig(), cache_bytes=0)
    said = ["I hate green tea", "I like green tea", "I like jasmine tea", "我不喜欢喝乌龙茶", "I live in Porto",
            "from now on answer in detail", "I love bossa nova", "我住在上海"]
    for n in range(1, 4):
        for texts in (said[i:i + n] for i in range(len(said) - n + 1)):
            pending = [{"job_key": f"k{j}", "user_id": "alice", "session_id": "s", "ts": NOW + j, "message_id": None,
                        "candidates": [c.as_dict() for c in funnel.process(t).candidates]}
                       for j, t in enumerate(texts)]
            state = UserState(pending, [], set())
            assert answers(cached, "alice", state) == answers(plain, "alice", state), texts
    assert cached.cache.stats["hit"] > 0


def test_kept_features_score_as_the_memories_themselves(db, funnel):
    """UserMemories keeps what scoring reads from each memory (recall.static_features); with them
    the scores and picks are those of the memories read as they are, whatever their state:
    expired, awaiting confirmation, style, recalled before, or with no times at all."""
    for i, text in enumerate(STATEMENTS):
        say(db, funnel, "alice", text, NOW - 86400 * i)
    memories = Store(db).recall_candidates("alice")
    for i, memory in enumerate(memories):
        memory.update({"hits": 3 * i, "last_accessed": NOW - 3600 * i if i % 2 else None})
        if i % 4 == 1:
            memory["expires_at"] = NOW - 60
        if i % 5 == 2:
            memory.update(status="pending_confirm", expires_at=NOW - 60)
        if i % 6 == 3:
            memory.update(source_ts=None, created_at=None, last_accessed=None)
    kept = UserMemories.build(1, memories, funnel.topics.tag)
    for later in (0, 3600, 86400 * 30):
        for query in QUERIES:
            for recall_all in (False, True):
                args = dict(now=NOW + later, topics=funnel.topics.tag, recall_all=recall_all)
                with_features = score(kept.memories, query, features=kept.features, **args)
                assert with_features == score(kept.memories, query, **args)
    assert any(m.get("status") == "pending_confirm" for m in score(kept.memories, "hello", now=NOW))


def test_a_malformed_memory_fails_only_the_requests_it_would_score_in(db, funnel):
    """A row outside the schema (hits below zero) kept in the cache: the requests it scores in
    raise as scoring it from the dict does, the others are answered as before."""
    for i, text in enumerate(STATEMENTS[:4]):
        say(db, funnel, "alice", text, NOW - 86400 * i)
    memories = Store(db).recall_candidates("alice")
    broken = next(m for m in memories if "tea" in m["content"])
    broken["hits"] = -1
    kept = UserMemories.build(1, memories, funnel.topics.tag)
    assert id(broken) not in kept.features
    args = dict(now=NOW, topics=funnel.topics.tag)
    assert score(kept.memories, "weekend plans?", features=kept.features, **args) == \
        score(kept.memories, "weekend plans?", **args) != []
    with pytest.raises(ValueError):
        score(kept.memories, "any tea tips?", features=kept.features, **args)


def test_a_request_reads_its_message_once_for_counts_and_recall(db, monkeypatch):
    """The middleware analyses the message once (its tokens and topics) for the topic counts and
    recall, scoring included: a message that recalls something is not read a second time."""
    import types

    from flask import Flask, jsonify, request

    from memo_mw import MemoryMiddleware, text

    from .conftest import observe_reads

    app = Flask(__name__)
    app.post("/chat")(lambda: jsonify(memories=[m["content"] for m in request.environ.get("memo.memories", [])]))
    middleware = app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db)
    say(db, middleware.funnel, "alice", "I like green tea", NOW)
    client = app.test_client()
    if text._speedups is None:
        pytest.skip("counts the C analysis's calls")
    read = []
    inner = text._speedups
    counting = types.SimpleNamespace(**{name: getattr(inner, name) for name in dir(inner) if not name.startswith("__")})
    counting.ascii_analysis = lambda folded, *args: read.append(folded) or inner.ascii_analysis(folded, *args)
    counting.Lexicon = inner.Lexicon
    monkeypatch.setattr(text, "_speedups", counting)
    # The usual request is read, and analysed, in one call.
    observe_reads(monkeypatch, middleware, lambda got: type(got) is tuple and read.append(got[2].lower()))
    for question in ("any green tea tips?", "which tea goes with green tea?"):
        memories = client.post("/chat", json={"message": question}, headers={"X-User-Id": "alice"}).json["memories"]
        assert memories == ["likes green tea"]
        assert read.count(question.lower()) == 1, read
    middleware.queue.close()
