"""Chat history: what is kept (masked, never sensitive, never for a user who turned it off), how
long, how it is forgotten, and multi-session replays through the middleware where a later question
brings back the right past message and the right memory, in both languages (embedded and with a
real rq worker)."""

import pytest
from flask import Flask, jsonify, request

from memo_mw import MemoryMiddleware, history, jobs
from memo_mw.recall import HISTORY
from memo_mw.store import Store
from memo_mw.text import nfkc, tokens

from .conftest import drain
from .test_store import database_bytes

pytestmark = pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)

T0 = 1_700_000_000
DAY = 86400


def chat_app():
    app = Flask(__name__)

    @app.post("/chat")
    def chat():
        return jsonify(block=request.environ.get("memo.block", ""), past=request.environ.get("memo.history", []),
                       memories=[m["content"] for m in request.environ.get("memo.memories", [])])

    return app


class Chat:
    """A user's chat through the middleware, one message an hour from T0 (the clock moves with it)."""

    def __init__(self, db, redis_url=None, **options):
        self.now, self.redis_url = T0, redis_url
        app = chat_app()
        app.wsgi_app = self.middleware = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url,
                                                          rules_reload_interval=None, clock=lambda: self.now,
                                                          trust_user_header=True, **options)
        self.client = app.test_client()

    def say(self, message, *, session="s1", user="alice", message_id=None):
        self.now += 3600
        body = {"message": message, "session_id": session, "ts": self.now, "message_id": message_id}
        reply = self.client.post("/chat", json=body, headers={"X-User-Id": user})
        assert reply.status_code == 200
        return reply.json

    def settle(self):
        if self.redis_url:
            drain(self.redis_url)
        else:
            self.middleware.queue.join()


def kept(db, user="alice"):
    with Store(db) as store:
        return [m["text"] for m in history.rows(store.db, user)]


# -- replays through the middleware ----------------------------------------------------------------

REPLAYS = {
    "en": (["Last weekend I finally visited my grandmother's village in Yorkshire",
            "My neighbour plays the trumpet at night",
            "I like jazz"],
           "What was the village I visited called again?", "grandmother's village",
           "Recommend an album for tonight", "likes jazz"),
    "zh": (["上周末我终于回了一趟外婆住的村子，在江西",
            "楼下邻居每天晚上都吹小号",
            "我喜欢爵士乐"],
           "我上次去的那个村子在哪个省来着？", "外婆住的村子",
           "今晚听点什么爵士乐好", "喜欢爵士乐"),
}


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("worker", ["embedded", "rq"])
def test_a_later_session_brings_back_the_right_message_and_memory(lang, worker, db, request):
    redis_url = request.getfixturevalue("redis_url") if worker == "rq" else None
    said, question, line, ask_memory, memory = REPLAYS[lang]
    chat = Chat(db, redis_url)
    for message in said:
        chat.say(message, session="monday")
    chat.settle()
    reply = chat.say(question, session="friday")
    assert [p["content"] for p in reply["past"]] == [said[0].replace("，", ",")]  # kept as NFKC, PII masked
    assert HISTORY in reply["block"] and line in reply["block"]
    assert reply["past"][0]["type"] == "history" and reply["past"][0]["source_session"] == "monday"
    reply = chat.say(ask_memory, session="friday")
    assert memory in reply["memories"]
    assert memory not in " ".join(p["content"] for p in reply["past"])  # a memory is not said twice
    chat.settle()
    assert kept(db) == [nfkc(m) for m in (*said, question, ask_memory)]


def test_the_current_sessions_last_turns_are_not_brought_back(db):
    chat = Chat(db)
    chat.say("My neighbour plays the trumpet at night")
    chat.settle()
    assert chat.say("how do I soundproof against a trumpet?")["past"] == []  # the app has this turn
    chat.settle()
    assert {p["content"] for p in chat.say("trumpet noise again", session="s2")["past"]} == {
        "My neighbour plays the trumpet at night", "how do I soundproof against a trumpet?"}


def test_sensitive_messages_are_never_kept_and_pii_is_masked(db):
    chat = Chat(db)
    chat.say("I was diagnosed with diabetes last year. What should I cook tonight?")
    chat.say("我有抑郁症，最近睡不好")
    chat.say("call me on 13812345678 about the trumpet")
    chat.say("forget that I like jazz")
    chat.settle()
    assert kept(db) == ["call me on [phone] about the trumpet"]
    assert b"diabetes" not in database_bytes(db) and b"13812345678" not in database_bytes(db)


def test_history_off_keeps_nothing_and_recalls_nothing(db):
    chat = Chat(db, history=False)
    chat.say("My neighbour plays the trumpet at night")
    chat.settle()
    assert kept(db) == [] and chat.say("trumpet noise again", session="s2")["past"] == []
    assert b"trumpet" not in database_bytes(db)


