"""Shape checks for the MemoryBank probing gold labels (fast; no memory store involved)."""

import json

import pytest

from bench import memorybank as mb
from bench.datasets import DATASETS

needs_datasets = pytest.mark.skipif(not (DATASETS / "memorybank_siliconfriend").is_dir(),
                                    reason=f"shared datasets not found at {DATASETS}")


def test_gold_file_opens_with_the_rule():
    first = json.loads(mb.GOLD.read_text(encoding="utf-8").splitlines()[0])
    assert set(first) == {"about"} and "response" in first["about"] and "none" in first["about"]


def test_gold_rows_are_well_formed():
    rows = mb.gold_rows()
    assert {row["lang"] for row in rows} == {"zh", "en"}
    for row in rows:
        assert row["answer_in"] in {"query", "response", "none"}
        assert isinstance(row["gold"], list) and len(set(row["gold"])) == len(row["gold"])
        assert (row["answer_in"] == "none") == (row["gold"] == [])
        assert all(g.startswith(f"{row['user']}-2023-") for g in row["gold"])


@needs_datasets
@pytest.mark.parametrize("lang", mb.LANGS)
def test_turns_shape(lang):
    users = mb.turns(lang)
    assert len(users) == 15
    for user, rows in users.items():
        assert user == user.strip() and rows
        ts = [row["ts"] for row in rows]
        assert ts == sorted(ts) and len(set(ts)) == len(ts)
        for row in rows:
            assert row["message_id"].startswith(f"{row['session_id']}-")
            assert row["session_id"] == f"{user}-{row['date']}"
            assert isinstance(row["text"], str)


@needs_datasets
@pytest.mark.parametrize("lang", mb.LANGS)
def test_every_question_has_one_row_and_every_gold_id_exists(lang):
    users = mb.turns(lang)
    ids = {row["message_id"] for rows in users.values() for row in rows}
    asked = mb.questions(lang)
    rows = mb.gold_rows(lang)
    assert sorted((r["user"], r["question"]) for r in rows) == sorted(asked)
    assert len(asked) == 100
    for row in rows:
        assert set(row["gold"]) <= ids, row
    for q in mb.probing(lang):
        assert q["ts"] == users[q["user"]][-1]["ts"] + 86400
        assert q["ts"] > max(row["ts"] for row in users[q["user"]])
