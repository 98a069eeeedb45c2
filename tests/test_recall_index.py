"""The term index behind recall for users with many memories (memo_mw.index).

It stays in step with the memories through every write (store, merge, supersede, touch, forget,
maintenance), forgetting leaves none of its terms in the database files, it keeps users apart,
and recall through it picks exactly what loading and scoring every memory picks.
"""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from memo_mw import defaults
from memo_mw import index_queries as queries
from memo_mw.funnel import Funnel
from memo_mw.index import memory_terms
from memo_mw.maintenance import maintain
from memo_mw.pipeline import Recaller
from memo_mw.recall import RecallConfig
from memo_mw.rules import load_rules
from memo_mw.store import Store, migrations
from memo_mw.topics import TopicTagger
from memo_mw.userstate import UserState, forget_marker

T0 = 1_700_000_000
LEXICON = {"food": ("noodles", "dumplings", "饺子", "火锅", "ice cream"), "sport": ("tennis", "网球", "跑步")}


def payload(content, key, *, polarity=1, user="u1", ts=T0, type_="preference", ttl_days=None, topics=(),
            language="en", message_id=None):
    return {
        "job_key": None, "user_id": user, "session_id": "s1", "ts": ts, "message_id": message_id,
        "candidates": [{"type": type_, "key": key, "polarity": polarity, "content": content,
                        "excerpt": f"original: {content}", "rule_id": "t.rule", "confidence": 0.7,
                        "ttl_days": ttl_days, "language": language, "topics": list(topics)}],
    }


def database_bytes(db: str) -> bytes:
    return b"".join(p.read_bytes() for p in Path(db).parent.iterdir() if p.name.startswith(Path(db).name))


def assert_in_step(db: str) -> None:
    """Every row's terms are exactly those of its text and tags; no term without its memory."""
    conn = sqlite3.connect(db)
    rows = conn.execute("select id, user_id, content, key, topics, terms_norm from memories").fetchall()
    import json
    for memory_id, user_id, content, key, topics, norm in rows:
        want, want_norm = memory_terms(content, key, json.loads(topics or "[]"))
        have = {t for (t,) in conn.execute("select term from memory_terms where memory_id = ? and user_id = ?",
                                            [memory_id, user_id])}
        assert have == want, (content, have ^ want)
        assert norm == pytest.approx(want_norm)
    assert conn.execute("select count(*) from memory_terms t left join memories m on m.id = t.memory_id"
                        " where m.id is null or m.user_id <> t.user_id").fetchone()[0] == 0
    conn.close()


def test_index_in_step_through_every_write(db):
    with Store(db) as store:
        store.remember(payload("likes zanzibarian noodles", "zanzibarian noodles", topics=["food"]))
        store.remember(payload("喜欢吃饺子", "饺子", language="zh"))
        store.remember(payload("plays quokkaball on sundays", "quokkaball", type_="task", ttl_days=1))
        store.remember(payload("likes jazz", "jazz", user="u2"))
        assert_in_step(db)
        assert store.remember(payload("likes zanzibarian noodles", "zanzibarian noodles", ts=T0 + 5)) == ["merged"]
        assert store.remember(payload("不喜欢吃饺子", "饺子", polarity=-1, language="zh", ts=T0 + 9)) == ["superseded"]
        assert_in_step(db)
        store.touch("u1", [m["id"] for m in store.memories("u1")], T0 + 20)
        assert_in_step(db)
        assert maintain(store, now=T0 + 2 * 86400)["expired"] == 1
        assert_in_step(db)
        assert maintain(store, now=T0 + 20 * 86400)["removed"] == 1  # quokkaball, never confirmed
        assert_in_step(db)
        assert b"quokkaball" not in database_bytes(db)
        assert store.forget("u1", match="zanzibarian noodles", ts=T0 + 30, reason="asked") == 1
        assert_in_step(db)
        assert b"zanzibarian" not in database_bytes(db)
        assert store.forget("u1", ts=T0 + 40, reason="asked") == 2  # 饺子, both statements
        assert_in_step(db)
        raw = database_bytes(db)
        assert "饺子".encode() not in raw and "饺".encode() not in raw
        assert b"jazz" in raw  # another user's memory and its terms stay
        conn = sqlite3.connect(db)
        assert {u for (u,) in conn.execute("select distinct user_id from memory_terms")} == {"u2"}


