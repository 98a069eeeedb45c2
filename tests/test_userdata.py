"""What one user sees, corrects and deletes (memo_mw.userdata), called directly on a real SQLite
file: every function touches that user's rows only, and edited or deleted text leaves the files."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from memo_mw import userdata
from memo_mw.adapters import Turn
from memo_mw.funnel import Funnel
from memo_mw.middleware import remember_payload
from memo_mw.queue import LocalQueue
from memo_mw.rules import load_rules
from memo_mw.store import Store

T0 = 1_700_000_000
ALICE = ("I like running", "from now on answer in Chinese", "I play tennis every sunday", "我喜欢喝乌龙茶",
         "I'm not into running anymore")
BOB = ("I love zanzibarian oolong", "I live in Reykjavik")


@pytest.fixture(scope="module")
def funnel():
    return Funnel(load_rules(None))


def say(store, funnel, user, *messages, ts=T0):
    """Messages through the shipped rules into the store, as the worker writes them."""
    for i, text in enumerate(messages):
        turn = Turn("plain", text, None, "s", f"{user}-{ts + i}", ts + i)
        store.remember(remember_payload(funnel.process(text), user_id=user, turn=turn, ts=ts + i, received=ts + i))


@pytest.fixture
def store(db, funnel):
    with Store(db) as store:
        say(store, funnel, "alice", *ALICE)
        say(store, funnel, "bob", *BOB)
        yield store


def database_bytes(db: str) -> bytes:
    return b"".join(Path(db + s).read_bytes() for s in ("", "-wal", "-shm") if Path(db + s).exists())


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


def test_one_user_never_reaches_another_users_memories(store, db):
    before = contents(store, "bob")
    for bobs in [m["id"] for m in userdata.memories(store, "bob")]:
        assert userdata.edit(store, "alice", bobs, "hacked", at=T0, reason="t") is None
        assert userdata.delete(store, "alice", bobs, ts=T0, reason="t") is None
    assert contents(store, "bob") == before and store.audit("alice") == []
    exported = userdata.export(store, "alice", now=T0)
    assert b"zanzibarian" not in repr(exported).encode() and b"Reykjavik" not in repr(exported).encode()


def test_export_is_everything_about_the_user(store):
    userdata.delete(store, "alice", memory_id(store, "alice", "plays tennis every sunday"), ts=T0, reason="t")
    data = userdata.export(store, "alice", now=T0 + 5)
    assert set(data) == {"user_id", "generated_at", "memories", "audit", "insights", "topic_counts"}
    assert (data["user_id"], data["generated_at"]) == ("alice", T0 + 5)
    assert len(data["memories"]) == 4 and {m["status"] for m in data["memories"]} == {"active", "superseded"}
    assert [a["action"] for a in data["audit"]] == ["delete"]


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
