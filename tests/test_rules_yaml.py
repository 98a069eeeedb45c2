"""Reading a rule file: lines remembered, and every problem of the YAML itself named where it is."""

from __future__ import annotations

import textwrap

import pytest

from memo_mw.rules_yaml import (
    Reporter,
    compile_pattern,
    mapping_of,
    positive_int,
    read_yaml,
    strings,
)


def read(tmp_path, text: str, *, encoding: str = "utf-8") -> tuple[str, dict | None, list[str]]:
    path = tmp_path / "r.yaml"
    path.write_bytes(textwrap.dedent(text).encode(encoding))
    problems: list[str] = []
    return str(path), read_yaml(str(path), problems), problems


def test_every_mapping_remembers_its_lines(tmp_path):
    _, data, problems = read(tmp_path, """\
        language: en
        triggers:
          - id: x.one
            pattern: 'a'
        """)
    assert problems == []
    (rule,) = data["triggers"]
    assert (data["__line__"], data["__lines__"]["triggers"]) == (1, 2)
    assert (rule["__line__"], rule["__lines__"]) == (3, {"id": 3, "pattern": 4})


@pytest.mark.parametrize("text, line, rule_id, message", [
    pytest.param("""\
        triggers:
          - id: x.yaml
            pattern: 'I like (?P<what>.+)'
            summary: [likes {what}
            type: preference
        """, 4, "x.yaml", "invalid YAML: expected ',' or ']'", id="unclosed-bracket"),
    pytest.param("triggers:\n  - id: x.tab\n    pattern: 'a'\n\ttype: fact\n", 4, "x.tab", "invalid YAML", id="tab"),
    pytest.param("""\
        triggers:
          - id: x.twice
            pattern: 'I like (?P<what>.+)'
            type: preference
            pattern: 'I love (?P<what>.+)'
        """, 5, "x.twice", "key 'pattern' given twice (YAML would silently keep the last one)", id="key-twice"),
])
def test_a_yaml_problem_names_the_line_and_the_nearest_rule(tmp_path, text, line, rule_id, message):
    path, _, problems = read(tmp_path, text)
    (problem,) = problems
    assert problem.startswith(f"{path}:{line}: {rule_id}: ") and message in problem, problem


@pytest.mark.parametrize("text, encoding, problem", [
    pytest.param("- a\n- b\n", "utf-8", ":1: the file must be a mapping of rule sections, not list", id="a-list"),
    pytest.param("language: é\n", "latin-1", ": cannot read: not UTF-8 text", id="not-utf8"),
])
def test_a_file_that_is_no_mapping_of_sections_is_refused(tmp_path, text, encoding, problem):
    path, data, problems = read(tmp_path, text, encoding=encoding)
    assert data is None and len(problems) == 1 and problems[0].startswith(path + problem)


def test_a_missing_file_cannot_be_read(tmp_path):
    problems: list[str] = []
    assert read_yaml(str(tmp_path / "gone.yaml"), problems) is None
    assert problems == [f"{tmp_path / 'gone.yaml'}: cannot read: No such file or directory"]


def test_values_are_checked_and_reported_where_they_are_written(tmp_path):
    path, data, _ = read(tmp_path, """\
        max_length: -1
        trailing: [ok, '', 3]
        triggers:
          - {id: x.bad, pattern: '(unclosed'}
        pronouns: [my]
        topics: {food: [tea]}
        """)
    problems: list[str] = []
    report = Reporter(path, problems)
    assert positive_int(data, "max_length", 500, report) == 500
    assert positive_int(data, "max_capture", 80, report) == 80  # absent: the default, no problem
    assert strings(data, "trailing", report) == ("ok",)
    (rule,) = data["triggers"]
    assert compile_pattern(rule["pattern"], "x.bad", rule, report) is None
    assert compile_pattern("I LIKE", "x.ok", rule, report).search("i like tea")  # case-insensitive
    assert mapping_of(data, "pronouns", "word: replacement", report) == {}
    assert mapping_of(data, "topics", "topic name: [words]", report) == {"food": ["tea"]}  # no line keys
    assert mapping_of(data, "fillers", "patterns", report) == {}  # absent: empty, no problem
    assert problems == [
        f"{path}:1: max_length must be a positive integer, not -1",
        f"{path}:2: trailing entries must be non-empty strings, not '' (quote it)",
        f"{path}:2: trailing entries must be non-empty strings, not 3 (quote it)",
        f"{path}:4: x.bad: pattern does not compile: missing ) at position 9",
        f"{path}:5: pronouns must be a mapping of word: replacement",
    ]
