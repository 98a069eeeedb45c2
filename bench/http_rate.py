"""The HTTP figure: requests/s of the bare chat app and of the wrapped one under gunicorn, driven by wrk.

    .venv/bin/python -m bench.http_rate [--rounds 12]

Both servers run at once (1 worker, 4 threads each; the wrapped one with Redis, as in production,
its user with 100 memories) and take turns under wrk (2 threads, 16 connections, a new message each
request), the order swapped every round, so that the machine's drift hits both alike. Each round
gives a ratio (bare requests/s over wrapped); the figure is their median.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.servers import RedisServer, free_port  # noqa: E402

WRK_SCRIPT = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-User-Id"] = "u"
local n = 0
request = function()
    n = n + 1  -- a new message each time, as in real traffic
    return wrk.format(nil, nil, nil, '{"message": "please summarise chapter ' .. n .. ' of the report"}')
end
"""


def gunicorn(env: dict[str, str], port: int) -> subprocess.Popen:
    binary = shutil.which("gunicorn", path=os.path.dirname(sys.executable)) or "gunicorn"
    process = subprocess.Popen([binary, "--bind", f"127.0.0.1:{port}", "--workers", "1", "--threads", "4",
                                "--worker-class", "gthread", "--log-level", "warning", "bench.app:app"],
                               cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("gunicorn did not start")


def wrk(port: int, seconds: int, script: str) -> float:
    """Requests per second (a run with a failed request is an error, not a figure)."""
    out = subprocess.run(["wrk", "-t2", "-c16", f"-d{seconds}s", "-s", script, f"http://127.0.0.1:{port}/chat"],
                         capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in out:
        raise RuntimeError(f"requests failed under wrk:\n{out}")
    return float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))


def run(redis_url: str, folder: str, rounds: int = 12, seconds: int = 3) -> dict:
    if not shutil.which("wrk"):
        return {"skipped": "wrk is not installed (apt-get install wrk)"}
    from bench.perf import chat_app, seed
    from memo_mw import MemoryMiddleware

    script = f"{folder}/post.lua"
    Path(script).write_text(WRK_SCRIPT)
    db = f"{folder}/http.db"
    seed(MemoryMiddleware(chat_app().wsgi_app, db=db, trust_user_header=True))
    envs = {"bare": {"MEMO_DB": ""}, "memo": {"MEMO_DB": db, "MEMO_REDIS_URL": redis_url}}
    ports = {name: free_port() for name in envs}
    servers = {name: gunicorn(env, ports[name]) for name, env in envs.items()}
    rates: dict[str, list[float]] = {name: [] for name in envs}
    try:
        for name in envs:
            wrk(ports[name], 2, script)  # warm
        for round_ in range(rounds):
            for name in (["bare", "memo"] if round_ % 2 == 0 else ["memo", "bare"]):
                rates[name].append(wrk(ports[name], seconds, script))
    finally:
        for process in servers.values():
            os.killpg(process.pid, signal.SIGTERM)
            process.wait()
    ratio = statistics.median(b / m for b, m in zip(rates["bare"], rates["memo"]))
    return {"bare": f"{statistics.median(rates['bare']):.0f}/s", "memo": f"{statistics.median(rates['memo']):.0f}/s",
            "ratio": f"{ratio:.3f}x", "rounds": rounds, "ceiling": "1.15x", "met": ratio <= 1.15}


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="memo-http-")
    server = RedisServer(folder)
    server.start()
    try:
        print(run(server.url, folder, args.rounds))
    finally:
        server.stop()
