"""The cluster run: the load test's guarantees with more than one of everything, on PostgreSQL.

    (from bench/perf.py: ``--only cluster_pg``)

Two web processes (tests/load_app.py, each its own gunicorn with one gthread worker, on its own
port, each with its own spool as on a host of its own) and two ``memo-mw worker`` processes share
one PostgreSQL database and one Redis. The load generator of tests/loadgen.py sends its threads'
requests, half of the threads to each web process (so a user's messages reach both), and the
workers store as the load runs. Then, as tests/test_load.py checks: no request failed, every
expected memory is stored (none lost), each exactly once (none doubled), each under its own user;
and a probe through both web processes: for each user, a question naming one of the user's own
words and words of other users' memories, whose recalled memories must all be the user's own.
"""

from __future__ import annotations

import collections
import contextlib
import http.client
import json
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis
from rq import Queue

from memo_mw import defaults
from memo_mw.spool import Spool
from memo_mw.store import check_writable
from tests.loadgen import (WORKER_STOP, LoadResult, expected_memories, gunicorn, plan, run_load, stop_group,
                           stored_memories)


def start_worker(db: str, redis_url: str, folder: str, n: int) -> subprocess.Popen:
    with open(f"{folder}/worker-{n}.log", "ab") as log:
        return subprocess.Popen([str(Path(sys.executable).parent / "memo-mw"), "worker", "--url", redis_url,
                                 "--db", db], cwd=folder, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def stop_workers(workers: list[subprocess.Popen]) -> None:
    """As tests/test_load.py stops its worker (a warm shutdown, then a cold one, then SIGKILL), both at once."""
    stoppers = [threading.Thread(target=stop_group, args=(w, WORKER_STOP)) for w in workers]
    for t in stoppers:
        t.start()
    for t in stoppers:
        t.join()


def ask(port: int, user: str, message: str) -> list[str]:
    """The contents of the memories recalled for ``user``'s message (the app's ``recalled``)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/chat", body=json.dumps({"message": message, "session_id": "probe"}).encode(),
                     headers={"Content-Type": "application/json", "X-User-Id": user})
        response = conn.getresponse()
        body = json.loads(response.read())
        assert response.status == 200, (response.status, body)
        return body["recalled"]
    finally:
        conn.close()


def word_of(memory: str) -> str:
    """The made-up word a load memory names (tests/loadgen.py's ``word``: the longest run of letters)."""
    return max(re.findall(r"[a-z]+", memory), key=len)


def probe(ports: list[int], expected: dict[tuple[str, str], int]) -> tuple[int, int]:
    """For each user, through each web process in turn: a question with one of the user's own memory
    words and the words of 12 other users' memories. (recalled memories of another user, own memories
    recalled)."""
    rng = random.Random(3)
    by_user: dict[str, list[str]] = {}
    for user, content in expected:
        by_user.setdefault(user, []).append(content)
    everything = list(expected)
    cross = own = 0
    for i, (user, contents) in enumerate(sorted(by_user.items())):
        others = [c for u, c in rng.sample(everything, min(40, len(everything))) if u != user][:12]
        words = [word_of(contents[0]), *map(word_of, others)]
        rng.shuffle(words)
        recalled = ask(ports[i % len(ports)], user, f"any tips for {' '.join(words)}?")
        cross += sum(1 for c in recalled if c not in contents)
        own += sum(1 for c in recalled if c in contents)
    return cross, own


def run(pg_url: str, redis_url: str, folder: str, *, threads: int, per_thread: int, users: int) -> dict:
    check_writable(pg_url)  # the schema, made once before four processes start on it
    work = plan(threads=threads, per_thread=per_thread, users=users)
    expected = expected_memories(work)
    workers = [start_worker(pg_url, redis_url, folder, n) for n in (1, 2)]
    results: list[LoadResult] = []
    try:
        with contextlib.ExitStack() as stack:
            webs = [stack.enter_context(gunicorn(pg_url, redis_url, workers=1, threads=8, folder=folder))
                    for _ in (1, 2)]
            halves = [work[0::2], work[1::2]]
            senders = [threading.Thread(target=lambda w=web, h=half: results.append(run_load(w.port, h)))
                       for web, half in zip(webs, halves)]
            started = time.perf_counter()
            for t in senders:
                t.start()
            for t in senders:
                t.join()
            seconds = time.perf_counter() - started
            queue = Queue(defaults.QUEUE_NAME, connection=redis.Redis.from_url(redis_url))
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and (queue.count or queue.started_job_registry.count):
                time.sleep(0.1)
            drained = time.perf_counter() - started
            failed_jobs = queue.failed_job_registry.count
            left = queue.count + queue.started_job_registry.count
            spooled = sum(len(Spool(str(p))) for p in Path(folder).glob("web-*.spool"))
            stored = stored_memories(pg_url)
            cross_recalled, own_recalled = probe([w.port for w in webs], expected)
    finally:
        stop_workers(workers)
    sent = sum(r.sent for r in results)
    statuses = sum((r.statuses for r in results), start=collections.Counter())
    errors = sum(len(r.errors) for r in results)
    wrong = sum(r.wrong_replies for r in results)
    by_user: dict[str, set[str]] = {}
    for user, content in expected:
        by_user.setdefault(user, set()).add(content)
    misplaced = sum(n for (user, content), n in stored.items() if content not in by_user.get(user, set()))
    lost = sum((expected - stored).values())
    doubled = sum(n - 1 for n in stored.values() if n > 1)
    cross_user = misplaced + cross_recalled
    ok = (not errors and not wrong and set(statuses) == {200} and sent == threads * per_thread and not lost
          and not doubled and not cross_user and not failed_jobs and not left and not spooled and own_recalled > 0)
    return {"requests": sent, "req_per_s": f"{sent / seconds:.0f}/s", "expected": sum(expected.values()),
            "stored": sum(stored.values()), "lost": lost, "doubled": doubled, "cross_user": cross_user,
            "failed_requests": errors + (sent - statuses[200] - errors) + wrong, "failed_jobs": failed_jobs + left,
            "drained_s": round(drained, 1), "probed_users": len(by_user),
            "own_recalled": own_recalled, "met": ok}
