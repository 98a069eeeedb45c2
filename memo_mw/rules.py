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

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import regex

from . import defaults
from .exceptions import RulesError
from .rules_check import Examples, read_examples, template_fields, wrong_examples
from .rules_yaml import META_KEYS, Reporter, compile_pattern, list_of, positive_int, read_yaml, strings

MEMORY_TYPES = ("preference", "fact", "task", "commitment", "style")
FORGET_SCOPES = ("all", "match")

TOP_KEYS = frozenset({
    "version", "language", "max_length", "max_capture", "fillers", "trailing", "key_prefixes",
    "pronouns", "negative", "forget", "recall_all", "triggers", "sensitive", "topics",
})
TRIGGER_KEYS = frozenset({"id", "pattern", "type", "polarity", "summary", "key", "confidence", "ttl_days",
                          "examples", "pronouns", "requires"})
GATE_KEYS = frozenset({"id", "pattern", "reason", "scope", "examples"})


@dataclass(frozen=True)
class Trigger:
    """A pattern that captures something worth remembering about the user."""

    id: str
    pattern: regex.Pattern
    type: str
    polarity: int
    summary: str
    key: str
    summary_fields: tuple[str, ...]  # the groups the summary uses: each must capture something
    confidence: float
    ttl_days: float | None
    language: str
    source: str
    examples: Examples = None
    pronouns: bool = True  # apply the file's pronoun map ("give me short answers" keeps its "me")
    #: Words of which a sentence must contain one (case-folded substrings) before the pattern
    #: is tried: a cheap pre-check for long patterns that can only match near those words.
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class Gate:
    """A pattern that stops a sentence (negative), or recognises a forget or recall-all request."""

    id: str
    pattern: regex.Pattern
    reason: str
    scope: str
    source: str
    examples: Examples = None


@dataclass
class RuleFile:
    """The rules of one file, compiled."""

    path: str
    language: str
    max_length: int
    max_capture: int
    fillers: list[regex.Pattern] = field(default_factory=list)
    trailing: tuple[str, ...] = ()
    key_prefixes: tuple[str, ...] = ()
    topics: dict[str, tuple[str, ...]] = field(default_factory=dict)  # topic -> words (case-folded)
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

    @property
    def topics(self) -> dict[str, tuple[str, ...]]:
        """Every file's topic lexicons, merged by topic name (``food`` in zh.yaml and en.yaml is one topic)."""
        merged: dict[str, tuple[str, ...]] = {}
        for rule_file in self.files:
            for name, words in rule_file.topics.items():
                merged[name] = merged.get(name, ()) + words
        return merged


def default_rule_paths() -> list[str]:
    """The shipped rules: ``rules/zh.yaml`` and ``rules/en.yaml``.

    An installed wheel carries them in the folder ``memo_mw/default_rules`` (the package
    ``memo_mw.default_rules``, mapped from ``rules/`` by ``package_dir``); in a source
    checkout (or an editable install) they are read from the top-level ``rules/`` folder.

    The folder has no ``__init__.py``, so ``importlib.resources.files()`` gives a
    ``MultiplexedPath`` whose ``str()`` is not a path: the folder is located on disk instead.
    """
    here = Path(__file__).resolve().parent
    candidates = [here / "default_rules", here.parent / "rules"]
    for folder in candidates:
        if all((folder / name).is_file() for name in defaults.DEFAULT_RULE_FILES):
            return [str(folder / name) for name in defaults.DEFAULT_RULE_FILES]
    raise RulesError([
        f"the default rule files ({', '.join(defaults.DEFAULT_RULE_FILES)}) are missing: looked in "
        f"{' and '.join(str(c) for c in candidates)}; reinstall memo-mw or pass your own rules"
    ])


def load_rules(paths: str | Sequence[str] | None = None) -> RuleSet:
    """Load, validate and compile rule files; ``None`` means the shipped defaults.

    A folder stands for every ``*.yaml`` file in it. Raises :class:`RulesError`
    listing every problem found, each as ``file:line: rule id: problem``.
    """
    rules, problems = _load_all(paths)
    if problems:
        raise RulesError(problems)
    return rules


def check_rules(paths: str | Sequence[str] | None = None) -> list[str]:
    """Every problem in the given rule files, as strings, examples included; empty means valid.

    The examples of the rules that did compile are run even when other rules have problems,
    so one run of ``memo-mw rules check`` lists everything to fix.
    """
    try:
        rules, problems = _load_all(paths)
    except RulesError as exc:  # no file to read at all
        return list(exc.problems)
    return problems + example_problems(rules)


