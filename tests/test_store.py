"""The store, on both engines: dedup, supersession, touch, search, edit, forget, delete."""

from __future__ import annotations

import time

import pytest

from memo_mw import jobs
from memo_mw.maintenance import maintain
from memo_mw.store import Store
from memo_mw.text import index_terms
from memo_mw.text import tokens

from .conftest import database_bytes

pytestmark = pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)

T0 = 1_700_000_000


def candidate(content, key, *, polarity=1, type_="preference", ttl_days=None, topics=(), language="en"):
    return {"type": type_, "key": key, "polarity": polarity, "content": content, "excerpt": f"original: {content}",
            "rule_id": "t.rule", "confidence": 0.7, "ttl_days": ttl_days, "language": language,
            "topics": list(topics)}


def payload(content, key, *, user="u1", ts=T0, job_key=None, message_id=None, received=None, **fields):
    """A ``remember`` job's payload with one candidate; ``received``: the server's time of the message."""
    out = {"job_key": job_key, "user_id": user, "session_id": "s1", "ts": ts, "message_id": message_id,
           "candidates": [candidate(content, key, **fields)]}
    if received is not None:
        out["received"] = received
    return out


def contents(memories):
    return [m["content"] for m in memories]


# -- remember: dedup, supersession, idempotent jobs -------------------------------------------

def test_the_same_statement_again_merges(db):
    with Store(db) as store:
        assert store.remember(payload("likes jazz", "jazz", message_id="a")) == ["stored"]
        assert store.remember(payload("Likes  jazz!", "jazz", ts=T0 + 100, message_id="b")) == ["merged"]
        (memory,) = store.list("u1", include_inactive=True)
    assert memory["hits"] == 1 and memory["confidence"] == pytest.approx(0.8)
    assert memory["source_ts"] == T0 + 100 and memory["source_ids"] == ["a", "b"]


@pytest.mark.parametrize("first, second", [
    pytest.param(("喜欢喝咖啡", 1), ("不喜欢喝咖啡", -1), id="zh-opposite"),
    pytest.param(("likes running", 1), ("dislikes running", -1), id="en-opposite"),
    pytest.param(("lives in Berlin", 1), ("lives in Paris", 1), id="en-new-value"),
])
def test_a_newer_statement_supersedes_and_the_older_is_kept(db, first, second):
    with Store(db) as store:
        store.remember(payload(first[0], "slot", polarity=first[1]))
        assert store.remember(payload(second[0], "slot", polarity=second[1], ts=T0 + 500)) == ["superseded"]
        active = store.list("u1")
        everything = store.list("u1", include_inactive=True)
    assert contents(active) == [second[0]]
    (old,) = [m for m in everything if m["content"] == first[0]]
    assert old["status"] == "superseded" and old["active"] is False and old["superseded_by"] == active[0]["id"]


def test_a_late_job_does_not_override_a_newer_statement(db):
    """A retried or spooled job of an older statement runs after a newer one: the newer stays."""
    with Store(db) as store:
        store.remember(payload("lives in Paris", "home", ts=T0 + 500))
        assert store.remember(payload("lives in Berlin", "home", ts=T0)) == ["outdated"]
        assert contents(store.list("u1")) == ["lives in Paris"]
        (late,) = [m for m in store.list("u1", include_inactive=True) if m["content"] == "lives in Berlin"]
    assert late["status"] == "superseded"


def test_a_deletion_by_the_user_stops_the_same_statement_still_waiting(db):
    """A statement read before the user deleted its memory on the page, whose job runs after."""
    with Store(db) as store:
        store.remember(payload("likes jazz", "jazz", received=time.time() - 5))
        (memory,) = store.list("u1")
        assert store.delete("u1", [memory["id"]], ts=T0 + 10) == 1
        assert store.remember(payload("likes jazz", "jazz", ts=T0 + 1, received=time.time() - 3)) == ["discarded"]
        assert store.remember(payload("likes jazz", "jazz", ts=T0 + 20, received=time.time() + 1)) == ["stored"]


