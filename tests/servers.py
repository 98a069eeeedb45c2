"""A private redis-server on a free port, in a folder of its own: for the tests (conftest.py)
and the benchmarks (bench/), which may stop and restart it and are the only ones to flush it."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

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
