"""Web and job workers that start together on new files (gunicorn forks its workers at
once; a deploy starts web and job workers side by side), or while a job worker holds the
database's write lock: every one of them starts. A lost race for a file's journal mode or
schema is retried, a held lock passes the start-up write check with a warning: never a
failed boot, which under gunicorn would stop the whole server ("Worker failed to boot")."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from memo_mw.spool import Spool
from memo_mw.store import Store

PROCESSES = 4
ROUNDS = 40
STEP = 0.05  # seconds between rounds

# Every process opens the same new file in each round, at the same moment: the web
# process's spool, or the store a job worker (or the CLI) opens.
OPEN = """
import json, sys, time
from memo_mw.spool import Spool
from memo_mw.store import Store
role, folder, start, rounds, step = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
failures = []
for n in range(rounds):
    at = start + n * step
    time.sleep(max(0.0, at - 0.01 - time.time()))
    while time.time() < at:  # the last few ms spun: a sleep wakes up too unevenly for a race
        pass
    try:
        if role == "spool":
            Spool(f"{folder}/{n}.spool").put({"func": "f", "args": [n]})
        else:
            Store(f"{folder}/{n}.db").close()
    except Exception as exc:
        failures.append(repr(exc))
print(json.dumps(failures))
"""


@pytest.mark.parametrize("role", ["spool", "store"])
def test_processes_opening_new_files_together_all_start(tmp_path, role):
    start = time.time() + 1.5  # past every process's imports
    processes = [subprocess.Popen([sys.executable, "-c", OPEN, role, str(tmp_path), str(start), str(ROUNDS), str(STEP)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(PROCESSES)]
    failures = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        failures += json.loads(out)
    assert failures == []
    # Every file is whole: each process's job in the spool, the store's schema.
    for n in range(ROUNDS):
        if role == "spool":
            jobs = [job for _, job in Spool(str(tmp_path / f"{n}.spool")).peek()]
            assert jobs == [{"func": "f", "args": [n]}] * PROCESSES
        else:
            with Store(str(tmp_path / f"{n}.db"), readonly=True) as store:
                assert store.list() == []


def test_gunicorn_starts_while_a_worker_holds_the_database_write_lock(tmp_path):
    """A job worker's long transaction (a big forget, maintenance) while web workers boot:
    they start, with a warning, instead of failing to boot, which stops the whole server."""
    import http.client
    import sqlite3

    from .loadgen import gunicorn

    db = str(tmp_path / "memo.db")
    Store(db).close()
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the write lock, held as a job worker's transaction holds it
    try:
        with gunicorn(db, None, workers=2, threads=2) as server:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            conn.request("POST", "/chat", body=json.dumps({"message": "hello there"}),
                         headers={"Content-Type": "application/json", "X-User-Id": "u1"})
            response = conn.getresponse()
            assert response.status == 200 and json.loads(response.read())["echo"] == "hello there"
            conn.close()
            # One answer says one worker is up; the other's boot (its check waits 0.5 s on the
            # lock) is over well within this, and a failed one would have stopped the server.
            time.sleep(4)
            assert server.process.poll() is None, server.log_text()
            log = server.log_text()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "locked by another writer" in log
    assert "Worker failed to boot" not in log
