"""A stand-in for tests/servers.py's PostgresServer until that lands (same API): a private PostgreSQL
in a temporary folder, on a free port of 127.0.0.1, database ``memo`` owned by ``memo``, trust auth."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from tests.servers import free_port


def _bin() -> str | None:
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / "initdb").exists():
            return str(folder)
    found = shutil.which("initdb")
    return os.path.dirname(found) if found else None


POSTGRES_BIN = _bin()


class PostgresServer:
    def __init__(self, folder: Path | str):
        # (Not inside ``folder``: the postgres user may not reach into a private temporary folder.)
        self.folder = tempfile.mkdtemp(prefix="memo-pg-")
        self.data = os.path.join(self.folder, "data")
        self.port = free_port()
        self.url = f"postgresql://memo@127.0.0.1:{self.port}/memo"
        self.running = False

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *command], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def start(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres", "postgres")
        if not os.path.exists(self.data):
            self._run(f"{POSTGRES_BIN}/initdb", "-D", self.data, "-U", "memo", "--auth=trust", "-E", "UTF8",
                      "--no-sync")
        self._run(f"{POSTGRES_BIN}/pg_ctl", "-D", self.data, "-w", "-l", os.path.join(self.folder, "log"), "-o",
                  f"-p {self.port} -k {self.folder} -h 127.0.0.1 -c fsync=off", "start")
        self.running = True
        if not getattr(self, "_made", False):
            self._run(f"{POSTGRES_BIN}/createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "memo", "memo")
            self._made = True

    def new_schema_url(self) -> str:
        import psycopg

        schema = "s" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"create schema {schema}")
        return f"{self.url}?options=-csearch_path%3D{schema}"

    def stop(self) -> None:
        if self.running:
            self._run(f"{POSTGRES_BIN}/pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")
            self.running = False
            shutil.rmtree(self.folder, ignore_errors=True)
