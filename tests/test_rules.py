"""Loading and validating rule files: every problem names its file, line and rule id."""

from __future__ import annotations

import json
import logging
import textwrap
import time
from pathlib import Path

import pytest
import regex

import memo_mw.rules as rules_module
from memo_mw import defaults
from memo_mw.exceptions import RulesError
from memo_mw.funnel import Funnel
from memo_mw.rules import check_rules, default_rule_paths, load_rules

GOOD_TRIGGER = """\
  - id: ok.like
    pattern: 'I like (?P<what>.+)'
    type: preference
    summary: 'likes {what}'
"""


def write(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(path)


def problems_of(*paths: str) -> list[str]:
    with pytest.raises(RulesError) as info:
        load_rules(list(paths))
    assert check_rules(list(paths)) == info.value.problems  # the same list, without raising
    return info.value.problems


# (case id, file text, line, rule id (or section/position), what the message says)
CASES = [
    ("unknown_section", "version: 1\ntrigers:\n" + GOOD_TRIGGER, 2, None, "unknown section 'trigers'"),
    ("missing_id", "triggers:\n" + GOOD_TRIGGER + "  - pattern: 'I hate (?P<what>.+)'\n    type: preference\n"
                   "    summary: 'hates {what}'\n", 6, "triggers[1]", "an entry of triggers has no id"),
    ("missing_id_gate", """\
        negative:
          - pattern: 'x'
        """, 2, "negative[0]", "an entry of negative has no id"),
    ("bad_regex", """\
        triggers:
          - id: x.regex
            type: preference
            pattern: 'I like (?P<what>.+'
            summary: 'likes {what}'
        """, 4, "x.regex", "pattern does not compile"),
    ("bad_type", """\
        triggers:
          - id: x.type
            pattern: 'I like (?P<what>.+)'
            type: opinion
            summary: 'likes {what}'
        """, 4, "x.type", "type must be one of preference, fact, task, commitment, style, not 'opinion'"),
    ("polarity_zero", """\
        triggers:
          - id: x.pol
            pattern: 'I like (?P<what>.+)'
            type: preference
            polarity: 0
            summary: 'likes {what}'
        """, 5, "x.pol", "polarity must be 1 or -1, not 0"),
    ("polarity_float", """\
        triggers:
          - id: x.polf
            pattern: 'I like (?P<what>.+)'
            type: preference
            polarity: 1.0
            summary: 'likes {what}'
        """, 5, "x.polf", "polarity must be 1 or -1, not 1.0"),
    ("polarity_bool", """\
        triggers:
          - id: x.polb
            pattern: 'I like (?P<what>.+)'
            type: preference
            polarity: true
            summary: 'likes {what}'
        """, 5, "x.polb", "polarity must be 1 or -1, not True"),
    ("confidence_high", """\
        triggers:
          - id: x.conf
            pattern: 'I like (?P<what>.+)'
            type: preference
            summary: 'likes {what}'
            confidence: 1.5
        """, 6, "x.conf", "confidence must be a number in (0, 1], not 1.5"),
    ("confidence_zero", """\
        triggers:
          - id: x.conf0
            pattern: 'I like (?P<what>.+)'
            type: preference
            summary: 'likes {what}'
            confidence: 0
        """, 6, "x.conf0", "confidence must be a number in (0, 1]"),
    ("forget_without_what", """\
        forget:
          - id: x.forget
            pattern: 'forget that (?P<thing>.+)'
            scope: match
        """, 3, "x.forget", "a forget rule with scope 'match' needs a named group (?P<what>...)"),
    ("unknown_key", """\
        triggers:
          - id: x.unknown
            pattern: 'I like (?P<what>.+)'
            type: preference
            summary: 'likes {what}'
            polarty: -1
        """, 6, "x.unknown", "unknown key 'polarty'"),
    ("unknown_key_gate", """\
        sensitive:
          - id: x.gate
            pattern: 'secret'
            raeson: private
        """, 4, "x.gate", "unknown key 'raeson'"),
    ("bad_ttl", """\
        triggers:
          - id: x.ttl
            pattern: 'I like (?P<what>.+)'
            type: task
            summary: 'likes {what}'
            ttl_days: -3
        """, 6, "x.ttl", "ttl_days must be a positive number"),
    ("bad_scope", """\
        negative:
          - id: x.scope
            pattern: 'x'
            scope: paragraph
        """, 4, "x.scope", "scope must be one of sentence, clause, preceding, message"),
    ("clause_scope_on_a_sensitive_gate", """\
        sensitive:
          - id: x.clause
            pattern: 'x'
            scope: clause
        """, 4, "x.clause", "scope must be 'sentence' or 'message'"),
    ("others_on_a_sensitive_gate", """\
        sensitive:
          - id: x.others
            pattern: 'my brother'
            others: true
        """, 4, "x.others", "others is true or false, in negative rules of scope sentence only"),
    ("others_on_a_message_gate", """\
        negative:
          - id: x.others
            pattern: 'my brother'
            scope: message
            others: true
        """, 5, "x.others", "others is true or false, in negative rules of scope sentence only"),
    ("not_a_mapping", """\
        triggers:
          - just a string
        """, 1, "triggers[0]", "every entry of triggers must be a mapping"),
]


@pytest.mark.parametrize("text, line, rule_id, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_problem_names_file_line_and_rule(tmp_path, text, line, rule_id, message):
    path = write(tmp_path, "bad.yaml", text)
    problems = problems_of(path)
    assert len(problems) == 1, problems
    (problem,) = problems
    assert problem.startswith(f"{path}:{line}: "), problem
    if rule_id is not None:
        assert problem.startswith(f"{path}:{line}: {rule_id}: "), problem
    assert message in problem


def test_duplicate_id_across_files(tmp_path):
    first = write(tmp_path, "a.yaml", "triggers:\n" + GOOD_TRIGGER)
    second = write(tmp_path, "b.yaml", "negative:\n  - id: x.neg\n    pattern: 'no'\ntriggers:\n" + GOOD_TRIGGER)
    (problem,) = problems_of(first, second)
    assert problem == f"{second}:5: ok.like: duplicate id (first defined in {first}:2)"
    # A folder holding both files reports the same problem.
    assert problems_of(str(tmp_path)) == [problem]


def test_every_problem_of_a_file_is_reported_at_once(tmp_path):
    path = write(tmp_path, "many.yaml", """\
        max_length: -5
        triggers:
          - id: x.one
            pattern: '(unclosed'
            type: preference
            summary: 'likes {what}'
          - id: x.two
            pattern: 'I like (?P<what>.+)'
            type: feeling
            polarity: 2
            summary: 'likes {what}'
          - id: x.one
            pattern: 'again'
            type: fact
            summary: 'a'
            key: 'a'
        forget:
          - id: x.three
            pattern: 'forget (?P<thing>.+)'
            scope: match
        """)
    assert problems_of(path) == [
        f"{path}:1: max_length must be a positive integer, not -5",
        f"{path}:19: x.three: a forget rule with scope 'match' needs a named group (?P<what>...)",
        f"{path}:4: x.one: pattern does not compile: missing ) at position 9",
        f"{path}:9: x.two: type must be one of preference, fact, task, commitment, style, not 'feeling'",
        f"{path}:10: x.two: polarity must be 1 or -1, not 2",
        f"{path}:12: x.one: duplicate id (first defined in {path}:3)",
    ]


def test_problems_of_several_files_are_all_reported(tmp_path):
    a = write(tmp_path, "a.yaml", "triggers:\n  - id: a.x\n    pattern: 'x'\n    type: nope\n    summary: x\n    key: x\n")
    b = write(tmp_path, "b.yaml", "triggers: [unclosed\n")
    missing = str(tmp_path / "missing.yaml")
    problems = problems_of(a, b, missing)
    assert [p.split(":")[0] for p in problems] == [a, b, missing]
    assert "cannot read" in problems[2]


def test_a_folder_loads_every_yaml_file_in_it(tmp_path):
    folder = tmp_path / "my_rules"
    folder.mkdir()
    write(folder, "b.yaml", "language: en\ntriggers:\n" + GOOD_TRIGGER)
    write(folder, "a.yaml", "language: zh\ntriggers:\n  - id: zh.like\n    pattern: '我喜欢(?P<what>.+)'\n"
                            "    type: preference\n    summary: '喜欢{what}'\n")
    write(folder, "notes.txt", "not: rules\n")
    rule_set = load_rules(str(folder))
    assert rule_set.paths == [str(folder / "a.yaml"), str(folder / "b.yaml")]
    assert [f.language for f in rule_set.files] == ["zh", "en"]
    assert [t.id for t in rule_set.triggers] == ["zh.like", "ok.like"]
    funnel = Funnel(rule_set)
    assert [c.content for c in funnel.process("I like jazz").candidates] == ["likes jazz"]
    assert [c.content for c in funnel.process("我喜欢爵士乐").candidates] == ["喜欢爵士乐"]
    # A folder and a file may be mixed; an empty folder is a problem, not an empty rule set.
    extra = write(tmp_path, "extra.yaml", "triggers:\n  - id: extra.x\n    pattern: 'x(?P<what>y)'\n"
                                          "    type: fact\n    summary: '{what}'\n")
    assert len(load_rules([str(folder), extra]).files) == 3
    empty = tmp_path / "empty"
    empty.mkdir()
    assert check_rules(str(empty)) == [f"{empty}: no rule files found"]


def test_the_shipped_rules_are_valid_and_found():
    paths = default_rule_paths()
    assert [Path(p).name for p in paths] == list(defaults.DEFAULT_RULE_FILES)
    assert all(Path(p).is_file() for p in paths)
    assert check_rules() == []
    assert [f.language for f in load_rules().files] == ["zh", "en"]


def test_default_rules_in_an_installed_layout(tmp_path, monkeypatch):
    """A wheel has memo_mw/default_rules/ (no __init__.py) and no top-level rules/ folder."""
    package = tmp_path / "site-packages" / "memo_mw"
    package.mkdir(parents=True)
    monkeypatch.setattr(rules_module, "__file__", str(package / "rules.py"))
    with pytest.raises(RulesError, match="default rule files .* are missing"):
        default_rule_paths()
    (package / "default_rules").mkdir()
    for name in defaults.DEFAULT_RULE_FILES:
        (package / "default_rules" / name).write_text("triggers: []\n", encoding="utf-8")
    assert default_rule_paths() == [str(package / "default_rules" / n) for n in defaults.DEFAULT_RULE_FILES]
    assert len(load_rules().files) == 2


CATASTROPHIC = "(?P<what>(?:a|aa)+)$"  # exponential backtracking, even in the regex module


def test_the_match_timeout_bounds_a_catastrophic_pattern(tmp_path, caplog):
    text = "a" * 40 + "b"
    # The pattern is really catastrophic: on its own it does not finish in half a second.
    with pytest.raises(TimeoutError):
        regex.compile(CATASTROPHIC).search(text, timeout=0.5)

    path = write(tmp_path, "slow.yaml", f"""\
        triggers:
          - id: slow.rule
            pattern: '{CATASTROPHIC}'
            type: fact
            summary: '{{what}}'
        """)
    funnel = Funnel(load_rules(path))
    caplog.set_level(logging.WARNING, logger="memo_mw.funnel")
    started = time.perf_counter()
    result = funnel.process(text)
    elapsed = time.perf_counter() - started
    assert result.stage == "no_trigger" and result.candidates == ()
    assert elapsed < 20 * defaults.REGEX_TIMEOUT  # bounded by the timeout, not by the pattern
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings and all("timed out" in w for w in warnings)
    # It names the rule (or, when a whole file's triggers are searched at once, the file).
    assert any("slow.rule" in w or path in w for w in warnings)
    # The same rule still works on an ordinary message.
    assert funnel.process("aaaa").stage == "captured"


def test_nested_quantifier_a_plus_plus_is_bounded_too(tmp_path, caplog):
    """``(a+)+$`` is the classic example; the regex module defuses it, and the funnel must still say no."""
    path = write(tmp_path, "classic.yaml", """\
        triggers:
          - id: classic.rule
            pattern: '(?P<what>(a+)+)$'
            type: fact
            summary: '{what}'
        """)
    started = time.perf_counter()
    result = Funnel(load_rules(path)).process("a" * 40 + "b")
    assert result.stage == "no_trigger"
    assert time.perf_counter() - started < 20 * defaults.REGEX_TIMEOUT


@pytest.mark.parametrize("text, problem", [
    pytest.param("version: 2\ntriggers: []\n",
                 "1: version 2 is not supported (this memo-mw reads version 1)", id="version"),
    pytest.param("recall_all:\n  - {id: r.all, pattern: 'about me', scope: sentence}\n",
                 "2: r.all: recall_all rules take no scope: they always read the whole message", id="recall-all-scope"),
])
def test_more_problems_reported(tmp_path, text, problem):
    path = tmp_path / "r.yaml"
    path.write_text(text, encoding="utf-8")
    assert check_rules([str(path)]) == [f"{path}:{problem}"]


# -- memo-mw rules test --file ------------------------------------------------------------

TRANSCRIPT_RULES = """\
language: en
negative:
  - {id: t.question, pattern: '\\?\\s*$', reason: a question}
sensitive:
  - {id: t.health, pattern: '\\bdiagnosed\\b', reason: health}
forget:
  - {id: t.forget, pattern: '\\bforget me\\b'}
triggers:
  - {id: t.dislike, pattern: '\\bI hate (?P<what>\\w+)', type: preference, polarity: -1, summary: 'hates {what}'}
  - {id: t.like, pattern: '\\bI like (?P<what>\\w+)', type: preference, summary: 'likes {what}'}
  - {id: t.live, pattern: '\\bI live in (?P<what>\\w+)', type: fact, summary: 'lives in {what}', key: lives}
"""


def run_transcript(tmp_path, lines: list[str], *args: str):
    from click.testing import CliRunner

    from memo_mw.cli import main

    rules = write(tmp_path, "t.yaml", TRANSCRIPT_RULES)
    transcript = tmp_path / "transcript.jsonl"
    transcript.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["rules", "test", "--rules", rules, "--file", str(transcript), *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


TRANSCRIPT = [
    '{"user": "u1", "session": "s1", "ts": 1700000000, "text": "I like tea. I hate coffee."}',
    '{"message": "I live in Lyon"}',  # the plain shape of a chat request
    '{"text": "I like tea"}',
    '{"text": "Do I like tea?"}',
    '{"text": "I was diagnosed, I like naps"}',
    '{"text": "hello there"}',
    '{"text": "please forget me"}',
    '{"role": "assistant", "text": "I like helping"}',
    "",
    "not json at all",
    '{"text": 42}',
]


def test_rules_test_file_prints_a_summary_table(tmp_path):
    result = run_transcript(tmp_path, TRANSCRIPT)
    assert result.exit_code == 0, result.output
    rows = {}
    for line in result.stdout.splitlines():
        parts = line.rsplit(None, 1)
        if len(parts) == 2 and parts[1].isdigit():
            rows[parts[0]] = int(parts[1])
    assert rows["lines"] == 10 and rows["invalid"] == 2 and rows["not_user"] == 1
    assert (rows["captured"], rows["negative"], rows["sensitive"], rows["no_trigger"], rows["forget"]) == (3, 1, 1, 1, 1)
    assert rows["preference"] == 3 and rows["fact"] == 1
    assert (rows["t.like"], rows["t.dislike"], rows["t.live"]) == (2, 1, 1)
    assert (rows["t.question"], rows["t.health"], rows["t.forget"]) == (1, 1, 1)
    # A bad line is reported with its number on stderr, and does not stop the run.
    assert "line 10: skipped: not JSON" in result.stderr
    assert 'line 11: skipped: no "text" (or "message") string' in result.stderr


def test_rules_test_file_json(tmp_path):
    result = run_transcript(tmp_path, TRANSCRIPT, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["lines"] == 10 and summary["invalid"] == 2 and summary["not_user"] == 1
    assert summary["stages"] == {"forget": 1, "no_trigger": 1, "too_long": 0, "negative": 1, "sensitive": 1,
                                 "unusable": 0, "captured": 3}
    assert summary["types"] == {"preference": 3, "fact": 1}
    assert summary["rules"] == {"t.like": 2, "t.dislike": 1, "t.live": 1, "t.question": 1, "t.health": 1,
                                "t.forget": 1}


def test_rules_test_needs_text_or_file_but_not_both(tmp_path):
    from click.testing import CliRunner

    from memo_mw.cli import main

    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"text": "I like tea"}\n', encoding="utf-8")
    assert CliRunner().invoke(main, ["rules", "test"]).exit_code == 2
    both = CliRunner().invoke(main, ["rules", "test", "--file", str(transcript), "I like tea"])
    assert both.exit_code == 2 and "one of them" in both.output
