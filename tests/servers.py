"""A private redis-server and a private PostgreSQL server, each on a free port in a folder of its own:
for the tests (conftest.py) and the benchmarks (bench/), which may stop and restart them and are the
only ones to empty them."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
import redis

REDIS_BINARY = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A redis-server this test session started, in its own folder, on a free port.

    Tests may stop and restart it; it is the only Redis the tests ever flush.
    """

    def __init__(self, folder: Path | str, *, appendonly: bool = False):
        self.folder = folder
        #: Persist what is queued across a restart (appendfsync always), as production should.
        self.appendonly = appendonly
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [REDIS_BINARY, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--dir", str(self.folder),
             *(["--appendonly", "yes", "--appendfsync", "always"] if self.appendonly else ["--appendonly", "no"])],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        try:
            for _ in range(400):
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    time.sleep(0.025)
        finally:
            client.close()
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


def _postgres_bin() -> str | None:
    """The folder of Debian's initdb and pg_ctl (the newest version's), or None when not installed."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    return str(found[-1].parent) if found else None


POSTGRES_BIN = _postgres_bin()


class PostgresServer:
    """A PostgreSQL server this test session started (initdb, pg_ctl) in a folder of its own, on a free
    port of 127.0.0.1, trusting local connections: the only PostgreSQL the tests use. PostgreSQL refuses
    to run as root: then the folder is made under the system's temporary folder for user postgres."""

    def __init__(self, folder: Path | str):
        self.port = free_port()
        self.url = f"postgresql://memo@127.0.0.1:{self.port}/memo"
        self.as_root = os.geteuid() == 0
        self.folder = Path(tempfile.mkdtemp(prefix="memo-pg-") if self.as_root else folder)
        self.data = self.folder / "data"

    def _run(self, *argv: str) -> subprocess.CompletedProcess:
        runner = ["runuser", "-u", "postgres", "--"] if self.as_root else []
        return subprocess.run([*runner, *argv], capture_output=True, text=True, timeout=120)

    def start(self) -> None:
        if self.as_root:
            shutil.chown(self.folder, "postgres")
        settings = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='{self.folder}'"
                    " -c fsync=off -c full_page_writes=off -c synchronous_commit=off -c max_connections=300")
        for argv in ([f"{POSTGRES_BIN}/initdb", "-D", str(self.data), "-U", "memo", "--auth=trust", "-E", "UTF8",
                      "--locale=C"],
                     [f"{POSTGRES_BIN}/pg_ctl", "-D", str(self.data), "-o", settings, "-l", str(self.folder / "log"),
                      "-w", "-t", "60", "start"]):
            done = self._run(*argv)
            if done.returncode:
                raise RuntimeError(f"{Path(argv[0]).name} failed: {done.stdout[-2000:]} {done.stderr[-2000:]}")
        with psycopg.connect(self.url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
            conn.execute("create database memo")

    def new_schema_url(self) -> str:
        """A URL whose connections see only a new, empty schema of their own (libpq's ``options``)."""
        schema = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"create schema {schema}")
        return f"{self.url}?options=-csearch_path%3D{schema}"

    def drop_schema(self, url: str) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"drop schema if exists {url.rsplit('%3D', 1)[1]} cascade")

    def stop(self) -> None:
        if self.data.exists():
            self._run(f"{POSTGRES_BIN}/pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        if self.as_root:
            shutil.rmtree(self.folder, ignore_errors=True)