def test_a_job_key_makes_remember_idempotent(db):
    assert jobs.remember(db, payload("likes tea", "tea", job_key="k1")) == ["stored"]
    assert jobs.remember(db, payload("likes tea", "tea", job_key="k1")) == ["duplicate_job"]
    with Store(db) as store:
        (memory,) = store.list("u1")
    assert memory["hits"] == 0


def test_a_task_expires_after_its_ttl(db):
    jobs.remember(db, payload("next time: book review", "book review", type_="task", ttl_days=30))
    with Store(db) as store:
        (memory,) = store.list("u1")
    assert memory["expires_at"] == T0 + 30 * 86400


def test_touch_counts_only_the_users_own_memories(db):
    jobs.remember(db, payload("likes tea", "tea", user="u1"))
    jobs.remember(db, payload("likes tea", "tea", user="u2"))
    with Store(db) as store:
        (mine,), (theirs,) = store.list("u1"), store.list("u2")
        assert jobs.touch(db, "u1", [mine["id"], theirs["id"]], T0 + 900) == 1
        assert store.touch("u1", [mine["id"], mine["id"]], T0 + 800) == 1  # recalled once, counted once
        mine, theirs = store.get("u1", mine["id"]), store.get("u2", theirs["id"])
    assert (mine["hits"], mine["last_accessed"]) == (2, T0 + 900)  # the latest use stays the latest
    assert (theirs["hits"], theirs["last_accessed"]) == (0, None)


def test_one_user_never_reads_or_deletes_another_users_memories(db):
    with Store(db) as store:
        store.remember(payload("likes tea", "tea", user="u1"))
        store.remember(payload("likes jazz", "jazz", user="u2"))
        (theirs,) = store.list("u2")
        assert store.get("u1", theirs["id"]) is None
        assert store.search("u1", tokens("tea jazz")) and contents(store.search("u1", tokens("jazz"))) == []
        assert store.edit("u1", theirs["id"], "likes polka", at=T0) is None
        assert store.delete("u1", [theirs["id"]], ts=T0) == 0
        assert contents(store.list("u2")) == ["likes jazz"]
        assert [m["user_id"] for m in store.list()] == ["u1", "u2"]


# -- search -------------------------------------------------------------------------------------

def test_search_reads_only_the_users_own_memories_of_a_common_word(db):
    with Store(db) as store:
        crowd = {"job_key": None, "user_id": "crowd", "session_id": "s", "ts": T0, "message_id": None,
                 "candidates": [candidate(f"likes coffee number {i}", f"coffee {i}") for i in range(3000)]}
        assert set(store.remember(crowd)) == {"stored"}
        store.remember(payload("likes coffee", "coffee", user="u1"))
        store.remember(payload("drinks coffee at dawn", "dawn coffee", user="u1", ts=T0 + 1))
        found = store.search("u1", tokens("any coffee tips?"), limit=5)
        assert sorted(contents(found)) == ["drinks coffee at dawn", "likes coffee"]
        assert len(store.search("crowd", tokens("coffee"), limit=5)) == 5


def test_search_puts_the_best_match_first_and_skips_superseded_memories(db):
    with Store(db) as store:
        for n in range(30):  # an old slot said over and over: superseded memories with the word
            store.remember(payload(f"plays chess at club {n}", "chess", ts=T0 + n))
        store.remember(payload("likes chess problems", "chess problems", ts=T0 + 100))
        store.remember(payload("reads chess books about chess openings", "chess books", ts=T0 + 101))
        found = store.search("u1", tokens("chess openings"), limit=3)
    assert contents(found)[0] == "reads chess books about chess openings"
    assert sorted(contents(found)) == ["likes chess problems", "plays chess at club 29",
                                       "reads chess books about chess openings"]


