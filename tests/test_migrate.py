"""``memo-mw migrate``: a whole store copied from SQLite into PostgreSQL and back, every table, ids kept,
each table's rows counted on both sides; a destination that holds data is refused."""

from __future__ import annotations

from click.testing import CliRunner

from memo_mw.cli import main
from memo_mw.migrate import TABLES, counts
from memo_mw.store import Store
from memo_mw.userdata import export

from .test_store import payload

T0 = 1_700_000_000


def fill(db: str) -> None:
    """Two users' memories (one superseded, one forgotten), history, topic counts and a history opt-out."""
    with Store(db) as store:
        for n, (user, content, key) in enumerate([("alice", "likes green tea", "tea"), ("alice", "dislikes tea", "tea"),
                                                  ("alice", "喜欢喝美式咖啡", "美式咖啡"), ("bob", "plays chess", "chess"),
                                                  ("bob", "likes jazz", "jazz")]):
            said = {"text": f"message {n}: {content}", "days": 90}
            store.remember({**payload(content, key, user=user, ts=T0 + n, job_key=f"j{n}",
                                      polarity=-1 if content.startswith("dislikes") else 1), "history": said})
        store.forget("bob", match="jazz", ts=T0 + 10, reason="test", now=True)
        store.db.execute("insert into topic_counts values (?, ?, ?, ?)", ["alice", "2023-W46", "food", 3])
        store.db.execute("insert into history_off values (?, ?)", ["carol", T0])


def run(*argv: str):
    return CliRunner().invoke(main, ["migrate", *argv])


def test_a_store_goes_to_postgresql_and_back_whole(tmp_path, postgres_url):
    source, back = str(tmp_path / "memo.db"), str(tmp_path / "back.db")
    fill(source)
    done = run("--from", source, "--to", postgres_url)
    assert done.exit_code == 0, done.output
    assert "copied and checked" in done.output and "copying" in done.stderr  # the progress bar's line
    assert run("--from", postgres_url, "--to", back).exit_code == 0
    with Store(source) as a, Store(postgres_url) as b, Store(back) as c:
        assert counts(a) == counts(b) == counts(c) and all(counts(a)[t] for t in ("memories", "history", "audit"))
        for user in ("alice", "bob"):
            exported = [export(s, user, now=T0 + 100) for s in (a, b, c)]
            assert exported[0] == exported[1] == exported[2]  # every field, ids included
        # Search works on the copies (PostgreSQL's tsvector is made from the copied terms).
        assert [m["content"] for m in b.search("alice", ["咖啡"])] == ["喜欢喝美式咖啡"]
        assert [m["content"] for m in c.search("alice", ["咖啡"])] == ["喜欢喝美式咖啡"]
        # New rows take new ids after the copied ones.
        b.remember(payload("likes rain", "rain", user="alice", ts=T0 + 50))
        assert max(m["id"] for m in b.list("alice")) > max(m["id"] for m in a.list(None, include_inactive=True))


def test_a_destination_with_data_is_refused_and_left_as_it_was(tmp_path, postgres_url):
    source = str(tmp_path / "memo.db")
    fill(source)
    with Store(postgres_url) as target:
        target.remember(payload("likes snow", "snow", user="dave"))
        before = counts(target)
    done = run("--from", source, "--to", postgres_url)
    assert done.exit_code == 1 and "already holds memo-mw data" in done.output
    with Store(postgres_url) as target:
        assert counts(target) == before


def test_a_missing_source_is_a_clear_error(tmp_path):
    done = run("--from", str(tmp_path / "none.db"), "--to", str(tmp_path / "to.db"))
    assert done.exit_code == 1 and "Error:" in done.output and "Traceback" not in done.output


def test_every_table_of_the_store_is_copied(tmp_path):
    with Store(str(tmp_path / "memo.db")) as store:
        tables = {t for (t,) in store.db.execute("select name from sqlite_master where type = 'table'")}
    assert tables - set(TABLES) <= {t for t in tables if "_fts" in t}  # (FTS5's own tables are remade)