def test_a_changed_text_unindexes_the_memory_until_reindexed(db):
    with Store(db) as store:
        store.remember(payload("likes zanzibarian noodles", "zanzibarian noodles"))
        store.db.execute("update memories set content = 'likes quokka stew'")
        assert store.db.execute("select terms_norm from memories").fetchone()[0] is None
        assert store.db.execute("select count(*) from memory_terms").fetchone()[0] == 0
        assert store.reindex() == 1
        assert_in_step(db)


def test_migration_backfills_existing_memories(db):
    conn = sqlite3.connect(db)
    import sqlite_utils
    migrations.apply(sqlite_utils.Database(conn), stop_before="m003_memory_terms")
    conn.execute("insert into memories (user_id, type, key, polarity, content, excerpt, source_ts, status,"
                 " active, hits, created_at, topics) values ('u1', 'preference', '火锅', 1, '喜欢吃火锅', 'x',"
                 f" {T0}, 'active', 1, 0, {T0}, '[\"food\"]')")
    conn.commit()
    conn.close()
    Store(db).close()
    assert_in_step(db)
    conn = sqlite3.connect(db)
    assert {t for (t,) in conn.execute("select term from memory_terms")} >= {"火锅", "topic:food"}


# -- recall through the index ------------------------------------------------------------

EN_THINGS = ["oolong tea", "jazz", "bossa nova", "hiking", "tennis", "noodles", "dumplings", "ice cream",
             "sci-fi novels", "horror movies", "chess", "cycling", "sushi", "coffee", "red wine", "board games",
             "photography", "gardening", "yoga", "k-pop", "baking bread", "swimming", "camping", "opera"]
EN_PLACES = ["Paris", "Berlin", "Hangzhou", "Osaka", "Lisbon", "Denver", "Kyoto", "Austin"]
ZH_THINGS = ["乌龙茶", "爵士乐", "徒步", "网球", "火锅", "饺子", "冰淇淋", "科幻小说", "恐怖片", "围棋", "骑行",
             "寿司", "咖啡", "红酒", "桌游", "摄影", "园艺", "瑜伽", "跑步", "烘焙", "游泳", "露营", "京剧", "书法"]
ZH_PLACES = ["杭州", "北京", "成都", "西安", "大理", "青岛", "苏州", "厦门"]
QUERIES = ["what tea should I try", "any jazz or bossa nova tonight?", "plan a hiking trip near Denver",
           "我想吃火锅", "推荐几本科幻小说", "周末去哪里跑步", "what do you remember about me", "你记得我什么",
           "dinner ideas, maybe noodles", "tell me about chess openings", "晚上喝点红酒吗", "something else entirely",
           "I need a gift for someone who likes photography and yoga", "杭州有什么好玩的", "best sushi in Osaka"]