def _load_all(paths: str | Sequence[str] | None) -> tuple[RuleSet, list[str]]:
    """The rules that compiled, and the problems of the rest."""
    files = expand_paths(paths)
    problems: list[str] = []
    compiled: list[RuleFile] = []
    seen_ids: dict[str, str] = {}
    for path in files:
        rule_file = _load_file(path, problems, seen_ids)
        if rule_file is not None:
            compiled.append(rule_file)
    return RuleSet(files=compiled, paths=files), problems


def expand_paths(paths: str | Sequence[str] | None) -> list[str]:
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
    data = read_yaml(path, problems)
    if data is None:
        return None
    report = Reporter(path, problems)
    for key in sorted(set(data) - TOP_KEYS - META_KEYS, key=str):
        report(data, None, f"unknown section {key!r} (known: {', '.join(sorted(TOP_KEYS))})", key=key)
    if data.get("version", 1) != 1:
        report(data, None, f"version {data.get('version')!r} is not supported (this memo-mw reads version 1)",
               key="version")
    rule_file = RuleFile(
        path=path,
        language=str(data.get("language", Path(path).stem)),
        max_length=positive_int(data, "max_length", defaults.MAX_MESSAGE_CHARS, report),
        max_capture=positive_int(data, "max_capture", defaults.MAX_CAPTURE_CHARS, report),
        # (In the order of the problems they report.)
        topics=_topics(data, report),
        key_prefixes=tuple(t.strip().casefold() for t in strings(data, "key_prefixes", report)),
        trailing=strings(data, "trailing", report),
        fillers=_fillers(data, report),
        pronouns=_pronouns(data, report),
    )
    for section in ("negative", "sensitive", "forget", "recall_all"):
        for index, node in enumerate(list_of(data, section, report)):
            gate = _gate(node, section, index, data, path, report, seen_ids)
            if gate is not None:
                getattr(rule_file, section).append(gate)
    for index, node in enumerate(list_of(data, "triggers", report)):
        trigger = _trigger(node, index, data, rule_file, report, seen_ids)
        if trigger is not None:
            rule_file.triggers.append(trigger)
    return rule_file


def _topics(data: dict, report: Reporter) -> dict[str, tuple[str, ...]]:
    topics = data.get("topics") or {}
    if not isinstance(topics, dict):
        report(data, None, "topics must be a mapping of topic name: [words]", key="topics")
        return {}
    out = {}
    for name, words in topics.items():
        if name in META_KEYS:
            continue
        if not isinstance(words, list) or not all(isinstance(w, str) and w.strip() for w in words):
            report(topics, None, f"topic {name!r} must be a list of non-empty strings", key=name)
            continue
        out[str(name)] = tuple(w.strip().casefold() for w in words)
    return out


def _fillers(data: dict, report: Reporter) -> list[regex.Pattern]:
    compiled = [compile_pattern(pattern, f"fillers[{i}]", data, report, key="fillers")
                for i, pattern in enumerate(list_of(data, "fillers", report))]
    return [pattern for pattern in compiled if pattern is not None]


def _pronouns(data: dict, report: Reporter) -> list[tuple[regex.Pattern, str]]:
    pronouns = data.get("pronouns") or {}
    if not isinstance(pronouns, dict):
        report(data, None, "pronouns must be a mapping of word: replacement", key="pronouns")
        return []
    out = []
    for word, repl in pronouns.items():
        if word in META_KEYS:
            continue
        word = str(word)
        # A Latin word is replaced only as a whole word ("my", not "myth"); Chinese has no
        # word boundaries, so a CJK entry is replaced wherever it occurs.
        bounded = rf"(?<!\w){regex.escape(word)}(?!\w)" if word.isascii() else regex.escape(word)
        out.append((regex.compile(bounded, regex.IGNORECASE), "" if repl is None else str(repl)))
    return out


def _rule_id(node: Any, section: str, index: int, data: dict, report, seen_ids: dict[str, str],
             path: str) -> str | None:
    position = f"{section}[{index}]"
    if not isinstance(node, dict):
        report(data, position, f"every entry of {section} must be a mapping, not {node!r}", key=section)
        return None
    rule_id = node.get("id")
    if not isinstance(rule_id, str) or not rule_id.strip():
        report(node, position, f"an entry of {section} has no id" if rule_id is None
               else f"id must be a non-empty string, not {rule_id!r}", key="id")
        return None
    if rule_id in seen_ids:
        report(node, rule_id, f"duplicate id (first defined in {seen_ids[rule_id]})", key="id")
        return None
    seen_ids[rule_id] = f"{path}:{node.get('__line__')}"
    return rule_id


