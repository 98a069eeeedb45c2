"""The statement grammar of a rule file (docs/rules.md, "Statement grammar"). A first-person
statement is read by its parts, each a plain word list in the YAML: a lead-in, the subject, a run
of adverbs (and, for a ``negated`` form, a negation among them), a verb of one class, an object.
Each verb class becomes an ordinary trigger, so it is tested, explained and gated like any other."""

from typing import Any

import regex

from .rules_yaml import Reporter, compile_pattern, mapping_of, unknown_keys

PARTS = ("openers", "subjects", "adverbs", "negations", "not_objects")
GRAMMAR_KEYS = frozenset({*PARTS, "lead", "with", "object", "vague", "contractions", "statements", "before",
                          "unstated_subject", "unstated_is_user"})
STATEMENT_KEYS = frozenset({"id", "verbs", "subjects", "type", "polarity", "summary", "key", "confidence",
                            "ttl_days", "examples", "negated", "object", "not_objects", "others"})
NEGATED_KEYS = frozenset({"summary", "polarity", "key", "type", "confidence", "examples"})
#: Adverbs in a row before the verb, at most, besides a negation (a bound keeps every pattern linear).
MAX_ADVERBS = 4


def words(items: list[str], name: str, lists: dict[str, set[str]]) -> str:
    """A word list as a named list of the ``regex`` module (one set, however long the list: a long
    alternation would cost memory in every pattern); a Latin word must end on a word boundary."""
    folded = {" ".join(i.casefold().split()) for i in items}
    latin = {i for i in folded if i[-1].isascii() and i[-1].isalnum()}
    lists[f"{name}_w"], lists[f"{name}_o"] = latin or {"\0"}, (folded - latin) or {"\0"}
    return rf"(?:\L<{name}_w>(?![\w-])|\L<{name}_o>)"


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


def requires_met(rule: Any, *, low: str, folded: str) -> bool:
    """A rule's pre-check: one of its ``requires`` words is in what its pattern reads (a statement, the
    lower-cased sentence with contractions spelled out, ``low``; any other rule, the casefolded sentence)."""
    requires = getattr(rule, "requires", ())
    return not requires or any(word in (low if getattr(rule, "statement", False) else folded) for word in requires)


def lowered(text: str) -> str:
    """What a statement's pattern reads: ``text`` in lower case (word lists are matched as sets,
    without case folding in every pattern); ``text`` itself when lower case would change its length."""
    low = text.lower()
    return low if len(low) == len(text) else text


def negation_in(rule: Any, match: regex.Match) -> str | None:
    """The negation among a statement's adverbs ("do not" in "really do not"), if there is one."""
    found = rule.negation and rule.negation.search(match.group("how") or "")
    return found.group() if found else None


def statement_form(rule: Any, match: regex.Match) -> bool:
    """A statement's plain and negated triggers share a pattern: the negation tells which one it is."""
    return not getattr(rule, "statement", False) or (negation_in(rule, match) is not None) == rule.negated


