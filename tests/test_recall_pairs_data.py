"""tests/data/recall_pairs_heldout.jsonl (bench/recall_pairs.py) is well-formed: shape only, no figures."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

PAIRS = Path(__file__).resolve().parent / "data" / "recall_pairs_heldout.jsonl"


def rows() -> list[dict]:
    return [json.loads(line) for line in PAIRS.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_header_then_users():
    head, *users = rows()
    assert set(head) >= {"about"} and "gold" in head["about"]
    for user in users:
        assert set(user) == {"user", "lang", "statements", "requests"}
        assert user["lang"] in ("zh", "en") and user["user"].startswith(user["lang"] + "-")
        assert 5 <= len(user["statements"]) <= 8 and 2 <= len(user["requests"]) <= 3
        assert all(s["text"].strip() for s in user["statements"])
        assert all(r["text"].strip() and isinstance(r["gold"], list) for r in user["requests"])


def test_each_language_has_50_users_and_some_requests_without_gold():
    users = rows()[1:]
    for lang in ("zh", "en"):
        mine = [u for u in users if u["lang"] == lang]
        assert len(mine) >= 50
        assert any(not r["gold"] for u in mine for r in u["requests"])


def test_ids_unique_and_every_gold_id_is_a_statement_of_the_same_user():
    users = rows()[1:]
    assert not [k for k, n in Counter(u["user"] for u in users).items() if n > 1]
    ids = [s["id"] for u in users for s in u["statements"]]
    assert not [k for k, n in Counter(ids).items() if n > 1]
    for user in users:
        own = {s["id"] for s in user["statements"]}
        assert all(s["id"].startswith(user["user"] + "-s") for s in user["statements"])
        for request in user["requests"]:
            assert set(request["gold"]) <= own, (user["user"], request["text"])
            assert len(set(request["gold"])) == len(request["gold"])
