"""The ``memo-mw`` command line, through click's CliRunner and as real processes.

Most tests use a small rules folder of their own (``rules_dir``), so the counts they
assert do not move when the shipped zh/en rules are tuned; a few run the shipped rules
on statements any version of them must capture.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
import redis
from click.testing import CliRunner
from rq import Queue
from rq.serializers import JSONSerializer
from werkzeug.test import Client

from memo_mw import MemoryMiddleware, defaults
from memo_mw.cli import REPLAY_COUNTS, main
from memo_mw.funnel import STAGES
from memo_mw.store import Store

from .conftest import drain, free_port

pytestmark = pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)

BIN = Path(sys.executable).parent
MEMO_MW = shutil.which("memo-mw", path=str(BIN))

T0 = 1_700_000_000  # 2023-11-14, the clock of every log below

EN_RULES = r"""
language: en
max_capture: 30
pronouns:
  my: their
negative:
  - id: t.en.question
    pattern: '\?\s*$'
    reason: a question
sensitive:
  - id: t.en.health
    pattern: '\bdiagnosed\b'
    reason: health
forget:
  - id: t.en.forget.all
    pattern: '\bforget everything\b'
    scope: all
  - id: t.en.forget.match
    pattern: '\bforget that (?P<what>[^.!?]+)'
    scope: match
recall_all:
  - id: t.en.recall_all
    pattern: '\bwhat do you remember\b'
triggers:
  - id: t.en.dislike
    pattern: "\\bI (?:don't like|hate) (?P<what>[^,.;!?]+)"
    type: preference
    polarity: -1
    summary: 'dislikes {what}'
  - id: t.en.like
    pattern: '\bI (?:like|love) (?P<what>[^,.;!?]+)'
    type: preference
    summary: 'likes {what}'
"""

ZH_RULES = r"""
language: zh
max_length: 30
trailing: ['的']
forget:
  - id: t.zh.forget
    pattern: '忘掉(?P<what>.+)'
    scope: match
triggers:
  - id: t.zh.dislike
    pattern: '我不喜欢(?P<what>[^，,。！？!?]+)'
    type: preference
    polarity: -1
    summary: '不喜欢{what}'
  - id: t.zh.like
    pattern: '我喜欢(?P<what>[^，,。！？!?]+)'
    type: preference
    summary: '喜欢{what}'
"""


@pytest.fixture
def rules_dir(tmp_path) -> Path:
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "en.yaml").write_text(EN_RULES, encoding="utf-8")
    (folder / "zh.yaml").write_text(ZH_RULES, encoding="utf-8")
    return folder


def cli(*args: str, input: str | None = None):
    """Run memo-mw in-process; a crash (anything but a click exit) fails the test with its traceback."""
    result = CliRunner().invoke(main, [str(a) for a in args], input=input)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def write_jsonl(path: Path, records) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        for r in records:
            fh.write(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False))
            fh.write("\n")
    return path


def msg(text, *, user="alice", ts, id=None, role=None, session="s1"):
    record = {"user": user, "session": session, "ts": ts, "text": text}
    if id is not None:
        record["id"] = id
    if role is not None:
        record["role"] = role
    return record


# One small chat log with a line for every stage and every store outcome.
LOG = [
    msg("我喜欢喝乌龙茶", ts=T0, id="z1"),                                 # 1 captured, stored
    msg("I like jazz", ts=T0 + 10, id="e1"),                              # 2 captured, stored
    msg("I like jazz", ts=T0 + 10, id="e1"),                              # 3 the same message re-sent: duplicate_job
    msg("I love opera", ts=T0 + 15, id="a1", role="assistant"),           # 4 context only: not_user
    "{this is not json",                                                  # 5 invalid
    {"user": "alice", "session": "s1", "text": "I like tea"},             # 6 invalid: no ts
    msg("I like jazz.", ts=T0 + 30, id="e2"),                             # 7 same statement again: merged
    msg("I don't like jazz", ts=T0 + 40, id="e3"),                        # 8 the opposite: superseded
    msg("I like tennis", user="bob", ts=T0 + 50, id="b1", session="s2"),  # 9 stored
    msg("I like chess", user="bob", ts=T0 + 60, id="b2", session="s2"),   # 10 stored
    msg("forget that I like tennis", user="bob", ts=T0 + 70, id="b3"),    # 11 forget: 1 forgotten
    msg("I like jazz?", ts=T0 + 80),                                      # 12 negative
    msg("I like being diagnosed early", ts=T0 + 90),                      # 13 sensitive
    msg("hello there", ts=T0 + 100),                                      # 14 no_trigger
    msg("我喜欢" + "很长的一句话" * 6, ts=T0 + 110),                      # 15 too_long (zh max_length 30)
    msg("I like " + "a very long phrase that goes on", ts=T0 + 120),      # 16 unusable (max_capture 30)
    "   ",                                                                # blank: not a line
]

EXPECTED = {
    "lines": 16, "invalid": 2, "not_user": 1, "forget": 1, "no_trigger": 1, "too_long": 1, "negative": 1,
    "sensitive": 1, "unusable": 1, "captured": 7, "stored": 4, "merged": 1, "superseded": 1,
    "duplicate_job": 1, "discarded": 0, "forgotten": 1,
}


@pytest.fixture
def replayed(tmp_path, rules_dir, db):
    """The database after replaying LOG, and the replay's result."""
    log = write_jsonl(tmp_path / "log.jsonl", LOG)
    result = cli("replay", log, "--db", db, "--rules", rules_dir, "--json")
    assert result.exit_code == 0, result.output
    return db, result