def statement_nodes(data: dict, report: Reporter) -> tuple[list[dict], regex.Pattern | None, regex.Pattern | None]:
    """The trigger nodes the grammar's statements expand to (a ``negated`` form first, as its own
    trigger ``<id>.not``), the pattern of a statement's opening (lead-in and subject), which a
    sentence must match before any of them is tried, and the pattern of a negation."""
    grammar = data.get("grammar")
    if grammar is None:
        return [], None, None
    if not isinstance(grammar, dict):
        report(data, None, "grammar must be a mapping (see docs/rules.md, Statement grammar)", key="grammar")
        return [], None, None
    unknown_keys(grammar, GRAMMAR_KEYS, None, report, "grammar key")
    parts = {name: _word_list(grammar, name, None, report) for name in PARTS}
    if not parts["subjects"]:
        report(grammar, None, "grammar needs subjects", key="subjects")
    if not parts["subjects"] or not all(_pattern_ok(grammar, key, report) for key in ("lead", "with")):
        return [], None, None
    lead = grammar.get("lead", "")
    start, lists = rf"^[\s\p{{P}}]*(?:{lead})?" if lead else r"^[\s\p{P}]*", {}
    openers = rf"(?:{words(parts['openers'], 'openers', lists)}[\s,，]*){{0,2}}" if parts["openers"] else ""
    opening = start + openers
    unsaid, is_user = _unsaid(grammar, report)
    nodes, subjects, theirs, unnamed, bare_verbs, user_verbs = [], list(parts["subjects"]), [], [], [], []
    for index, node in enumerate(grammar.get("statements") or []):
        if not isinstance(node, dict) or not isinstance(node.get("id"), str):
            report(grammar, None, f"statements[{index}] must be a mapping with an id", key="statements")
            continue
        own = node.get("subjects") if isinstance(node.get("subjects"), list) else parts["subjects"]
        named = [s for s in own if any(s == g or s.startswith(f"{g} ") for g in parts["subjects"])]  # "i am"
        users = bool(named)  # not "my father"; a time word in the user's statement ("最近") names no one
        listed = unsaid is True or isinstance(unsaid, list) and node["id"] in unsaid
        bare = rf"^[\s\p{{P}}]*{openers}" if users and listed else ""
        along = rf"(?:{grammar['with']})?" if users and grammar.get("with") else ""  # 我和老公都…
        nodes.extend(_expand(node, opening, bare, parts, grammar, report, dict(lists), along=along))
        if users:
            subjects += named
            unnamed += [s for s in own if s not in named]
        elif node.get("others"):  # a person ("老婆"), not a time or place ("平时", "家里")
            theirs += own
        else:
            unnamed += own
        if bare:
            verbs = [v for v in node.get("verbs") or [] if isinstance(v, str) and v.strip()]
            bare_verbs += verbs
            user_verbs += verbs if is_user is True or isinstance(is_user, list) and node["id"] in is_user else []
    if isinstance(unsaid, list) and (unknown := set(unsaid) - {n["id"] for n in nodes}):
        report(grammar, None, f"unstated_subject names no statement: {', '.join(sorted(unknown))}",
               key="unstated_subject")
    subjects, theirs, unnamed = (words([s for s in group if isinstance(s, str) and s.strip()], name, lists)
                                 for group, name in ((subjects, "subjects"), (theirs, "theirs"), (unnamed, "unnamed")))
    mods = words(parts["adverbs"] + parts["negations"], "mods", lists)  # then adverbs and one of those verbs:
    bare = "".join(rf"|^[\s\p{{P}}]*{openers}(?:{mods}[\s,]*){{0,{MAX_ADVERBS + 1}}}{words(verbs, name, lists)}{said}"
                   for verbs, name, said in ((user_verbs, "user_verbs", "(?P<said>)"), (bare_verbs, "bare_verbs", ""))
                   if verbs)
    # said: the user is named. The fewest openers first, so that "我今年…" names 我 and "我老婆…" does not.
    said = rf"{start}{openers and openers + '?'}(?:(?P<said>{subjects})(?!{theirs})|{theirs}|{unnamed}){bare}"
    opener = compile_pattern(said, "grammar.subjects", grammar, report, key="subjects", lists=lists)
    negations = sorted({n.casefold() for n in parts["negations"]}, key=len, reverse=True)
    latin = [rf"(?<![\w-]){regex.escape(n)}(?![\w-])" if n.isascii() else regex.escape(n) for n in negations]
    negation = regex.compile("|".join(latin)) if latin else None
    return nodes, opener, negation


def _pattern_ok(grammar: dict, key: str, report: Reporter) -> bool:
    """The grammar's ``key`` is absent or a pattern that compiles (a problem is reported)."""
    pattern = grammar.get(key, "")
    return isinstance(pattern, str) and (not pattern or compile_pattern(pattern, f"grammar.{key}", grammar, report,
                                                                        key=key) is not None)


