"""Load and validate the YAML rules that drive the capture funnel.

A rules file (``rules/zh.yaml``, ``rules/en.yaml``, or a file of your own) holds the
trigger patterns, the gates that stop a message, the fillers removed before a summary
is rendered, and the forget phrases. Files are validated when they are loaded: every
problem is reported with the file, the line and the rule id, so a broken edit is
caught at start-up, not on the first matching message.

Patterns use the ``regex`` module, are case-insensitive, and are always matched with a timeout
(:data:`memo_mw.defaults.REGEX_TIMEOUT`), so a pattern with catastrophic
backtracking costs a bounded amount of time and is logged, never hangs a request.
"""

from __future__ import annotations

import importlib.resources
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex
import yaml

from . import defaults
from .exceptions import RulesError

MEMORY_TYPES = ("preference", "fact", "task", "commitment", "style")
FORGET_SCOPES = ("all", "match")

_TOP_KEYS = {
    "version", "language", "max_length", "max_capture", "fillers", "trailing",
    "pronouns", "negative", "forget", "recall_all", "triggers", "sensitive",
}
_TRIGGER_KEYS = {"id", "pattern", "type", "polarity", "summary", "key", "confidence", "ttl_days", "examples"}
_GATE_KEYS = {"id", "pattern", "reason", "scope", "examples"}


class _LineLoader(yaml.SafeLoader):
    """A safe YAML loader that remembers the line of every mapping, for error messages."""

    def construct_mapping(self, node, deep=False):
        mapping = super().construct_mapping(node, deep=deep)
        mapping["__line__"] = node.start_mark.line + 1
        return mapping


@dataclass(frozen=True)
class Trigger:
    """A pattern that captures something worth remembering about the user."""

    id: str
    pattern: regex.Pattern
    type: str
    polarity: int
    summary: str
    key: str
    confidence: float
    ttl_days: float | None
    language: str
    source: str


@dataclass(frozen=True)
class Gate:
    """A pattern that stops a sentence (negative), or recognises a forget or recall-all request."""

    id: str
    pattern: regex.Pattern
    reason: str
    scope: str
    source: str


@dataclass
class RuleFile:
    """The rules of one file, compiled."""

    path: str
    language: str
    max_length: int
    max_capture: int
    fillers: list[regex.Pattern] = field(default_factory=list)
    trailing: tuple[str, ...] = ()
    pronouns: list[tuple[regex.Pattern, str]] = field(default_factory=list)
    triggers: list[Trigger] = field(default_factory=list)
    negative: list[Gate] = field(default_factory=list)
    sensitive: list[Gate] = field(default_factory=list)
    forget: list[Gate] = field(default_factory=list)
    recall_all: list[Gate] = field(default_factory=list)


@dataclass
class RuleSet:
    """All loaded rule files, in order. The first file whose trigger matches a sentence wins."""

    files: list[RuleFile]
    paths: list[str]

    @property
    def triggers(self) -> list[Trigger]:
        return [t for f in self.files for t in f.triggers]

    def gates(self, kind: str) -> list[Gate]:
        return [g for f in self.files for g in getattr(f, kind)]


def default_rule_paths() -> list[str]:
    """The shipped rules: ``rules/zh.yaml`` and ``rules/en.yaml``.

    In a source checkout (or an editable install) they are read from the top-level
    ``rules/`` folder; an installed wheel carries them as ``memo_mw.default_rules``.
    """
    source_tree = Path(__file__).resolve().parent.parent / "rules"
    if (source_tree / "zh.yaml").is_file():
        folder = source_tree
    else:
        folder = Path(str(importlib.resources.files("memo_mw.default_rules")))
    return [str(folder / name) for name in defaults.DEFAULT_RULE_FILES]


def load_rules(paths: str | Sequence[str] | None = None) -> RuleSet:
    """Load, validate and compile rule files; ``None`` means the shipped defaults.

    A folder stands for every ``*.yaml`` file in it. Raises :class:`RulesError`
    listing every problem found, each as ``file:line: rule id: problem``.
    """
    files = _expand(paths)
    problems: list[str] = []
    compiled: list[RuleFile] = []
    seen_ids: dict[str, str] = {}
    for path in files:
        rule_file = _load_file(path, problems, seen_ids)
        if rule_file is not None:
            compiled.append(rule_file)
    if problems:
        raise RulesError(problems)
    return RuleSet(files=compiled, paths=files)


