"""Chaos run: load through a real server while Redis, the worker and the database fail.

    .venv/bin/python bench/chaos.py [--threads 20] [--requests 500] [--users 200] [--json]

Starts its own redis-server (append-only file on, fsync always: what production should
run, so jobs queued in Redis survive a Redis restart), the chat app of tests/load_app.py
under gunicorn (2 gthread workers), and `memo-mw worker`. While the load generator sends
threads x requests messages (about 30 % of them statements the rules capture, each naming
a word no other message uses), a fault loop, in turn:

- stops Redis for 3 s, then starts it again (the web processes spool to `<db>.spool`);
- SIGKILLs the worker and its work horse mid-job, then starts a new worker;
- holds SQLite's write lock for 7 s (longer than the 5 s busy timeout: jobs fail and retry);

then waits for the spool and the queue to empty (retries included) and compares what is
stored with what the messages said. Prints faults, requests by status, and memories
expected / stored / missing / doubled / under the wrong user. Exit status 1 if any request
failed or any memory is missing, doubled or misplaced.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Run as a script, bench/ is first on the path, and bench/http.py would hide the standard library's http.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402
from rq import Queue  # noqa: E402
from rq.job import Job  # noqa: E402
from rq.registry import StartedJobRegistry  # noqa: E402
from rq.serializers import JSONSerializer  # noqa: E402

from memo_mw import defaults  # noqa: E402
from memo_mw.spool import Spool  # noqa: E402
from memo_mw.store import check_writable  # noqa: E402
from tests.loadgen import expected_memories, gunicorn, plan, run_load, stop_group, stored_memories  # noqa: E402
from tests.servers import RedisServer  # noqa: E402


def start_worker(url: str, folder: str) -> subprocess.Popen:
    """`memo-mw worker`, its log appended to worker.log in the run's folder."""
    with open(os.path.join(folder, "worker.log"), "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "memo_mw", "worker", "--url", url], cwd=ROOT,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop_worker(worker: subprocess.Popen) -> None:
    """SIGTERM (a warm shutdown), then SIGKILL: rq 3.0's shutdown may wait out its command
    channel's 60 s poll."""
    stop_group(worker, ((signal.SIGTERM, 10), (signal.SIGKILL, 20)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--requests", type=int, default=500, help="per thread")
    parser.add_argument("--users", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    folder = tempfile.mkdtemp(prefix="memo-chaos-")
    db = os.path.join(folder, "memo.db")
    check_writable(db)
    server = RedisServer(folder, appendonly=True)
    server.start()
    worker = [start_worker(server.url, folder)]
    work = plan(args.threads, args.requests, args.users)
    faults: list[str] = []
    done = threading.Event()

    def inject() -> None:
        cycle = 0
        while not done.wait(2.0):
            if worker[0].poll() is not None:  # a supervisor's job: a worker that stopped is started again
                faults.append(f"{time.strftime('%X')} the worker had exited ({worker[0].returncode}); restarted")
                worker[0] = start_worker(server.url, folder)
            kind = cycle % 3
            cycle += 1
            if kind == 0:
                server.stop()
                faults.append(f"{time.strftime('%X')} Redis stopped for 3 s")
                done.wait(3.0)
                server.start()
            elif kind == 1:
                os.killpg(worker[0].pid, signal.SIGKILL)
                worker[0].wait()
                faults.append(f"{time.strftime('%X')} worker SIGKILLed (with its work horse); a new one started")
                worker[0] = start_worker(server.url, folder)
            else:
                holder = sqlite3.connect(db, isolation_level=None)
                holder.execute("BEGIN IMMEDIATE")
                faults.append(f"{time.strftime('%X')} SQLite write lock held for 7 s")
                done.wait(7.0)
                holder.execute("ROLLBACK")
                holder.close()

    try:
        with gunicorn(db, server.url) as web:
            chaos = threading.Thread(target=inject)
            chaos.start()
            result = run_load(web.port, work)
            done.set()
            chaos.join()
            # Let the web processes' spool threads send what waited for Redis.
            spool = Spool(db + ".spool")
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and len(spool):
                time.sleep(0.5)
            spooled_left = len(spool)
        # The worker finishes the queue; retries of jobs that met the lock, or whose worker
        # died, come back from rq's scheduler (and from abandoned-job cleanup, moved forward).
        connection = redis.Redis.from_url(server.url)
        queue = Queue(defaults.QUEUE_NAME, connection=connection, serializer=JSONSerializer)

        def intermediate() -> int:
            # Ids of jobs that finished (and were deleted, result_ttl 0) linger there until a
            # worker's maintenance round; only jobs that still exist are waiting.
            ids = queue.intermediate_queue.get_job_ids()
            return sum(job is not None for job in Job.fetch_many(ids, connection=connection, serializer=JSONSerializer))

        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            StartedJobRegistry(queue=queue).cleanup(timestamp=time.time() + 600)
            # A job taken by a worker killed before it was registered as started waits in rq's
            # intermediate queue; the worker's maintenance retries it after a minute or two.
            waiting = (queue.count + queue.scheduled_job_registry.count + StartedJobRegistry(queue=queue).count
                       + intermediate())
            if waiting == 0:
                break
            if worker[0].poll() is not None:
                faults.append(f"{time.strftime('%X')} the worker had exited ({worker[0].returncode}); restarted")
                worker[0] = start_worker(server.url, folder)
            time.sleep(1.0)
        left_waiting = {"queued": queue.count, "scheduled": queue.scheduled_job_registry.count,
                        "started": StartedJobRegistry(queue=queue).count,
                        "intermediate": intermediate(), "spool": spooled_left}
        failed_jobs = queue.failed_job_registry.count
        connection.close()
    finally:
        done.set()
        stop_worker(worker[0])
        server.stop()

    expected = expected_memories(work)
    stored = stored_memories(db)
    expected_users = {user: {c for (u, c) in expected if u == user} for user, _ in expected}
    misplaced = sum(1 for (user, content) in stored if content not in expected_users.get(user, set())
                    and any(content in contents for contents in expected_users.values()))
    report = {
        "requests": result.sent, "statuses": dict(result.statuses), "errors": len(result.errors),
        "wrong_replies": result.wrong_replies, "seconds": round(result.seconds, 1), "faults": faults,
        "memories_expected": sum(expected.values()), "memories_stored": sum(stored.values()),
        "missing": sum((expected - stored).values()),
        "doubled": sum(count - 1 for count in stored.values() if count > 1),
        "misplaced": misplaced, "failed_jobs": failed_jobs, "jobs_left_waiting": left_waiting,
    }
    if report["missing"]:
        report["missing_examples"] = [list(pair) for pair in list(expected - stored)[:5]]
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for name, value in report.items():
            if name == "faults":
                print("faults:")
                for fault in value:
                    print("  -", fault)
            else:
                print(f"{name}: {value}")
    bad = (report["errors"] or sum(left_waiting.values()) or report["wrong_replies"] or set(report["statuses"]) - {200}
           or report["missing"] or report["doubled"] or report["misplaced"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
