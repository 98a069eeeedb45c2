"""The performance suite (``make bench``): every figure a ratio to a baseline measured in the same run.

    .venv/bin/python bench/perf.py [--quick] [--only NAME ...] [--rounds N] [--control] [--json PATH]

1. ``wsgi``: a non-trigger message (a new one each time) for a user with 100 memories,
   in-process WSGI calls: the Flask app wrapped by the middleware (private Redis) vs the bare app.
   Target <= 1.5x (p50).
2. ``http``: the same over HTTP under gunicorn (1 worker, 4 threads) driven by wrk (16
   connections), wrapped vs bare: both served at once, 24 rounds (6 with ``--quick``, N with
   ``--rounds N``) of a 3-second run of each in turn, the order swapped every round and both
   servers started again every 6 rounds (ROUNDS_PER_PAIR); each round's ratio of requests per
   second, p50 latency and the gunicorn worker's CPU time per request (from /proc), and their
   median over the rounds, with the middle half of them. Target <= 1.05x. With ``--control``, a
   third server in the same rounds, the bare app behind a wrapper that only reads the body and
   puts it back (bench/app.py): its ratio to the bare app is what the figure resolves, and what
   any middleware that reads the body costs.
3. ``captured``: a message the rules capture (a new statement each time, from 200 users in
   turn), with a `memo-mw worker` storing them meanwhile as deployed: what handing it to the
   queue costs the request (with write-behind, the row in the local outbox that the outbox
   thread sends) vs one Redis round trip (PING) in the same run, timed both in a tight loop and
   right after a request's work (where the hand-off happens). Target <= 2x. Also shown: the
   whole extra time of a captured request over the bare app, in PINGs.
4. ``worker``: memories stored per second by one `memo-mw worker` vs one plain RQ job per
   memory on rq's default forking worker. Target >= 5x.
5. ``recall``: bench/recall.py (1,000,000 rows; ``--quick``: 200,000): p50/p99 at 100, 1,000
   and 10,000 memories for one user. Target p99 <= 5 ms at 10,000.
6. ``rss``: resident memory of a web worker process after 500 requests, with the middleware and
   the default rules vs without. Target <= +20 MB.

Starts its own redis-server (never touches another). Machine notes and results: docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

from memo_mw import MemoryMiddleware, defaults  # noqa: E402
from memo_mw.pipeline import remember_payload  # noqa: E402
from memo_mw.store import Store  # noqa: E402
from tests.loadgen import free_port, word  # noqa: E402
from tests.servers import RedisServer  # noqa: E402

RESULTS: dict[str, dict] = {}
THINGS = ["jazz", "green tea", "tennis", "sushi", "python", "hiking", "chess", "coffee", "rust", "piano"]


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def seed_memories(middleware, user="u", n=100):
    with Store(middleware.db) as store:
        for i in range(n):
            result = middleware.funnel.process(f"I like {THINGS[i % len(THINGS)]} style {word(i)}")
            ts = time.time() - i * 3600
            store.remember(remember_payload(result, user_id=user, session_id="s", ts=ts, message_id=None, time_key=ts))


@contextlib.contextmanager
def wrapped_pair(name: str):
    """A redis-server of its own, the bare chat app and the same app wrapped by the middleware
    (its user "u" with 100 memories): figure 1's request, for the scripts that take it apart."""
    folder = tempfile.mkdtemp(prefix=f"memo-{name}-")
    server = RedisServer(folder)
    server.start()
    try:
        bare = chat_app().wsgi_app
        middleware = MemoryMiddleware(chat_app().wsgi_app, db=f"{folder}/{name}.db", redis_url=server.url)
        seed_memories(middleware)
        try:
            yield bare, middleware
        finally:
            middleware.queue.close()
    finally:
        server.stop()


def chat_app():
    from bench.app import app as _  # noqa: F401  (the module's app is the bare one unless MEMO_DB is set)
    from flask import Flask, jsonify, request

    app = Flask("bench")

    @app.post("/chat")
    def chat():
        body = request.get_json()
        return jsonify(reply="ok", length=len(body["message"]))

    return app


def environ_for(body: bytes, user="u"):
    return {"REQUEST_METHOD": "POST", "PATH_INFO": "/chat", "SERVER_NAME": "bench", "SERVER_PORT": "80",
            "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.input": io.BytesIO(body), "wsgi.url_scheme": "http",
            "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)), "HTTP_X_USER_ID": user,
            "wsgi.errors": sys.stderr, "wsgi.multithread": True, "wsgi.multiprocess": False,
            "wsgi.run_once": False, "wsgi.version": (1, 0)}


