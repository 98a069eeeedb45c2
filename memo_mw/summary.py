"""What a matched trigger says: its one-line summary and the memory key (slot) it fills, from the
rule's ``summary`` and ``key`` templates (docs/rules.md, "Templates and 3sg")."""

import string

import regex

from .rules import RuleFile, Trigger
from .text import memory_key

# Edge punctuation, except the brackets of PII placeholders such as "[email]".
_EDGE_PUNCT = regex.compile(r"^[[\s\p{P}]--[\[\]]]+|[[\s\p{P}]--[\[\]]]+$", regex.V1)
_SPACES = regex.compile(r"\s+")
_FIRST_WORD = regex.compile(r"^\S+")
_CASED_WORD = regex.compile(r"\b(?!\p{Lu}{2,}\b)\w+")  # a word, not an acronym ("IT")
_IRREGULAR = {"have": "has", "be": "is", "am": "is", "are": "is", "do": "does", "go": "goes"}
_AS_SAID = frozenset(("can will must should may might "  # left as said: modal verbs, and no verb ("in bed by ten")
                      "in on at by to up out off into a an the not so too very just only").split())


def summarize(trigger: Trigger, rule_file: RuleFile, groups: dict[str, str | None]) -> tuple[str, str] | None:
    """The summary and memory key of a match with these ``groups``; None when nothing usable was
    captured (a group the summary needs is empty, the phrase is too long, nothing is left)."""
    # The verb as said, in lower case but for an acronym past its first word: "Grew up in", "LOVE"; "work in IT".
    verb = _FIRST_WORD.sub(lambda m: m[0].lower(), groups.get("verb") or "")
    said = {**groups, "verb": _CASED_WORD.sub(lambda m: m[0].lower(), verb)}
    values = {name: tidy(value or "", rule_file, particles=(name == "what"), pronouns=trigger.pronouns)
              for name, value in said.items()}
    if any(not values.get(name) for name in trigger.summary_fields):
        return None
    if len(values.get("what", "")) > rule_file.max_capture:
        return None
    content = _SPACES.sub(" ", render(trigger.summary, values)).strip()
    key = strip_key_prefixes(memory_key(render(trigger.key, values)), rule_file.key_prefixes)
    return (content, key) if content and key else None


def strip_edge_punct(text: str) -> str:
    """``text`` without punctuation or whitespace at its ends (a placeholder's brackets stay)."""
    return _EDGE_PUNCT.sub("", text)


def tidy(value: str, rule_file: RuleFile, *, particles: bool, pronouns: bool) -> str:
    """Edge punctuation (and, for the remembered phrase, trailing particles) off; first person to third."""
    value = strip_edge_punct(value.strip())
    changed = particles
    while changed and value:
        changed = False
        for particle in rule_file.trailing:
            if _ends_with_particle(value, particle):
                value, changed = strip_edge_punct(value[: -len(particle)]), True
    for pattern, replacement in rule_file.pronouns if pronouns else ():
        value = pattern.sub(replacement, value)
    return value


class _TemplateFormatter(string.Formatter):
    def format_field(self, value, format_spec):
        if format_spec == "3sg":
            return third_person(str(value))
        return super().format_field(value, format_spec)


def render(template: str, values: dict[str, str]) -> str:
    """Render a rule's summary or key template: ``str.format`` plus the spec ``3sg``."""
    return _TemplateFormatter().vformat(template, (), values)


def third_person(phrase: str) -> str:
    """``run at 6am`` -> ``runs at 6am``; ``go`` -> ``goes``; ``study`` -> ``studies``."""
    first, sep, rest = phrase.partition(" ")
    lower = first.lower()
    participle = lower.endswith("ing") and any(c in "aeiouy" for c in lower[:-3])  # "wearing"; "sing" is a verb
    if lower in _IRREGULAR:
        first = _IRREGULAR[lower]
    elif lower in _AS_SAID or not lower.isalpha() or lower.endswith("ed") and not lower.endswith("eed") or participle:
        return phrase  # not a verb we can conjugate, past tense or a participle: leave it as said
    elif lower.endswith("s") and not lower.endswith(("ss", "us")):
        return phrase  # already third person
    elif lower.endswith(("sh", "ch", "ss", "us", "x", "o", "z")):
        first += "es"
    elif lower.endswith("y") and len(lower) > 1 and lower[-2] not in "aeiou":
        first = first[:-1] + "ies"
    else:
        first += "s"
    return first + sep + rest


def strip_key_prefixes(key: str, prefixes: tuple[str, ...]) -> str:
    """``喝乌龙茶`` -> ``乌龙茶``, ``drinking coffee`` -> ``coffee``: one slot however the thing is named.
    A Latin prefix must be a whole word, and something must remain after it."""
    changed = True
    while changed:
        changed = False
        for prefix in prefixes:
            if rest := _after_prefix(key, prefix):
                key, changed = rest, True
    return key


def _after_prefix(key: str, prefix: str) -> str:
    """What follows ``prefix`` at the start of ``key`` ("" when it is not there as a whole word)."""
    if not key.startswith(prefix) or len(key) <= len(prefix):
        return ""
    rest = key[len(prefix):]
    if prefix[-1].isascii() and prefix[-1].isalnum():
        return rest.lstrip() if rest[0].isspace() else ""
    return rest


def _ends_with_particle(value: str, particle: str) -> bool:
    """``value`` ends with ``particle``; a Latin particle must be a whole word ("too", not "tattoo")."""
    if len(value) <= len(particle) or not value.casefold().endswith(particle.casefold()):
        return False
    return not particle[0].isascii() or not particle[0].isalnum() or value[-len(particle) - 1].isspace()