@pytest.mark.parametrize("stored, query", [
    pytest.param("喜欢喝美式咖啡", "推荐一杯咖啡", id="zh-bigram"),
    pytest.param("住在杭州西湖区", "杭州有什么好吃的", id="zh-place"),
    pytest.param("likes playing tennis", "any tennis tips?", id="en-word"),
    pytest.param("喜欢听jazz", "recommend some jazz", id="mixed"),
])
def test_search_matches_words_and_chinese_bigrams(db, stored, query):
    with Store(db) as store:
        store.remember(payload(stored, stored))
        store.remember(payload("has a cat", "cat", language="zh"))
        assert contents(store.search("u1", tokens(query))) == [stored]


def test_search_matches_topics(db):
    with Store(db) as store:
        store.remember(payload("doesn't eat pork", "pork", polarity=-1, topics=["food"]))
        store.remember(payload("likes jazz", "jazz", topics=["music"]))
        assert contents(store.search("u1", ["lunch", "topic:food"])) == ["doesn't eat pork"]
        assert contents(store.search("u1", ["food"])) == []  # a topic is not a word


def test_search_always_includes_style_and_memories_awaiting_confirmation(db):
    with Store(db) as store:
        store.remember(payload("answers in English", "style:language", type_="style"))
        store.remember(payload("renew the passport", "passport", type_="task", ttl_days=1))
        store.remember(payload("likes jazz", "jazz"))
        store.remember(payload("likes tea", "tea", ts=T0 + 10))
        assert contents(store.search("u1", tokens("jazz"))) == ["likes jazz", "answers in English"]
        maintain(store, now=T0 + 86400)  # the task expires: it awaits a confirmation
        found = store.search("u1", tokens("weather"))
        assert sorted(contents(found)) == ["answers in English", "renew the passport"]
        (task,) = [m for m in found if m["status"] == "pending_confirm"]
        store.touch("u1", [task["id"]], T0 + 2 * 86400)  # asked about once: not again
        assert contents(store.search("u1", tokens("weather"))) == ["answers in English"]
        assert contents(store.search("u2", tokens("jazz"))) == []


def test_search_everything_gives_the_latest_recallable_memories(db):
    with Store(db) as store:
        for n, (content, key) in enumerate([("likes jazz", "jazz"), ("likes tea", "tea"), ("likes golf", "golf"),
                                            ("dislikes golf", "golf")]):
            store.remember(payload(content, key, ts=T0 + n, polarity=-1 if content.startswith("dis") else 1))
        store.remember(payload("likes chess", "chess", user="u2"))
        assert contents(store.search("u1", [], everything=True)) == ["dislikes golf", "likes tea", "likes jazz"]
        assert contents(store.search("u1", [], everything=True, limit=2)) == ["dislikes golf", "likes tea"]
        assert store.search("u1", []) == []


# -- edit -----------------------------------------------------------------------------------------

def test_an_edit_is_found_by_its_new_words_and_leaves_no_old_ones(db):
    with Store(db) as store:
        store.remember(payload("likes zanzibarian oolong", "oolong"))
        (memory,) = store.list("u1")
        edited = store.edit("u1", memory["id"], "likes sencha", at=T0 + 10.5)
        assert (edited["content"], edited["key"], edited["updated_at"]) == ("likes sencha", "oolong", T0 + 10)
        assert contents(store.search("u1", tokens("sencha"))) == ["likes sencha"]
        assert store.search("u1", tokens("zanzibarian")) == []
    assert index_terms("u1", ["zanzibarian"])[0].encode() not in database_bytes(db)


def test_an_edit_marker_discards_what_was_said_of_the_slot_before_it_only(db):
    at = T0 + 100.5
    with Store(db) as store:
        store.remember(payload("likes tea", "tea", ts=T0))
        (memory,) = store.list("u1")
        store.edit("u1", memory["id"], "likes white tea", at=at)
        assert store.remember(payload("likes green tea", "tea", ts=T0 + 50)) == ["discarded"]  # no receipt: ts
        # Read by the server before the edit, whatever time its client gave it.
        assert store.remember(payload("likes black tea", "tea", received=at - 0.1, ts=T0 + 200)) == ["discarded"]
        assert store.remember(payload("likes black tea", "tea", received=at + 0.1, ts=T0)) == ["superseded"]
        assert store.remember(payload("likes jazz", "jazz", ts=T0 + 50)) == ["stored"]  # another slot
        assert store.remember(payload("likes oolong tea", "tea", user="u2", ts=T0 + 50)) == ["stored"]
        assert contents(store.list("u1")) == ["likes black tea", "likes jazz"]
        # Markers older than a job can wait go when the next edit is written.
        (jazz,) = [m for m in store.list("u1") if m["key"] == "jazz"]
        store.edit("u1", jazz["id"], "likes bebop", at=at + 9 * 86400)
        assert store.remember(payload("likes green tea", "tea", received=at - 1, ts=T0)) == ["superseded"]