def call(app, body, user="u"):
    out = app(environ_for(body, user), lambda status, headers, exc_info=None: None)
    for _ in out:
        pass
    close = getattr(out, "close", None)
    if close:
        close()


def timing(owner, name, add, clock=time.perf_counter):
    """Replace ``owner.name`` by a wrapper that calls it and passes the seconds it took (by
    ``clock``) to ``add``."""
    method = getattr(owner, name)

    def wrapper(*args, **kwargs):
        started = clock()
        try:
            return method(*args, **kwargs)
        finally:
            add(clock() - started)
    setattr(owner, name, wrapper)


def timed(fn, n, warm=200):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(n):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


def alternate(fns: dict, n: int, block: int = 50) -> dict:
    """Time each function n times, in turns of ``block`` calls: the machine's speed drifts over
    seconds (a shared VM's doubles and halves), and short turns put both under the same drift
    (turns of a second each gave a figure that moved by 0.3 from run to run; of 50 calls, 0.1)."""
    times = {name: [] for name in fns}
    for name, fn in fns.items():
        timed(fn, 0, warm=200)
    done = 0
    while done < n:
        size = min(block, n - done)
        for name, fn in fns.items():
            times[name] += timed(fn, size, warm=0)
        done += size
    return times


def report(name, **figures):
    RESULTS[name] = figures
    print(f"{name:9} " + "   ".join(f"{k} {v}" for k, v in figures.items()), flush=True)


# -- 1. in-process WSGI ---------------------------------------------------------------

def bench_wsgi(server, folder, n):
    bare = chat_app().wsgi_app
    middleware = MemoryMiddleware(chat_app().wsgi_app, db=f"{folder}/wsgi.db", redis_url=server.url)
    seed_memories(middleware)
    # A new message each time, as in real traffic (no cache of tokens, tags or funnel results helps).
    bodies = iter([json.dumps({"message": f"what's the weather like in {word(i)} today?"}).encode()
                   for i in range(2 * n + 1000)])
    times = alternate({"bare": lambda: call(bare, next(bodies)), "memo": lambda: call(middleware, next(bodies))}, n)
    b50, m50 = pct(times["bare"], .5), pct(times["memo"], .5)
    mean = {k: statistics.fmean(v) for k, v in times.items()}
    report("wsgi", bare_p50=f"{b50 * 1e6:.0f} us", memo_p50=f"{m50 * 1e6:.0f} us", ratio_p50=f"{m50 / b50:.2f}x",
           ratio_mean=f"{mean['memo'] / mean['bare']:.2f}x",
           ratio_p99=f"{pct(times['memo'], .99) / pct(times['bare'], .99):.2f}x", target="<= 1.5x")
    middleware.queue.close()


# -- 2. HTTP under gunicorn -----------------------------------------------------------

WRK_SCRIPT = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-User-Id"] = "u"
local n = 0
request = function()
    n = n + 1  -- a new message each time, as in real traffic
    return wrk.format(nil, nil, nil, '{"message": "what is the weather like in town ' .. n .. ' today?"}')
end
"""


def gunicorn(env, port, app="bench.app:app"):
    binary = shutil.which("gunicorn", path=os.path.dirname(sys.executable)) or "gunicorn"
    process = subprocess.Popen([binary, "--bind", f"127.0.0.1:{port}", "--workers", "1", "--threads", "4",
                                "--worker-class", "gthread", "--log-level", "warning", app],
                               cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return process


def wrk(port, seconds, script, pid=None):
    """Requests per second, p50 latency, non-2xx count, and (with the server's worker ``pid``)
    the worker's CPU seconds per request over the run."""
    cpu = _cpu_seconds(pid)
    out = subprocess.run(["wrk", "-t2", "-c16", f"-d{seconds}s", "--latency", "-s", script,
                          f"http://127.0.0.1:{port}/chat"], capture_output=True, text=True, check=True).stdout
    cpu = _cpu_seconds(pid) - cpu
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0}[p50.group(2)]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    requests = int(re.search(r"(\d+) requests in", out).group(1))
    return rps, float(p50.group(1)) * scale, int(non2xx.group(1)) if non2xx else 0, cpu / max(1, requests)


