"""The spool: jobs that wait in a local SQLite file while Redis cannot be reached (only then).

Each spooled job is the enqueue call as it would have been made, so sending it later is the same
call; it is removed only after Redis took it (a job id makes a second send harmless). Several
processes may share one spool file; SQLite serialises them."""

import contextlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from . import defaults

Job = dict[str, Any]


class Spool:
    def __init__(self, path: str | Path):
        self.path = str(path)

    @contextlib.contextmanager
    def _connect(self, *, create: bool = True) -> Iterator[sqlite3.Connection | None]:
        """A connection for one call, from any thread; None when nothing waits (no file, ``create`` false)."""
        if not os.path.exists(self.path):
            if not create:
                yield None
                return
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            # The jobs hold what users said (masked): the file is for this account only.
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, 0o600))
        conn = sqlite3.connect(self.path, timeout=defaults.BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        try:
            conn.execute("PRAGMA secure_delete = ON")  # sent jobs hold user text: overwrite it
            conn.execute("create table if not exists jobs (id integer primary key, job text not null)")
            yield conn
        finally:
            conn.close()

    def put(self, job: Job) -> None:
        """Keep one job (raises OSError or sqlite3.Error when the file cannot take it)."""
        with self._connect() as conn:
            conn.execute("insert into jobs (job) values (?)", [json.dumps(job, ensure_ascii=False)])

    def peek(self, limit: int = 100, *, after: int = 0) -> list[tuple[int, Job]]:
        """The oldest jobs (with an id above ``after``), with their ids for :meth:`remove`."""
        with self._connect(create=False) as conn:
            return [] if conn is None else [(i, json.loads(job)) for i, job in conn.execute(
                "select id, job from jobs where id > ? order by id limit ?", [after, limit])]

    def remove(self, ids: list[int]) -> None:
        with self._connect(create=False) as conn:
            if conn is not None:
                conn.execute("begin immediate")  # one commit for the batch, not one per job
                conn.executemany("delete from jobs where id = ?", [[i] for i in ids])
                conn.execute("commit")

    def rewrite(self, change: Callable[[Job], Job | None]) -> int:
        """Apply ``change(job) -> job or None`` (None: drop it) to every waiting job; how many
        changed. A forget request takes what it names out of the jobs waiting here too."""
        changed = 0
        with self._connect(create=False) as conn:
            if conn is None:
                return 0
            with conn:  # committed at the end, rolled back on an error
                conn.execute("begin immediate")
                for i, text in conn.execute("select id, job from jobs").fetchall():
                    job = json.loads(text)
                    new = change(job)
                    if new is None:
                        conn.execute("delete from jobs where id = ?", [i])
                    elif new != job:
                        conn.execute("update jobs set job = ? where id = ?", [json.dumps(new, ensure_ascii=False), i])
                    changed += new != job
        return changed

    def __len__(self) -> int:
        with self._connect(create=False) as conn:
            return 0 if conn is None else conn.execute("select count(*) from jobs").fetchone()[0]