def memories(db, *args):
    result = cli("memories", "--db", db, "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


# -- replay -----------------------------------------------------------------------------


def test_replay_counts_every_stage_and_outcome(replayed):
    _, result = replayed
    counts = json.loads(result.stdout)
    assert list(counts) == [*REPLAY_COUNTS, "seconds"]
    assert {k: v for k, v in counts.items() if k != "seconds"} == EXPECTED
    # Every non-blank line is counted exactly once: invalid, someone else's, or at one funnel stage.
    assert counts["lines"] == counts["invalid"] + counts["not_user"] + sum(counts[s] for s in STAGES)
    assert counts["captured"] == sum(counts[k] for k in ("stored", "merged", "superseded", "duplicate_job"))
    # The invalid lines are named on stderr, with their line numbers; stdout is only the JSON.
    assert "line 5: skipped" in result.stderr and "not JSON" in result.stderr
    assert "line 6: skipped" in result.stderr and "ts must be epoch seconds" in result.stderr


def test_replay_prints_a_table_without_json(tmp_path, rules_dir, db):
    log = write_jsonl(tmp_path / "log.jsonl", LOG)
    result = cli("replay", log, "--db", db, "--rules", rules_dir)
    assert result.exit_code == 0
    table = dict(line.split() for line in result.stdout.splitlines())
    assert {k: int(v) for k, v in table.items() if k != "seconds"} == EXPECTED
    assert float(table["seconds"]) >= 0


def test_replay_reads_stdin_and_is_idempotent(tmp_path, rules_dir, db):
    text = "\n".join(json.dumps(r, ensure_ascii=False) if isinstance(r, dict) else r for r in LOG)
    first = json.loads(cli("replay", "-", "--db", db, "--rules", rules_dir, "--json", input=text).stdout)
    assert first["stored"] == 4
    again = json.loads(cli("replay", "-", "--db", db, "--rules", rules_dir, "--json", input=text).stdout)
    # The same messages make the same job keys as the middleware would: nothing is stored twice.
    # (7 captures, and 4 more messages kept as chat history only)
    assert again["captured"] == 7 and again["duplicate_job"] == 7 + 4
    assert again["stored"] == again["merged"] == again["superseded"] == 0


@pytest.mark.parametrize("record, reason", [
    ({"user": "a", "session": "s", "ts": True, "text": "I like jazz"}, "ts must be epoch seconds"),
    ({"user": "a", "session": "s", "ts": T0 * 1000, "text": "I like jazz"}, "ts must be epoch seconds"),
    ({"user": "", "session": "s", "ts": T0, "text": "I like jazz"}, "no user"),
    ({"user": None, "session": "s", "ts": T0, "text": "I like jazz"}, "no user"),
    ({"user": "a", "session": "s", "ts": T0, "text": 5}, 'no "text"'),
    ({"user": "a", "session": "s", "ts": T0, "text": "I like jazz", "role": 3}, "role must be a string"),
    ('["a", "list"]', "not a JSON object"),
    ('{"user": "a", "ts": NaN, "text": "I like jazz"}', "ts must be epoch seconds"),
])
def test_replay_skips_invalid_lines_with_a_reason(tmp_path, rules_dir, db, record, reason):
    log = write_jsonl(tmp_path / "log.jsonl", [record, msg("I like jazz", user="a", ts=T0 + 1)])
    result = cli("replay", log, "--db", db, "--rules", rules_dir, "--json")
    assert result.exit_code == 0
    counts = json.loads(result.stdout)
    assert (counts["lines"], counts["invalid"], counts["stored"]) == (2, 1, 1)
    assert "line 1: skipped" in result.stderr and reason in result.stderr


def bytes_file(path, *lines: bytes):
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_a_line_that_is_not_utf8_is_named_replay_and_rules_test_go_on_recall_batch_stops(tmp_path, rules_dir, db):
    good = json.dumps(msg("I like jazz", user="a", ts=T0)).encode()
    bad = b'{"user": "a", "ts": 1700000001, "text": "I like caf\xe9"}'  # Latin-1, not UTF-8
    log = bytes_file(tmp_path / "log.jsonl", bad, good)
    result = cli("replay", log, "--db", db, "--rules", rules_dir, "--json")
    assert result.exit_code == 0 and "line 1: skipped: not UTF-8" in result.stderr
    assert (json.loads(result.stdout)["invalid"], json.loads(result.stdout)["stored"]) == (1, 1)  # the rest is read
    tested = cli("rules", "test", "--rules", rules_dir, "--file", log, "--json")
    assert tested.exit_code == 0 and "line 1: skipped: not UTF-8" in tested.stderr
    assert json.loads(tested.stdout)["invalid"] == 1 and json.loads(tested.stdout)["stages"]["captured"] == 1
    asks = bytes_file(tmp_path / "asks.jsonl", b'{"user": "a", "query": "jazz"}', b'{"user": "a", "query": "caf\xe9"}')
    batch = cli("recall", "--db", db, "--batch", asks)
    assert batch.exit_code == 1 and "line 2: not a recall request" in batch.stderr and "not UTF-8" in batch.stderr
    assert "Traceback" not in batch.output + batch.stderr


def test_recall_for_a_user_with_nothing_stored_says_so(music_db):
    result = cli("recall", "--db", music_db, "--user", "nobody", "jazz")
    assert result.exit_code == 0 and result.stdout == "" and "nothing is stored for user 'nobody'" in result.stderr
    assert "nothing is stored" not in cli("recall", "--db", music_db, "--user", "alice", "weather").stderr


def test_replay_throughput_and_counts_on_2000_lines(tmp_path, rules_dir, db, capsys):
    """200 blocks of 10 lines, 4 blocks per user; the outcome of each line is known in advance."""
    records = []
    for i in range(200):
        user, ts = f"u{i % 50}", T0 + i * 10
        records += [
            msg("I like jazz", user=user, ts=ts, id=f"{i}-0"),                  # stored, then supersedes a dislike
            msg("我喜欢喝乌龙茶", user=user, ts=ts + 1, id=f"{i}-1"),            # stored, then merged
            msg("hello there", user=user, ts=ts + 2),                          # no_trigger
            msg("I like jazz?", user=user, ts=ts + 3),                         # negative
            msg("I like jazz", user=user, ts=ts + 4, role="assistant"),        # not_user
            msg("I don't like jazz", user=user, ts=ts + 5, id=f"{i}-5"),       # supersedes the like
            "not json at all",                                                 # invalid
            msg("I like being diagnosed", user=user, ts=ts + 7),               # sensitive
            msg(f"I like tennis round {i}", user=user, ts=ts + 8, id=f"{i}-8"),  # stored
            msg(f"forget that I like tennis round {i}", user=user, ts=ts + 9),   # forget: 1 forgotten
        ]
    log = write_jsonl(tmp_path / "big.jsonl", records)
    result = cli("replay", log, "--db", db, "--rules", rules_dir, "--json")
    assert result.exit_code == 0
    counts = json.loads(result.stdout)
    seconds = counts.pop("seconds")
    assert counts == {
        "lines": 2000, "invalid": 200, "not_user": 200, "forget": 200, "no_trigger": 200, "too_long": 0,
        "negative": 200, "sensitive": 200, "unusable": 0, "captured": 800,
        # per user: block 1 stores jazz, tea and tennis, and the dislike supersedes the like;
        # blocks 2-4 each supersede twice (like over dislike, dislike over like), merge the
        # tea and store a tennis round, which the next line forgets.
        "stored": 50 * (3 + 3 * 1), "merged": 50 * 3, "superseded": 50 * (1 + 3 * 2), "duplicate_job": 0, "discarded": 0,
        "forgotten": 200,
    }
    active, everything = memories(db), memories(db, "--all")
    assert len(active) == 100 and len(everything) == 450  # per user: 8 jazz memories (7 superseded) and the tea
    assert {m["content"] for m in active} == {"dislikes jazz", "喜欢喝乌龙茶"}
    assert not any("tennis" in m["content"] for m in everything)
    with capsys.disabled():  # speed is reported, not asserted: it belongs to the benchmarks
        print(f"\n[memo-mw replay] 2000 lines in {seconds:.2f} s = {2000 / max(seconds, 1e-9):,.0f} lines/second")


def test_replay_with_the_shipped_rules(tmp_path, db):
    log = write_jsonl(tmp_path / "log.jsonl", [
        msg("I like jazz", ts=T0, id="m1"),
        msg("我喜欢喝乌龙茶", ts=T0 + 1, id="m2"),
        msg("I like jazz", ts=T0 + 2, id="m3", role="assistant"),
        msg("hello", ts=T0 + 3),
    ])
    result = cli("replay", log, "--db", db, "--json")
    assert result.exit_code == 0, result.output
    counts = json.loads(result.stdout)
    assert (counts["lines"], counts["captured"], counts["stored"], counts["not_user"], counts["no_trigger"]) == (
        4, 2, 2, 1, 1)
    stored = {m["source_ids"][0]: m for m in memories(db)}
    assert set(stored) == {"m1", "m2"}
    assert "jazz" in stored["m1"]["content"] and "乌龙茶" in stored["m2"]["content"]


# -- memories ---------------------------------------------------------------------------

FIELD_TYPES = {
    "id": int, "user_id": str, "type": str, "key": str, "polarity": int, "content": str, "excerpt": str,
    "active": bool, "status": str, "source_session": str, "source_ts": int, "source_ids": list,
    "confidence": float, "hits": int, "created_at": int,
}


def test_memories_json_fields_and_types(replayed):
    db, _ = replayed
    rows = memories(db, "--all")
    assert rows, "nothing stored"
    for m in rows:
        for name, kind in FIELD_TYPES.items():
            assert name in m, name
            assert type(m[name]) is kind, (name, m[name])  # exactly: True is not an int here, 1 not a bool
        assert "last_accessed" in m and (m["last_accessed"] is None or type(m["last_accessed"]) is int)
        assert m["polarity"] in (1, -1) and 0 < m["confidence"] <= 1
        assert m["active"] is (m["status"] == "active")
        assert all(type(i) is str for i in m["source_ids"])
    tea = next(m for m in rows if m["source_ids"] == ["z1"])
    assert (tea["user_id"], tea["type"], tea["content"], tea["polarity"]) == ("alice", "preference", "喜欢喝乌龙茶", 1)
    assert tea["source_ts"] == T0 == tea["created_at"] and tea["source_session"] == "s1"
    assert tea["excerpt"] == "我喜欢喝乌龙茶" and tea["key"] == "喝乌龙茶"


def test_memories_active_only_unless_all(replayed):
    db, _ = replayed
    active = memories(db)
    assert all(m["active"] is True for m in active)
    assert sorted((m["user_id"], m["content"]) for m in active) == [
        ("alice", "dislikes jazz"), ("alice", "喜欢喝乌龙茶"), ("bob", "likes chess")]
    everything = memories(db, "--all")
    assert len(everything) == len(active) + 1
    (old,) = [m for m in everything if not m["active"]]
    new = next(m for m in everything if m["content"] == "dislikes jazz")
    # The merged statement kept both message ids and the later ts; the opposite one replaced it.
    assert (old["content"], old["status"], old["superseded_by"]) == ("likes jazz", "superseded", new["id"])
    assert old["source_ids"] == ["e1", "e2"] and old["source_ts"] == T0 + 30 and old["created_at"] == T0 + 10
    assert new["source_ids"] == ["e3"] and new["polarity"] == -1 and new["source_ts"] == T0 + 40
    # The assistant's line, the forgotten one and the stopped ones left nothing behind.
    contents = " ".join(m["content"] + " " + m["excerpt"] for m in everything)
    for absent in ("opera", "tennis", "diagnosed", "jazz?", "hello"):
        assert absent not in contents


def test_the_database_may_come_from_memo_db(replayed):
    db, _ = replayed
    result = CliRunner().invoke(main, ["memories", "--json"], env={"MEMO_DB": db})
    assert result.exit_code == 0 and json.loads(result.stdout) == memories(db)


def test_memories_user_filter(replayed):
    db, _ = replayed
    assert {m["user_id"] for m in memories(db, "--all")} == {"alice", "bob"}
    assert [m["content"] for m in memories(db, "--user", "bob")] == ["likes chess"]
    assert {m["user_id"] for m in memories(db, "--user", "alice", "--all")} == {"alice"}
    assert memories(db, "--user", "nobody") == []


def test_memories_text_output(replayed):
    db, _ = replayed
    result = cli("memories", "--db", db, "--all")
    assert result.exit_code == 0
    assert "likes chess" in result.stdout and "[superseded]" in result.stdout


# -- recall -----------------------------------------------------------------------------


@pytest.fixture
def music_db(tmp_path, rules_dir, db):
    log = write_jsonl(tmp_path / "music.jsonl", [
        msg("I like jazz", ts=T0, id="m1"),
        msg("I like jazz piano trios", ts=T0 + 1, id="m2"),
        msg("I like green tea", ts=T0 + 2, id="m3"),
        msg("I like jazz", user="bob", ts=T0 + 3, id="m4"),
    ])
    assert cli("replay", log, "--db", db, "--rules", rules_dir).exit_code == 0
    return db


def recall(db, *args):
    result = cli("recall", "--db", db, "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_recall_ranks_with_scores(music_db, rules_dir):
    rows = recall(music_db, "--user", "alice", "--now", T0, "jazz music")
    assert [m["content"] for m in rows] == ["likes jazz", "likes jazz piano trios"]  # tea is not relevant
    assert all(isinstance(m["score"], float) for m in rows)
    assert rows[0]["score"] > rows[1]["score"]
    assert {m["user_id"] for m in rows} == {"alice"} and rows[0]["source_ids"] == ["m1"]
    assert recall(music_db, "--user", "alice", "--now", T0, "--k", "1", "jazz music") == rows[:1]
    assert [m for m in recall(music_db, "--user", "alice", "--now", T0, "--k", "0", "jazz") if m["type"] != "history"] == []
    # A "what do you remember" question recalls without a word in common.
    everything = recall(music_db, "--user", "alice", "--now", T0, "--rules", rules_dir, "what do you remember?")
    assert len(everything) == 3


def test_recall_now_is_the_clock(music_db):
    fresh = recall(music_db, "--user", "alice", "--now", T0, "jazz")
    year_later = recall(music_db, "--user", "alice", "--now", T0 + 365 * 86400, "jazz")
    assert [m["id"] for m in fresh] == [m["id"] for m in year_later]
    # Only recency changed: w_recency * (exp(-decay * days) difference).
    drop = fresh[0]["score"] - year_later[0]["score"]
    expected = defaults.WEIGHT_RECENCY * (1 - math.exp(-defaults.RECENCY_DECAY * 365))
    assert drop == pytest.approx(expected, abs=1e-4)
    assert recall(music_db, "--user", "alice", "--now", T0, "jazz") == fresh  # deterministic


def test_recall_text_output_and_usage_errors(music_db):
    result = cli("recall", "--db", music_db, "--user", "alice", "--now", T0, "jazz")
    assert result.exit_code == 0 and "likes jazz" in result.stdout
    assert re.match(r"^\d\.\d{3}  likes jazz  \(preference\)$", result.stdout.splitlines()[0])
    missing = cli("recall", "--db", music_db, "jazz")
    assert missing.exit_code == 2 and "give --user and QUERY, or --batch FILE" in missing.stderr


def test_recall_lists_past_messages_after_the_memories(tmp_path, rules_dir, db):
    log = write_jsonl(tmp_path / "log.jsonl", [
        msg("My neighbour plays the trumpet at night", ts=T0, id="m1", session="monday"),
        msg("I like jazz", ts=T0 + 1, id="m2", session="monday"),
        msg("The trumpet is too loud", user="bob", ts=T0 + 2, id="m3")])
    assert cli("replay", log, "--db", db, "--rules", rules_dir).exit_code == 0
    rows = recall(db, "--user", "alice", "--now", T0 + 60, "--rules", rules_dir, "jazz against trumpet noise?")
    assert [(m["type"], m["content"]) for m in rows] == [
        ("preference", "likes jazz"), ("history", "My neighbour plays the trumpet at night")]
    assert {k: rows[1][k] for k in ("source_ts", "source_session", "source_ids")} == {
        "source_ts": T0, "source_session": "monday", "source_ids": ["m1"]}
    # The request's own session: its last turns are the app's already.
    assert recall(db, "--user", "alice", "--now", T0 + 60, "--session", "monday", "trumpet") == []
    batch = write_jsonl(tmp_path / "asks.jsonl", [{"user": "alice", "query": "trumpet", "now": T0 + 60},
                                                  {"user": "carol", "query": "trumpet"}, ""])
    lines = [json.loads(line) for line in cli("recall", "--db", db, "--batch", batch).stdout.splitlines()]
    assert [[m["content"] for m in line["results"]] for line in lines] == [
        ["My neighbour plays the trumpet at night"], []]
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"user": "alice", "query": "trumpet"}, {"user": "alice"}])
    result = cli("recall", "--db", db, "--batch", bad)
    assert result.exit_code == 1 and "line 2: not a recall request" in result.stderr
    assert cli("recall", "--db", db, "--batch", batch, "--user", "alice").exit_code == 2


