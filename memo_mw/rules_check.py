"""The checks of a rule beyond its YAML types: its templates' fields, and its ``examples``, which
``memo-mw rules check`` and a reload (:mod:`memo_mw.reload`) run, start-up does not."""

import string
from typing import Any

import regex

from .rules_grammar import requires_met, statement_form
from .rules_yaml import META_KEYS, Reporter

#: A rule's ``examples``: the sentences it must match, those it must not, and the line of the rule.
Examples = tuple[tuple[str, ...], tuple[str, ...], int | None] | None


def template_fields(summary: Any, key: Any, pattern: regex.Pattern | None, rule_id: str, node: dict,
                    report: Reporter) -> tuple[str, ...] | None:
    """The groups a trigger's summary uses (each must capture something); None, reported, when
    the summary or key template is not one, or uses a group the pattern does not have."""
    used, ok = {}, True
    for name, template in (("summary", summary), ("key", key)):
        if not isinstance(template, str) or not template.strip():
            report(node, rule_id, f"{name} must be a non-empty template string", key=name)
            ok = False
        elif pattern is not None:
            used[name] = _fields(template, name, rule_id, node, report)
            for field_name in [f for f in used[name] if f not in pattern.groupindex]:
                report(node, rule_id, f"{name} uses {{{field_name}}} but the pattern has no group "
                       f"(?P<{field_name}>...)", key=name)
                ok = False
    return tuple(used.get("summary", ())) if ok else None


def _fields(template: str, name: str, rule_id: str, node: dict, report: Reporter) -> list[str]:
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        report(node, rule_id, f"{name} is not a valid template: {exc}", key=name)
        return []
    for _, field_name, spec, _ in parsed:
        if field_name is not None and spec not in ("", "3sg"):
            report(node, rule_id, f"{name} uses an unknown format spec {spec!r} (known: 3sg)", key=name)
    return [f for _, f, _, _ in parsed if f is not None]


def read_examples(node: dict, rule_id: str, report: Reporter) -> Examples:
    """A rule's ``examples`` as read (None without them, or reported when they are no such mapping)."""
    value = node.get("examples")
    if value is None:
        return None
    lists = [value.get(name) or [] for name in ("match", "no_match")] if isinstance(value, dict) else None
    if lists and not set(value) - META_KEYS - {"match", "no_match"} and all(
            isinstance(items, list) and all(isinstance(i, str) for i in items) for items in lists):
        return tuple(lists[0]), tuple(lists[1]), node.get("__line__")
    report(node, rule_id, "examples must be {match: [sentences], no_match: [sentences]}", key="examples")
    return None


def wrong_examples(path: str, rules: list[Any], spell=lambda sentence: sentence) -> list[str]:
    """The examples these rules (of the file at ``path``) get wrong, as ``file:line: rule id: problem``;
    ``spell``: how the file's statement grammar reads a sentence (contractions spelled out)."""
    problems = []
    for rule in rules:
        if rule.examples is None:
            continue
        should, should_not, line = rule.examples
        where = f"{path}:{line}" if line else path
        for sentence, wanted in [(x, True) for x in should] + [(x, False) for x in should_not]:
            try:
                read = spell(sentence) if getattr(rule, "statement", False) else sentence
                match = rule.pattern.search(read, timeout=1.0)
                found = (match is not None and statement_form(rule, match)
                         and requires_met(rule, low=read, folded=sentence.casefold()))
            except TimeoutError:
                problems.append(f"{where}: {rule.id}: pattern timed out on example {sentence!r} "
                                "(catastrophic backtracking?)")
                continue
            if found != wanted:
                problem = "example does not match" if wanted else "no_match example matches"
                problems.append(f"{where}: {rule.id}: {problem}: {sentence!r}")
    return problems
