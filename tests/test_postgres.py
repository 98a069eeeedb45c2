"""The PostgreSQL engine: its schema (a tsvector column of the hashed terms, GIN indexes), one writer per
user at a time, clear errors that tell a passing fault from a mistake, and a chat that goes on while the
server is down. (The store's behaviour on PostgreSQL: the suites marked both_engines.)"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from memo_mw import MemoryMiddleware, defaults, postgres
from memo_mw.exceptions import StoreError, passing_fault
from memo_mw.queue import LocalQueue
from memo_mw.store import Store, check_writable
from memo_mw.text import index_terms

from .conftest import wait_until
from .servers import PostgresServer
from .test_middleware import RecordingApp, environ_for, plain, run
from .test_store import payload


def test_the_index_is_a_tsvector_of_the_hashed_terms_under_gin(postgres_url):
    with Store(postgres_url) as store:
        store.remember(payload("likes green tea", "green tea", user="alice"))
        store.remember(payload("喜欢喝美式咖啡", "美式咖啡", user="alice"))
    with psycopg.connect(postgres_url) as conn:
        indexes = dict(conn.execute("select indexname, indexdef from pg_indexes where schemaname = current_schema()"))
        vectors = [v for (v,) in conn.execute("select tsv::text from memories order by id")]
    assert "USING gin (tsv)" in indexes["memories_tsv"] and "USING gin (tsv)" in indexes["history_tsv"]
    assert index_terms("alice", ["tea"])[0] in vectors[0] and "tea" not in vectors[0]  # hashed, not words
    with Store(postgres_url) as store:  # Chinese finds it by its words, as on SQLite
        assert [m["content"] for m in store.search("alice", ["咖啡"])] == ["喜欢喝美式咖啡"]
        assert store.search("bob", ["咖啡", "tea"]) == []


def test_a_writer_waits_for_another_on_the_same_user_only(postgres_url):
    Store(postgres_url).close()
    holding, release = threading.Event(), threading.Event()

    def writer():
        with Store(postgres_url) as store, store.write("alice"):
            holding.set()
            release.wait(5)

    thread = threading.Thread(target=writer)
    thread.start()
    assert holding.wait(5)
    with Store(postgres_url) as store:
        started = time.monotonic()
        assert store.remember(payload("likes tea", "tea", user="bob")) == ["stored"]
        assert time.monotonic() - started < 0.3  # another user's write does not wait
        threading.Timer(0.4, release.set).start()
        started = time.monotonic()
        assert store.remember(payload("likes tea", "tea", user="alice")) == ["stored"]
        assert time.monotonic() - started >= 0.3  # alice's waited for the other writer of alice
    thread.join()


def test_racing_writers_store_one_memory_per_statement(postgres_url):
    Store(postgres_url).close()

    def say(n):
        with Store(postgres_url) as store:
            store.remember(payload("likes tea", "tea", user="alice", job_key=f"job-{n}", ts=1_700_000_000 + n % 2))

    threads = [threading.Thread(target=say, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with Store(postgres_url) as store:
        memories = store.list("alice", include_inactive=True)
    assert [(m["content"], m["active"]) for m in memories] == [("likes tea", True)]  # merged, never twice


def test_a_wrong_database_is_a_mistake_and_an_unreachable_server_a_passing_fault(postgres_server):
    with pytest.raises(StoreError, match="memo_nowhere") as wrong:
        check_writable(postgres_server.url.rsplit("/", 1)[0] + "/memo_nowhere")
    assert not passing_fault(wrong.value)
    with pytest.raises(StoreError) as down:
        check_writable("postgresql://memo@127.0.0.1:1/memo")
    assert passing_fault(down.value)


def test_the_password_is_not_in_messages():
    with pytest.raises(StoreError) as error:
        Store("postgresql://memo:hunter2-secret@127.0.0.1:1/memo")
    assert "hunter2" not in str(error.value) and "127.0.0.1" in str(error.value)


def test_reclaim_vacuums_what_a_forget_deleted(postgres_url):
    with Store(postgres_url) as store:
        store.remember({**payload("likes tea", "tea", user="alice"), "history": {"text": "I like tea", "days": 90}})
        assert store.forget("alice", ts=1_800_000_000, reason="test") == 1
        store.db.reclaim()  # (the maintenance job's: VACUUM of the tables that hold users' text)
    with psycopg.connect(postgres_url) as conn:
        vacuumed = dict(conn.execute("select relname, vacuum_count + autovacuum_count from pg_stat_user_tables"
                                     " where schemaname = current_schema()"))
        assert conn.execute("select count(*) from memories").fetchone()[0] == 0
        assert conn.execute("select count(*) from history").fetchone()[0] == 0
    assert vacuumed["memories"] >= 1 and vacuumed["history"] >= 1


def block(middleware, message):
    """The memory block the app got with ``message`` (the request answered 200, its jobs run)."""
    run(middleware, environ_for(plain(message)))
    return middleware.app.calls.pop()["environ"].get("memo.block", "")


def test_the_chat_goes_on_while_the_server_is_down_and_recalls_once_it_is_back(tmp_path):
    server = PostgresServer(tmp_path)
    server.start()
    try:
        app = MemoryMiddleware(RecordingApp(), db=server.url, trust_user_header=True, queue=LocalQueue(),
                               body_user=True)
        block(app, "I like green tea")
        assert "green tea" in block(app, "what tea should I drink?")
        server.stop_server()
        started = time.monotonic()
        for _ in range(4):
            assert block(app, "what tea should I drink?") == ""  # passed through, no memories
        # The first waited for the pool (PG_POOL_TIMEOUT); the breaker skips the store for the next ones.
        assert time.monotonic() - started < defaults.PG_POOL_TIMEOUT + 2
        server.start_server()
        assert wait_until(lambda: "green tea" in block(app, "what tea should I drink?"),
                          timeout=defaults.PG_POOL_TIMEOUT + 5)  # back after the breaker's cooldown, no restart
        app.queue.close()
    finally:
        postgres.close_pools()
        server.stop()
