"""The SQLite store: schema, pragmas, dedup, supersession, touch, forget, idempotent jobs."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from memo_mw import jobs
from memo_mw.exceptions import StoreError
from memo_mw.store import Store, migrations


def payload(content, key, *, polarity=1, user="u1", ts=1_700_000_000, job_key=None, message_id=None,
            type_="preference", ttl_days=None):
    return {
        "job_key": job_key, "user_id": user, "session_id": "s1", "ts": ts, "message_id": message_id,
        "candidates": [{"type": type_, "key": key, "polarity": polarity, "content": content,
                        "excerpt": f"original: {content}", "rule_id": "t.rule", "confidence": 0.7,
                        "ttl_days": ttl_days, "language": "en"}],
    }


def test_schema_pragmas_and_migrations(db):
    Store(db).close()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    columns = {row[1] for row in conn.execute("PRAGMA table_info(memories)")}
    assert {"id", "user_id", "type", "key", "polarity", "content", "excerpt", "source_session", "source_ts",
            "confidence", "status", "active", "hits", "last_accessed", "expires_at", "rule_id",
            "topics", "superseded_by", "created_at"} <= columns
    applied = [r[0] for r in conn.execute("select name from _sqlite_migrations where migration_set = 'memo_mw'")]
    assert applied == [m.name for m in migrations._migrations]
    Store(db).close()  # opening again applies nothing twice
    assert conn.execute("select count(*) from _sqlite_migrations").fetchone()[0] == len(applied)


def test_same_statement_again_merges(db):
    with Store(db) as store:
        assert store.remember(payload("likes jazz", "jazz", message_id="a")) == ["stored"]
        assert store.remember(payload("Likes  jazz!", "jazz", ts=1_700_000_100, message_id="b")) == ["merged"]
        (memory,) = store.memories("u1", include_inactive=True)
    assert memory["hits"] == 1 and memory["confidence"] == pytest.approx(0.8)
    assert memory["source_ts"] == 1_700_000_100 and memory["source_ids"] == ["a", "b"]


@pytest.mark.parametrize("first, second", [
    pytest.param(("喜欢喝咖啡", 1), ("不喜欢喝咖啡", -1), id="zh-opposite"),
    pytest.param(("likes running", 1), ("dislikes running", -1), id="en-opposite"),
    pytest.param(("lives in Berlin", 1), ("lives in Paris", 1), id="en-new-value"),
])
def test_newer_statement_supersedes(db, first, second):
    with Store(db) as store:
        store.remember(payload(first[0], "slot", polarity=first[1]))
        assert store.remember(payload(second[0], "slot", polarity=second[1], ts=1_700_000_500)) == ["superseded"]
        active = store.memories("u1")
        everything = store.memories("u1", include_inactive=True)
    assert [m["content"] for m in active] == [second[0]]
    old = next(m for m in everything if m["content"] == first[0])
    assert old["status"] == "superseded" and old["active"] is False and old["superseded_by"] == active[0]["id"]


def test_job_key_makes_remember_idempotent(db):
    jobs.remember(db, payload("likes tea", "tea", job_key="k1"))
    assert jobs.remember(db, payload("likes tea", "tea", job_key="k1")) == ["duplicate_job"]
    (memory,) = Store(db).memories("u1")
    assert memory["hits"] == 0


def test_task_expiry_from_ttl(db):
    jobs.remember(db, payload("next time: book review", "book review", type_="task", ttl_days=30))
    (memory,) = Store(db).memories("u1")
    assert memory["expires_at"] == 1_700_000_000 + 30 * 86400


def test_touch_counts_only_the_users_own_memories(db):
    jobs.remember(db, payload("likes tea", "tea", user="u1"))
    jobs.remember(db, payload("likes tea", "tea", user="u2"))
    (mine,), (theirs,) = Store(db).memories("u1"), Store(db).memories("u2")
    assert jobs.touch(db, "u1", [mine["id"], theirs["id"]], 1_700_000_900) == 1
    assert Store(db).get(mine["id"])["hits"] == 1 and Store(db).get(mine["id"])["last_accessed"] == 1_700_000_900
    assert Store(db).get(theirs["id"])["hits"] == 0


def test_forget_is_physical_and_audited(db, tmp_path):
    jobs.remember(db, payload("plays tennis every sunday", "tennis"))
    jobs.remember(db, payload("likes zanzibarian oolong", "oolong"))
    jobs.remember(db, payload("likes zanzibarian oolong", "oolong", user="u2"))
    assert jobs.forget(db, "u1", "I play tennis", 1_700_000_999) == 1
    assert [m["content"] for m in Store(db).memories("u1")] == ["likes zanzibarian oolong"]
    assert jobs.forget(db, "u1", None, 1_700_001_000) == 1
    assert Store(db).memories("u1") == []
    assert [m["user_id"] for m in Store(db).memories()] == ["u2"]  # never another user's
    conn = sqlite3.connect(db)
    audit = conn.execute("select user_id, action, count, reason from audit order by id").fetchall()
    assert audit == [("u1", "forget_match", 1, "user request"), ("u1", "forget_all", 1, "user request")]
    jobs.forget(db, "u2", None, 1_700_001_001)
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("memo.db"))
    assert b"tennis" not in raw and b"zanzibarian" not in raw


@pytest.mark.parametrize("make_path", [
    pytest.param(lambda tmp: tmp / "not-a-db.db", id="not-a-database"),
    pytest.param(lambda tmp: tmp / "dir.db", id="a-directory"),
])
def test_unusable_database_is_a_clear_error(tmp_path, make_path):
    path = make_path(tmp_path)
    if path.name == "dir.db":
        path.mkdir()
    else:
        path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot use .* as the memory database"):
        Store(path)


def test_busy_timeout_on_every_connection(db):
    Store(db).close()
    for readonly in (False, True):
        with Store(db, readonly=readonly) as store:
            assert store.db.execute("PRAGMA busy_timeout").fetchone()[0] == 5000


def test_a_statement_older_than_forget_everything_is_discarded(db):
    with Store(db) as store:
        store.forget("u1", ts=1_700_000_500, reason="user request")
        assert store.remember(payload("likes jazz", "jazz", ts=1_700_000_400, job_key="late")) == ["discarded"]
        assert store.remember(payload("likes jazz", "jazz", ts=1_700_000_600, job_key="new")) == ["stored"]
        assert store.remember(payload("likes tea", "tea", user="u2", ts=1_700_000_400)) == ["stored"]


def test_a_writer_waits_for_another_instead_of_failing(db):
    import threading
    import time

    Store(db).close()
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # another worker in the middle of a write
    threading.Timer(0.4, lambda: holder.execute("COMMIT")).start()
    started = time.monotonic()
    with Store(db) as store:
        assert store.remember(payload("likes tea", "tea")) == ["stored"]
    assert time.monotonic() - started >= 0.3  # it waited (busy timeout) rather than raising
    holder.close()


def received(content, key, at, **kwargs):
    return {**payload(content, key, **kwargs), "received": at}


def test_forget_markers_order_statements_by_the_servers_receipt_time(tmp_path):
    """A marker with the server's time (a page deletion, a chat forget the middleware read)
    meets a payload's receipt time; the client times (ts) order only what lacks either."""
    store = Store(str(tmp_path / "m.db"))
    at = 1_700_000_100.5
    with store.write():
        store.mark_forgotten("u1", "likes green tea", int(at), at=at)
    # Read before the deletion, from a client a year ahead: forgotten.
    assert store.remember(received("likes green tea", "tea", at - 0.1, ts=int(at) + 365 * 86400)) == ["discarded"]
    # Read after it, from a client a day behind: stored.
    assert store.remember(received("likes green tea", "tea", at + 0.1, ts=int(at) - 86400)) == ["stored"]
    assert store.remember(received("likes green tea", "tea", at - 1, user="u2", ts=int(at) - 86400)) == ["stored"]
    # No receipt time (a job queued before payloads carried one): the client's ts, as before.
    store2 = Store(str(tmp_path / "m2.db"))
    with store2.write():
        store2.mark_forgotten("u1", "likes green tea", int(at), at=at)
    assert store2.remember(payload("likes green tea", "tea", ts=int(at) - 10)) == ["discarded"]
    assert store2.remember(payload("likes green tea", "tea", ts=int(at) + 10)) == ["stored"]


