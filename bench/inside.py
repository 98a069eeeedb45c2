"""Figure 1b from inside the gunicorn worker: the middleware's own CPU time, step by step.

    .venv/bin/python bench/inside.py [--seconds 8] [--rounds 2] [--steps]

bench/perf.py's HTTP figure reads the worker's CPU time from /proc, which holds everything the
process does. Here the same app and load (gunicorn, 1 worker, 4 threads; wrk, 16 connections, a
new message each request, a user with 100 memories) run with timers in the worker: each request's
thread CPU time (``time.thread_time``) in the wrapped call and in the app inside it, the
difference being the middleware's own, and with ``--steps`` the same for each step
bench/breakdown.py names. Also the worker's garbage collections (count and thread CPU time, by
generation), and each thread's CPU time a request (gunicorn's main thread, its pool of four, the
middleware's own threads). The timers are system calls (``CLOCK_THREAD_CPUTIME_ID``, about 1 us a
pair here): the steps' timers add to the middleware's own time, so read it from a run without
them. Compare a step here with its in-process time from bench/breakdown.py: the ratio is what the
server's threads and system calls make the same code cost.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: Where the worker writes its figures (set by main() for the worker it starts).
OUT = "MEMO_INSIDE_OUT"
STEPS_ON = "MEMO_INSIDE_STEPS"


def timed_app():
    """The benchmark app (bench.app), wrapped when MEMO_DB is set, with the timers in place."""
    import collections
    import gc

    from bench.app import app
    from bench.breakdown import MODULE_STEPS, STEPS, timed
    from memo_mw import middleware as middleware_module

    clock = time.thread_time
    spent: collections.defaultdict[str, float] = collections.defaultdict(float)
    collections = {"count": [0, 0, 0], "cpu": [0.0, 0.0, 0.0]}
    started = threading.local()

    def on_gc(phase, info):
        if phase == "start":
            started.gc = clock()
        elif hasattr(started, "gc"):
            collections["count"][info["generation"]] += 1
            collections["cpu"][info["generation"]] += clock() - started.gc

    gc.callbacks.append(on_gc)

    middleware = app.wsgi_app
    if hasattr(middleware, "funnel"):  # wrapped: the app inside, and each step
        timed(middleware, "app", spent, "app", clock)
        if os.environ.get(STEPS_ON):
            for label, path, name in STEPS:
                timed(operator.attrgetter(path)(middleware) if path else middleware, name, spent, label, clock)
            for label, name in MODULE_STEPS:
                if getattr(middleware_module, name) is not None:
                    timed(middleware_module, name, spent, label, clock)
    timed(app, "wsgi_app", spent, "wrapped", clock)
    out = os.environ[OUT]

    base: dict[str, float] = {}  # each thread's CPU seconds at request WARM

    def served(environ, start_response):
        spent["requests"] += 1
        if spent["requests"] % 1000 == 0:  # the worker is killed at the end: written as it goes
            threads = _thread_seconds()
            if spent["requests"] == WARM:
                base.update(threads)
            per = {name: (seconds - base.get(name, 0.0)) / (spent["requests"] - WARM) * 1e6
                   for name, seconds in threads.items()} if base else {}
            Path(out).write_text(json.dumps({"spent": spent, "gc": collections, "threads": per}))
        return app(environ, start_response)

    return served


#: The request from which each thread's CPU time is counted (the start-up and warm-up left out).
WARM = 4000


def _thread_seconds() -> dict[str, float]:
    """Each live thread's CPU seconds, by name (gunicorn's pool threads share a prefix)."""
    seconds = {}
    for thread in threading.enumerate():
        try:
            seconds[thread.name] = time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (OSError, TypeError):  # ended meanwhile
            continue
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", action="store_true", help="time each step too (their timers add to the total)")
    args = parser.parse_args()
    from bench.perf import WRK_SCRIPT, chat_app, gunicorn, seed_memories, wrk
    from memo_mw import MemoryMiddleware
    from tests.loadgen import free_port
    from tests.servers import RedisServer

    folder = tempfile.mkdtemp(prefix="memo-inside-")
    server = RedisServer(folder)
    server.start()
    try:
        script = f"{folder}/post.lua"
        Path(script).write_text(WRK_SCRIPT)
        db = f"{folder}/inside.db"
        seed_memories(MemoryMiddleware(chat_app().wsgi_app, db=db))
        for round_ in range(args.rounds):
            for name, env in (("bare", {"MEMO_DB": ""}), ("memo", {"MEMO_DB": db, "MEMO_REDIS_URL": server.url})):
                out = f"{folder}/{name}-{round_}.json"
                port = free_port()
                process = gunicorn({**env, OUT: out, STEPS_ON: "1" if args.steps else ""}, port,
                                   app="bench.inside:timed_app()")
                try:
                    wrk(port, 2, script)  # warm
                    wrk(port, args.seconds, script)
                    time.sleep(0.2)
                finally:
                    os.killpg(process.pid, signal.SIGTERM)
                    process.wait()
                report(name, json.loads(Path(out).read_text()))
    finally:
        server.stop()
    return 0


def report(name: str, figures: dict) -> None:
    spent, gc_figures, threads = figures["spent"], figures["gc"], figures.get("threads") or {}
    n = int(spent.pop("requests"))
    per = {label: seconds / n * 1e6 for label, seconds in spent.items()}
    line = f"{name:5} {n:6d} requests: thread CPU {per.pop('wrapped'):6.1f} us a request"
    if "app" in per:
        inside = per.pop("app")
        line += f", the app inside {inside:.1f} us, the middleware's own {spent['wrapped'] / n * 1e6 - inside:.1f} us"
    print(line)
    if per:
        print("      steps: " + ", ".join(f"{label} {us:.1f}" for label, us in per.items()) + " (us)")
    print(f"      gc: {gc_figures['count']} collections by generation, "
          f"{sum(gc_figures['cpu']) / n * 1e6:.1f} us a request", flush=True)
    if threads:  # where the worker's CPU goes: the server's main thread, its pool, the middleware's
        pool = sum(us for name, us in threads.items() if name.startswith("ThreadPoolExecutor"))
        others = {name: us for name, us in threads.items() if not name.startswith("ThreadPoolExecutor")}
        print(f"      threads (us a request after the first {WARM}): pool {pool:.1f}, " +
              ", ".join(f"{name} {us:.1f}" for name, us in sorted(others.items())), flush=True)


if __name__ == "__main__":
    sys.exit(main())
