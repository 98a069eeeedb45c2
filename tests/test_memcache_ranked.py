"""A user with many memories kept in the process (memo_mw.memcache.RankedMemories): recall through
bounds gives exactly what scoring every memory gives, whatever the query, the time, the request's
short-lived state and the settings; a write is seen on the next recall; the cache keeps to its bound."""

from __future__ import annotations

import random

import pytest

from memo_mw import defaults
from memo_mw.funnel import Funnel
from memo_mw.maintenance import maintain
from memo_mw.memcache import DICT_BYTES, RANKED_BYTES, RankedMemories, UserMemories
from memo_mw.pipeline import Recaller
from memo_mw.recall import RecallConfig
from memo_mw.rules import load_rules
from memo_mw.store import Store
from memo_mw.topics import TopicTagger
from memo_mw.userstate import UserState, forget_marker

from .test_recall_index import EN_PLACES, EN_THINGS, LEXICON, QUERIES, T0, ZH_PLACES, ZH_THINGS, fill, payload

USER = "many"
N = 700  # above RECALL_INDEX_MIN_MEMORIES: the ranked form
#: Topic words no memory says: a query with one finds memories by their topic alone.
TOPIC_ONLY = {"food": ("lasagna", "千层面"), "sport": ("curling", "冰壶")}


@pytest.fixture(scope="module")
def funnel():
    funnel = Funnel(load_rules())
    funnel.topics = TopicTagger({t: LEXICON[t] + TOPIC_ONLY[t] for t in LEXICON})
    return funnel


@pytest.fixture
def many(db):
    rng = random.Random(11)
    with Store(db) as store:
        fill(store, USER, N, rng)
        fill(store, "few", 40, rng)
        ids = [m["id"] for m in store.memories(USER)]
        for _ in range(30):  # a few much hotter than the rest (hotness is normalised by the hottest)
            store.touch(USER, {i: rng.randrange(1, 40) for i in rng.sample(ids, 5)}, T0 + rng.randrange(N * 600))
    return db


@pytest.fixture
def confirming(many):
    with Store(many) as store:
        maintain(store, now=T0 + 40 * 86400)  # some tasks now await confirmation (always shown, once)
    return many


def random_queries(rng: random.Random, n: int) -> list[str]:
    out = list(QUERIES)
    for _ in range(n):
        zh = rng.random() < 0.5
        things, places = (ZH_THINGS, ZH_PLACES) if zh else (EN_THINGS, EN_PLACES)
        words = [rng.choice(things) for _ in range(rng.randrange(1, 3))] + [rng.choice(places)] * rng.randrange(2)
        if rng.random() < 0.4:  # a topic only: ranks memories of the topic among weaker word matches
            words[0] = rng.choice(TOPIC_ONLY[rng.choice(sorted(TOPIC_ONLY))][1 if zh else 0])
        out.append(("".join(words) + rng.choice(["", "吗", "怎么样"])) if zh else
                   " ".join([rng.choice(["any", "what about", "tips on", ""]), *words, rng.choice(["?", "tonight", ""])]))
    return out


def pair(db, funnel, config, **kw):
    cached = Recaller(db, funnel, config, **kw)
    plain = Recaller(db, funnel, config, indexed=False, cache_bytes=0)
    return cached, plain


def key(memories):
    return [(m["id"], m["content"], m["score"]) for m in memories]


def assert_same(cached, plain, query, now, state=None):
    kw = {"state": state} if state is not None else {}
    got = cached.recall(USER, query, now=now, **kw)
    want = plain.recall(USER, query, now=now, **kw)
    assert key(got) == key(want), query
    assert got == want, query  # every field, as loading every memory gives it
    return got


@pytest.mark.parametrize("candidates", [defaults.RECALL_CACHE_CANDIDATES, 1])
@pytest.mark.parametrize("config", [RecallConfig(), RecallConfig(k=10, budget=10_000),
                                    RecallConfig(k=3, w_topic=0.6, w_hotness=0.5, hotness_full=2),
                                    RecallConfig(budget=100)],
                         ids=["default", "k10", "weights", "budget"])
def test_ranked_recall_picks_what_scoring_every_memory_picks(many, funnel, candidates, config):
    cached, plain = pair(many, funnel, config, cache_candidates=candidates)
    queries = random_queries(random.Random(candidates), 60)
    # Time moves on, a little back (threads finish out of order), and far back.
    for now in (T0 + 3 * 86400, T0 + 45 * 86400, T0 + 45 * 86400 - 50, T0 + 45 * 86400 + 7200, T0 + 86400):
        for query in queries:
            assert_same(cached, plain, query, now)
    assert isinstance(cached.cache._users[USER], RankedMemories)
    assert cached.stats["ranked"] == 5 * len(queries) and cached.stats["indexed"] == 0
    if candidates == 1:  # one candidate a list is seldom enough: the retries ran
        assert cached.stats["ranked_retry"] > 0, cached.stats
    if config.budget == 100:  # fewer than k fit: nothing proves the rest cannot, every memory that could score
        assert cached.stats["ranked_full"] > 0, cached.stats