def _unsaid(grammar: dict, report: Reporter) -> tuple[bool | list, bool | list]:
    """``unstated_subject``: an unsaid subject ("周末喜欢去爬山", "love a good thriller") is the user's where a
    sentence starts, after openers (true, or the ids of the statements that read it so); and
    ``unstated_is_user``: the statements (true: all of those) whose verbs, so said, name the user even after
    someone else was named ("My dad loves golf. Love jazz"; not "My grandpa was a farmer. Grew up in Kansas")."""
    for key in ("unstated_subject", "unstated_is_user"):
        value = grammar.get(key, False)
        if not isinstance(value, bool) and not (isinstance(value, list) and all(isinstance(i, str) for i in value)):
            report(grammar, None, f"{key} must be true, false or a list of statement ids", key=key)
    return grammar.get("unstated_subject", False), grammar.get("unstated_is_user", False)


def _expand(node: dict, opening: str, bare: str, parts: dict[str, list[str]], grammar: dict, report: Reporter,
            lists: dict[str, set[str]], *, along: str = "") -> list[dict]:
    """One statement's triggers: its ``negated`` form (when it has one), then the plain form. ``bare``,
    when given, is another opening: a sentence's start, with the subject unsaid; ``along``, someone named
    with the subject."""
    rule_id = node["id"]
    unknown_keys(node, STATEMENT_KEYS, rule_id, report)
    verbs = _word_list(node, "verbs", rule_id, report)
    subjects = _word_list(node, "subjects", rule_id, report) if "subjects" in node else parts["subjects"]
    if not verbs or not subjects:
        return report(node, rule_id, "a statement needs verbs and subjects", key="verbs") or []
    modifiers = parts["adverbs"] + parts["negations"]
    mods = rf"(?:{words(modifiers, 'mods', lists)}[\s,]*)" if modifiers else "(?!)"  # "really, really"
    unsaid = f"|{bare}(?P<who>)" if bare else ""  # two groups named who: the subject said, or none
    start = rf"(?:{opening}(?P<who>{words(subjects, 'subjects', lists)}){along}{unsaid})\s*"
    not_objects = _word_list(node, "not_objects", rule_id, report) if "not_objects" in node else parts["not_objects"]
    stop = rf"(?!\s*{words(not_objects, 'not_objects', lists)})" if not_objects else ""
    stop += rf"(?!{grammar['vague']})" if grammar.get("vague") else ""
    what = str(node.get("object", "{object}")).replace("{object}", grammar.get("object", ".{1,60}"))  # the grammar's
    tail = rf"(?P<verb>{words(verbs, 'verbs', lists)})\s*+{stop}(?P<what>{what})"
    # One pattern for both forms, one run of adverbs and negations: the funnel finds the negation in
    # {how} and tells the forms apart by it (a word list costs memory in every pattern that uses it).
    plain = {k: v for k, v in node.items() if k not in ("verbs", "subjects", "negated", "object", "not_objects")}
    plain |= {"__lists__": lists, "pattern": rf"{start}(?P<how>{mods}{{0,{MAX_ADVERBS + 1}}}){tail}",
              "requires": [" ".join(v.split()) for v in verbs]}  # a pattern is tried only where one of its verbs is
    negated = node.get("negated")
    if negated is None:
        return [plain]
    if not isinstance(negated, dict) or not parts["negations"]:
        report(node, rule_id, "negated must be a mapping (summary, polarity...) and the grammar needs negations",
               key="negated")
        return [plain]
    unknown_keys(negated, NEGATED_KEYS, rule_id, report, where=" in negated")
    return [{**plain, "polarity": -plain.get("polarity", 1), "examples": None, **negated, "id": f"{rule_id}.not",
             "__negated__": True}, plain]