def check_rules(paths: str | Sequence[str] | None = None) -> list[str]:
    """Every problem in the given rule files, as strings; an empty list means valid."""
    try:
        load_rules(paths)
    except RulesError as exc:
        return list(exc.problems)
    return []


def _expand(paths: str | Sequence[str] | None) -> list[str]:
    if paths is None:
        return default_rule_paths()
    if isinstance(paths, (str, Path)):
        paths = [paths]
    out: list[str] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            out.extend(str(x) for x in sorted(path.glob("*.yaml")))
        else:
            out.append(str(path))
    if not out:
        raise RulesError([f"{', '.join(map(str, paths))}: no rule files found"])
    return out


def _load_file(path: str, problems: list[str], seen_ids: dict[str, str]) -> RuleFile | None:
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.load(fh, Loader=_LineLoader)  # noqa: S506 - a SafeLoader subclass
    except OSError as exc:
        problems.append(f"{path}: cannot read: {exc.strerror or exc}")
        return None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        problems.append(f"{where}: invalid YAML: {getattr(exc, 'problem', None) or exc}")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path}: the file must be a mapping of rule sections")
        return None

    def report(node: Any, rule_id: str | None, problem: str) -> None:
        line = node.get("__line__") if isinstance(node, dict) else None
        where = f"{path}:{line}" if line else path
        problems.append(f"{where}: {rule_id + ': ' if rule_id else ''}{problem}")

    for key in sorted(set(data) - _TOP_KEYS - {"__line__"}):
        report(data, None, f"unknown section {key!r}")
    language = data.get("language", Path(path).stem)
    rule_file = RuleFile(
        path=path,
        language=str(language),
        max_length=_positive_int(data, "max_length", defaults.MAX_MESSAGE_CHARS, report),
        max_capture=_positive_int(data, "max_capture", defaults.MAX_CAPTURE_CHARS, report),
        trailing=tuple(str(t) for t in _list(data, "trailing", report)),
    )
    for i, pattern in enumerate(_list(data, "fillers", report)):
        compiled = _compile(pattern, f"fillers[{i}]", data, report)
        if compiled is not None:
            rule_file.fillers.append(compiled)
    pronouns = data.get("pronouns") or {}
    if not isinstance(pronouns, dict):
        report(data, None, "pronouns must be a mapping of word: replacement")
    else:
        for word, repl in pronouns.items():
            if word == "__line__":
                continue
            rule_file.pronouns.append((regex.compile(rf"(?i)(?<!\w){regex.escape(str(word))}(?!\w)"), str(repl)))

    for section in ("negative", "sensitive", "forget", "recall_all"):
        for node in _list(data, section, report):
            gate = _gate(node, section, path, report, seen_ids)
            if gate is not None:
                getattr(rule_file, section).append(gate)
    for node in _list(data, "triggers", report):
        trigger = _trigger(node, rule_file, report, seen_ids)
        if trigger is not None:
            rule_file.triggers.append(trigger)
    return rule_file


def _list(data: dict, key: str, report) -> list:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        report(data, None, f"{key} must be a list")
        return []
    return value


def _positive_int(data: dict, key: str, default: int, report) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        report(data, None, f"{key} must be a positive integer, not {value!r}")
        return default
    return value


def _compile(pattern: Any, rule_id: str, node: Any, report) -> regex.Pattern | None:
    if not isinstance(pattern, str) or not pattern:
        report(node, rule_id, "pattern must be a non-empty string")
        return None
    try:
        return regex.compile(pattern, regex.V0 | regex.IGNORECASE)
    except regex.error as exc:
        report(node, rule_id, f"pattern does not compile: {exc}")
        return None


