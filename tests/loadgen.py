"""A load generator for the reliability tests and bench/chaos.py: many users, many threads,
a mix of messages the rules capture (each with the one memory it must leave) and messages
they do not, sent over HTTP to a real server (gunicorn) running tests/load_app.py."""

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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

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
def gunicorn(db: str, redis_url: str | None, *, workers: int = 2, threads: int = 8) -> Iterator[Gunicorn]:
    """tests/load_app.py under gunicorn (gthread workers) on a free port. What gunicorn and
    the app log goes to a file beside the database (a pipe nobody reads would block the
    server once full): ``log_text()`` of what this yields."""
    port = free_port()
    server = Gunicorn(port, Path(f"{db}.gunicorn-{port}.log"))
    env = dict(os.environ, MEMO_DB=db, MEMO_REDIS_URL=redis_url or "", PYTHONPATH=str(ROOT))
    binary = shutil.which("gunicorn", path=os.path.dirname(sys.executable)) or "gunicorn"
    with open(server.log, "wb") as log:
        process = subprocess.Popen(
            [binary, "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--threads", str(threads),
             "--worker-class", "gthread", "--keep-alive", "30", "--log-level", "warning", "tests.load_app:app"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
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