# -- forget and delete --------------------------------------------------------------------------

def test_forget_is_physical_and_audited(db):
    jobs.remember(db, payload("plays tennis every sunday", "tennis"))
    jobs.remember(db, payload("likes zanzibarian oolong", "oolong"))
    jobs.remember(db, payload("likes zanzibarian oolong", "oolong", user="u2"))
    tennis_term = index_terms("u1", ["tennis"])[0].encode()
    assert b"tennis" in database_bytes(db) and tennis_term in database_bytes(db)
    assert jobs.forget(db, "u1", "I play tennis", T0 + 999) == 1
    with Store(db) as store:
        assert contents(store.list("u1")) == ["likes zanzibarian oolong"]
    assert jobs.forget(db, "u1", None, T0 + 1000) == 1
    with Store(db) as store:
        assert store.list("u1", include_inactive=True) == []
        assert contents(store.list("u2")) == ["likes zanzibarian oolong"]  # never another user's
        assert [(a["action"], a["count"], a["reason"]) for a in store.audit("u1")] == [
            ("forget_match", 1, "user request"), ("forget_all", 1, "user request")]
        assert store.audit("u2") == []
    raw = database_bytes(db)
    assert b"tennis" not in raw and tennis_term not in raw  # the row, the index entry, the WAL
    assert b"zanzibarian" in raw  # u2's
    jobs.forget(db, "u2", None, T0 + 1001)
    assert b"zanzibarian" not in database_bytes(db)


def test_delete_is_physical_and_audited(db):
    with Store(db) as store:
        store.remember(payload("plays the theremin", "theremin"))
        store.remember(payload("likes tea", "tea"))
        theremin, _ = store.list("u1")
        assert store.delete("u1", [theremin["id"], 12345], ts=T0 + 5, reason="page") == 1
        assert contents(store.list("u1")) == ["likes tea"]
        assert store.audit("u1") == [{"action": "delete", "count": 1, "at": T0 + 5, "reason": "page"}]
        assert store.search("u1", tokens("theremin")) == []
    assert b"theremin" not in database_bytes(db)


def test_a_statement_older_than_forget_everything_is_discarded(db):
    with Store(db) as store:
        store.forget("u1", ts=T0 + 500, reason="user request")
        assert store.remember(payload("likes jazz", "jazz", ts=T0 + 400, job_key="late")) == ["discarded"]
        assert store.remember(payload("likes jazz", "jazz", ts=T0 + 600, job_key="new")) == ["stored"]
        assert store.remember(payload("likes tea", "tea", user="u2", ts=T0 + 400)) == ["stored"]


def test_forget_markers_order_statements_by_the_servers_receipt_time(tmp_path):
    """A marker with the server's time (a page deletion, a chat forget the middleware read)
    meets a payload's receipt time; the client times (ts) order only what lacks either."""
    at = T0 + 100.5
    with Store(tmp_path / "m.db") as store:
        store.forget("u1", match="likes green tea", ts=int(at), at=at, reason="test")
        # Read before the request, from a client a year ahead: forgotten.
        assert store.remember(payload("likes green tea", "tea", received=at - 0.1, ts=int(at) + 365 * 86400)) == [
            "discarded"]
        # Read after it, from a client a day behind: stored.
        assert store.remember(payload("likes green tea", "tea", received=at + 0.1, ts=int(at) - 86400)) == ["stored"]
        assert store.remember(payload("likes green tea", "tea", user="u2", received=at - 1)) == ["stored"]
    with Store(tmp_path / "m2.db") as store:  # no receipt time (a replay): the client's ts
        store.forget("u1", match="likes green tea", ts=int(at), at=at, reason="test")
        assert store.remember(payload("likes green tea", "tea", ts=int(at) - 10)) == ["discarded"]
        assert store.remember(payload("likes green tea", "tea", ts=int(at) + 10)) == ["stored"]


