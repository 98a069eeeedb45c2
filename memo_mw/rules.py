"""Load and validate the YAML rules that drive the capture funnel (the format: docs/rules.md). Every
problem is reported at load time with its file, line and rule id, so a broken edit is caught at
start-up, not on the first matching message."""

import string
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import regex

from . import defaults
from .exceptions import RulesError
from .rules_check import Examples, read_examples, template_fields, wrong_examples
from .rules_grammar import contractions, lowered, spelled_out, statement_nodes
from .rules_yaml import Reporter, compile_pattern, list_of, mapping_of, positive_int, read_yaml, strings, unknown_keys

MEMORY_TYPES = ("preference", "fact", "task", "commitment", "style")
FORGET_SCOPES = ("all", "match")
GATE_SCOPES = ("sentence", "clause", "preceding", "message")  # "clause", "preceding": negative gates only

TOP_KEYS = frozenset({
    "version", "language", "max_length", "max_capture", "fillers", "trailing", "key_prefixes",
    "pronouns", "negative", "forget", "recall_all", "triggers", "sensitive", "topics", "grammar",
})
TRIGGER_KEYS = frozenset({"id", "pattern", "type", "polarity", "summary", "key", "confidence", "ttl_days",
                          "examples", "pronouns", "requires", "explicit", "others"})
GATE_KEYS = frozenset({"id", "pattern", "reason", "scope", "examples", "others"})


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
    #: A cheap pre-check for long patterns: a sentence must hold one of these (case-folded) first.
    requires: tuple[str, ...] = ()
    statement: bool = False  # made from the statement grammar: read with contractions spelled out
    negated: bool = False  # a statement's negated form: it matches only with a negation, the plain one only without
    negation: regex.Pattern | None = None  # a statement's: how a negation is found among its adverbs
    explicit: bool = False  # an explicit request to remember: when it is not kept, the app is told why
    of_others: bool = False  # `others: true` ("我女儿在学钢琴"): the comma pieces after its match are theirs


@dataclass(frozen=True)
class Gate:
    """A pattern that stops a sentence (negative), or recognises a forget or recall-all request."""
    id: str
    pattern: regex.Pattern
    reason: str
    scope: str
    source: str
    examples: Examples = None
    others: bool = False  # `others: true`: it stops statements about someone else; a trigger marked so passes it


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
    contractions: tuple[regex.Pattern, dict[str, str]] | None = None  # the grammar's, as one pattern
    #: The opening of a statement (lead-in and subject): the grammar's triggers need it to match.
    opening: regex.Pattern | None = None
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
    """The shipped rules: in ``memo_mw/default_rules`` of a wheel, in ``rules/`` of a checkout (a folder
    without ``__init__.py``, for which ``importlib.resources`` would give no plain path)."""
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
    """Load, validate and compile rule files (a folder: its ``*.yaml``); ``None``: the shipped ones.
    Raises :class:`RulesError` listing every problem, each as ``file:line: rule id: problem``."""
    rules, problems = _load_all(paths)
    if problems:
        raise RulesError(problems)
    return rules


def check_rules(paths: str | Sequence[str] | None = None) -> list[str]:
    """Every problem in the given rule files, examples included; empty means valid. The rules
    that compiled have their examples run even when others have problems: one run lists all."""
    try:
        rules, problems = _load_all(paths)
    except RulesError as exc:  # no file to read at all
        return list(exc.problems)
    return problems + example_problems(rules)


def _load_all(paths: str | Sequence[str] | None) -> tuple[RuleSet, list[str]]:
    """The rules that compiled, and the problems of the rest."""
    files = expand_paths(paths)
    problems: list[str] = []
    seen_ids: dict[str, str] = {}
    compiled = [_load_file(path, problems, seen_ids) for path in files]
    return RuleSet(files=[f for f in compiled if f is not None], paths=files), problems


def expand_paths(paths: str | Sequence[str] | None) -> list[str]:
    """The rule files named, a folder standing for its ``*.yaml`` files."""
    if paths is None:
        return default_rule_paths()
    if isinstance(paths, (str, Path)):
        paths = [paths]
    out = [str(file) for path in map(Path, paths)
           for file in (sorted(path.glob("*.yaml")) if path.is_dir() else [path])]
    if not out:
        raise RulesError([f"{', '.join(map(str, paths))}: no rule files found"])
    return out