def fill(store: Store, user: str, n: int, rng: random.Random, ts: int = T0) -> None:
    with store.write():
        for i in range(n):
            zh = i % 2 == 1
            things, places = (ZH_THINGS, ZH_PLACES) if zh else (EN_THINGS, EN_PLACES)
            thing, place = rng.choice(things), rng.choice(places)
            kind = rng.randrange(5)
            if zh:
                content = [f"喜欢{thing}", f"不喜欢{thing}", f"在{place}{thing}", f"每周{thing}{i}次",
                           f"想去{place}{thing}"][kind]
            else:
                content = [f"likes {thing}", f"dislikes {thing}", f"{thing} in {place}", f"{thing} {i} times a week",
                           f"wants {thing} trip to {place}"][kind]
            topics = [t for t, words in LEXICON.items() if any(w in content.lower() for w in words)]
            type_ = "style" if i % 1000 == 5 else "task" if i % 200 == 3 else "preference"
            store.remember(payload(f"{content} #{i}" if rng.random() < 0.5 else content, f"{user}-slot-{i}",
                                   user=user, ts=ts + i * 600, type_=type_, language="zh" if zh else "en",
                                   ttl_days=30 if type_ == "task" else None,
                                   topics=topics if rng.random() < 0.7 else ()))
    ids = [m["id"] for m in store.memories(user)]
    for _ in range(n // 2):
        store.touch(user, rng.sample(ids, 3), ts + rng.randrange(n * 600))


@pytest.fixture
def big(db):
    rng = random.Random(7)
    with Store(db) as store:
        fill(store, "big", 420, rng)
        fill(store, "other", 60, rng)
        maintain(store, now=T0 + 40 * 86400)  # some tasks now await confirmation
    return db


def recallers(db, **kw):
    funnel = Funnel(load_rules())
    funnel.topics = TopicTagger(LEXICON)
    config = RecallConfig(k=10, budget=10_000)
    # The SQL term index: the in-process cache off (it would keep these users; see test_memcache_ranked).
    return (Recaller(db, funnel, config, indexed=True, cache_bytes=0, **kw),
            Recaller(db, funnel, config, indexed=False, cache_bytes=0))


def same(indexed: Recaller, plain: Recaller, user: str, query: str, now: float, state=None) -> list:
    kw = {"state": state} if state is not None else {}
    got = indexed.recall(user, query, now=now, **kw)
    want = plain.recall(user, query, now=now, **kw)
    assert [(m["id"], m["content"], m["score"]) for m in got] == [(m["id"], m["content"], m["score"]) for m in want], query
    return got


@pytest.mark.parametrize("candidates", [defaults.RECALL_INDEX_CANDIDATES, 3])
def test_indexed_recall_picks_what_loading_everything_picks(big, candidates):
    indexed, plain = recallers(big, index_candidates=candidates)
    with Store(big) as store:
        assert queries.active_count(store, "big") > defaults.RECALL_INDEX_MIN_MEMORIES
    for now in (T0 + 3 * 86400, T0 + 45 * 86400):
        for query in QUERIES:
            same(indexed, plain, "big", query, now)
    assert indexed.stats["indexed"] == 2 * len(QUERIES)
    if candidates == defaults.RECALL_INDEX_CANDIDATES:
        assert indexed.stats["fallback"] <= len(QUERIES) // 3, indexed.stats
    assert plain.stats["indexed"] == 0


def test_indexed_recall_with_pending_forgets_and_shown(big):
    indexed, plain = recallers(big)
    with Store(big) as store:
        rows = store.recall_candidates("big")
    confirm = [m["id"] for m in rows if m["status"] == "pending_confirm"]
    assert confirm
    slot = next(m for m in rows if m["content"].startswith("likes"))
    pending = [payload("dislikes " + slot["content"][6:], slot["key"], polarity=-1, user="big", ts=T0 + 50 * 86400),
               payload("喜欢吃火锅和饺子", "火锅和饺子", user="big", ts=T0 + 50 * 86400, language="zh")]
    state = UserState(pending, [forget_marker("tennis", T0 + 60 * 86400)], set(confirm[:1]))
    for query in QUERIES + [slot["content"], "tennis partner"]:
        got = same(indexed, plain, "big", query, T0 + 50 * 86400, state)
        assert not any("tennis" in m["content"] for m in got)


def test_users_never_see_each_other_through_the_index(big):
    with Store(big) as store:
        store.remember(payload("collects zanzibarian stamps", "zanzibarian stamps", user="other"))
        mine = {m["id"] for m in store.recall_candidates("big")}
        assert all(r["id"] in mine for r in queries.matches(store, "big", ["zanzibarian", "stamp", "tea"], []))
        assert queries.matches(store, "big", ["zanzibarian"], []) == []
    indexed, plain = recallers(big)
    got = same(indexed, plain, "big", "zanzibarian stamps", T0 + 3 * 86400)
    assert all(m["user_id"] == "big" for m in got)
    got = same(indexed, plain, "big", "what do you remember about me", T0 + 3 * 86400)
    assert got and all(m["user_id"] == "big" for m in got)


def test_rows_written_without_terms_are_still_recalled(big):
    conn = sqlite3.connect(big)
    conn.execute("insert into memories (user_id, type, key, polarity, content, excerpt, source_ts, status,"
                 f" active, hits, created_at) values ('big', 'fact', 'quokka', 1, 'keeps a quokka', 'x', {T0},"
                 f" 'active', 1, 0, {T0})")
    conn.commit()
    conn.close()
    indexed, plain = recallers(big)
    got = same(indexed, plain, "big", "how is my quokka", T0 + 3 * 86400)
    assert "keeps a quokka" in [m["content"] for m in got]


def test_few_memories_load_everything(db):
    with Store(db) as store:
        fill(store, "small", 20, random.Random(1))
    indexed, plain = recallers(db)
    for query in QUERIES:
        same(indexed, plain, "small", query, T0 + 3 * 86400)
    assert indexed.stats["indexed"] == 0


def test_memories_indexed_with_a_clitic_in_their_tokens_are_indexed_again(tmp_path):
    """m011: a database written when "John's" was the token john' gets those memories' terms made
    again, by maintenance in batches (not at start-up, which must not wait minutes on a large file),
    so the index finds "John's car" for a question about John."""
    db = str(tmp_path / "old.db")
    with Store(db) as store:
        store.remember(payload("John's car is red", "john's car"))
        store.remember(payload("Ana’s cat is grey", "ana’s cat", ts=T0 + 1))
        store.remember(payload("Leo＇s dog is old", "leo＇s dog", ts=T0 + 2))
        store.remember(payload("likes noodles", "noodles", ts=T0 + 3))
        assert store.db.execute("select count(*) from reindex_due").fetchone()[0] == 0  # a new file: none due
    conn = sqlite3.connect(db)
    with conn:  # the terms as they were written then
        for word in ("john", "ana", "leo"):
            conn.execute("update memory_terms set term = ? where term = ?", [word + "'", word])
        conn.execute("drop table reindex_due")
        conn.execute("delete from _sqlite_migrations where name = 'm011_reindex_apostrophes'")
    noodles = conn.execute("select memory_id from memory_terms where term = 'noodle'").fetchall()
    conn.close()
    with Store(db) as store:  # opening applies the migration: it only marks the work due
        assert store.db.execute("select count(*) from memory_terms where term like '%''%'").fetchone()[0] == 3
        assert store.reindex_due(batch=2) == 3  # two transactions
        assert store.reindex_due() == 0  # done, and the mark gone
        assert store.db.execute("select count(*) from reindex_due").fetchone()[0] == 0
    assert_in_step(db)
    conn = sqlite3.connect(db)
    assert conn.execute("select count(*) from memory_terms where term like '%''%'").fetchone()[0] == 0
    assert conn.execute("select memory_id from memory_terms where term = 'noodle'").fetchall() == noodles
    conn.close()
    with Store(db) as store:
        john = store.db.execute("select id from memories where content = ?", ["John's car is red"]).fetchone()[0]
        assert [m["id"] for m in queries.matches(store, "u1", ["john"], [])] == [john]


def test_the_reindex_after_m011_stops_at_its_budget_and_goes_on_later(tmp_path):
    db = str(tmp_path / "old.db")
    with Store(db) as store:
        for i in range(5):
            store.remember(payload(f"Tom's bike number {i}", f"tom's bike {i}", ts=T0 + i))
        store.db.execute("insert into reindex_due (name, after_id, until_id) values ('clitics', 0, 5)")
        assert store.reindex_due(batch=2, budget=0) == 0  # no time: nothing done, still due
        assert store.reindex_due(batch=2, budget=-1) == 0
        assert store.db.execute("select after_id from reindex_due").fetchone()[0] == 0
        assert store.reindex_due(batch=2) == 5
    assert_in_step(db)
