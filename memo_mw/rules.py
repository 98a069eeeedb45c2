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

import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import regex
import yaml

from . import defaults
from .exceptions import RulesError

MEMORY_TYPES = ("preference", "fact", "task", "commitment", "style")
FORGET_SCOPES = ("all", "match")

_TOP_KEYS = {
    "version", "language", "max_length", "max_capture", "fillers", "trailing", "key_prefixes",
    "pronouns", "negative", "forget", "recall_all", "triggers", "sensitive", "topics",
}
_TRIGGER_KEYS = {"id", "pattern", "type", "polarity", "summary", "key", "confidence", "ttl_days", "examples",
                 "pronouns", "requires"}
_GATE_KEYS = {"id", "pattern", "reason", "scope", "examples"}


class _LineLoader(yaml.SafeLoader):
    """A safe YAML loader that remembers lines, for error messages.

    Every mapping gets ``__line__`` (where it starts) and ``__lines__`` (the line of each
    key); a key given twice in one mapping, which plain YAML silently resolves to the
    last value, is recorded in ``duplicate_keys``.
    """

    def __init__(self, stream):
        super().__init__(stream)
        self.duplicate_keys: list[tuple[int, str, str | None]] = []

    def construct_mapping(self, node, deep=False):
        lines: dict[Any, int] = {}
        if isinstance(node, yaml.MappingNode):
            owner = next((v.value for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == "id"
                          and isinstance(v, yaml.ScalarNode)), None)
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    key = self.construct_object(key_node)
                    if key in lines:
                        self.duplicate_keys.append((key_node.start_mark.line + 1, str(key), owner))
                    lines.setdefault(key, key_node.start_mark.line + 1)
        mapping = super().construct_mapping(node, deep=deep)
        mapping["__line__"] = node.start_mark.line + 1
        mapping["__lines__"] = lines
        return mapping


_META_KEYS = {"__line__", "__lines__"}

#: A rule's ``examples``: sentences its pattern must match, and must not match, with the line
#: of the rule for error messages. Checked by ``memo-mw rules check``, not at start-up.
Examples = Optional[tuple[tuple[str, ...], tuple[str, ...], Optional[int]]]


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
    files = _expand(paths)
    problems: list[str] = []
    compiled: list[RuleFile] = []
    seen_ids: dict[str, str] = {}
    for path in files:
        rule_file = _load_file(path, problems, seen_ids)
        if rule_file is not None:
            compiled.append(rule_file)
    return RuleSet(files=compiled, paths=files), problems


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


_NEAR_ID = regex.compile(r"""^\s*(?:-\s*)?id\s*:\s*['"]?([^'"\s#]+)""")


def _nearest_id(text: str, line: int) -> str | None:
    """The id of the rule written at or above ``line`` (1-based), to name it in a YAML syntax error."""
    lines = text.splitlines()[:line]
    for raw in reversed(lines):
        match = _NEAR_ID.match(raw)
        if match:
            return match.group(1)
    return None