def _load_file(path: str, problems: list[str], seen_ids: dict[str, str]) -> RuleFile | None:
    data = read_yaml(path, problems)
    if data is None:
        return None
    report = Reporter(path, problems)
    unknown_keys(data, TOP_KEYS, None, report, "section")
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
        contractions=contractions(data, report),
    )
    statements, rule_file.opening, negation = statement_nodes(data, report)
    for section in ("negative", "sensitive", "forget", "recall_all", "triggers", "grammar"):
        nodes = statements if section == "grammar" else list_of(data, section, report)
        for index, node in enumerate(nodes):
            rule_id = _rule_id(node, section, index, data, report, seen_ids, path)
            rule = rule_id and (_trigger(node, rule_id, rule_file, report) if section in ("triggers", "grammar")
                                else _gate(node, rule_id, section, path, report))
            if rule and section == "grammar":
                # What the key names must be there ({what}, usually); the adverbs and the negation may be empty.
                key_fields = tuple(f for _, f, _, _ in string.Formatter().parse(rule.key) if f)
                rule = replace(rule, statement=True, negated=bool(node.get("__negated__")), negation=negation,
                               summary_fields=key_fields)
            if rule:
                getattr(rule_file, "triggers" if section == "grammar" else section).append(rule)
    _place_statements(rule_file, data, report)
    return rule_file


def _place_statements(rule_file: RuleFile, data: dict, report: Reporter) -> None:
    """Move the grammar's triggers (appended last) to just before the trigger ``grammar.before`` names."""
    before = (data.get("grammar") or {}).get("before") if isinstance(data.get("grammar"), dict) else None
    if before is None:
        return
    plain = [t for t in rule_file.triggers if not t.statement]
    at = next((i for i, t in enumerate(plain) if t.id == before), None)
    if at is None:
        report(data["grammar"], None, f"grammar.before names no trigger of this file: {before!r}", key="before")
        return
    rule_file.triggers = plain[:at] + [t for t in rule_file.triggers if t.statement] + plain[at:]


def _topics(data: dict, report: Reporter) -> dict[str, tuple[str, ...]]:
    out = {}
    for name, words in mapping_of(data, "topics", "topic name: [words]", report).items():
        if not isinstance(words, list) or not all(isinstance(w, str) and w.strip() for w in words):
            report(data["topics"], None, f"topic {name!r} must be a list of non-empty strings", key=name)
            continue
        out[str(name)] = tuple(w.strip().casefold() for w in words)
    return out


def _fillers(data: dict, report: Reporter) -> list[regex.Pattern]:
    compiled = [compile_pattern(pattern, f"fillers[{i}]", data, report, key="fillers")
                for i, pattern in enumerate(list_of(data, "fillers", report))]
    return [pattern for pattern in compiled if pattern is not None]


def _pronouns(data: dict, report: Reporter) -> list[tuple[regex.Pattern, str]]:
    out = []
    for word, repl in mapping_of(data, "pronouns", "word: replacement", report).items():
        word = str(word)
        # A Latin word is replaced only as a whole word ("my", not "myth"; "i", not Baha'i's); Chinese
        # has no word boundaries, so a CJK entry is replaced wherever it occurs.
        bounded = rf"(?<![\w'’]){regex.escape(word)}(?!\w)" if word.isascii() else regex.escape(word)
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