# -- rules ------------------------------------------------------------------------------


def test_rules_check_ok(rules_dir):
    shipped = cli("rules", "check")
    assert shipped.exit_code == 0, shipped.output
    assert re.match(r"ok: 2 files, \d+ triggers", shipped.stdout)
    own = cli("rules", "check", rules_dir)
    assert own.exit_code == 0 and own.stdout.startswith("ok: 2 files, 4 triggers")
    assert str(rules_dir / "en.yaml") in own.stdout and str(rules_dir / "zh.yaml") in own.stdout


def test_rules_check_failing(tmp_path, rules_dir):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "triggers:\n"
        "  - id: x.bad_regex\n"
        "    pattern: '(unclosed'\n"
        "    type: preference\n"
        "    summary: 'likes {what}'\n"
        "  - id: x.bad_type\n"
        "    pattern: 'I like (?P<what>.+)'\n"
        "    type: opinion\n"
        "    summary: 'likes {what}'\n",
        encoding="utf-8")
    result = cli("rules", "check", bad)
    assert result.exit_code == 1
    assert f"{bad}:3: x.bad_regex: pattern does not compile" in result.stderr
    assert f"{bad}:8: x.bad_type: type must be one of" in result.stderr
    assert "Error: 2 problems in the rules" in result.stderr
    assert result.stdout == ""
    # Problems of several files are all reported; a missing file is one of them.
    several = cli("rules", "check", rules_dir, bad, tmp_path / "missing.yaml")
    assert several.exit_code == 1 and "Error: 3 problems" in several.stderr
    assert f"{tmp_path / 'missing.yaml'}: cannot read" in several.stderr


