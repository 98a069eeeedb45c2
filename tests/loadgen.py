"""A load generator for the reliability tests and bench/chaos.py: many users, many threads,
a mix of messages the rules capture (each with the one memory it must leave) and messages
they do not, sent over HTTP to a real server (gunicorn) running tests/load_app.py; and the
real rq worker those tests drain the queue with (:func:`drain`)."""

from __future__ import annotations

import collections
import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from rq import Queue, SimpleWorker, Worker
from rq.serializers import JSONSerializer

from .servers import free_port

ROOT = Path(__file__).resolve().parent.parent
SYLLABLES = ["ka", "lo", "mi", "ru", "ze", "po", "ta", "ne", "shi", "vu", "ga", "bo", "di", "fe", "ho", "ju"]

#: (message template, the memory it must leave) for captured messages, in both languages.
CAPTURED = [("I like {w}", "likes {w}"), ("I love {w} tea", "likes {w} tea"), ("我喜欢{w}", "喜欢{w}"),
            ("我喜欢喝{w}茶", "喜欢喝{w}茶"), ("remember that I prefer {w}", "prefers {w}")]
#: Messages the rules must not capture (questions, small talk); {w} may name a stored memory.
IGNORED = ["what's the weather like today?", "any tips for {w}?", "你好，今天怎么样？", "can you explain {w}?",
           "thanks!"]


def word(n: int) -> str:
    """A made-up word per number (no digits: nothing that PII masking could touch)."""
    letters = []
    for _ in range(5):
        letters.append(SYLLABLES[n % 16])
        n //= 16
    return "".join(letters)


@dataclass
class Request:
    user: str
    message: str
    expected: str | None  # the memory this message must leave, if any


def plan(threads: int, per_thread: int, users: int, captured_share: float = 0.3, seed: int = 7) -> list[list[Request]]:
    """Per thread, the requests it sends; every captured message names a word no other message uses."""
    rng = random.Random(seed)
    counter = 0
    work = []
    for _ in range(threads):
        requests = []
        for _ in range(per_thread):
            user = f"user-{rng.randrange(users):03d}"
            counter += 1
            w = word(counter)
            if rng.random() < captured_share:
                template, memory = rng.choice(CAPTURED)
                requests.append(Request(user, template.format(w=w), memory.format(w=w)))
            else:
                requests.append(Request(user, rng.choice(IGNORED).format(w=word(rng.randrange(1, counter + 1))), None))
        work.append(requests)
    return work


@dataclass
class LoadResult:
    statuses: collections.Counter = field(default_factory=collections.Counter)
    errors: list[str] = field(default_factory=list)
    wrong_replies: int = 0
    seconds: float = 0.0

    @property
    def sent(self) -> int:
        return sum(self.statuses.values()) + len(self.errors)


def run_load(port: int, work: list[list[Request]], *, timeout: float = 30.0) -> LoadResult:
    """Send every thread's requests over its own keep-alive connection; count what came back."""
    result = LoadResult()
    lock = threading.Lock()

    def send_all(requests: list[Request]) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        for req in requests:
            body = json.dumps({"message": req.message, "session_id": "load"}, ensure_ascii=False).encode()
            headers = {"Content-Type": "application/json", "X-User-Id": req.user}
            try:
                conn.request("POST", "/chat", body=body, headers=headers)
                response = conn.getresponse()
                reply = response.read()
                ok = response.status == 200 and json.loads(reply).get("echo") == req.message
            except (OSError, http.client.HTTPException, ValueError) as exc:
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
                with lock:
                    result.errors.append(f"at {time.perf_counter() - started:.1f} s, {req.user}: {type(exc).__name__}: {exc}")
                continue
            with lock:
                result.statuses[response.status] += 1
                result.wrong_replies += not ok
        conn.close()

    started = time.perf_counter()
    pool = [threading.Thread(target=send_all, args=(requests,)) for requests in work]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    result.seconds = time.perf_counter() - started
    return result


@dataclass
class Gunicorn:
    """A :func:`gunicorn` server: its port, the file it logs to, and its master process."""

    port: int
    log: Path
    process: subprocess.Popen | None = None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@contextlib.contextmanager
