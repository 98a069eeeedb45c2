"""A rule's templates and examples: what ``memo-mw rules check`` verifies beyond the YAML types."""

from __future__ import annotations

import textwrap

import pytest

from memo_mw.exceptions import RulesError
from memo_mw.rules import check_rules, load_rules


@pytest.mark.parametrize("text, line, rule_id, message", [
    pytest.param("""\
        triggers:
          - id: x.sum
            pattern: 'I like (?P<thing>.+)'
            type: preference
            summary: 'likes {what}'
            key: '{thing}'
        """, 5, "x.sum", "summary uses {what} but the pattern has no group (?P<what>...)", id="summary_group"),
    pytest.param("""\
        triggers:
          - id: x.key
            pattern: 'I like (?P<thing>.+)'
            type: preference
            summary: 'likes {thing}'
        """, 2, "x.key", "key uses {what} but the pattern has no group (?P<what>...)", id="key_group"),
    pytest.param("""\
        triggers:
          - id: x.spec
            pattern: 'I like (?P<what>.+)'
            type: preference
            summary: 'likes {what:upper}'
        """, 5, "x.spec", "unknown format spec 'upper'", id="bad_format_spec"),
    pytest.param("triggers:\n  - {id: x.open, pattern: 'I like (?P<what>.+)', type: fact, summary: 'likes {what'}\n",
                 2, "x.open", "summary is not a valid template", id="unclosed_field"),
    pytest.param("triggers:\n  - {id: x.empty, pattern: 'I like (?P<what>.+)', type: fact, summary: ' '}\n",
                 2, "x.empty", "summary must be a non-empty template string", id="empty_summary"),
    pytest.param("negative:\n  - {id: x.ex, pattern: 'no', examples: {match: ['no'], maybe: ['x']}}\n",
                 2, "x.ex", "examples must be {match: [sentences], no_match: [sentences]}", id="examples_unknown_key"),
])
def test_a_template_must_use_groups_of_the_pattern_and_known_specs(tmp_path, text, line, rule_id, message):
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    (problem,) = check_rules([str(path)])
    assert problem.startswith(f"{path}:{line}: {rule_id}: ") and message in problem, problem


def test_rules_check_verifies_examples(tmp_path):
    path = tmp_path / "ex.yaml"
    path.write_text(
        "language: en\n"
        "triggers:\n"
        "  - id: en.like\n"
        "    pattern: '\\bI like (?P<what>\\w+)'\n"
        "    type: preference\n"
        "    summary: 'likes {what}'\n"
        "    examples:\n"
        "      match: ['I like tea', 'I love tea']\n"
        "      no_match: ['I like', 'I like jazz']\n",
        encoding="utf-8",
    )
    problems = check_rules([str(path)])
    assert problems == [
        f"{path}:3: en.like: example does not match: 'I love tea'",
        f"{path}:3: en.like: no_match example matches: 'I like jazz'",
    ]
    load_rules([str(path)])  # examples are for `rules check`; they do not stop start-up


def test_bad_examples_and_trailing_entries_are_reported(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "language: zh\n"
        "trailing: [的, ~]\n"
        "triggers:\n"
        "  - id: zh.like\n"
        "    pattern: '我喜欢(?P<what>.+)'\n"
        "    type: preference\n"
        "    summary: '喜欢{what}'\n"
        "    examples: ['我喜欢茶']\n",
        encoding="utf-8",
    )
    problems = "\n".join(check_rules([str(path)]))
    assert f"{path}:2: trailing entries must be non-empty strings, not None" in problems
    assert f"{path}:8: zh.like: examples must be {{match: [sentences], no_match: [sentences]}}" in problems


def test_rules_check_reports_an_example_that_times_out(tmp_path):
    path = tmp_path / "slow.yaml"
    path.write_text(
        "language: en\n"
        "triggers:\n"
        "  - id: en.slow\n"
        "    pattern: '(?:(?:a|aa)+$|I like (?P<what>\\w+))'\n"
        "    type: preference\n"
        "    summary: 'likes {what}'\n"
        "    examples: {no_match: ['" + "a" * 40 + "!']}\n",
        encoding="utf-8",
    )
    (problem,) = check_rules([str(path)])
    assert problem.startswith(f"{path}:3: en.slow: pattern timed out on example 'aaaa")


def test_rules_check_reports_load_problems_and_failing_examples_together(tmp_path):
    """One run lists everything to fix: a broken rule does not hide another rule's wrong example."""
    path = tmp_path / "mixed.yaml"
    path.write_text(
        "language: en\n"
        "triggers:\n"
        "  - id: en.broken\n"
        "    pattern: '(unclosed'\n"
        "    type: preference\n"
        "    summary: 'x'\n"
        "    key: 'x'\n"
        "  - id: en.like\n"
        "    pattern: '\\bI like (?P<what>\\w+)'\n"
        "    type: preference\n"
        "    summary: 'likes {what}'\n"
        "    examples: {match: ['I adore tea']}\n",
        encoding="utf-8",
    )
    problems = check_rules([str(path)])
    assert problems[0].startswith(f"{path}:4: en.broken: pattern does not compile")
    assert problems[1:] == [f"{path}:8: en.like: example does not match: 'I adore tea'"]
    with pytest.raises(RulesError) as info:
        load_rules([str(path)])
    assert len(info.value.problems) == 1  # start-up does not run examples


def test_cli_rules_check_reports_failing_examples(tmp_path):
    from click.testing import CliRunner

    from memo_mw.cli import main

    path = tmp_path / "ex.yaml"
    path.write_text(
        "language: en\n"
        "triggers:\n"
        "  - {id: en.like, pattern: '\\bI like (?P<what>\\w+)', type: preference, summary: 'likes {what}',\n"
        "     examples: {match: ['I adore tea']}}\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["rules", "check", str(path)])
    assert result.exit_code == 1
    assert f"{path}:3: en.like: example does not match: 'I adore tea'" in result.output
    assert "1 problem in the rules" in result.output


def test_an_example_the_rules_requires_words_keep_out_is_reported(tmp_path):
    """The funnel tries a trigger only on a sentence holding one of its ``requires`` words: so does the check."""
    path = tmp_path / "req.yaml"
    path.write_text("triggers:\n  - {id: x.req, pattern: 'answer (?P<what>in \\w+)', type: style,"
                    " summary: 'wants answers {what}', requires: [english, chinese],"
                    " examples: {match: ['answer in English', 'answer in French']}}\n", encoding="utf-8")
    (problem,) = check_rules([str(path)])
    assert "x.req: example does not match: 'answer in French'" in problem