def test_ranked_recall_with_pending_forgets_and_shown(confirming, funnel):
    many = confirming
    cached, plain = pair(many, funnel, RecallConfig(k=8, budget=10_000), cache_candidates=2)
    with Store(many) as store:
        rows = store.recall_candidates(USER)
    confirm = [m["id"] for m in rows if m["status"] == "pending_confirm"]
    assert confirm
    slot = next(m for m in rows if m["content"].startswith("likes"))
    now = T0 + 50 * 86400
    pending = [payload("dislikes " + slot["content"][6:], slot["key"], polarity=-1, user=USER, ts=now),
               payload("喜欢吃火锅和饺子", "火锅和饺子", user=USER, ts=now, language="zh")]
    # Said again, not yet stored: the stored memory stays (with its hits and age), whether or not
    # the message matches it best.
    again = [payload(m["content"], m["key"], polarity=m["polarity"], user=USER, ts=now,
                     type_=m["type"]) for m in rows if m["type"] == "preference"][::40]
    states = [(UserState(pending, [], set()), ()), (UserState(again, [], set()), ()),
              (UserState([], [forget_marker("tennis", now)], set(confirm[:1])), ("tennis",)),
              (UserState(pending, [forget_marker("jazz", now), forget_marker("网球", now)], set(confirm)),
               ("jazz", "网球"))]
    for state, hidden in states:
        for query in QUERIES + [slot["content"], "tennis partner", "jazz tonight", "网球"] + [
                p["candidates"][0]["content"].split()[-1] for p in again]:
            got = assert_same(cached, plain, query, now, state)
            assert not any(word in m["content"] for word in hidden for m in got)
            assert not any(m["id"] in state.shown for m in got)


@pytest.mark.parametrize("how", ["one", "all"])
def test_hottest_memories_hidden_by_a_forget(many, funnel, how):
    """Hotness is normalised by the hottest visible memory: hiding the hottest ones changes every
    score, and a request must see that (bounds stretched by as much, or every memory scored)."""
    now = T0 + 50 * 86400
    with Store(many) as store:
        if how == "one":  # far the hottest, alone: the bounds of every other memory stretch
            store.remember(payload("plays the zanzibarian flute", "zanzibarian flute", user=USER, ts=T0))
            flute = next(m for m in store.recall_candidates(USER) if "zanzibarian" in m["content"])
            store.touch(USER, {flute["id"]: 1000}, T0 + N * 600)
            word = "zanzibarian"
        else:  # every one of the hottest: the normalisation needs every memory
            hot = [m for m in store.recall_candidates(USER) if "chess" in m["content"]]
            store.touch(USER, {m["id"]: 500 for m in hot}, T0 + N * 600)
            word = "chess"
    cached, plain = pair(many, funnel, RecallConfig(), cache_candidates=1)
    hidden = UserState([], [forget_marker(word, now)], set())
    for query in random_queries(random.Random(3), 40):
        assert_same(cached, plain, query, now)
        got = assert_same(cached, plain, query, now, hidden)
        assert not any(word in m["content"] for m in got)
    if how == "all":
        assert cached.stats["ranked_full"] > 0


def test_memories_found_by_topic_alone_rank_by_recency_and_hotness(db, funnel):
    """A message sharing only a topic with memories: they score the topic bonus plus recency and
    hotness, so the hottest (scored always) are not the best when they are old; the bound of those
    left out must count the bonus."""
    now = T0 + 1000 * 86400
    with Store(db) as store:
        with store.write():
            for i in range(320):
                store.remember(payload(f"dish {i}", f"dish {i}", user=USER, ts=T0, topics=["food"]))
        ids = [m["id"] for m in store.memories(USER)]
        store.touch(USER, {i: 20 for i in ids[:8]}, T0)  # the hottest, long ago
        store.touch(USER, {i: 10 for i in ids[100:110]}, now)  # less hot, but just now
    cached, plain = pair(db, funnel, RecallConfig(), cache_candidates=1)
    for query in ("lasagna", "千层面", "lasagna or curling"):
        got = assert_same(cached, plain, query, now)
        assert {m["id"] for m in got} <= set(ids[100:110])
    assert_same(cached, plain, "any dish with lasagna", now)  # "dish": the shortest lines first
    assert cached.stats["ranked_retry"] > 0


def test_a_pending_repeat_of_an_old_memory(many, funnel):
    """Said again and not yet stored: the stored memory stays as it is (old), the repeat is not a
    new memory, even when the stored one would not be among the candidates."""
    now = T0 + 10 * 86400
    with Store(many) as store:
        with store.write():
            for i in range(10):
                store.remember(payload(f"zanzibarian tea w{i}", f"zt{i}", user=USER, ts=T0))
            store.remember(payload("zanzibarian tea wx", "ztx", user=USER, ts=T0 - 500 * 86400))
    again = UserState([payload("zanzibarian tea wx", "ztx", user=USER, ts=now)], [], set())
    cached, plain = pair(many, funnel, RecallConfig(k=8, budget=10_000), cache_candidates=1)
    got = assert_same(cached, plain, "zanzibarian tea", now, again)
    assert all(m["id"] is not None for m in got) and "zanzibarian tea wx" not in [m["content"] for m in got]


