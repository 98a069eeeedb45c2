"""Cost of memo-mw on the request path and in replay, as ratios to baselines measured in the same run.

    .venv/bin/python bench/pipeline.py [--n 2000]

1. funnel: microseconds per message (the shared datasets' user turns) vs. ``json.loads`` of
   the same message as a request body (a floor every JSON chat app already pays).
2. request: a Flask chat endpoint through the werkzeug test client, bare and wrapped by the
   middleware with jobs going to a private redis-server (as in production; 20 memories stored
   for the user): p50 and p99 ratio. Without redis-server, the embedded thread is used.
3. replay: lines per second of ``memo-mw replay``'s code path vs. reading and parsing the lines.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flask import Flask, jsonify, request  # noqa: E402

from bench.datasets import SOURCES  # noqa: E402
from memo_mw import MemoryMiddleware  # noqa: E402
from memo_mw.funnel import Funnel  # noqa: E402
from memo_mw.pipeline import remember_payload  # noqa: E402
from memo_mw.rules import load_rules  # noqa: E402
from memo_mw.store import Store  # noqa: E402


def per_call(fn, items, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for item in items:
            fn(item)
        best = min(best, time.perf_counter() - started)
    return best / len(items)


def messages():
    rows = [r for name in ("memorybank-zh", "memorybank-en", "dulemon") for r in SOURCES[name]()]
    return [r for r in rows if r.get("role", "user") == "user"]


def bench_funnel(rows):
    funnel = Funnel(load_rules())
    texts = [r["text"] for r in rows]
    bodies = [json.dumps({"user_id": "u", "message": t}, ensure_ascii=False) for t in texts]
    t_funnel = per_call(funnel.process, texts)
    t_json = per_call(json.loads, bodies)
    print(f"funnel      {t_funnel * 1e6:8.1f} us/message   json.loads {t_json * 1e6:6.1f} us   "
          f"ratio {t_funnel / t_json:6.1f}x   ({len(texts)} messages)")


def chat_app():
    app = Flask(__name__)

    @app.post("/chat")
    def chat():
        body = request.get_json()
        return jsonify(reply="ok", length=len(body["message"]))

    return app


def private_redis(folder):
    """A redis-server of our own on a free port, or None when the binary is missing."""
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not os.path.exists(binary):
        return None, None
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", "--dir", folder], stdout=subprocess.DEVNULL)
    time.sleep(0.3)
    return process, f"redis://127.0.0.1:{port}/0"


def bench_request(n, folder):
    server, redis_url = private_redis(folder)
    plain = chat_app().test_client()
    wrapped_app = chat_app()
    db = f"{folder}/req.db"
    middleware = MemoryMiddleware(wrapped_app.wsgi_app, db=db, redis_url=redis_url)
    wrapped_app.wsgi_app = middleware
    wrapped = wrapped_app.test_client()
    with Store(db) as store:
        for i in range(20):
            result = Funnel(middleware.rules).process(f"I like jazz album number {i}")
            ts = time.time() - i * 3600
            store.remember(remember_payload(result, user_id="u", session_id="s", ts=ts, message_id=None, time_key=ts))
    queries = ["any jazz albums for tonight?", "我不吃香菜，推荐个菜", "what's the weather like?", "I love bossa nova"]

    def timings(client):
        out = []
        for i in range(n):
            started = time.perf_counter()
            client.post("/chat", json={"message": queries[i % len(queries)]}, headers={"X-User-Id": "u"})
            out.append(time.perf_counter() - started)
        return sorted(out)

    base, memo = timings(plain), timings(wrapped)
    middleware.queue.close()
    if server is not None:
        server.terminate()
        server.wait()
    p = lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))]  # noqa: E731
    print(f"request ({'redis' if server else 'embedded'})")
    print(f"            p50 {p(memo, .5) * 1e3:6.2f} ms vs {p(base, .5) * 1e3:6.2f} ms  ratio {p(memo, .5) / p(base, .5):5.2f}x"
          f"   p99 {p(memo, .99) * 1e3:6.2f} ms vs {p(base, .99) * 1e3:6.2f} ms  ratio {p(memo, .99) / p(base, .99):5.2f}x")


def bench_replay(rows, folder):
    lines = [json.dumps(r, ensure_ascii=False) for r in rows] * 3
    started = time.perf_counter()
    for line in lines:
        json.loads(line)
    t_parse = time.perf_counter() - started
    funnel, store = Funnel(load_rules()), Store(f"{folder}/replay.db")
    started = time.perf_counter()
    store.db.conn.execute("BEGIN")
    for line in lines:
        r = json.loads(line)
        result = funnel.process(r["text"])
        if result.captured:
            store.remember(remember_payload(result, user_id=r["user"], session_id=r["session"], ts=r["ts"],
                                            message_id=r.get("id"), time_key=r["ts"]))
    store.db.conn.execute("COMMIT")
    t_replay = time.perf_counter() - started
    print(f"replay      {len(lines) / t_replay:8.0f} lines/s   parse only {len(lines) / t_parse:8.0f} lines/s   "
          f"ratio {t_replay / t_parse:6.1f}x   ({len(lines)} lines)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="requests per side in the request benchmark")
    args = parser.parse_args()
    rows = messages()
    with tempfile.TemporaryDirectory() as folder:
        bench_funnel(rows)
        bench_request(args.n, folder)
        bench_replay(rows, folder)