def test_forget_all_with_the_servers_time_orders_statements_by_receipt(tmp_path):
    store = Store(str(tmp_path / "m.db"))
    at = 1_700_000_100.5
    assert store.remember(payload("likes jazz", "jazz")) == ["stored"]
    assert store.remember(payload("likes bebop", "bebop", ts=int(at) + 365 * 86400)) == ["stored"]  # a clock ahead
    # A (late) job's forget leaves what its client said after it; one carried out now does not.
    assert store.forget("u1", ts=int(at), reason="test") == 1
    assert [m["content"] for m in store.memories("u1")] == ["likes bebop"]
    assert store.forget("u1", ts=int(at), reason="test", at=at, now=True) == 1
    # Said before "forget me" (its job late), from a client clock ahead: not stored.
    assert store.remember(received("likes blues", "blues", at - 1, ts=int(at) + 86400)) == ["discarded"]
    # Said after it, from a client clock behind: stored (the audit's client time does not rule it).
    assert store.remember(received("likes funk", "funk", at + 1, ts=int(at) - 86400)) == ["stored"]
    # Without a receipt time, the audit's forget_all decides by the client's ts, as before.
    assert store.remember(payload("likes soul", "soul", ts=int(at) - 5)) == ["discarded"]
    assert [m["content"] for m in store.memories("u1")] == ["likes funk"]
    # No words are kept for "everything".
    assert store.db.execute("select tokens from forget_markers where server_at is not null").fetchall() == [("null",)]