def test_a_write_is_seen_on_the_next_ranked_recall(many, funnel):
    cached, plain = pair(many, funnel, RecallConfig(k=10, budget=10_000))
    now = T0 + 50 * 86400
    first = assert_same(cached, plain, "zanzibarian noodles", now)
    entry = cached.cache._users[USER]
    with Store(many) as store:  # another connection writes: a new memory, hits, a forget
        store.remember(payload("likes zanzibarian noodles", "zanzibarian noodles", user=USER, ts=now))
    got = assert_same(cached, plain, "zanzibarian noodles", now)
    assert "likes zanzibarian noodles" in [m["content"] for m in got] and got != first
    assert cached.cache._users[USER] is not entry
    with Store(many) as store:
        store.touch(USER, [m["id"] for m in got[1:4]], now)
        store.touch(USER, {got[-1]["id"]: 900}, now)
    assert_same(cached, plain, "zanzibarian noodles", now)
    assert_same(cached, plain, "noodles", now)
    with Store(many) as store:
        store.forget(USER, match="zanzibarian noodles", ts=now, reason="test")
    got = assert_same(cached, plain, "zanzibarian noodles", now)
    assert not any("zanzibarian" in m["content"] for m in got)
    with Store(many) as store:
        store.forget(USER, ts=now, reason="test")
    assert cached.recall(USER, "noodles", now=now) == []


def test_cache_bound_eviction_and_the_largest_users(many, funnel):
    assert UserMemories.build(None, [], funnel.topics.tag).cost == RankedMemories(None, [], funnel.topics.tag).cost == 0
    # Room for the large user, or the small one, not both.
    cached = Recaller(many, funnel, RecallConfig(), cache_bytes=N * RANKED_BYTES + 10 * DICT_BYTES, cache_user=N + 10)
    cached.recall(USER, "noodles", now=T0)
    big = cached.cache._users[USER]
    assert isinstance(big, RankedMemories) and big.size == N
    assert cached.cache.bytes == big.cost <= cached.cache.max_bytes
    cached.recall("few", "noodles", now=T0)  # no room for both: the least recently used goes
    assert list(cached.cache._users) == ["few"] and isinstance(cached.cache._users["few"], UserMemories)
    assert cached.cache.bytes <= cached.cache.max_bytes and cached.cache.stats["evicted"] == 1
    # A user above cache_user is read through the SQL term index, and not kept.
    small = Recaller(many, funnel, RecallConfig(), cache_user=N - 1)
    plain = Recaller(many, funnel, RecallConfig(), indexed=False, cache_bytes=0)
    assert key(small.recall(USER, "noodles", now=T0)) == key(plain.recall(USER, "noodles", now=T0))
    assert small.stats["indexed"] == 1 and USER not in small.cache._users


def test_recall_counts_are_patched_into_a_large_users_copy_not_loaded_again(many, funnel):
    """A touch flush (hits, last_accessed) moves the user's `touched`, not its `version`: the
    cached copy takes the new counts in, and answers stay those of scoring every memory."""
    cached, plain = pair(many, funnel, RecallConfig(k=10, budget=10_000))
    now = T0 + 50 * 86400
    rng = random.Random(5)
    assert_same(cached, plain, "noodles", now)
    loads = cached.cache.stats["miss"]
    for round_ in range(6):
        got = assert_same(cached, plain, rng.choice(QUERIES), now + round_)
        with Store(many) as store:
            before = store.db.execute("select version, touched from user_versions where user_id = ?", [USER]).fetchone()
            ids = [m["id"] for m in got] or [m["id"] for m in store.memories(USER)[:3]]
            store.touch(USER, {i: rng.randrange(1, 300) for i in ids}, int(now + round_))
            after = store.db.execute("select version, touched from user_versions where user_id = ?", [USER]).fetchone()
        assert after[0] == before[0] and after[1] > before[1]  # counts only: touched moved, version did not
        for query in random_queries(rng, 4):
            assert_same(cached, plain, query, now + round_ + 1)
    assert cached.cache.stats["miss"] == loads  # never loaded again
    assert cached.stats["retouched"] == 6


def test_any_other_change_moves_the_version(many):
    with Store(many) as store:
        def versions():
            return store.db.execute("select version, touched from user_versions where user_id = ?", [USER]).fetchone()

        memory = store.memories(USER)[0]
        start = versions()
        store.db.execute("update memories set content = content || ' too' where id = ?", [memory["id"]])
        changed = versions()
        assert changed[0] > start[0] and changed[1] == start[1]
        store.db.execute("update memories set hits = hits + 1, status = status where id = ?", [memory["id"]])
        touched = versions()
        assert touched[0] == changed[0] and touched[1] > changed[1]
        store.db.execute("update memories set hits = hits + 1, active = 0 where id = ?", [memory["id"]])
        assert versions()[0] > touched[0]  # counts and something else: a real change
