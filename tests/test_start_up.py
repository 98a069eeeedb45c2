"""Web and job workers that start together on new files (gunicorn forks its workers at
once; a deploy starts web and job workers side by side), while a job worker holds the
database's write lock, or while the database's disk is full: every one of them starts. A lost
race for a file's journal mode or schema is retried, a held lock passes the start-up write
check with a warning, a full disk starts the middleware degraded: never a failed boot, which
under gunicorn would stop the whole server ("Worker failed to boot"). A configuration mistake
is still an error at start-up."""

from __future__ import annotations

import json
import resource
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from memo_mw import MemoryMiddleware
from memo_mw.exceptions import StoreError
from memo_mw.spool import Spool
from memo_mw.store import Store

from .conftest import wait_until
from .loadgen import drain
from .test_middleware import seed

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


#: Bytes a file may grow to on the "full disk" below: less than SQLite's shared-memory file
#: (32 KiB) needs, more than the few lines the server logs.
FULL_DISK_BYTES = 20_000


def full_disk() -> None:
    """In the process that runs it (and those it starts): no file may grow past FULL_DISK_BYTES
    (RLIMIT_FSIZE, its signal ignored so that a write fails as on a full disk). SQLite cannot make
    the database's shared-memory file: opening the database fails with "disk I/O error"."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (FULL_DISK_BYTES, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def test_gunicorn_starts_degraded_on_a_full_disk_and_its_captures_reach_the_store(tmp_path, redis_url):
    """Issue 33, item 2: a full disk when the web workers boot makes them start degraded (one
    warning each) instead of failing to boot; the chat answers, the capture goes to Redis."""
    import http.client

    from .loadgen import gunicorn

    db = str(tmp_path / "memo.db")
    Store(db).close()
    with gunicorn(db, redis_url, workers=2, threads=2, preexec_fn=full_disk) as server:
        for message in ("I like kalimba music", "hello there"):
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
            conn.request("POST", "/chat", body=json.dumps({"message": message}),
                         headers={"Content-Type": "application/json", "X-User-Id": "u1"})
            response = conn.getresponse()
            assert response.status == 200 and json.loads(response.read())["echo"] == message
            conn.close()
        assert wait_until(lambda: server.log_text().count("starting degraded") == 2), server.log_text()
        assert server.process.poll() is None, server.log_text()
        log = server.log_text()
    assert "disk I/O error" in log and "Worker failed to boot" not in log
    assert log.count("recall failed") == 0  # not a line per request
    assert drain(redis_url) >= 1
    with Store(db) as store:
        assert [m["content"] for m in store.list("u1")] == ["likes kalimba music"]


# A web process on a full disk, then with room again: no restart in between.
DEGRADED = """
import json, logging, resource, signal, sys
from flask import Flask, jsonify, request
from memo_mw import MemoryMiddleware
from tests.test_start_up import full_disk
logging.basicConfig(level=logging.WARNING)
full_disk()
app = Flask("chat")
app.post("/chat")(lambda: jsonify(memories=[m["content"] for m in request.environ.get("memo.memories", [])]))
app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=sys.argv[1], redis_url=sys.argv[2], trust_user_header=True)
client = app.test_client()
def say(message):
    return client.post("/chat", json={"message": message}, headers={"X-User-Id": "alice"}).json["memories"]
seen = [say("which green tea should I buy? I like oolong"), say("which green tea should I buy?")]
hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))  # the disk has room again
seen.append(say("which green tea should I buy?"))
print(json.dumps(seen))
"""


def test_a_degraded_start_recalls_once_the_database_recovers_without_a_restart(tmp_path, redis_url):
    db = str(tmp_path / "memo.db")
    seed(db, "alice", "likes green tea", "green tea")
    from .loadgen import ROOT

    done = subprocess.run([sys.executable, "-c", DEGRADED, db, redis_url], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # While full: the chat passes through with nothing recalled; with room: recalled, same process.
    full, full_again, room = json.loads(done.stdout)
    assert full == full_again == [] and sorted(room) == ["likes green tea", "likes oolong"]  # (oolong: pending)
    assert done.stderr.count("starting degraded") == 1 and "Traceback" not in done.stderr, done.stderr
    drain(redis_url)  # the capture made while the disk was full went to Redis
    with Store(db) as store:
        assert sorted(m["content"] for m in store.list("alice")) == ["likes green tea", "likes oolong"]


def _other_version(path):
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    return path


@pytest.mark.parametrize("make, error", [
    pytest.param(lambda path: path.mkdir() or path, "it is a directory", id="a-directory"),
    pytest.param(lambda path: path.write_bytes(b"this is not sqlite" * 100) and path, "not a database",
                 id="not-a-database"),
    pytest.param(_other_version, "schema version 99", id="another-schema-version"),
    pytest.param(lambda path: path.write_text("x") and path / "memo.db", "cannot open", id="under-a-file"),
])
def test_a_configuration_mistake_is_still_an_error_at_start_up(tmp_path, make, error):
    db = make(tmp_path / "memo.db")
    with pytest.raises(StoreError, match=error):
        MemoryMiddleware(lambda environ, start_response: [], db=str(db))