def _unknown_keys(node: dict, allowed: frozenset[str], rule_id: str, report) -> None:
    for key in sorted(set(node) - allowed - META_KEYS, key=str):
        report(node, rule_id, f"unknown key {key!r} (known: {', '.join(sorted(allowed))})", key=key)


def _gate(node: Any, section: str, index: int, data: dict, path: str, report, seen_ids) -> Gate | None:
    rule_id = _rule_id(node, section, index, data, report, seen_ids, path)
    if rule_id is None:
        return None
    _unknown_keys(node, GATE_KEYS, rule_id, report)
    pattern = compile_pattern(node.get("pattern"), rule_id, node, report)
    scope = node.get("scope", "all" if section == "forget" else "sentence")
    if section == "forget":
        if scope not in FORGET_SCOPES:
            report(node, rule_id, f"scope must be one of {', '.join(FORGET_SCOPES)}, not {scope!r}", key="scope")
            return None
        if pattern is not None and scope == "match" and "what" not in pattern.groupindex:
            report(node, rule_id, "a forget rule with scope 'match' needs a named group (?P<what>...)",
                   key="pattern")
            return None
    elif section == "recall_all":
        if "scope" in node:
            report(node, rule_id, "recall_all rules take no scope: they always read the whole message",
                   key="scope")
            return None
        scope = "message"
    elif scope not in ("sentence", "message"):
        report(node, rule_id, f"scope must be 'sentence' or 'message', not {scope!r}", key="scope")
        return None
    if pattern is None:
        return None
    return Gate(id=rule_id, pattern=pattern, reason=str(node.get("reason", section)), scope=scope, source=path,
                examples=read_examples(node, rule_id, report))


def _trigger(node: Any, index: int, data: dict, rule_file: RuleFile, report, seen_ids) -> Trigger | None:
    rule_id = _rule_id(node, "triggers", index, data, report, seen_ids, rule_file.path)
    if rule_id is None:
        return None
    _unknown_keys(node, TRIGGER_KEYS, rule_id, report)
    ok = True
    pattern = compile_pattern(node.get("pattern"), rule_id, node, report)
    mem_type = node.get("type")
    if mem_type not in MEMORY_TYPES:
        report(node, rule_id, f"type must be one of {', '.join(MEMORY_TYPES)}, not {mem_type!r}", key="type")
        ok = False
    polarity = node.get("polarity", 1)
    # An int, and only 1 or -1: 1.0 and true compare equal to 1 but are not polarities.
    if isinstance(polarity, bool) or not isinstance(polarity, int) or polarity not in (1, -1):
        report(node, rule_id, f"polarity must be 1 or -1, not {polarity!r}", key="polarity")
        ok = False
    confidence = node.get("confidence", defaults.DEFAULT_CONFIDENCE)
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence <= 1:
        report(node, rule_id, f"confidence must be a number in (0, 1], not {confidence!r}", key="confidence")
        ok = False
    ttl = node.get("ttl_days")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < 1e6):
        report(node, rule_id, f"ttl_days must be a positive number, not {ttl!r}", key="ttl_days")
        ok = False
    requires = node.get("requires") or []
    if not isinstance(requires, list) or not all(isinstance(w, str) and w.strip() for w in requires):
        report(node, rule_id, "requires must be a list of non-empty strings", key="requires")
        ok, requires = False, []
    pronouns = node.get("pronouns", True)
    if not isinstance(pronouns, bool):
        report(node, rule_id, f"pronouns must be true or false, not {pronouns!r}", key="pronouns")
        ok = False
    summary = node.get("summary")
    key = node.get("key", "{what}")
    summary_fields = template_fields(summary, key, pattern, rule_id, node, report)
    ok = ok and summary_fields is not None
    if pattern is None or not ok:
        return None
    return Trigger(
        id=rule_id, pattern=pattern, type=mem_type, polarity=polarity, summary=summary, key=key,
        summary_fields=summary_fields or (), pronouns=pronouns is not False,
        requires=tuple(w.strip().casefold() for w in requires),
        confidence=float(confidence), ttl_days=float(ttl) if ttl is not None else None,
        language=rule_file.language, source=rule_file.path, examples=read_examples(node, rule_id, report),
    )


def example_problems(rules: RuleSet) -> list[str]:
    """Examples a rule's pattern gets wrong, as ``file:line: rule id: problem`` strings."""
    return [problem for f in rules.files for problem in wrong_examples(
        f.path, [*f.triggers, *f.negative, *f.sensitive, *f.forget, *f.recall_all])]