def test_rules_check_through_the_console_script(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("triggers:\n  - id: x.one\n    pattern: 'a'\n    type: preference\n    polarity: 2\n"
                   "    summary: 'a'\n    key: 'a'\n", encoding="utf-8")
    proc = subprocess.run([MEMO_MW, "rules", "check", str(bad)], check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert f"{bad}:5: x.one: polarity must be 1 or -1, not 2" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_rules_test_shows_the_gates_and_the_memory(rules_dir):
    captured = cli("rules", "test", "--rules", rules_dir, "I like jazz")
    assert captured.exit_code == 0
    lines = captured.stdout.splitlines()
    assert lines[0] == "trigger    t.en.like"
    assert "result     captured" in lines
    assert "memory     type=preference key=jazz polarity=+1 summary=likes jazz" in lines

    dislike = cli("rules", "test", "--rules", rules_dir, "I don't like jazz").stdout
    assert "type=preference key=jazz polarity=-1 summary=dislikes jazz" in dislike

    stopped = cli("rules", "test", "--rules", rules_dir, "I like jazz?").stdout.splitlines()
    assert "negative   t.en.question: a question" in stopped and "result     negative" in stopped
    assert not any(line.startswith("memory") for line in stopped)

    assert "result     sensitive" in cli("rules", "test", "--rules", rules_dir, "I like being diagnosed").stdout
    assert "result     no_trigger" in cli("rules", "test", "--rules", rules_dir, "hello").stdout
    forget = cli("rules", "test", "--rules", rules_dir, "forget that I like jazz").stdout
    assert "forget     t.en.forget.match (match)" in forget and "scope=match match=I like jazz" in forget

    as_json = json.loads(cli("rules", "test", "--rules", rules_dir, "--json", "我喜欢喝乌龙茶的").stdout)
    assert as_json["stage"] == "captured" and as_json["forget"] is None
    (candidate,) = as_json["candidates"]
    assert (candidate["type"], candidate["content"], candidate["rule_id"]) == ("preference", "喜欢喝乌龙茶", "t.zh.like")


def test_rules_test_with_the_shipped_rules():
    result = cli("rules", "test", "I like jazz")
    assert result.exit_code == 0
    assert "result     captured" in result.stdout and "type=preference" in result.stdout
    assert "jazz" in result.stdout.split("summary=")[1]


# -- worker -----------------------------------------------------------------------------


def chat_with_a_waiting_job(redis_url, rules_dir, db) -> Queue:
    """A chat turn through the middleware on Redis: one remember job waits on the memo queue."""
    def chat(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok"]

    middleware = MemoryMiddleware(chat, trust_user_header=True, db=db, redis_url=redis_url, rules=str(rules_dir))
    response = Client(middleware).post("/chat", json={"message": "I like jazz", "session_id": "s9",
                                                      "message_id": "w1"}, headers={"X-User-Id": "carol"})
    assert response.status_code == 200
    queue = Queue(defaults.QUEUE_NAME, connection=redis.Redis.from_url(redis_url), serializer=JSONSerializer)
    assert queue.count == 1
    return queue


@pytest.mark.parametrize("command", [
    pytest.param(lambda url, db: [MEMO_MW, "worker", "--burst", "--url", url, "--db", db], id="memo-mw-worker"),
    pytest.param(lambda url, db: [MEMO_MW, "worker", "--burst", "--url", url, "--fork"], id="memo-mw-worker-fork"),
    pytest.param(lambda url, db: [os.path.join(os.path.dirname(MEMO_MW), "rq"), "worker", "--burst", "--url", url,
                                  "--with-scheduler", "--serializer", "rq.serializers.JSONSerializer",
                                  "--worker-class", "rq.SimpleWorker", "memo"], id="plain-rq-worker"),
])
def test_worker_burst_drains_a_job_enqueued_by_the_middleware(redis_url, rules_dir, db, command, tmp_path):
    queue = chat_with_a_waiting_job(redis_url, rules_dir, db)
    with Store(db) as store:
        assert store.list("carol") == []  # nothing is written until a worker runs the job

    # rq 3.0's burst worker may take a minute to exit: it closes its pubsub connection while the
    # listener thread waits up to 60 s for a message.
    proc = subprocess.run(command(redis_url, db), check=False, capture_output=True, text=True, timeout=150,
                          cwd=tmp_path)  # (not where the middleware was: the job names the database)
    assert proc.returncode == 0, proc.stderr
    assert queue.count == 0 and queue.failed_job_registry.count == 0
    with Store(db) as store:
        (memory,) = store.list("carol")
    assert (memory["content"], memory["source_ids"], memory["source_session"]) == ("likes jazz", ["w1"], "s9")


def test_forget_with_url_changes_the_waiting_job(redis_url, rules_dir, db):
    queue = chat_with_a_waiting_job(redis_url, rules_dir, db)
    result = cli("forget", "--db", db, "--user", "carol", "--match", "jazz", "--url", redis_url)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "deleted 0 memories of carol; 1 waiting jobs changed in Redis"
    assert queue.count == 0  # the job had nothing left to store: deleted, not run
    drain(redis_url)
    with Store(db) as store:
        assert store.list("carol", include_inactive=True) == []


def test_forget_reports_an_unreachable_redis_after_deleting(replayed):
    db, _ = replayed
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = cli("forget", "--db", db, "--user", "bob", "--url", url)
    assert result.exit_code == 1
    assert f"Error: deleted 1 memories of bob, but cannot reach Redis at {url}" in result.stderr
    assert memories(db, "--user", "bob", "--all") == []


def test_insights_and_maintain_on_a_replayed_log(replayed):
    db, _ = replayed
    everyone = json.loads(cli("insights", "--db", db, "--now", T0 + 86400, "--json").stdout)
    assert set(everyone) == {"alice", "bob"} and all(lines == [] for lines in everyone.values())  # too few
    counts = json.loads(cli("maintain", "--db", db, "--now", T0 + 86400, "--json").stdout)
    assert counts == {"expired": 0, "removed": 0, "resolved": 0, "history_pruned": 0}
    # Today, the log's messages (said in 2023) are past the history's 90 days: deleted.
    assert cli("maintain", "--db", db).stdout.strip() == "expired 0, removed 0, resolved 0, history_pruned 9"


def test_worker_reports_an_unreachable_redis():
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = cli("worker", "--burst", "--url", url)
    assert result.exit_code == 1 and f"cannot reach Redis at {url}" in result.stderr


def test_worker_refuses_a_bad_database_before_it_starts(tmp_path, redis_url):
    (tmp_path / "garbage.db").write_bytes(b"this is not a sqlite file" * 100)
    result = cli("worker", "--burst", "--url", redis_url, "--db", str(tmp_path / "garbage.db"))
    assert result.exit_code == 1 and result.stderr.startswith("Error: cannot use") and "Traceback" not in result.output


# -- errors, help, entry points ---------------------------------------------------------


@pytest.fixture
def bad_dbs(tmp_path):
    (tmp_path / "garbage.db").write_bytes(b"this is not a sqlite file" * 100)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "folder.db").mkdir()
    (tmp_path / "other.db").write_bytes(b"")  # a valid, empty SQLite file: not a memo-mw one
    return tmp_path


@pytest.mark.parametrize("argv, message", [
    (["memories", "--db", "{d}/missing.db"], "no memory database at"),
    (["memories", "--db", "{d}/garbage.db", "--json"], "file is not a database"),
    (["memories", "--db", "{d}/folder.db"], "no memory database at"),
    (["memories", "--db", "{d}/other.db"], "holds schema version 0"),
    (["maintain", "--db", "{d}/other.db"], "holds schema version 0"),
    (["recall", "--db", "{d}/garbage.db", "--user", "a", "jazz"], "file is not a database"),
    (["recall", "--db", "{d}/missing.db", "--user", "a", "jazz"], "no memory database at"),
    (["forget", "--db", "{d}/missing.db", "--user", "a"], "no memory database at"),
    (["replay", "{log}", "--db", "{d}/afile/x.db"], "cannot open the memory database"),
    (["replay", "{log}", "--db", "{d}/folder.db"], "cannot use"),
    (["replay", "{log}", "--db", "{d}/garbage.db"], "file is not a database"),
])
def test_bad_db_is_a_clear_error(bad_dbs, argv, message):
    log = write_jsonl(bad_dbs / "log.jsonl", [msg("I like jazz", ts=T0)])
    argv = [a.format(d=bad_dbs, log=log) for a in argv]
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)  # a ClickException, not a crash
    assert result.stderr.startswith("Error: ") and message in result.stderr
    assert "Traceback" not in result.output
    assert not (bad_dbs / "missing.db").exists()  # reading never creates a database
    assert (bad_dbs / "other.db").stat().st_size == 0  # nor is another program's file given a schema


def test_bad_db_without_traceback_in_a_real_process(tmp_path):
    (tmp_path / "garbage.db").write_bytes(b"garbage" * 100)
    proc = subprocess.run([MEMO_MW, "memories", "--db", str(tmp_path / "garbage.db"), "--json"],
                          check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("Error: cannot use") and "Traceback" not in proc.stderr


def all_commands(group: click.Group, prefix=()):
    for name, command in group.commands.items():
        yield (*prefix, name), command
        if isinstance(command, click.Group):
            yield from all_commands(command, (*prefix, name))


COMMANDS = [path for path, _ in all_commands(main)]


def test_every_command_is_listed():
    assert set(COMMANDS) >= {("worker",), ("replay",), ("memories",), ("recall",), ("forget",), ("rules",),
                             ("rules", "check"), ("rules", "test")}
    result = cli("--help")
    assert result.exit_code == 0 and "rule-based long-term memory" in result.stdout
    for name in ("worker", "replay", "memories", "recall", "forget", "rules"):
        assert re.search(rf"^\s+{name}\s+\S", result.stdout, re.MULTILINE), name  # listed with a summary


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_command_has_help(path):
    command = dict(all_commands(main))[path]
    result = cli(*path, "--help")
    assert result.exit_code == 0
    assert result.stdout.startswith(f"Usage: main {' '.join(path)}")
    assert command.help
    assert " ".join(command.help.split("\n")[0].split()) in " ".join(result.stdout.split())
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{' '.join(path)} {param.opts[0]} has no help text"
            assert param.opts[0] in result.stdout


def test_version():
    result = cli("--version")
    assert result.exit_code == 0 and "0.1.0" in result.stdout


def test_console_script_and_python_m_behave_the_same(tmp_path, rules_dir):
    assert MEMO_MW is not None and Path(MEMO_MW).parent == BIN, "memo-mw is not installed next to python"
    log = write_jsonl(tmp_path / "log.jsonl", LOG)
    outputs = []
    for i, prog in enumerate(([MEMO_MW], [sys.executable, "-m", "memo_mw"])):
        db = str(tmp_path / f"run{i}.db")
        replay = subprocess.run([*prog, "replay", str(log), "--db", db, "--rules", str(rules_dir), "--json"],
                                check=False, capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert replay.returncode == 0, replay.stderr
        counts = json.loads(replay.stdout)
        del counts["seconds"]
        assert counts == EXPECTED
        listed = subprocess.run([*prog, "memories", "--db", db, "--all", "--json"], check=False, capture_output=True,
                                text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        outputs.append(json.loads(listed.stdout))
        help_text = subprocess.run([*prog, "--help"], check=False, capture_output=True, text=True, timeout=60)
        assert help_text.returncode == 0 and "Usage:" in help_text.stdout and "replay" in help_text.stdout
    assert outputs[0] == outputs[1] and len(outputs[0]) == 4  # tea, jazz (superseded), its opposite, chess