def test_a_forget_all_without_the_servers_time_still_orders_timed_payloads(tmp_path):
    """A forget job queued before jobs carried their receipt time (or a replay) leaves a
    marker of the client's time: a timed payload said before it is still discarded."""
    store = Store(str(tmp_path / "m.db"))
    t = 1_700_000_100
    assert store.forget("u1", ts=t, reason="test") == 0
    assert store.remember(received("likes blues", "blues", t - 50, ts=t - 50)) == ["discarded"]
    assert store.remember(received("likes funk", "funk", t + 50, ts=t + 50)) == ["stored"]


def test_forget_markers_age_by_this_process_clock(tmp_path):
    """Not by a request's time: a client a year ahead does not drop other users' markers."""
    store = Store(str(tmp_path / "m.db"))
    now = time.time()
    with store.write():
        store.mark_forgotten("u1", "likes jazz", int(now) - 9 * 86400)  # older than a job can wait
        store.mark_forgotten("u2", "likes tango", int(now) - 60)
        store.mark_forgotten("u3", "likes salsa", int(now) - 60, at=now - 60)
        store.mark_forgotten("u4", "likes polka", int(now) + 365 * 86400)  # its client's clock ahead
    users = [u for (u,) in store.db.execute("select user_id from forget_markers order by user_id")]
    assert users == ["u2", "u3", "u4"]


def test_an_edit_marker_discards_what_was_said_of_the_slot_before_it_only(tmp_path):
    store = Store(str(tmp_path / "m.db"))
    with store.write():
        store.mark_edited("u1", "tea", 1_700_000_100.5)
    assert store.remember(payload("likes green tea", "tea", ts=1_700_000_050)) == ["discarded"]  # no receipt: ts
    assert store.remember(received("likes black tea", "tea", 1_700_000_100.4, ts=1_700_000_200)) == ["discarded"]
    # Read by the server after the edit, whatever time the client gave it.
    assert store.remember(received("likes black tea", "tea", 1_700_000_100.6, ts=1_700_000_000)) == ["stored"]
    assert store.remember(payload("likes jazz", "jazz", ts=1_700_000_050)) == ["stored"]  # another slot
    assert store.remember(payload("likes oolong tea", "tea", user="u2", ts=1_700_000_050)) == ["stored"]
    # The slot is kept as a hash, not as its words.
    assert store.db.execute("select count(*) from edit_markers where slot like '%tea%'").fetchone()[0] == 0
    with store.write():  # markers older than a job can wait go when the next is written
        store.mark_edited("u1", "jazz", 1_700_000_100 + 9 * 86400)
    assert store.db.execute("select count(*) from edit_markers").fetchone()[0] == 1


def test_a_forget_marker_hashed_before_clitics_were_split_still_matches(tmp_path):
    """Markers keep hashed tokens only; one made when "John's" was the token john' (and
    "don't" don't) must still stop what it named, and nothing else."""
    from memo_mw.userstate import _hashed

    store = Store(str(tmp_path / "m.db"))
    at = 1_700_000_100
    with store.write():
        for words in ({"john'", "car"}, {"don't", "olive"}):  # as "John's car", "don't like olives" hashed then
            store.db.execute("insert into forget_markers (user_id, tokens, at, server_at) values (?, ?, ?, null)",
                             ["u1", json.dumps(sorted(_hashed(frozenset(words)))), at])
    assert store.remember(payload("John's car is red", "john's car", ts=at - 10)) == ["discarded"]
    assert store.remember(payload("don't eat olives", "olives", polarity=-1, ts=at - 10)) == ["discarded"]
    assert store.remember(payload("Johnny has a red bike", "bike", ts=at - 10)) == ["stored"]
    # A full-width apostrophe is one after NFKC, then and now.
    assert store.remember(payload("John＇s car is blue", "john＇s car", ts=at - 10)) == ["discarded"]
    # Markers made now name the same memories by their new tokens.
    with store.write():
        store.mark_forgotten("u1", "Maria's flat", at)
    assert store.remember(payload("Maria's flat is in Porto", "maria's flat", ts=at - 10)) == ["discarded"]
    assert store.remember(payload("Maria lives in Porto", "maria", ts=at - 10)) == ["stored"]