def _rule_id(node: Any, section: str, report, seen_ids: dict[str, str], path: str) -> str | None:
    if not isinstance(node, dict):
        report(None, None, f"every entry of {section} must be a mapping, not {node!r}")
        return None
    rule_id = node.get("id")
    if not isinstance(rule_id, str) or not rule_id:
        report(node, None, f"an entry of {section} has no id")
        return None
    if rule_id in seen_ids:
        report(node, rule_id, f"duplicate id (first defined in {seen_ids[rule_id]})")
        return None
    seen_ids[rule_id] = path
    return rule_id


def _unknown_keys(node: dict, allowed: set[str], rule_id: str, report) -> None:
    for key in sorted(set(node) - allowed - {"__line__"}):
        report(node, rule_id, f"unknown key {key!r}")


def _gate(node: Any, section: str, path: str, report, seen_ids) -> Gate | None:
    rule_id = _rule_id(node, section, report, seen_ids, path)
    if rule_id is None:
        return None
    _unknown_keys(node, _GATE_KEYS, rule_id, report)
    pattern = _compile(node.get("pattern"), rule_id, node, report)
    scope = node.get("scope", "all" if section == "forget" else "sentence")
    if section == "forget":
        if scope not in FORGET_SCOPES:
            report(node, rule_id, f"scope must be one of {', '.join(FORGET_SCOPES)}, not {scope!r}")
            return None
        if pattern is not None and scope == "match" and "what" not in pattern.groupindex:
            report(node, rule_id, "a forget rule with scope 'match' needs a named group (?P<what>...)")
            return None
    elif scope not in ("sentence", "message"):
        report(node, rule_id, f"scope must be 'sentence' or 'message', not {scope!r}")
        return None
    if pattern is None:
        return None
    return Gate(id=rule_id, pattern=pattern, reason=str(node.get("reason", section)), scope=scope, source=path)


def _trigger(node: Any, rule_file: RuleFile, report, seen_ids) -> Trigger | None:
    rule_id = _rule_id(node, "triggers", report, seen_ids, rule_file.path)
    if rule_id is None:
        return None
    _unknown_keys(node, _TRIGGER_KEYS, rule_id, report)
    ok = True
    pattern = _compile(node.get("pattern"), rule_id, node, report)
    mem_type = node.get("type")
    if mem_type not in MEMORY_TYPES:
        report(node, rule_id, f"type must be one of {', '.join(MEMORY_TYPES)}, not {mem_type!r}")
        ok = False
    polarity = node.get("polarity", 1)
    if polarity not in (1, -1) or isinstance(polarity, bool):
        report(node, rule_id, f"polarity must be 1 or -1, not {polarity!r}")
        ok = False
    confidence = node.get("confidence", defaults.DEFAULT_CONFIDENCE)
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence <= 1:
        report(node, rule_id, f"confidence must be a number in (0, 1], not {confidence!r}")
        ok = False
    ttl = node.get("ttl_days")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl <= 0):
        report(node, rule_id, f"ttl_days must be a positive number, not {ttl!r}")
        ok = False
    summary = node.get("summary")
    key = node.get("key", "{what}")
    for name, template in (("summary", summary), ("key", key)):
        if not isinstance(template, str) or not template.strip():
            report(node, rule_id, f"{name} must be a non-empty template string")
            ok = False
        elif pattern is not None:
            for field_name in _template_fields(template, name, rule_id, node, report):
                if field_name not in pattern.groupindex:
                    report(node, rule_id, f"{name} uses {{{field_name}}} but the pattern has no group (?P<{field_name}>...)")
                    ok = False
    if pattern is None or not ok:
        return None
    return Trigger(
        id=rule_id, pattern=pattern, type=mem_type, polarity=polarity, summary=summary, key=key,
        confidence=float(confidence), ttl_days=float(ttl) if ttl is not None else None,
        language=rule_file.language, source=rule_file.path,
    )


def _template_fields(template: str, name: str, rule_id: str, node, report) -> Iterable[str]:
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        report(node, rule_id, f"{name} is not a valid template: {exc}")
        return []
    for _, field_name, spec, _ in parsed:
        if field_name is not None and spec not in ("", "3sg"):
            report(node, rule_id, f"{name} uses an unknown format spec {spec!r} (known: 3sg)")
    return [f for _, f, _, _ in parsed if f is not None]
