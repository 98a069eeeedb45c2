"""The spool: jobs that wait in a local SQLite file while Redis cannot be reached.

Used only then: a job goes to Redis when Redis answers. Each spooled job is the enqueue call as
it would have been made (function, JSON arguments, job id, the pending payload for the user's
state), so sending it later is the same call. Jobs are sent oldest first and removed only after
Redis took them: a process that dies in between sends them again, which their job ids make
harmless. Several processes may share one spool file; SQLite serialises them.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from . import defaults


class Spool:
    def __init__(self, path: str | Path):
        self.path = str(path)

    def _connect(self) -> sqlite3.Connection:
        # A connection per call: the spool is used only while Redis is down, from any thread.
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=defaults.SQLITE_BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        conn.execute("PRAGMA secure_delete = ON")  # sent jobs hold user text: overwrite it
        conn.execute("create table if not exists jobs (id integer primary key, job text not null)")
        return conn

    def put(self, job: dict[str, Any]) -> None:
        """Keep one job (raises OSError or sqlite3.Error when the file cannot take it)."""
        conn = self._connect()
        try:
            conn.execute("insert into jobs (job) values (?)", [json.dumps(job, ensure_ascii=False)])
        finally:
            conn.close()

    def peek(self, limit: int = 100) -> list[tuple[int, dict[str, Any]]]:
        """The oldest jobs, with their ids for :meth:`remove`; nothing when there is no file."""
        if not Path(self.path).exists():
            return []
        conn = self._connect()
        try:
            return [(i, json.loads(job)) for i, job in
                    conn.execute("select id, job from jobs order by id limit ?", [limit])]
        finally:
            conn.close()

    def remove(self, ids: list[int]) -> None:
        conn = self._connect()
        try:
            conn.executemany("delete from jobs where id = ?", [[i] for i in ids])
        finally:
            conn.close()

    def rewrite(self, change: Any) -> int:
        """Apply ``change(job) -> job or None`` (None: drop it) to every waiting job; how many
        changed. A forget request takes what it names out of the jobs waiting here too."""
        conn = self._connect()
        changed = 0
        try:
            conn.execute("begin immediate")
            for i, text in conn.execute("select id, job from jobs").fetchall():
                job = json.loads(text)
                new = change(job)
                if new is None:
                    conn.execute("delete from jobs where id = ?", [i])
                elif new != job:
                    conn.execute("update jobs set job = ? where id = ?", [json.dumps(new, ensure_ascii=False), i])
                changed += new != job
            conn.execute("commit")
        finally:
            conn.close()
        return changed

    def __len__(self) -> int:
        if not Path(self.path).exists():
            return 0
        conn = self._connect()
        try:
            return conn.execute("select count(*) from jobs").fetchone()[0]
        finally:
            conn.close()