def test_a_user_who_turned_history_off_has_none_stored(db):
    chat = Chat(db)
    chat.say("My neighbour plays the trumpet at night")
    chat.say("Bob's neighbour plays drums", user="bob")
    chat.settle()
    with Store(db) as store:
        assert history.set_enabled(store.db, "alice", False, ts=T0) == 1  # what was kept goes too
        store.vacuum_deleted()
    chat.say("My other neighbour plays the tuba")
    chat.settle()
    assert kept(db) == [] and kept(db, "bob") == ["Bob's neighbour plays drums"]
    assert b"tuba" not in database_bytes(db) and b"trumpet" not in database_bytes(db)
    with Store(db) as store:
        history.set_enabled(store.db, "alice", True, ts=T0)
    chat.say("The tuba again")
    chat.settle()
    assert kept(db) == ["The tuba again"]


@pytest.mark.parametrize("forget, left", [
    pytest.param("forget everything you know about me", [], id="en-all"),
    pytest.param("forget what I said about the trumpet", ["I like jazz"], id="en-match"),
    pytest.param("把我说过的都忘了", [], id="zh-all"),
])
def test_forget_requests_cover_the_history(forget, left, db, redis_url):
    chat = Chat(db, redis_url)
    chat.say("My neighbour plays the trumpet at night")
    chat.say("I like jazz")
    chat.say("The trumpet player lives upstairs", user="bob")
    chat.settle()
    chat.say(forget)
    chat.settle()
    assert kept(db) == left and kept(db, "bob") == ["The trumpet player lives upstairs"]
    if not left:
        assert b"at night" not in database_bytes(db)


def test_a_message_waiting_for_its_job_is_not_kept_after_a_forget_request(db, redis_url):
    chat = Chat(db, redis_url)
    chat.say("My neighbour plays the trumpet at night")
    chat.say("forget everything")  # before the worker ran the first job
    chat.settle()
    assert kept(db) == []


def test_retention_is_fixed_as_a_message_is_written_and_pruned_by_maintenance(db):
    chat = Chat(db, history_days=1)
    chat.say("My neighbour plays the trumpet at night")
    chat.settle()
    assert kept(db) == ["My neighbour plays the trumpet at night"]
    chat.now += 2 * DAY  # past the day: no longer recalled, even before maintenance runs
    assert chat.say("trumpet again", session="s2")["past"] == []
    assert jobs.maintain(db, chat.now)["history_pruned"] == 1
    assert b"at night" not in database_bytes(db)


# -- the pieces -------------------------------------------------------------------------------------

def add(store, text, *, ts=T0, user="alice", session="s", days=None):
    payload = {"user_id": user, "ts": ts, "session_id": session, "message_id": f"m{ts}",
               "history": {"text": text, "days": days}}
    return history.add(store.db, payload)


def test_search_scores_bm25_from_the_users_own_counts(db):
    with Store(db) as store:
        add(store, "the trumpet upstairs, my neighbour and the trumpet again", ts=T0)
        add(store, "my trumpet teacher is nice", ts=T0 + 1)
        add(store, "my neighbour's cat", ts=T0 + 2)
        for n in range(20):  # another user's messages change nothing of alice's figures
            add(store, f"trumpet {n}", ts=T0 + 3 + n, user="bob")
        found = history.search(store.db, "alice", tokens("neighbour trumpet teacher"), now=T0 + 99, session_id="x")
        by_text = {m["text"][:12]: m for m in found}
        assert set(by_text) == {"the trumpet ", "my trumpet t", "my neighbour"}
        assert by_text["my trumpet t"]["bm25"] > by_text["the trumpet "]["bm25"] > by_text["my neighbour"]["bm25"] > 0
        assert by_text["my trumpet t"]["match"] > 0.5 > by_text["my neighbour"]["match"]
        assert history.search(store.db, "alice", tokens("violin"), now=T0 + 99, session_id="x") == []


def test_rank_needs_enough_of_the_request_skips_what_a_memory_says_and_keeps_a_budget():
    query = tokens("which trumpet teacher did I mention")
    found = [{"id": i, "text": text, "ts": T0, "bm25": 2.0 - i, "match": match, "words": " ".join(tokens(text)),
              "session_id": "s", "message_id": None}
             for i, (text, match) in enumerate([("my trumpet teacher is called Ann", 0.9), ("I like the trumpet", 0.5),
                                                ("trumpet teacher " + "word " * 300, 0.9), ("a teacher", 0.1)])]
    chosen = history.rank(found, query, now=T0, budget=40)
    assert [m["id"] for m in chosen] == [0, 1]  # the third does not fit the budget, the fourth matches too little
    assert [m["id"] for m in history.rank(found, query, now=T0, said=["my trumpet teacher is called Ann"])] == [1, 2]
    assert len(history.rank(found[2:], query, now=T0)[0]["text"]) <= 200


def test_a_long_message_is_cut_to_its_best_sentence():
    text = "I went shopping. " * 20 + "My trumpet teacher is called Ann. " + "Then lunch. " * 20
    assert history.excerpt(text, tokens("trumpet teacher")) == "My trumpet teacher is called Ann."
    assert history.excerpt("short one", tokens("x")) == "short one"


def test_approx_tokens_counts_words_characters_and_marks():
    assert history.approx_tokens("I like jazz.") == 4
    assert history.approx_tokens("我喜欢爵士乐") == 6