def _cpu_seconds(pid) -> float:
    """User + system CPU seconds of a process (its threads included), from /proc."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _worker_pid(master: int) -> int | None:
    children = Path(f"/proc/{master}/task/{master}/children")
    for _ in range(100):
        pids = children.read_text().split() if children.exists() else []
        if pids:
            return int(pids[0])
        time.sleep(0.05)
    return None


#: Rounds of the HTTP figure served by one pair of server processes: every this many rounds both
#: are started again, so that the figure averages over several processes of each app (where a
#: process's memory lands, and so which of its lines share a cache set, moves its speed by a few
#: percent for its whole life: two servers of the same app came out 1.026x apart). pyperf runs its
#: benchmarks in many processes for the same reason.
ROUNDS_PER_PAIR = 6


def bench_http(server, folder, seconds, rounds, control=False):
    """Both apps served at once (only one loaded at a time), in short runs of wrk taking turns, the
    order swapped every round: the machine's speed, which drifts by a fifth within minutes here,
    hits the two runs of a round alike; both servers started again every ROUNDS_PER_PAIR rounds.
    Each round gives a ratio; the figure is their median, with the middle half of them as its
    spread. With control, a third server (bench/app.py's body-reading wrapper) takes its turn in
    each round too (the order rotated every round), its ratios reported beside."""
    if not shutil.which("wrk"):
        print("http      skipped: wrk is not installed (apt-get install wrk)")
        return
    script = f"{folder}/post.lua"
    Path(script).write_text(WRK_SCRIPT)
    db = f"{folder}/http.db"
    seed_memories(MemoryMiddleware(chat_app().wsgi_app, db=db))
    envs = {"bare": {"MEMO_DB": ""}, "memo": {"MEMO_DB": db, "MEMO_REDIS_URL": server.url}}
    if control:
        envs["control"] = {"MEMO_DB": "", "MEMO_CONTROL": "read"}
    names = list(envs)
    runs = {name: [] for name in names}
    for first in range(0, rounds, ROUNDS_PER_PAIR):
        servers = {}
        try:
            for name, env in envs.items():
                port = free_port()
                process = gunicorn(env, port)
                servers[name] = (process, port, _worker_pid(process.pid))
            for _, port, _ in servers.values():
                wrk(port, 2, script)  # warm
            for round_ in range(first, min(rounds, first + ROUNDS_PER_PAIR)):
                turn = round_ % len(names)
                for name in names[turn:] + names[:turn]:  # (two: the order swapped every round)
                    _, port, pid = servers[name]
                    runs[name].append(wrk(port, seconds, script, pid))
        finally:
            for process, _, _ in servers.values():
                os.killpg(process.pid, signal.SIGTERM)
                process.wait()

    def ratios(index, invert=False, of="memo", against="bare"):
        pairs = [(run[index] / base[index]) ** (-1 if invert else 1) for base, run in zip(runs[against], runs[of])]
        quartiles = statistics.quantiles(pairs, n=4) if len(pairs) > 1 else pairs * 3
        return statistics.median(pairs), quartiles[0], quartiles[2]

    cpu, throughput, p50 = ratios(3), ratios(0, invert=True), ratios(1)
    median = {name: [statistics.median(run[i] for run in runs[name]) for i in range(4)] for name in runs}
    errors = sum(run[2] for name in runs for run in runs[name])
    report("http", bare_rps=f"{median['bare'][0]:.0f}", memo_rps=f"{median['memo'][0]:.0f}",
           ratio_throughput=f"{throughput[0]:.3f}x", ratio_p50=f"{p50[0]:.3f}x",
           cpu_per_request=f"{median['bare'][3] * 1e6:.0f} / {median['memo'][3] * 1e6:.0f} us",
           ratio_cpu=f"{cpu[0]:.3f}x", cpu_middle_half=f"{cpu[1]:.3f}-{cpu[2]:.3f}x",
           throughput_middle_half=f"{throughput[1]:.3f}-{throughput[2]:.3f}x", rounds=rounds, non_2xx=errors,
           target="<= 1.05x")
    if control:
        body_read = ratios(3, of="control")
        report("http_control", what="a wrapper that only reads the body and puts it back, against the bare app",
               cpu_per_request=f"{median['bare'][3] * 1e6:.0f} / {median['control'][3] * 1e6:.0f} us",
               ratio_cpu=f"{body_read[0]:.3f}x", cpu_middle_half=f"{body_read[1]:.3f}-{body_read[2]:.3f}x",
               memo_over_control=f"{ratios(3, against='control')[0]:.3f}x")


# -- 3. a captured message ------------------------------------------------------------

def bench_captured(server, folder, n):
    bare = chat_app().wsgi_app
    middleware = MemoryMiddleware(chat_app().wsgi_app, db=f"{folder}/captured.db", redis_url=server.url)
    seed_memories(middleware)
    spent = []

    def add(seconds):
        spent[-1] += seconds

    # The hand-off: everything the request does to get the memory queued (and visible as pending).
    timing(middleware, "_enqueue", add)
    timing(middleware, "_state_call", add)
    counter = iter(range(10**9))

    def captured():  # a new statement each time, from 200 users in turn (as many users chatting)
        spent.append(0.0)
        n = next(counter)
        call(middleware, json.dumps({"message": f"I like {word(n)} music"}).encode(), user=f"user-{n % 200}")

    client = redis.Redis.from_url(server.url)
    body = json.dumps({"message": "I like jazz music"}).encode()
    after_request = []

    def ping_after_request():  # a round trip where the hand-off happens: after a request's work
        call(bare, body)
        started = time.perf_counter()
        client.ping()
        after_request.append(time.perf_counter() - started)

    # As deployed: a worker stores what is captured (and drops its pending entry) meanwhile.
    worker = subprocess.Popen([sys.executable, "-m", "memo_mw", "worker", "--url", server.url], cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        times = alternate({"ping": client.ping, "ping_after_request": ping_after_request,
                           "bare": lambda: call(bare, body), "captured": captured}, n)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
    handoff = sorted(spent[-len(times["captured"]):])
    ping, ping_in_request = pct(times["ping"], .5), pct(after_request[-n:], .5)
    extra = pct(times["captured"], .5) - pct(times["bare"], .5)
    report("captured", ping_p50=f"{ping * 1e6:.0f} us", ping_after_request_p50=f"{ping_in_request * 1e6:.0f} us",
           handoff_p50=f"{pct(handoff, .5) * 1e6:.0f} us", handoff_p99=f"{pct(handoff, .99) * 1e6:.0f} us",
           handoff_in_pings=f"{pct(handoff, .5) / ping:.2f}x",
           handoff_in_pings_after_request=f"{pct(handoff, .5) / ping_in_request:.2f}x",
           whole_extra_in_pings=f"{extra / ping:.1f}x", target="hand-off <= 2x")
    client.close()
    middleware.queue.close()


# -- 4. worker throughput -------------------------------------------------------------

def bench_worker(server, folder, n):
    from rq import Queue, Worker

    from memo_mw.funnel import Funnel
    from memo_mw.rules import load_rules

    funnel = Funnel(load_rules())
    payloads = []
    for i in range(n):
        result = funnel.process(f"I like {word(i)} music")
        payloads.append(remember_payload(result, user_id=f"user-{i % 50}", session_id="s", ts=1_700_000_000 + i,
                                         message_id=None, time_key=i))
    connection = redis.Redis.from_url(server.url)

    def plain_rq():
        db = f"{folder}/worker-plain.db"
        Store(db).close()
        queue = Queue("plain", connection=connection)
        for payload in payloads:
            queue.enqueue("memo_mw.jobs.remember", db, payload)
        batch, defaults.WORKER_BATCH = defaults.WORKER_BATCH, 1  # one job, one memory (the forks inherit it)
        try:
            started = time.perf_counter()
            Worker([queue], connection=connection).work(burst=True, logging_level="ERROR")
            return time.perf_counter() - started, db
        finally:
            defaults.WORKER_BATCH = batch

    def memo_worker():
        db = f"{folder}/worker-memo.db"
        middleware = MemoryMiddleware(chat_app().wsgi_app, db=db, redis_url=server.url)
        for payload in payloads:
            middleware.queue.enqueue("memo_mw.jobs.remember", [db, payload], job_id=payload["job_key"])
        middleware.queue.close()
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "memo_mw", "worker", "--burst", "--url", server.url], cwd=ROOT,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return time.perf_counter() - started, db

    t_plain, db_plain = plain_rq()
    t_memo, db_memo = memo_worker()
    counts = []
    for db in (db_plain, db_memo):
        with Store(db) as store:
            counts.append(store.db.execute("select count(*) from memories").fetchone()[0])
    report("worker", plain_rq=f"{counts[0] / t_plain:.0f}/s", memo_worker=f"{counts[1] / t_memo:.0f}/s",
           ratio=f"{(counts[1] / t_memo) / (counts[0] / t_plain):.1f}x", stored=f"{counts[1]}/{n}", target=">= 5x")
    connection.close()


# -- 5. recall latency ----------------------------------------------------------------

def bench_recall(rows):
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "recall.py"), "--rows", str(rows)],
                         capture_output=True, text=True, check=True).stdout
    print(out.rstrip())
    table = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)\s+([\d.]+) ms\s+([\d.]+) ms\s+([\d.]+) ms\s+([\d.]+) ms", line)
        if m:
            table[int(m.group(1))] = {"p50_ms": float(m.group(2)), "p99_ms": float(m.group(3)),
                                      "load_all_p50_ms": float(m.group(4)), "load_all_p99_ms": float(m.group(5))}
    report("recall", rows=rows, **{f"p99_at_{k}": f"{v['p99_ms']:.2f} ms" for k, v in table.items()},
           target="p99 <= 5 ms at 10000")
    RESULTS["recall"]["table"] = table


# -- 6. memory ------------------------------------------------------------------------

RSS_SCRIPT = """
import io, json, os, sys, time
sys.path.insert(0, {root!r})
from bench.perf import chat_app, call, seed_memories, word
from memo_mw import MemoryMiddleware
app = chat_app().wsgi_app
if {wrapped!r}:
    app = MemoryMiddleware(app, db={db!r}, redis_url={url!r})
    seed_memories(app)
for i in range(500):
    message = "I like " + word(i) + " music" if i % 3 == 0 else "what's the weather like today?"
    call(app, json.dumps({{"message": message}}).encode())
time.sleep(0.5)
rss = [l for l in open("/proc/self/status") if l.startswith("VmRSS")][0].split()[1]
print(int(rss) * 1024)
"""


def bench_rss(server, folder):
    sizes = {}
    for wrapped in (False, True):
        code = RSS_SCRIPT.format(root=str(ROOT), wrapped=wrapped, db=f"{folder}/rss.db", url=server.url)
        sizes[wrapped] = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                            check=True, cwd=ROOT).stdout.split()[-1])
    report("rss", bare=f"{sizes[False] / 2**20:.1f} MB", memo=f"{sizes[True] / 2**20:.1f} MB",
           delta=f"+{(sizes[True] - sizes[False]) / 2**20:.1f} MB", target="<= +20 MB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller runs (about a minute)")
    parser.add_argument("--only", nargs="*", choices=["wsgi", "http", "captured", "worker", "recall", "rss"])
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--control", action="store_true", help="the HTTP figure also for a wrapper that only "
                        "reads the body and puts it back, a third server in the same rounds")
    parser.add_argument("--rounds", type=int, help="rounds of the HTTP figure (default 24, 6 with --quick): "
                        "more for a tighter median, about 6 s a round")
    args = parser.parse_args()
    only = set(args.only or ["wsgi", "http", "captured", "worker", "recall", "rss"])
    n = 2000 if args.quick else 10000
    folder = tempfile.mkdtemp(prefix="memo-perf-")
    server = RedisServer(folder)
    server.start()
    print(f"memo-mw performance, {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, Python "
          f"{sys.version.split()[0]}, {subprocess.run(['redis-server', '--version'], capture_output=True, text=True).stdout.split()[2]}")
    try:
        for name, run in (("wsgi", lambda: bench_wsgi(server, folder, n)),
                          ("http", lambda: bench_http(server, folder, 2 if args.quick else 3,
                                                      args.rounds or (6 if args.quick else 24), args.control)),
                          ("captured", lambda: bench_captured(server, folder, n)),
                          ("worker", lambda: bench_worker(server, folder, 500 if args.quick else 2000)),
                          ("recall", lambda: bench_recall(200_000 if args.quick else 1_000_000)),
                          ("rss", lambda: bench_rss(server, folder))):
            if name in only:
                flushed = redis.Redis.from_url(server.url)
                flushed.flushdb()  # our own server
                flushed.close()
                run()
    finally:
        server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(RESULTS, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
