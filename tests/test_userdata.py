"""What one user sees, corrects and deletes (memo_mw.userdata), memories and chat history, called
directly on a real SQLite file: every function touches that user's rows only, and edited or deleted
text leaves the files."""

from __future__ import annotations

import time

import pytest

from memo_mw import userdata
from memo_mw.adapters import Turn
from memo_mw.funnel import Funnel
from memo_mw.middleware import remember_payload
from memo_mw.queue import LocalQueue
from memo_mw.rules import load_rules
from memo_mw.store import Store
from memo_mw.text import index_terms

from .conftest import database_bytes

pytestmark = pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)

T0 = 1_700_000_000
ALICE = ("I like running", "from now on answer in Chinese", "I play tennis every sunday", "我喜欢喝乌龙茶",
         "I'm not into running anymore")
BOB = ("I love zanzibarian oolong", "I live in Reykjavik")
#: Chat messages that state nothing to remember: they are only in the history.
ALICE_CHAT = ("What is the weather like in Lisbon", "Tell me a joke about penguins", "推荐一本关于长城的书")
BOB_CHAT = ("Translate quokka into French",)


@pytest.fixture(scope="module")
def funnel():
    return Funnel(load_rules(None))


def say(store, funnel, user, *messages, ts=T0, history=False):
    """Messages through the shipped rules into the store, as the worker writes them (``history``: kept there too)."""
    for i, text in enumerate(messages):
        turn = Turn("plain", text, None, "s", f"{user}-{ts + i}", ts + i)
        result = funnel.process(text)
        said = {"text": funnel.history_text(result), "days": None} if history else None
        store.remember(remember_payload(result, user_id=user, turn=turn, ts=ts + i, received=ts + i, history=said))


@pytest.fixture
def store(db, funnel):
    with Store(db) as store:
        say(store, funnel, "alice", *ALICE)
        say(store, funnel, "bob", *BOB)
        yield store


@pytest.fixture
def chats(store, funnel):
    """The store, with a chat history for alice and bob."""
    say(store, funnel, "alice", *ALICE_CHAT, ts=T0 + 10, history=True)
    say(store, funnel, "bob", *BOB_CHAT, ts=T0 + 20, history=True)
    return store


def memory_id(store, user, content):
    return next(m["id"] for m in userdata.memories(store, user) if m["content"] == content)


def contents(store, user):
    return sorted(m["content"] for m in userdata.memories(store, user))


@pytest.mark.parametrize("filters, expected", [
    pytest.param({}, ["answer style: answer in Chinese", "dislikes running", "likes running",
                      "plays tennis every sunday", "喜欢喝乌龙茶"], id="every-status"),
    pytest.param({"type": "fact"}, ["plays tennis every sunday"], id="type"),
    pytest.param({"status": "superseded"}, ["likes running"], id="status"),
    pytest.param({"status": "active", "type": "preference"}, ["dislikes running", "喜欢喝乌龙茶"], id="both"),
    pytest.param({"q": "RUNNING"}, ["dislikes running", "likes running"], id="q-case"),
    pytest.param({"q": "乌龙"}, ["喜欢喝乌龙茶"], id="q-chinese"),
    pytest.param({"q": "ＴＥＮＮＩＳ"}, ["plays tennis every sunday"], id="q-full-width"),
    pytest.param({"q": "oolong"}, [], id="q-another-users-word"),
    pytest.param({"q": "running", "status": "active"}, ["dislikes running"], id="q-and-status"),
])
def test_memories_are_the_users_own_filtered(store, filters, expected):
    found = userdata.memories(store, "alice", **filters)
    assert sorted(m["content"] for m in found) == expected
    assert all(m["user_id"] == "alice" for m in found)


def test_edit_replaces_the_line_and_the_old_wording_leaves_the_file(store, db):
    tennis = memory_id(store, "alice", "plays tennis every sunday")
    assert b"tennis every sunday" in database_bytes(db)
    outcome, memory = userdata.edit(store, "alice", tennis, "plays  jazz piano\non mondays", at=T0 + 100,
                                    reason="test", topics=["music"])
    assert outcome == "edited" and memory["id"] == tennis
    assert (memory["content"], memory["excerpt"], memory["topics"]) == ("plays jazz piano on mondays",) * 2 + (["music"],)
    assert b"tennis every sunday" not in database_bytes(db)
    assert [(a["action"], a["count"], a["reason"]) for a in store.audit("alice")] == [("edit", 1, "test")]
    assert userdata.edit(store, "alice", tennis, "plays jazz piano on mondays", at=T0 + 200,
                         reason="test") == ("unchanged", memory)