def _gate(node: dict, rule_id: str, section: str, path: str, report: Reporter) -> Gate | None:
    unknown_keys(node, GATE_KEYS, rule_id, report)
    pattern = compile_pattern(node.get("pattern"), rule_id, node, report)
    scope = node.get("scope", "all" if section == "forget" else "sentence")
    problem = None
    if section == "recall_all":
        problem = "recall_all rules take no scope: they always read the whole message" if "scope" in node else None
        scope = "message"
    elif section == "negative" and scope not in GATE_SCOPES:
        problem = f"scope must be one of {', '.join(GATE_SCOPES)}, not {scope!r}"
    elif section not in ("forget", "negative") and scope not in ("sentence", "message"):
        problem = f"scope must be 'sentence' or 'message', not {scope!r}"
    elif section == "forget" and scope not in FORGET_SCOPES:
        problem = f"scope must be one of {', '.join(FORGET_SCOPES)}, not {scope!r}"
    if problem:
        report(node, rule_id, problem, key="scope")
        return None
    if pattern is None:
        return None
    if scope == "match" and "what" not in pattern.groupindex:
        report(node, rule_id, "a forget rule with scope 'match' needs a named group (?P<what>...)", key="pattern")
        return None
    if "others" in node and (section != "negative" or scope != "sentence" or not isinstance(node["others"], bool)):
        report(node, rule_id, f"others is true or false, in negative rules of scope sentence only: {node['others']!r}",
               key="others")
        return None
    return Gate(id=rule_id, pattern=pattern, reason=str(node.get("reason", section)), scope=scope, source=path,
                examples=read_examples(node, rule_id, report), others=node.get("others", False))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: A trigger's plain values: key, default, whether a value is right, and the problem when not.
_TRIGGER_VALUES = (
    ("type", None, lambda v: v in MEMORY_TYPES, f"type must be one of {', '.join(MEMORY_TYPES)}, not {{!r}}"),
    # 1.0 and true compare equal to 1 but are not polarities.
    ("polarity", 1, lambda v: _is_number(v) and isinstance(v, int) and v in (1, -1),
     "polarity must be 1 or -1, not {!r}"),
    ("confidence", defaults.DEFAULT_CONFIDENCE, lambda v: _is_number(v) and 0 < v <= 1,
     "confidence must be a number in (0, 1], not {!r}"),
    ("ttl_days", None, lambda v: v is None or _is_number(v) and 0 < v < 1e6,
     "ttl_days must be a positive number, not {!r}"),
    ("requires", None, lambda v: not v or isinstance(v, list) and all(isinstance(w, str) and w.strip() for w in v),
     "requires must be a list of non-empty strings"),
    ("pronouns", True, lambda v: isinstance(v, bool), "pronouns must be true or false, not {!r}"),
    ("explicit", False, lambda v: isinstance(v, bool), "explicit must be true or false, not {!r}"),
    ("others", False, lambda v: isinstance(v, bool), "others must be true or false, not {!r}"),
)


def _trigger(node: dict, rule_id: str, rule_file: RuleFile, report: Reporter) -> Trigger | None:
    unknown_keys(node, TRIGGER_KEYS, rule_id, report)
    pattern = compile_pattern(node.get("pattern"), rule_id, node, report, lists=node.get("__lists__"))
    values, ok = {}, True
    for name, default, valid, problem in _TRIGGER_VALUES:
        values[name] = node.get(name, default)
        if not valid(values[name]):
            report(node, rule_id, problem.format(values[name]), key=name)
            ok = False
    summary, key = node.get("summary"), node.get("key", "{what}")
    summary_fields = template_fields(summary, key, pattern, rule_id, node, report)
    if pattern is None or not ok or summary_fields is None:
        return None
    ttl = values["ttl_days"]
    return Trigger(
        id=rule_id, pattern=pattern, type=values["type"], polarity=values["polarity"], summary=summary, key=key,
        summary_fields=summary_fields, pronouns=values["pronouns"], explicit=values["explicit"],
        of_others=values["others"], requires=tuple(w.strip().casefold() for w in values["requires"] or ()),
        confidence=float(values["confidence"]), ttl_days=None if ttl is None else float(ttl),
        language=rule_file.language, source=rule_file.path, examples=read_examples(node, rule_id, report),
    )


def example_problems(rules: RuleSet) -> list[str]:
    """Examples a rule's pattern gets wrong, as ``file:line: rule id: problem`` strings."""
    return [problem for f in rules.files for problem in wrong_examples(
        f.path, [*f.triggers, *f.negative, *f.sensitive, *f.forget, *f.recall_all],
        lambda sentence, pairs=f.contractions: lowered(spelled_out(pairs, sentence)))]
