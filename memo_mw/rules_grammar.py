"""The statement grammar of a rule file (docs/rules.md, "Statement grammar"). A first-person
statement is read by its parts, each a plain word list in the YAML: a lead-in, the subject, a run
of adverbs (and, for a ``negated`` form, a negation among them), a verb of one class, an object.
Each verb class becomes an ordinary trigger, so it is tested, explained and gated like any other."""

from __future__ import annotations

from typing import Any

import regex

from .rules_yaml import META_KEYS, Reporter, compile_pattern, mapping_of

PARTS = ("openers", "subjects", "adverbs", "negations", "not_objects")
GRAMMAR_KEYS = frozenset({*PARTS, "lead", "object", "vague", "contractions", "statements", "before"})
STATEMENT_KEYS = frozenset({"id", "verbs", "subjects", "type", "polarity", "summary", "key", "confidence",
                            "ttl_days", "examples", "negated", "object", "not_objects"})
NEGATED_KEYS = frozenset({"summary", "polarity", "key", "type", "confidence", "examples"})
#: Adverbs in a row before the verb, at most (a bound keeps every pattern linear).
MAX_ADVERBS = 4


def words(items: list[str]) -> str:
    """A word list as one alternation, longest first; a Latin word must end on a word boundary,
    and a space in a phrase stands for any run of spaces."""
    alternatives = []
    for item in sorted({i.strip().casefold() for i in items}, key=len, reverse=True):
        escaped = r"\s+".join(regex.escape(part) for part in item.split())
        alternatives.append(escaped + (r"(?![\w-])" if item[-1].isascii() and item[-1].isalnum() else ""))
    return "(?:" + "|".join(alternatives) + ")"


def _word_list(node: dict, key: str, rule_id: str | None, report: Reporter) -> list[str]:
    value = node.get(key) or []
    if not isinstance(value, list) or not all(isinstance(w, str) and w.strip() for w in value):
        report(node, rule_id, f"{key} must be a list of non-empty words or phrases", key=key)
        return []
    return value


def contractions(data: dict, report: Reporter) -> tuple[regex.Pattern, dict[str, str]] | None:
    """The file's ``grammar.contractions`` ("i'm": "i am") as one pattern and the long forms."""
    grammar = data.get("grammar") or {}
    pairs = mapping_of(grammar, "contractions", "short form: long form", report) if isinstance(grammar, dict) else {}
    if not pairs:
        return None
    long_forms = {str(short).casefold(): str(long) for short, long in pairs.items()}
    alternatives = "|".join(regex.escape(short) for short in sorted(long_forms, key=len, reverse=True))
    return regex.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", regex.IGNORECASE), long_forms


def spelled_out(contracted: tuple[regex.Pattern, dict[str, str]] | None, sentence: str) -> str:
    """``sentence`` as the grammar reads it: "I’m" as "i am", "don't" as "do not"."""
    said = sentence.replace("\u2019", "'")
    if contracted is None:
        return said
    pattern, long_forms = contracted
    return pattern.sub(lambda m: long_forms[m.group().casefold()], said)


def statement_nodes(data: dict, report: Reporter) -> tuple[list[dict], regex.Pattern | None]:
    """The trigger nodes the grammar's statements expand to (a ``negated`` form first, as its own
    trigger ``<id>.not``), and the pattern of a statement's opening (lead-in and subject), which a
    sentence must match before any of them is tried."""
    grammar = data.get("grammar")
    if grammar is None:
        return [], None
    if not isinstance(grammar, dict):
        report(data, None, "grammar must be a mapping (see docs/rules.md, Statement grammar)", key="grammar")
        return [], None
    for key in sorted(set(grammar) - GRAMMAR_KEYS - META_KEYS, key=str):
        report(grammar, None, f"unknown grammar key {key!r} (known: {', '.join(sorted(GRAMMAR_KEYS))})", key=key)
    parts = {name: _word_list(grammar, name, None, report) for name in PARTS}
    if not parts["subjects"]:
        report(grammar, None, "grammar needs subjects", key="subjects")
        return [], None
    lead = grammar.get("lead", "")
    if not isinstance(lead, str) or lead and compile_pattern(lead, "grammar.lead", grammar, report, key="lead") is None:
        return [], None
    opening = rf"^[\s\p{{P}}]*(?:{lead})?" if lead else r"^[\s\p{P}]*"
    if parts["openers"]:
        opening += rf"(?:{words(parts['openers'])}[\s,，]*){{0,2}}"
    nodes, subjects = [], list(parts["subjects"])
    for index, node in enumerate(grammar.get("statements") or []):
        if not isinstance(node, dict) or not isinstance(node.get("id"), str):
            report(grammar, None, f"statements[{index}] must be a mapping with an id", key="statements")
            continue
        nodes.extend(_expand(node, opening, parts, grammar, report))
        subjects += node.get("subjects") or [] if isinstance(node.get("subjects"), list) else []
    opener = compile_pattern(opening + words([s for s in subjects if isinstance(s, str) and s.strip()]),
                             "grammar.subjects", grammar, report, key="subjects")
    return nodes, opener


def _expand(node: dict, opening: str, parts: dict[str, list[str]], grammar: dict, report: Reporter) -> list[dict]:
    """One statement's triggers: its ``negated`` form (when it has one), then the plain form."""
    rule_id = node["id"]
    for key in sorted(set(node) - STATEMENT_KEYS - META_KEYS, key=str):
        report(node, rule_id, f"unknown key {key!r} (known: {', '.join(sorted(STATEMENT_KEYS))})", key=key)
    verbs = _word_list(node, "verbs", rule_id, report)
    subjects = _word_list(node, "subjects", rule_id, report) if "subjects" in node else parts["subjects"]
    if not verbs or not subjects:
        return report(node, rule_id, "a statement needs verbs and subjects", key="verbs") or []
    adverbs = rf"(?:{words(parts['adverbs'])}\s*)" if parts["adverbs"] else "(?!)"
    start = rf"{opening}(?P<who>{words(subjects)})\s*"
    not_objects = _word_list(node, "not_objects", rule_id, report) if "not_objects" in node else parts["not_objects"]
    stop = rf"(?!\s*{words(not_objects)})" if not_objects else ""
    stop += rf"(?!{grammar['vague']})" if grammar.get("vague") else ""
    tail = rf"(?P<verb>{words(verbs)})\s*+{stop}(?P<what>{node.get('object', grammar.get('object', '.{1,60}'))})"
    plain = {k: v for k, v in node.items() if k not in ("verbs", "subjects", "negated", "object", "not_objects")}
    plain["pattern"] = rf"{start}(?P<how>{adverbs}{{0,{MAX_ADVERBS}}}){tail}"
    negated = node.get("negated")
    if negated is None:
        return [plain]
    if not isinstance(negated, dict) or not parts["negations"]:
        report(node, rule_id, "negated must be a mapping (summary, polarity...) and the grammar needs negations",
               key="negated")
        return [plain]
    for key in sorted(set(negated) - NEGATED_KEYS - META_KEYS, key=str):
        report(negated, rule_id, f"unknown key {key!r} in negated (known: {', '.join(sorted(NEGATED_KEYS))})", key=key)
    denied = {**plain, "polarity": -plain.get("polarity", 1), "examples": None,
              **{k: v for k, v in negated.items()}, "id": f"{rule_id}.not"}
    denied["pattern"] = (rf"{start}(?P<how>{adverbs}{{0,2}}(?P<neg>{words(parts['negations'])})\s*"
                         rf"{adverbs}{{0,2}}){tail}")
    return [denied, plain]