def test_edit_masks_personal_data(store, db):
    tennis = memory_id(store, "alice", "plays tennis every sunday")
    _, memory = userdata.edit(store, "alice", tennis, "plays tennis with bob@example.com", at=T0 + 100, reason="t")
    assert memory["content"] == "plays tennis with [email]"
    assert b"bob@example.com" not in database_bytes(db)


def test_edit_into_an_equal_memory_merges_them(store, db, funnel):
    say(store, funnel, "alice", "I like running", ts=T0 + 100)  # "likes running" active again
    kept = next(m for m in store.list("alice") if m["content"] == "likes running")
    edited = store.get("alice", memory_id(store, "alice", "plays tennis every sunday"))
    outcome, memory = userdata.edit(store, "alice", edited["id"], "Likes  running", at=T0 + 200, reason="t")
    assert outcome == "merged" and memory["id"] == kept["id"] and memory["status"] == "active"
    assert memory["hits"] == kept["hits"] + edited["hits"] + 1
    assert memory["source_ids"] == kept["source_ids"] + edited["source_ids"]
    assert store.get("alice", edited["id"]) is None and b"tennis every sunday" not in database_bytes(db)
    assert [a["action"] for a in store.audit("alice")] == ["edit_merge"]


def test_delete_is_physical_and_audited(store, db):
    tennis = memory_id(store, "alice", "plays tennis every sunday")
    assert userdata.delete(store, "alice", tennis, ts=T0, reason="test")["content"] == "plays tennis every sunday"
    assert store.get("alice", tennis) is None and b"tennis every sunday" not in database_bytes(db)
    assert [(a["action"], a["count"]) for a in store.audit("alice")] == [("delete", 1)]
    assert userdata.delete(store, "alice", tennis, ts=T0, reason="test") is None


def test_one_user_never_reaches_another_users_memories(chats, db):
    store = chats
    before = contents(store, "bob")
    for bobs in [m["id"] for m in userdata.memories(store, "bob")]:
        assert userdata.edit(store, "alice", bobs, "hacked", at=T0, reason="t") is None
        assert userdata.delete(store, "alice", bobs, ts=T0, reason="t") is None
    for bobs in [m["id"] for m in userdata.history(store, "bob")]:
        assert userdata.delete_history(store, "alice", bobs, ts=T0, reason="t") == 0
    assert contents(store, "bob") == before and store.audit("alice") == []
    assert [m["text"] for m in userdata.history(store, "bob")] == list(BOB_CHAT)
    exported = repr(userdata.export(store, "alice", now=T0)).encode()
    assert not [word for word in (b"zanzibarian", b"Reykjavik", b"quokka") if word in exported]


def test_export_is_everything_about_the_user(chats):
    store = chats
    userdata.delete(store, "alice", memory_id(store, "alice", "plays tennis every sunday"), ts=T0, reason="t")
    data = userdata.export(store, "alice", now=T0 + 5)
    assert set(data) == {"user_id", "generated_at", "memories", "history", "history_enabled", "audit", "insights",
                         "topic_counts"}
    assert (data["user_id"], data["generated_at"]) == ("alice", T0 + 5)
    assert len(data["memories"]) == 4 and {m["status"] for m in data["memories"]} == {"active", "superseded"}
    assert [(m["text"], m["ts"], m["session_id"]) for m in data["history"]] == [
        (text, T0 + 10 + i, "s") for i, text in enumerate(ALICE_CHAT)]
    assert data["history"][0]["message_id"] == f"alice-{T0 + 10}" and data["history_enabled"] is True
    assert [a["action"] for a in data["audit"]] == ["delete"]
    userdata.set_history(store, "alice", False, ts=T0 + 6, reason="t")
    assert userdata.export(store, "alice", now=T0 + 7)["history_enabled"] is False


# -- chat history ---------------------------------------------------------------------

def history_texts(store, user, **filters):
    return [m["text"] for m in userdata.history(store, user, **filters)]