def _load_file(path: str, problems: list[str], seen_ids: dict[str, str]) -> RuleFile | None:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        problems.append(f"{path}: cannot read: {exc.strerror or exc}")
        return None
    except UnicodeDecodeError as exc:
        problems.append(f"{path}: cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})")
        return None
    loader = _LineLoader(text)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        # The rule being written where the broken construct began (a "[" never closed...).
        start = context_mark or mark
        near = _nearest_id(text, start.line + 1) if start else None
        detail = f" ({context} that started at line {context_mark.line + 1})" if context and context_mark else ""
        problems.append(f"{where}: {near + ': ' if near else ''}invalid YAML: "
                        f"{getattr(exc, 'problem', None) or exc}{detail}")
        return None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        problems.append(f"{path}:1: the file must be a mapping of rule sections, not {type(data).__name__}")
        return None

    def report(node: Any, rule_id: str | None, problem: str, key: str | None = None) -> None:
        line = None
        if isinstance(node, dict):
            line = (node.get("__lines__") or {}).get(key) if key is not None else None
            line = line or node.get("__line__")
        where = f"{path}:{line}" if line else path
        problems.append(f"{where}: {rule_id + ': ' if rule_id else ''}{problem}")

    for line, key, owner in loader.duplicate_keys:
        problems.append(f"{path}:{line}: {owner + ': ' if owner else ''}key {key!r} given twice "
                        "(YAML would silently keep the last one)")
    for key in sorted(set(data) - _TOP_KEYS - _META_KEYS, key=str):
        report(data, None, f"unknown section {key!r} (known: {', '.join(sorted(_TOP_KEYS))})", key=key)
    if data.get("version", 1) != 1:
        report(data, None, f"version {data.get('version')!r} is not supported (this memo-mw reads version 1)",
               key="version")
    language = data.get("language", Path(path).stem)
    rule_file = RuleFile(
        path=path,
        language=str(language),
        max_length=_positive_int(data, "max_length", defaults.MAX_MESSAGE_CHARS, report),
        max_capture=_positive_int(data, "max_capture", defaults.MAX_CAPTURE_CHARS, report),
    )
    topics = data.get("topics") or {}
    if not isinstance(topics, dict):
        report(data, None, "topics must be a mapping of topic name: [words]", key="topics")
    else:
        for name, words in topics.items():
            if name in _META_KEYS:
                continue
            if not isinstance(words, list) or not all(isinstance(w, str) and w.strip() for w in words):
                report(topics, None, f"topic {name!r} must be a list of non-empty strings", key=name)
                continue
            rule_file.topics[str(name)] = tuple(w.strip().casefold() for w in words)
    rule_file.key_prefixes = tuple(t.strip().casefold() for t in _strings(data, "key_prefixes", report))
    rule_file.trailing = _strings(data, "trailing", report)
    for i, pattern in enumerate(_list(data, "fillers", report)):
        compiled = _compile(pattern, f"fillers[{i}]", data, report, key="fillers")
        if compiled is not None:
            rule_file.fillers.append(compiled)
    pronouns = data.get("pronouns") or {}
    if not isinstance(pronouns, dict):
        report(data, None, "pronouns must be a mapping of word: replacement", key="pronouns")
    else:
        for word, repl in pronouns.items():
            if word in _META_KEYS:
                continue
            word = str(word)
            # A Latin word is replaced only as a whole word ("my", not "myth"); Chinese has no
            # word boundaries, so a CJK entry is replaced wherever it occurs.
            bounded = rf"(?<!\w){regex.escape(word)}(?!\w)" if word.isascii() else regex.escape(word)
            rule_file.pronouns.append((regex.compile(bounded, regex.IGNORECASE), "" if repl is None else str(repl)))

    for section in ("negative", "sensitive", "forget", "recall_all"):
        for index, node in enumerate(_list(data, section, report)):
            gate = _gate(node, section, index, data, path, report, seen_ids)
            if gate is not None:
                getattr(rule_file, section).append(gate)
    for index, node in enumerate(_list(data, "triggers", report)):
        trigger = _trigger(node, index, data, rule_file, report, seen_ids)
        if trigger is not None:
            rule_file.triggers.append(trigger)
    return rule_file


def _list(data: dict, key: str, report) -> list:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        report(data, None, f"{key} must be a list", key=key)
        return []
    return value


def _strings(data: dict, key: str, report) -> tuple[str, ...]:
    """A section that is a list of non-empty strings; other entries are reported and left out."""
    out = []
    for item in _list(data, key, report):
        if isinstance(item, str) and item.strip():
            out.append(item)
        else:
            report(data, None, f"{key} entries must be non-empty strings, not {item!r} (quote it)", key=key)
    return tuple(out)


def _positive_int(data: dict, key: str, default: int, report) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        report(data, None, f"{key} must be a positive integer, not {value!r}", key=key)
        return default
    return value


def _compile(pattern: Any, rule_id: str, node: Any, report, key: str = "pattern") -> regex.Pattern | None:
    if not isinstance(pattern, str) or not pattern:
        report(node, rule_id, f"pattern must be a non-empty string, not {pattern!r}", key=key)
        return None
    try:
        return regex.compile(pattern, regex.V0 | regex.IGNORECASE)
    except regex.error as exc:
        report(node, rule_id, f"pattern does not compile: {exc}", key=key)
        return None


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


