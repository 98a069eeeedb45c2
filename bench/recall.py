"""Recall latency for a large user among many: the full-text index must read only that user's postings.

    .venv/bin/python -m bench.recall [--rows 1000000] [--queries 200] [--history] [--db postgresql://...]

Builds one store with ``--rows`` memories: one user with 10,000 and 99 others sharing the rest, all
made of the same common words (likes, places, foods, in both languages), so a user filter outside
the index would read every user's postings of a word. Then times :meth:`Recaller.recall` for the
large user on ``--queries`` messages made of those common words, and gives p50 and p99.
``--history``: a user with 10,000 past messages (chat history) and 1,000 memories, among 20 users
with as many; each request is timed through both recalls, the memories and the past messages.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memo_mw import postgres  # noqa: E402
from memo_mw.funnel import Funnel  # noqa: E402
from memo_mw.recall import Recaller  # noqa: E402
from memo_mw.rules import load_rules  # noqa: E402
from memo_mw.store import Store, indexed  # noqa: E402
from memo_mw.text import index_terms, tokens  # noqa: E402

VERBS = ["likes", "dislikes", "eats", "plays", "reads about", "lives near", "wants to visit", "collects"]
THINGS = ["coffee", "jazz", "tennis", "sushi", "python", "hiking", "chess", "green tea", "rust", "piano",
          "music", "books", "movies", "the morning", "cats", "rain", "beer", "trains", "pizza", "running"]
ZH = ["喜欢喝咖啡", "喜欢爵士乐", "不吃香菜", "住在上海", "喜欢爬山", "在学吉他", "喜欢看电影", "喜欢下雨天"]
QUERIES = ["I like coffee in the morning", "what music should I play", "any movies like that?",
           "推荐一杯咖啡", "周末去爬山吗", "books about trains and rain", "pizza or sushi tonight?"]


MEMORY_INSERT = ("insert into memories (user_id, type, key, polarity, content, excerpt, source_ts, confidence,"
                 " created_at, hits, last_accessed, terms, words)"
                 " values (?, 'preference', ?, 1, ?, ?, ?, 0.7, ?, ?, ?, ?, ?)")
HISTORY_INSERT = ("insert into history (user_id, session_id, message_id, ts, expires_at, text, terms, words)"
                  " values (?, ?, null, ?, ?, ?, ?, ?)")
BATCH = 5_000


def insert_all(db: str, sql: str, rows) -> None:
    """Every row through the store's engine (SQL with ``?`` placeholders, as for both engines), in one
    transaction (on SQLite, many would leave the full-text index in more segments), ``BATCH`` at a time."""
    with Store(db) as store, store.write():
        batch = []
        for row in rows:
            batch.append(row)
            if len(batch) == BATCH:
                store.db.executemany(sql, batch)
                batch = []
        store.db.executemany(sql, batch)


def build(db: str, rows: int, big: int = 10_000, users: int = 100) -> None:
    """``rows`` memories in ``db`` (a SQLite path or a PostgreSQL URL)."""
    rng = random.Random(7)
    now = int(time.time())

    def made():
        for n in range(rows):
            user = "big" if n < big else f"user{n % (users - 1)}"
            if n % 5 == 0:
                content = ZH[n % len(ZH)] + str(n % 97)
            else:
                content = f"{rng.choice(VERBS)} {rng.choice(THINGS)} {rng.choice(THINGS)} no {n % 97}"
            key = content[:12]
            index = indexed(user, content, key, [])
            yield [user, key, content, content, now - n, now - n, n % 13, now - n % 1000, index["terms"], index["words"]]

    insert_all(db, MEMORY_INSERT, made())
    if postgres.is_url(db):
        with Store(db) as store:
            store.db.execute("analyze memories")


def build_history(db: str, messages: int = 10_000, users: int = 20) -> None:
    """Every user's chat history: ``messages`` each, sentences of the same common words (the rows
    ``history.add`` writes, 90 days kept)."""
    rng = random.Random(11)
    now = int(time.time())

    def made():
        for n in range(messages * users):
            user = "big" if n % users == 0 else f"user{n % users}"
            text = (f"我{rng.choice(ZH)}，{rng.choice(ZH)}，今天第{n % 97}次" if n // users % 5 == 0 else
                    f"I {rng.choice(VERBS)} {rng.choice(THINGS)} and {rng.choice(THINGS)}, more than {rng.choice(THINGS)}")
            words = tokens(text)
            ts = now - n * 60
            yield [user, f"s{n // 500}", ts, ts + 90 * 86400, text, " ".join(index_terms(user, words)),
                   " ".join(sorted(words))]

    insert_all(db, HISTORY_INSERT, made())
    if postgres.is_url(db):
        with Store(db) as store:
            store.db.execute("analyze history")


def timed(call, queries: int) -> dict:
    """p50 and p99 of ``call(i)`` over ``queries`` calls (after 20 that warm the file's pages)."""
    times = []
    for i in range(queries + 20):
        started = time.perf_counter()
        call(i)
        if i >= 20:
            times.append(time.perf_counter() - started)
    times.sort()
    p99 = times[int(0.99 * (len(times) - 1))]
    return {"p50": f"{statistics.median(times) * 1e3:.2f} ms", "p99": f"{p99 * 1e3:.2f} ms", "ceiling": "10 ms",
            "met": p99 <= 0.010}


def run_history(queries: int = 200, db: str | None = None) -> dict:
    """Both recalls for a user with 10,000 past messages and 1,000 memories, among 20 such users;
    ``db``: an empty PostgreSQL database (its URL) instead of a new SQLite file."""
    db = db or f"{tempfile.mkdtemp(prefix='memo-history-')}/recall.db"
    started = time.perf_counter()
    build(db, 20_000, big=1_000, users=20)
    build_history(db)
    built = time.perf_counter() - started
    recaller = Recaller(db, Funnel(load_rules()))

    def both(i: int) -> None:
        message = f"{QUERIES[i % len(QUERIES)]} {i}"
        memories = recaller.recall("big", message)
        recaller.history("big", message, session_id="now", memories=memories)

    return {"user_messages": 10_000, "user_memories": 1_000, "built_s": round(built), **timed(both, queries)}


def run(rows: int = 1_000_000, queries: int = 200, db: str | None = None) -> dict:
    """``db``: an empty PostgreSQL database (its URL) instead of a new SQLite file."""
    db = db or f"{tempfile.mkdtemp(prefix='memo-recall-')}/recall.db"
    started = time.perf_counter()
    build(db, rows)
    built = time.perf_counter() - started
    recaller = Recaller(db, Funnel(load_rules()))
    figures = timed(lambda i: recaller.recall("big", f"{QUERIES[i % len(QUERIES)]} {i}"), queries)
    return {"rows": rows, "user_memories": 10_000, "built_s": round(built), **figures}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--history", action="store_true", help="the chat history case instead")
    parser.add_argument("--db", help="an empty PostgreSQL database's URL (default: a new SQLite file)")
    args = parser.parse_args()
    print(json.dumps(run_history(args.queries, args.db) if args.history else run(args.rows, args.queries, args.db)))