@pytest.mark.parametrize("q, expected", [
    pytest.param(None, list(ALICE_CHAT), id="all"),
    pytest.param("PENGUIN", ["Tell me a joke about penguins"], id="q-case"),
    pytest.param("长城", ["推荐一本关于长城的书"], id="q-chinese"),
    pytest.param("ｌｉｓｂｏｎ", ["What is the weather like in Lisbon"], id="q-full-width"),
    pytest.param("quokka", [], id="q-another-users-word"),
])
def test_history_is_the_users_own_filtered(chats, q, expected):
    found = userdata.history(chats, "alice", q=q)
    assert [m["text"] for m in found] == expected
    assert all(set(m) == {"id", "session_id", "message_id", "ts", "text"} for m in found)


def test_delete_one_history_message_is_physical_and_audited(chats, db):
    penguins = next(m["id"] for m in userdata.history(chats, "alice") if "penguins" in m["text"])
    term = index_terms("alice", ["penguin"])[0].encode()
    assert b"penguins" in database_bytes(db) and term in database_bytes(db)
    assert userdata.delete_history(chats, "alice", penguins, ts=T0 + 30, reason="test") == 1
    assert b"penguins" not in database_bytes(db) and term not in database_bytes(db)
    assert history_texts(chats, "alice") == [ALICE_CHAT[0], ALICE_CHAT[2]]
    assert [(a["action"], a["count"], a["reason"]) for a in chats.audit("alice")] == [("delete_history", 1, "test")]
    assert userdata.delete_history(chats, "alice", penguins, ts=T0 + 31, reason="test") == 0
    assert len(chats.audit("alice")) == 1  # nothing deleted, nothing audited


def test_delete_all_history_is_the_users_own(chats, db):
    assert userdata.delete_history(chats, "alice", ts=T0 + 30, reason="test") == 3
    assert history_texts(chats, "alice") == [] and history_texts(chats, "bob") == list(BOB_CHAT)
    assert not [word for word in (b"Lisbon", b"penguins", "长城".encode()) if word in database_bytes(db)]
    assert [(a["action"], a["count"]) for a in chats.audit("alice")] == [("delete_history", 3)]
    assert len(contents(chats, "alice")) == 5  # the memories stay
    assert userdata.history_enabled(chats, "alice") is True  # deleting is not turning it off


def test_turning_history_off_deletes_it_and_keeps_nothing_more(chats, db, funnel):
    assert userdata.set_history(chats, "alice", False, ts=T0 + 30, reason="test") == 3
    assert userdata.history_enabled(chats, "alice") is False and userdata.history_enabled(chats, "bob") is True
    assert b"Lisbon" not in database_bytes(db)
    assert [(a["action"], a["count"]) for a in chats.audit("alice")] == [("delete_history", 3)]
    say(chats, funnel, "alice", "Any news about the comet", ts=T0 + 40, history=True)
    assert history_texts(chats, "alice") == [] and b"comet" not in database_bytes(db)
    assert userdata.set_history(chats, "alice", True, ts=T0 + 50, reason="test") == 0
    say(chats, funnel, "alice", "Any news about the eclipse", ts=T0 + 60, history=True)
    assert history_texts(chats, "alice") == ["Any news about the eclipse"]
    assert len(chats.audit("alice")) == 1


def test_without_a_queue_nothing_waits():
    assert userdata.forget_waiting(None, "alice", None, T0, T0) is True
    assert userdata.pending(None, "alice") == []
    userdata.drop_pending_slot(None, "alice", "running", T0)  # nothing to reach: no error


def test_an_edit_takes_the_slot_out_of_the_pending_memories(funnel):
    queue = LocalQueue()
    try:
        late = remember_payload(funnel.process("I live in Springfield"), user_id="alice",
                                turn=Turn("plain", "I live in Springfield", None, "s", None, T0), ts=T0, received=T0)
        other = remember_payload(funnel.process("I love jazz"), user_id="alice",
                                 turn=Turn("plain", "I love jazz", None, "s", None, T0), ts=T0, received=T0)
        for payload in (late, other):
            queue.state.put_pending("alice", payload)
        userdata.drop_pending_slot(queue, "alice", late["candidates"][0]["key"], time.time())
        assert [p["job_key"] for p in userdata.pending(queue, "alice")] == [other["job_key"]]
    finally:
        queue.close()
