"""A private redis-server and a private PostgreSQL server, each on a free port in a folder of its own:
for the tests (conftest.py) and the benchmarks (bench/), which may stop and restart them and are the
only ones to empty them."""

from __future__ import annotations

import os
import pwd
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
    """The folder of initdb and pg_ctl: the one on PATH, else Debian's newest /usr/lib/postgresql/*/bin;
    None when PostgreSQL is not installed."""
    on_path = shutil.which("initdb")
    if on_path and (Path(on_path).resolve().parent / "pg_ctl").exists():
        return str(Path(on_path).resolve().parent)  # /usr/local/bin/initdb may be a link to Debian's
    found = [p for p in Path("/usr/lib/postgresql").glob("*/bin/initdb") if (p.parent / "pg_ctl").exists()]
    version = lambda p: tuple(int(n) for n in p.parts[-3].split(".") if n.isdigit())  # noqa: E731
    return str(max(found, key=version).parent) if found else None


POSTGRES_BIN = _postgres_bin()


class PostgresServer:
    """A PostgreSQL server this test session started (initdb, pg_ctl) in a folder of its own, on a free
    port of 127.0.0.1, trusting local connections (superuser ``memo``, database ``memo``): the only
    PostgreSQL the tests use, never the system's. PostgreSQL refuses to run as root: then it runs as user
    postgres (runuser) in a folder of the system's temporary folder that start() makes and stop() removes
    (pytest's folders, mode 700 under /tmp/pytest-of-root, are closed to user postgres)."""

    def __init__(self, folder: Path | str):
        self.port = free_port()
        self.url = f"postgresql://memo@127.0.0.1:{self.port}/memo"
        self.as_root = os.geteuid() == 0
        self.given = Path(folder)
        self.folder = self.given
        self.data = self.folder / "data"

    def _run(self, *argv: str) -> subprocess.CompletedProcess:
        runner = ["runuser", "-u", "postgres", "--"] if self.as_root else []
        return subprocess.run([*runner, *argv], capture_output=True, text=True, timeout=120, cwd=self.folder)

    def _log_tail(self) -> str:
        try:
            return (self.folder / "log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def start(self) -> None:
        """initdb, pg_ctl start -w (and pg_isready), then database memo; on failure, stop() and a
        RuntimeError with the end of the server's log."""
        if not self.as_root:
            self.folder.mkdir(parents=True, exist_ok=True)
        else:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root, PostgreSQL needs user postgres (Debian's package makes it)")
            self.folder = Path(tempfile.mkdtemp(prefix="memo-pg-"))
            self.data = self.folder / "data"
            os.chown(self.folder, user.pw_uid, user.pw_gid)
        try:
            self._check(f"{POSTGRES_BIN}/initdb", "-D", str(self.data), "-U", "memo", "--auth=trust", "-E", "UTF8",
                        "--locale=C")
            self.start_server()
            isready = shutil.which("pg_isready", path=f"{POSTGRES_BIN}:{os.environ.get('PATH', '')}")
            if isready and subprocess.run([isready, "-q", "-h", "127.0.0.1", "-p", str(self.port), "-t", "30"],
                                          timeout=60).returncode:
                raise RuntimeError(f"PostgreSQL does not answer on port {self.port}\nlog: {self._log_tail()}")
            with psycopg.connect(self.url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
                conn.execute("create database memo")
        except BaseException:
            self.stop()
            raise

    def start_server(self) -> None:
        """Start the server (again), on the same port and data."""
        settings = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='{self.folder}'"
                    " -c fsync=off -c full_page_writes=off -c synchronous_commit=off -c max_connections=300")
        self._check(f"{POSTGRES_BIN}/pg_ctl", "-D", str(self.data), "-o", settings, "-l", str(self.folder / "log"),
                    "-w", "-t", "60", "start")

    def stop_server(self) -> None:
        """Stop the server, keeping its data (``start_server`` starts it again)."""
        self._run(f"{POSTGRES_BIN}/pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def _check(self, *argv: str) -> None:
        done = self._run(*argv)
        if done.returncode:
            raise RuntimeError(f"{Path(argv[0]).name} failed: {done.stdout[-2000:]} {done.stderr[-2000:]}"
                               f"\nlog: {self._log_tail()}")

    def new_schema_url(self) -> str:
        """A URL whose connections see only a new, empty schema of their own: libpq's ``options`` set
        its search_path (``postgresql://memo@127.0.0.1:PORT/memo?options=-csearch_path%3Dt_HEX``)."""
        schema = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"create schema {schema}")
        return f"{self.url}?options=-csearch_path%3D{schema}"

    def drop_schema(self, url: str) -> None:
        """Drop the schema of a URL from new_schema_url(), with everything in it."""
        schema = url.rsplit("%3D", 1)[1]
        assert schema.startswith("t_") and schema[2:].isalnum(), url
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"drop schema if exists {schema} cascade")

    def stop(self) -> None:
        """pg_ctl stop -m fast, then remove its data (as root, the whole folder start() made): a later
        start() begins a new, empty server."""
        if (self.data / "postmaster.pid").exists():
            self.stop_server()
        shutil.rmtree(self.folder if self.as_root else self.data, ignore_errors=True)
        self.folder = self.given
        self.data = self.folder / "data"