def test_forget_all_with_the_servers_time_orders_statements_by_receipt(db):
    at = T0 + 100.5
    with Store(db) as store:
        assert store.remember(payload("likes jazz", "jazz")) == ["stored"]
        assert store.remember(payload("likes bebop", "bebop", ts=int(at) + 365 * 86400)) == ["stored"]  # clock ahead
        # A (late) job's forget spares what its client said after it; one carried out now does not.
        assert store.forget("u1", ts=int(at), reason="test") == 1
        assert contents(store.list("u1")) == ["likes bebop"]
        assert store.forget("u1", ts=int(at), reason="test", at=at, now=True) == 1
        # Said before "forget me" (its job late), from a client clock ahead: not stored.
        assert store.remember(payload("likes blues", "blues", received=at - 1, ts=int(at) + 86400)) == ["discarded"]
        # Said after it, from a client clock behind: stored.
        assert store.remember(payload("likes funk", "funk", received=at + 1, ts=int(at) - 86400)) == ["stored"]
        # Without a receipt time, the client's ts decides.
        assert store.remember(payload("likes soul", "soul", ts=int(at) - 5)) == ["discarded"]
        assert contents(store.list("u1")) == ["likes funk"]


def test_a_forget_all_without_the_servers_time_still_orders_timed_payloads(db):
    with Store(db) as store:
        assert store.forget("u1", ts=T0, reason="test") == 0
        assert store.remember(payload("likes blues", "blues", received=T0 - 50, ts=T0 - 50)) == ["discarded"]
        assert store.remember(payload("likes funk", "funk", received=T0 + 50, ts=T0 + 50)) == ["stored"]


def test_forget_markers_age_by_this_process_clock(db):
    """Not by a request's time: a client a year ahead does not drop other users' markers."""
    now = time.time()
    with Store(db) as store:
        store.forget("u1", match="likes jazz", ts=int(now) - 9 * 86400, reason="t")  # older than a job waits
        store.forget("u2", match="likes tango", ts=int(now) - 60, reason="t")
        store.forget("u3", match="likes salsa", ts=int(now) - 60, at=now - 60, reason="t")
        store.forget("u4", match="likes polka", ts=int(now) + 365 * 86400, reason="t")  # its clock ahead
        assert store.remember(payload("likes jazz", "jazz", user="u1", ts=int(now) - 10 * 86400)) == ["stored"]
        assert store.remember(payload("likes tango", "tango", user="u2", ts=int(now) - 120)) == ["discarded"]
        assert store.remember(payload("likes salsa", "salsa", user="u3", received=now - 120)) == ["discarded"]
        assert store.remember(payload("likes polka", "polka", user="u4", ts=int(now))) == ["discarded"]


def test_forget_everything_deletes_the_profile_too(db):
    from memo_mw import counters
    from memo_mw import insights as profile

    with Store(db) as store:
        for user in ("u1", "u2"):
            counters.add(store, user, {("2023-W46", "music"): 5})
            store.remember(payload("likes jazz", "jazz", user=user, topics=["music"]))
            assert profile.run(store, user, now=T0)
        store.forget("u1", match="likes jazz", ts=T0 + 1, reason="t")
        assert profile.read(store, "u1") and counters.rows(store, "u1")  # a targeted forget keeps them
        store.forget("u1", ts=T0 + 2, reason="t")
        assert profile.read(store, "u1") == [] and counters.rows(store, "u1") == []
        assert profile.read(store, "u2") and counters.rows(store, "u2")