def gunicorn(db: str, redis_url: str | None, *, workers: int = 2, threads: int = 8,
             preexec_fn: Callable[[], None] | None = None, folder: str | None = None) -> Iterator[Gunicorn]:
    """tests/load_app.py under gunicorn (gthread workers) on a free port. What gunicorn and
    the app log goes to a file beside the database (a pipe nobody reads would block the
    server once full): ``log_text()`` of what this yields. ``preexec_fn``: run in the server's
    process before it starts (a resource limit). ``folder`` (needed for a PostgreSQL URL): the
    log and the web process's own spool go there instead, as on a host of its own."""
    port = free_port()
    server = Gunicorn(port, Path(folder, f"gunicorn-{port}.log") if folder else Path(f"{db}.gunicorn-{port}.log"))
    spool = os.path.join(folder, f"web-{port}.spool") if folder else ""
    env = dict(os.environ, MEMO_DB=db, MEMO_REDIS_URL=redis_url or "", MEMO_SPOOL=spool, PYTHONPATH=str(ROOT))
    binary = shutil.which("gunicorn", path=os.path.dirname(sys.executable)) or "gunicorn"
    with open(server.log, "wb") as log:
        process = subprocess.Popen(
            [binary, "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--threads", str(threads),
             "--worker-class", "gthread", "--keep-alive", "30", "--log-level", "warning", "tests.load_app:app"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True,
            preexec_fn=preexec_fn)
    server.process = process
    try:
        deadline = time.monotonic() + 30
        while True:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            try:
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                pass
            finally:
                conn.close()
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("gunicorn did not start: " + server.log_text())
            time.sleep(0.1)
        yield server
    finally:
        with contextlib.suppress(ProcessLookupError):  # it may have stopped: the test says why
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def expected_memories(work: list[list[Request]]) -> collections.Counter:
    return collections.Counter((r.user, r.expected) for requests in work for r in requests if r.expected)


def stored_memories(db: str) -> collections.Counter:
    from memo_mw.store import Store

    with Store(db, readonly=True) as store:
        return collections.Counter((row[0], row[1]) for row in store.db.execute(
            "select user_id, content from memories where active = 1").fetchall())


class _NoCommandChannel:
    """rq's worker without the command channel (pub/sub) through which ``rq`` sends stop and
    shutdown commands to a long-running worker. A burst in a test takes no commands, and rq 3.0.0
    unsubscribes before it stops that channel's thread, which with redis-py 8 then sometimes waits
    its whole 60 s poll (rq/rq#1613)."""

    def subscribe(self) -> None:
        pass

    def unsubscribe(self) -> None:
        pass


class BurstWorker(_NoCommandChannel, Worker):
    """rq's forking worker for a burst in a test."""


class BurstSimpleWorker(_NoCommandChannel, SimpleWorker):
    """rq's worker that runs jobs in its own process, as ``memo-mw worker`` does, for a burst in a test."""


def drain(redis_url: str, *, scheduler: bool = False, name: str = "memo") -> int:
    """Run a real rq worker in burst mode on the memo queue until it is empty; return how many
    jobs were waiting. ``scheduler``: as ``memo-mw worker`` does, first move the retries that
    are due back to the queue."""
    connection = redis.Redis.from_url(redis_url)
    queue = Queue(name, connection=connection, serializer=JSONSerializer)
    waiting = queue.count
    BurstWorker([queue], connection=connection, serializer=JSONSerializer).work(
        burst=True, with_scheduler=scheduler, logging_level="WARNING")
    failed = queue.failed_job_registry.count
    connection.close()
    assert failed == 0, "a memo job failed"
    return waiting


@contextlib.contextmanager
def opened_queues(**defaults: Any) -> Iterator[Callable[..., Any]]:
    """``make(url, **options)``: RedisQueues (``defaults`` under the options) that are closed
    when the block ends, pass or fail: no spool thread may send into the next test's Redis."""
    from memo_mw.queue import RedisQueue

    made = []

    def make(url: str, **options: Any) -> RedisQueue:
        made.append(RedisQueue(url, **{**defaults, **options}))
        return made[-1]

    try:
        yield make
    finally:
        for queue in made:
            queue.close()


#: How the load runs stop a worker: SIGTERM (rq's warm shutdown), a second SIGTERM (its cold one) after
#: 5 s, SIGKILL after 5 more (rq 3.0.0's warm shutdown can wait a minute with nothing in hand).
WORKER_STOP = ((signal.SIGTERM, 5), (signal.SIGTERM, 5), (signal.SIGKILL, 20))


def stop_group(process: subprocess.Popen, steps: tuple[tuple[int, float], ...]) -> None:
    """Send each signal of ``steps`` to the process group in turn, waiting its seconds for the
    process to end; return once it has."""
    for sig, wait in steps:
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:  # already gone
            pass
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
