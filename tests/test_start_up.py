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

from memo_mw.outbox import Outbox
from memo_mw.store import Store, retry_setup

PROCESSES = 4
ROUNDS = 40
STEP = 0.05  # seconds between rounds

# Every process opens the same new file in each round, at the same moment: the web
# worker's outbox, or the store a job worker (or the CLI) opens.
OPEN = """
import json, sys, time
from memo_mw.outbox import Outbox
from memo_mw.store import Store, retry_setup
role, folder, start, rounds, step = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
failures = []
for n in range(rounds):
    at = start + n * step
    time.sleep(max(0.0, at - 0.01 - time.time()))
    while time.time() < at:  # the last few ms spun: a sleep wakes up too unevenly for a race
        pass
    try:
        if role == "outbox":
            Outbox(f"{folder}/{n}.outbox")
        else:
            Store(f"{folder}/{n}.db").close()
    except Exception as exc:
        failures.append(repr(exc))
print(json.dumps(failures))
"""


@pytest.mark.parametrize("role", ["outbox", "store"])
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
    # Every file is whole: the outbox's tables, the store's migrations.
    for n in range(ROUNDS):
        if role == "outbox":
            outbox = Outbox(str(tmp_path / f"{n}.outbox"))
            assert outbox.count() == 0
        else:
            with Store(str(tmp_path / f"{n}.db"), readonly=True) as store:
                assert store.memories() == []


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


def test_retry_setup_retries_a_lost_race_only_and_until_its_deadline():
    import sqlite3

    calls = []

    def locked_twice():
        calls.append(1)
        if len(calls) <= 2:
            raise sqlite3.OperationalError("database is locked")
        return "done"

    assert retry_setup(locked_twice) == "done" and len(calls) == 3

    def broken():
        calls.append(1)
        raise sqlite3.OperationalError("no such table: memories")

    calls.clear()
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        retry_setup(broken)
    assert len(calls) == 1  # not a race: raised at once

    def always_locked():
        calls.append(1)
        raise sqlite3.OperationalError("database is locked")

    calls.clear()
    started = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        retry_setup(always_locked, deadline=0.3)
    assert len(calls) > 1 and 0.3 <= time.monotonic() - started < 5
