"""The spool (memo_mw.spool) on a real SQLite file: jobs wait in order, leave only when removed,
and a forget request can rewrite or drop them."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from memo_mw.spool import Spool


def job(n: int, user: str = "alice") -> dict:
    return {"func": "memo_mw.jobs.remember", "args": ["db", {"user_id": user, "n": n, "text": f"语 {n}"}],
            "job_id": f"job-{n}", "user_id": user, "pending": None}


def test_jobs_wait_in_order_until_removed(tmp_path):
    spool = Spool(tmp_path / "deep" / "folder" / "memo.spool")  # folders made on the first put
    assert len(spool) == 0 and spool.peek() == []
    assert not os.path.exists(spool.path)  # reading an empty spool creates nothing
    for n in range(5):
        spool.put(job(n))
    assert len(spool) == 5
    batch = spool.peek(limit=3)
    assert [j for _, j in batch] == [job(0), job(1), job(2)]  # oldest first, the same JSON back
    spool.remove([i for i, _ in batch[:2]])
    assert [j["job_id"] for _, j in spool.peek()] == ["job-2", "job-3", "job-4"]
    assert len(Spool(spool.path)) == 3  # in the file, for another process on it


def test_the_spool_file_is_private(tmp_path):
    spool = Spool(tmp_path / "memo.spool")
    spool.put(job(1))
    assert stat.S_IMODE(os.stat(spool.path).st_mode) == 0o600


def test_rewrite_changes_drops_and_keeps(tmp_path):
    spool = Spool(tmp_path / "memo.spool")
    assert spool.rewrite(lambda j: None) == 0  # nothing waits: nothing changes
    for n, user in enumerate(["alice", "bob", "alice"]):
        spool.put(job(n, user))

    def change(j):
        if j["user_id"] != "alice":
            return j
        return None if j["args"][1]["n"] == 0 else {**j, "args": [j["args"][0], {**j["args"][1], "text": "gone"}]}

    assert spool.rewrite(change) == 2
    assert [(j["user_id"], j["args"][1]["text"]) for _, j in spool.peek()] == [("bob", "语 1"), ("alice", "gone")]
    assert spool.rewrite(change) == 0  # alice's job is already as the change makes it
    assert len(spool) == 2


def test_a_failing_rewrite_changes_nothing(tmp_path):
    spool = Spool(tmp_path / "memo.spool")
    spool.put(job(1))
    spool.put(job(2))

    def change(j):
        if j["args"][1]["n"] == 2:
            raise ValueError("bad job")

    with pytest.raises(ValueError):
        spool.rewrite(change)
    assert [j["job_id"] for _, j in spool.peek()] == ["job-1", "job-2"]


def test_removed_text_leaves_the_file(tmp_path):
    spool = Spool(tmp_path / "memo.spool")
    spool.put({**job(1), "args": ["db", {"text": "zanzibarian oolong"}]})
    spool.put(job(2))
    assert b"zanzibarian" in Path(spool.path).read_bytes()
    spool.remove([i for i, j in spool.peek() if j["job_id"] == "job-1"])
    assert b"zanzibarian" not in Path(spool.path).read_bytes()  # secure_delete: overwritten


@pytest.mark.parametrize("where", [pytest.param("under-a-file", id="parent-is-a-file"),
                                   pytest.param("a-directory", id="path-is-a-directory")])
def test_an_unwritable_spool_raises_on_put(tmp_path, where):
    (tmp_path / "plain-file").write_text("x")
    (tmp_path / "a-directory").mkdir()
    path = tmp_path / "plain-file" / "memo.spool" if where == "under-a-file" else tmp_path / "a-directory"
    spool = Spool(path)
    with pytest.raises((OSError, sqlite3.Error)):
        spool.put(job(1))