def _unknown_keys(node: dict, allowed: set[str], rule_id: str, report) -> None:
    for key in sorted(set(node) - allowed - _META_KEYS, key=str):
        report(node, rule_id, f"unknown key {key!r} (known: {', '.join(sorted(allowed))})", key=key)


def _gate(node: Any, section: str, index: int, data: dict, path: str, report, seen_ids) -> Gate | None:
    rule_id = _rule_id(node, section, index, data, report, seen_ids, path)
    if rule_id is None:
        return None
    _unknown_keys(node, _GATE_KEYS, rule_id, report)
    pattern = _compile(node.get("pattern"), rule_id, node, report)
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
                examples=_examples(node, rule_id, report))


def _trigger(node: Any, index: int, data: dict, rule_file: RuleFile, report, seen_ids) -> Trigger | None:
    rule_id = _rule_id(node, "triggers", index, data, report, seen_ids, rule_file.path)
    if rule_id is None:
        return None
    _unknown_keys(node, _TRIGGER_KEYS, rule_id, report)
    ok = True
    pattern = _compile(node.get("pattern"), rule_id, node, report)
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
    summary_fields: tuple[str, ...] = ()
    for name, template in (("summary", summary), ("key", key)):
        if not isinstance(template, str) or not template.strip():
            report(node, rule_id, f"{name} must be a non-empty template string", key=name)
            ok = False
        elif pattern is not None:
            fields = _template_fields(template, name, rule_id, node, report)
            if name == "summary":
                summary_fields = tuple(fields)
            for field_name in fields:
                if field_name not in pattern.groupindex:
                    report(node, rule_id, f"{name} uses {{{field_name}}} but the pattern has no group "
                           f"(?P<{field_name}>...)", key=name)
                    ok = False
    if pattern is None or not ok:
        return None
    return Trigger(
        id=rule_id, pattern=pattern, type=mem_type, polarity=polarity, summary=summary, key=key,
        summary_fields=summary_fields, pronouns=pronouns is not False,
        requires=tuple(w.strip().casefold() for w in requires),
        confidence=float(confidence), ttl_days=float(ttl) if ttl is not None else None,
        language=rule_file.language, source=rule_file.path, examples=_examples(node, rule_id, report),
    )


def _examples(node: dict, rule_id: str, report) -> Examples:
    value = node.get("examples")
    if value is None:
        return None
    lists = {}
    if isinstance(value, dict):
        for name in ("match", "no_match"):
            items = value.get(name) or []
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                break
            lists[name] = tuple(items)
        else:
            if not set(value) - _META_KEYS - {"match", "no_match"}:
                return lists["match"], lists["no_match"], node.get("__line__")
    report(node, rule_id, "examples must be {match: [sentences], no_match: [sentences]}", key="examples")
    return None


def example_problems(rules: RuleSet) -> list[str]:
    """Examples a rule's pattern gets wrong, as ``file:line: rule id: problem`` strings."""
    problems = []
    for rule_file in rules.files:
        rules_of_file = [*rule_file.triggers, *rule_file.negative, *rule_file.sensitive, *rule_file.forget,
                         *rule_file.recall_all]
        for rule in rules_of_file:
            if rule.examples is None:
                continue
            should, should_not, line = rule.examples
            where = f"{rule_file.path}:{line}" if line else rule_file.path
            for sentence, wanted in [(x, True) for x in should] + [(x, False) for x in should_not]:
                try:
                    found = rule.pattern.search(sentence, timeout=1.0) is not None
                except TimeoutError:
                    problems.append(f"{where}: {rule.id}: pattern timed out on example {sentence!r} "
                                    "(catastrophic backtracking?)")
                    continue
                if found != wanted:
                    problem = "example does not match" if wanted else "no_match example matches"
                    problems.append(f"{where}: {rule.id}: {problem}: {sentence!r}")
    return problems


def _template_fields(template: str, name: str, rule_id: str, node, report) -> list[str]:
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        report(node, rule_id, f"{name} is not a valid template: {exc}", key=name)
        return []
    for _, field_name, spec, _ in parsed:
        if field_name is not None and spec not in ("", "3sg"):
            report(node, rule_id, f"{name} uses an unknown format spec {spec!r} (known: 3sg)", key=name)
    return [f for _, f, _, _ in parsed if f is not None]
