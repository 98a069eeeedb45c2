"""bench/eval.py: the hand-labelled capture sample is well-formed, and the metrics compute what they say."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from bench import eval as ev
from bench.datasets import DATASETS, SOURCES

needs_datasets = pytest.mark.skipif(not DATASETS.is_dir(), reason=f"shared datasets not found at {DATASETS}")

FIELDS = {"dataset", "lang", "id", "text", "label", "note"}
LANGS = {"memorybank-zh": "zh", "memorybank-en": "en", "dulemon": "zh"}


@pytest.fixture(scope="module")
def labels():
    return ev.load_labels()


def test_label_file_has_the_rule_in_its_header():
    head = [line for line in ev.LABELS.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    text = "\n".join(head)
    assert "label true" in text and "label false" in text and str(ev.SEED) in text


def test_label_file_is_well_formed(labels):
    assert len(labels) == sum(n for _, _, n in ev.SAMPLE)
    for row in labels:
        assert FIELDS <= set(row), row
        assert set(row) <= FIELDS | {"persona"}, row
        assert row["dataset"] in LANGS and row["lang"] == LANGS[row["dataset"]]
        assert isinstance(row["label"], bool)
        assert isinstance(row["text"], str) and row["text"].strip()
        assert isinstance(row["note"], str) and row["note"].strip()
        assert ("persona" in row) == (row["dataset"] == "dulemon")
    keys = Counter((r["dataset"], r["id"]) for r in labels)
    assert not [k for k, n in keys.items() if n > 1], "duplicate ids"
    for dataset in LANGS:
        seen = {r["label"] for r in labels if r["dataset"] == dataset}
        assert seen == {True, False}, f"{dataset}: both labels must occur"


@needs_datasets
def test_labelled_texts_are_the_seeded_sample_of_the_datasets(labels):
    texts = {(name, r["id"]): r["text"] for name in LANGS for r in SOURCES[name]()}
    for row in labels:
        assert texts[(row["dataset"], row["id"])] == row["text"], row["id"]
    sample = ev.sample_turns()
    assert [(s["dataset"], s["id"]) for s in sample] == [(r["dataset"], r["id"]) for r in labels]


def test_precision_recall_f1():
    m = ev.prf([True, True, False, False, True], [True, False, True, False, True])
    assert (m["tp"], m["fp"], m["fn"]) == (2, 1, 1)
    assert m["precision"] == pytest.approx(2 / 3) and m["recall"] == pytest.approx(2 / 3)
    assert m["f1"] == pytest.approx(2 / 3)
    every = ev.prf([True] * 4, [True, False, False, False])
    assert every["precision"] == 0.25 and every["recall"] == 1.0 and every["f1"] == pytest.approx(0.4)
    none = ev.prf([False, False], [True, False])
    assert none["precision"] == 0.0 and none["recall"] == 0.0 and none["f1"] == 0.0


def test_hit_and_recall_at_k():
    ranked = ["a", "b", "c", "d"]
    assert ev.hit_at_k(ranked, ["c"], 1) == 0.0
    assert ev.hit_at_k(ranked, ["c"], 3) == 1.0
    assert ev.recall_at_k(ranked, ["a", "d"], 1) == 0.5
    assert ev.recall_at_k(ranked, ["a", "d"], 3) == 0.5
    assert ev.recall_at_k(ranked, ["a", "d"], 5) == 1.0
    assert ev.hit_at_k([], ["a"], 5) == 0.0
    # One stored row standing for several memories (same text, merged) counts as all of them.
    assert ev.recall_at_k([["x", "y"], ["z"]], ["y", "z"], 1) == 0.5
    assert ev.hit_at_k([["x", "y"], ["z"]], ["y"], 1) == 1.0


def test_bm25_ranks_the_obviously_relevant_document_first():
    docs = ["Bart went fishing with his father at the lake.", "Bart won a chess game at school.",
            "Bart ate a mango ice cream."]
    assert ev.BM25(docs).rank("I want to play chess again")[0] == 1
    zh = ["Bart和爸爸去湖边钓鱼。", "Bart在学校下象棋赢了。", "Bart吃了芒果冰淇淋。"]
    assert ev.BM25(zh).rank("我还想再吃冰淇淋！")[0] == 2
    assert ev.BM25(zh).rank("xyz") == []
    assert ev.bm25_tokens("I like 下象棋") == ["i", "like", "下", "象", "棋", "下象", "象棋"]


def test_madial_query_is_the_user_turn_before_the_test_turn(tmp_path):
    folder = tmp_path / "madial_bench" / "zh"
    folder.mkdir(parents=True)
    dialogue = {"dialogue": ["<BOD>\n", '<Bart>:"我今天好开心"\n', '<Assistant>:"为什么呀？"\n',
                             '<Bart>:"我想再去放风筝！"\n', '<Assistant>:"你记得在海边放风筝吗？"\n', "<EOD>\n"],
                "test-turn": [4], "relevant-id": [8, 3], "user-id": 1, "id": 0}
    (folder / "MADial-Bench-zh-dialogue.json").write_text(json.dumps(dialogue, ensure_ascii=False) + "\n", "utf-8")
    [last] = ev.madial_queries("zh", "last", root=tmp_path)
    assert last["query"] == "我想再去放风筝！" and last["gold"] == ["8", "3"] and last["user"] == 1
    [history] = ev.madial_queries("zh", "history", root=tmp_path)
    assert history["query"] == "我今天好开心 我想再去放风筝！"
