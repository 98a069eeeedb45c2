"""The capture funnel: which user messages become memories, and as what one-line summary.

Each message goes through the stages in order and stops at the first that says no::

    forget?  -> trigger -> length -> negative gates -> sensitive gate -> compression -> captured

Everything here is pure computation on the message and the compiled rules: no I/O,
microseconds per message. The result names the stage where the message stopped, so
``memo-mw replay`` can count them and ``memo-mw rules test`` can show the trace.
"""

from __future__ import annotations

import functools
import logging
import operator
import re
import string
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import regex

from . import defaults
from .needles import Screen, as_needle, fold, needles
from .privacy import DIGITS_HINT, MASK_HINTS, PIECE_HINT, mask_found, mask_pii
from .rules import Gate, RuleFile, RuleSet, Trigger
from . import text as _text
from .text import memory_key, nfkc
from .topics import TopicTagger

log = logging.getLogger(__name__)

#: Stage names, in funnel order; ``captured`` and ``forget`` are the two that produce work.
STAGES = ("forget", "no_trigger", "too_long", "negative", "sensitive", "unusable", "captured")

# A sentence ends at CJK or Latin terminal punctuation or a newline (a period only
# before whitespace, so "3.5" stays whole); a comma before "but"/"但是" also starts a new
# clause, so "I like jazz, but I hate country" yields two statements; so does a comma before
# "and I" / 而我, so "My boss likes golf, and I like tennis" keeps the user's own statement.
_SPLIT = regex.compile(
    r"(?<=[。！？!?；;])|\n|(?<=\.)(?=\s)|[,，]\s*(?=(?:but|however|though|although)\b|但|不过|可是)"
    r"|[,，]\s*(?=and\s+I\b|而我|我自己)",
    regex.IGNORECASE | regex.V1,
)
# Every split of _SPLIT is at one of these characters (or after it): a text without any, but for
# its last character, is one sentence.
_SPLIT_AT = re.compile(r"[。！？!?；;\n.,，]")
# Edge punctuation, except the brackets of PII placeholders such as "[email]".
_EDGE_PUNCT = regex.compile(r"^[[\s\p{P}]--[\[\]]]+|[[\s\p{P}]--[\[\]]]+$", regex.V1)
_SPACES = regex.compile(r"\s+")
_BLANKS = regex.compile(r"[^\S\n]+")
_ASCII_BLANKS = re.compile(r"[\t\r\x0b\x0c]")  # in ASCII text, with "  ": where _BLANKS changes something
_HAN = regex.compile(r"\p{Han}")
_LATIN = regex.compile(r"\p{Latin}")
# Rule files of these languages are skipped for sentences without their script.
_SCRIPT_OF = {"zh": "han", "en": "latin"}


def _split(text: str) -> list[str]:
    return [s.strip() for s in _SPLIT.split(text, concurrent=False) if s and s.strip()]


def _union(patterns: list[regex.Pattern]) -> regex.Pattern | None:
    """One pattern matching wherever any of ``patterns`` matches; None if they cannot be joined."""
    if not patterns:
        return None
    try:
        return regex.compile("|".join(f"(?:{p.pattern})" for p in patterns), regex.V0 | regex.IGNORECASE)
    except regex.error:
        return None


_NO_SCRIPT, _LATIN_ONLY = frozenset(), frozenset({"latin"})
_PII = "pii hints"  # the screen's key for memo_mw.privacy.MASK_HINTS


def _scripts(sentence: str) -> frozenset[str]:
    if sentence.isascii():  # no Han; Latin if it has a letter (an ASCII letter has case)
        return _LATIN_ONLY if sentence.lower() != sentence.upper() else _NO_SCRIPT
    han = _HAN.search(sentence, concurrent=False) is not None
    latin = _LATIN.search(sentence, concurrent=False) is not None
    return frozenset(("han",) * han + ("latin",) * latin)


@dataclass(slots=True)
class Candidate:
    """One memory the funnel wants stored: plain values only, so it travels as JSON."""

    type: str
    key: str
    polarity: int
    content: str
    excerpt: str
    rule_id: str
    confidence: float
    ttl_days: float | None
    language: str
    topics: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(slots=True, frozen=True)
class FunnelResult:
    """Where a message stopped, what it produced, and the trace through each gate. A value: the
    usual message's result is one instance shared by every request (_QUIET)."""

    stage: str
    candidates: tuple[Candidate, ...] = ()
    forget_scope: str | None = None
    forget_match: str | None = None
    trace: tuple[tuple[str, str], ...] = ()
    #: False when the message is surely no recall-everything question (is_recall_all), found on
    #: the way; None when not known here.
    recall_all: bool | None = None

    @property
    def captured(self) -> bool:
        return self.stage == "captured"


@dataclass(slots=True)
class _Hit:
    sentence: str
    trigger: Trigger
    match: regex.Match
    rule_file: RuleFile


#: What process() answers for the usual message (memo_mw._speedups.quiet), by whether the message
#: is surely no recall-everything question: one value for every request.
_QUIET = (FunnelResult("no_trigger", trace=(("trigger", "no trigger matched"),)),
          FunnelResult("no_trigger", trace=(("trigger", "no trigger matched"),), recall_all=False))


class Funnel:
    """Runs messages through the compiled rules. Thread-safe: it holds no per-message state."""

    def __init__(self, rules: RuleSet, *, timeout: float = defaults.REGEX_TIMEOUT, screen: bool = True):
        """``screen=False`` runs every pattern on every text (the needles rule none out): the
        same results, slower; what the tests compare the screen with."""
        self.rules = rules
        self.timeout = timeout
        self.topics = TopicTagger(rules.topics)
        # Fillers joined into one alternation per file (one pass instead of one per pattern).
        self._fillers = [(_SCRIPT_OF.get(f.language), _union(f.fillers)) for f in rules.files if f.fillers]
        # Every pattern's literal needles (memo_mw.needles): a text without them is not searched.
        # Most messages trigger nothing, and checking a few substrings says so in microseconds.
        # Two screens: what every message meets (fillers, forget requests, triggers, recall-all
        # questions), and the gates that only a triggered message meets. Every message is searched
        # for the first one's needles alone, a third of them: less to search, and less to keep in
        # the CPU's caches (under a busy server that costs more than the search itself).
        self._screen = Screen() if screen else Screen.off()
        self._gate_screen = Screen() if screen else Screen.off()
        for _, filler in self._fillers:
            if filler is not None:
                self._screen.add(id(filler), needles(filler.pattern))
        self._any_filler = self._firsts(id(f) for _, f in self._fillers if f is not None)
        for gate in rules.gates("forget") + rules.gates("recall_all"):
            self._screen.add(id(gate), needles(gate.pattern.pattern))
        for gate in rules.gates("negative") + rules.gates("sensitive"):
            self._gate_screen.add(id(gate), needles(gate.pattern.pattern))
        # A trigger's `requires` words are needles too (checked again as written when they pass).
        # Per file, the triggers each needle of their first set may let through, in file order.
        self._by_needle: dict[int, dict[str, tuple[int, ...]]] = {}
        self._unscreened: dict[int, tuple[int, ...]] = {}
        for rule_file in rules.files:
            by_needle: dict[str, list[int]] = {}
            unscreened = []
            for i, trigger in enumerate(rule_file.triggers):
                sets = self._screen.add(id(trigger), (*needles(trigger.pattern.pattern),
                                                  frozenset(map(fold, trigger.requires))))
                if not sets:
                    unscreened.append(i)
                for needle in sets[0] if sets else ():
                    by_needle.setdefault(needle, []).append(i)
            self._by_needle[id(rule_file)] = {n: tuple(v) for n, v in by_needle.items()}
            self._unscreened[id(rule_file)] = tuple(unscreened)
        # The triggers' needles over the whole message: a message with none of them triggers
        # nothing, whatever its sentences (None: some trigger has no needles, always look).
        self._after = self._after_first()
        self._any_trigger = None if any(self._unscreened.values()) else frozenset(self._after)
        # The gate lists each stage reads, sorted by scope once rather than per message.
        by_scope = lambda gates, scope: [g for g in gates if g.scope == scope]  # noqa: E731
        self._negative_message = by_scope(rules.gates("negative"), "message")
        self._negative_sentence = {id(f): by_scope(f.negative, "sentence") for f in rules.files}
        self._sensitive_message = by_scope(rules.gates("sensitive"), "message")
        self._sensitive_sentence = by_scope(rules.gates("sensitive"), "sentence")
        # As for triggers: a Chinese forget pattern cannot match a message with no Chinese character.
        script_of = {id(g): _SCRIPT_OF.get(f.language) for f in rules.files for g in f.forget}
        # By the scripts of a text: the forget gates that may apply, and the needles one of which
        # any text they can match holds.
        self._forget_for = {}
        for scripts in (_NO_SCRIPT, _LATIN_ONLY, frozenset({"han"}), frozenset({"han", "latin"})):
            gates = [g for g in rules.gates("forget") if script_of.get(id(g)) in (None, *scripts)]
            self._forget_for[scripts] = (gates, self._firsts(id(g) for g in gates))
        self._recall_all = rules.gates("recall_all")
        self._any_recall_all = self._firsts(id(g) for g in self._recall_all)
        # What PII masking looks for, screened with the rest: most messages need no mask looked at.
        # (With the words a code or key mask needs beside a digit: privacy.mask_found() takes them.)
        hints = self._screen.add(_PII, [frozenset(map(fold, MASK_HINTS))])
        self._pii_hints = hints[0] if hints else None
        # Each hint as the screen finds it (word edges marked) -> the hint, for privacy.mask_found().
        self._pii_hint_of = {as_needle(h): h for h in map(fold, MASK_HINTS)}
        # The usual message, ASCII and triggering nothing, told in one call (_quiet_args): made on first use.
        self._quiet: tuple | None = None
        self._usual: tuple | None = None  # usual_args(), made on first use

    def _firsts(self, keys) -> frozenset[str] | None:
        """The first needle sets of these patterns, joined: a text with none of them is matched by
        none of the patterns (None: some pattern has no needles)."""
        firsts = [self._screen.sets(key) for key in keys]
        return frozenset().union(*(sets[0] for sets in firsts)) if all(firsts) else None

    def _after_first(self) -> dict[str, tuple[bool, frozenset[str], tuple[tuple[frozenset[str], ...], ...]]]:
        """For each needle of some trigger's first set, what else those triggers need: (whether one
        needs nothing more, the second sets of those with two sets, joined, the other sets of those
        with more). Some trigger with this needle may match a text iff one needs nothing more, its
        needles meet the joined set (each of those triggers needs one of its own), or all of one's
        other sets are met."""
        after: dict[str, list] = {}
        for rule_file in self.rules.files:
            for needle, indexes in self._by_needle[id(rule_file)].items():
                entry = after.setdefault(needle, [False, set(), []])
                for i in indexes:
                    rest = self._screen.sets(id(rule_file.triggers[i]))[1:]
                    if not rest:
                        entry[0] = True
                    elif len(rest) == 1:
                        entry[1].update(rest[0])
                    else:
                        entry[2].append(rest)
        return {n: (alone, frozenset(seconds), tuple(more)) for n, (alone, seconds, more) in after.items()}

    def _may_trigger(self, present: frozenset[str]) -> bool:
        """Whether some trigger's needle sets are all in ``present`` (a text's needles; each of its
        sentences holds no more): if none are, no sentence of it can trigger anything."""
        if self._any_trigger is None:
            return True
        for needle in self._any_trigger.intersection(present):
            alone, seconds, more = self._after[needle]
            if alone or not seconds.isdisjoint(present):
                return True
            for sets in more:
                if not any(map(present.isdisjoint, sets)):
                    return True
        return False

    # -- matching with a timeout -------------------------------------------------------

    def _search(self, rule: Trigger | Gate, text: str, present: frozenset[str] | None = None
                ) -> regex.Match | None:
        """``rule.pattern.search(text)`` with the timeout; with ``present`` (the screen's needles
        of ``text``), the rule's needle sets rule the search out first."""
        if present is not None and not self._screen.may_match(id(rule), present):
            return None
        try:
            return rule.pattern.search(text, timeout=self.timeout, concurrent=False)
        except TimeoutError:
            log.warning("memo-mw: rule %s of %s timed out on a message of %d characters; treated as no match",
                        rule.id, rule.source, len(text))
            return None

    def _gate_hit(self, gates: list[Gate], text: str, screen: Screen | None = None) -> Gate | None:
        """The first of these gates (screened by ``screen``, the gate screen by default) that matches."""
        screen = self._gate_screen if screen is None else screen
        present = screen.present(text) if gates else frozenset()
        for gate in gates:
            if screen.may_match(id(gate), present) and self._search(gate, text) is not None:
                return gate
        return None

    # -- the stages --------------------------------------------------------------------

    def clean(self, text: str) -> str:
        """NFKC, fillers removed, whitespace collapsed."""
        return self._clean(text)[0]

    def _clean(self, text: str) -> tuple[str, frozenset[str] | None]:
        """The cleaned text, and its needles when no filler changed it (else None)."""
        text = nfkc(text)
        present: frozenset[str] | None = self._screen.present(text)
        changed = False
        if self._any_filler is None or not self._any_filler.isdisjoint(present):
            scripts = _scripts(text)
            for needed, filler in self._fillers:
                if filler is None or (needed is not None and needed not in scripts):
                    continue
                if not self._screen.may_match(id(filler), present):
                    continue
                try:
                    cleaned = filler.sub("", text, timeout=self.timeout, concurrent=False)
                except TimeoutError:
                    log.warning("memo-mw: a filler pattern timed out; left the text as it was")
                    continue
                if cleaned != text:  # a removal can make the next filler's needles: look again
                    changed = True
                    present = self._screen.present(cleaned)
                text = cleaned
        # Runs of spaces become one; line breaks stay, as they end sentences.
        if text.isascii() and "  " not in text and (text.isprintable() or _ASCII_BLANKS.search(text) is None):
            cleaned = text.strip()  # nothing for _BLANKS to do
        else:
            cleaned = _BLANKS.sub(" ", text, concurrent=False).strip()
        return cleaned, (None if changed or cleaned != text else present)

    def sentences(self, text: str) -> list[str]:
        if _SPLIT_AT.search(text, 0, len(text) - 1) is None:  # one sentence (the last character aside)
            text = text.strip()
            return [text] if text else []
        return _split(text)

    def process(self, message: str) -> FunnelResult:
        """Run one user message through every stage."""
        if message and message.isascii():
            quiet = self._quiet if self._quiet is not None else self._quiet_args()
            speedups = _text._speedups
            if quiet and speedups is not None:
                # Most messages: what the stages below would say, in one call (memo_mw._speedups.quiet).
                verdict = speedups.quiet(message, *quiet)
                if verdict >= 0:
                    return _QUIET[verdict == 0 and self._any_recall_all is not None]
        return self._process(message)

    def _quiet_args(self) -> tuple:
        """The screen's table and what memo_mw._speedups.quiet() checks the needles it finds
        against, or ``()`` when it cannot tell (no C speedups, no table, a screen that is off, or
        patterns without needles). For a message that is printable ASCII with no space at an end
        or beside another (what cleaning leaves as it is), quiet() answers -1 (look closer) when a
        needle is there of a filler, a forget request or a PII mask other than a digit; when some
        trigger's needle sets are all there (as _may_trigger); or, with a digit, when the text
        holds DIGITS_HINT digits or a piece of PIECE_HINT characters (masks may run). Otherwise
        the message triggers nothing: 1 if a recall-everything question's needles are there
        (recall looks again), else 0."""
        args: tuple = ()
        forget_firsts = [self._forget_for[scripts][1] for scripts in (_NO_SCRIPT, _LATIN_ONLY)]
        table = self._screen.table() if _text._speedups is not None else ()
        if table and self._pii_hints is not None and self._any_filler is not None and \
                self._any_trigger is not None and None not in forget_firsts:
            # Each needle's roles (memo_mw/_speedups.c): 1 stop (look closer), 2 a digit, 4 a
            # recall-everything needle, 8 the first of some trigger's (with its _after entry).
            digits = frozenset(map(as_needle, string.digits)) & self._pii_hints
            flags: dict[str, int] = {}
            for role, needles_ in ((1, (self._pii_hints - digits).union(self._any_filler, *forget_firsts)),
                                   (2, digits), (4, self._any_recall_all or ()), (8, self._any_trigger)):
                for needle in needles_:
                    flags[needle] = flags.get(needle, 0) | role
            # The _after entries with the table's own needle objects, in tuples: quiet() compares the
            # needles it finds with them by identity (no hash of each read: fewer cache lines).
            own = {needle: needle for ends in table[2] if ends for needle in ends}

            def mine(needles: Iterable[str]) -> tuple[str, ...]:
                return tuple(own[needle] for needle in needles if needle in own)  # (others cannot be found)

            after = {n: (alone, mine(seconds), tuple(tuple(map(mine, sets)) for sets in more))
                     for n, (alone, seconds, more) in self._after.items()}
            roles = {n: (f, after[n] if f & 8 else None) for n, f in flags.items()}
            # And each state's: the roles of the needles that end there (read as the text is scanned),
            # and 16 where any needle ends.
            state_flags = bytes(functools.reduce(operator.or_, (flags.get(n, 0) for n in ends), 16) if ends else 0
                                for ends in table[2])
            # The first state where a needle ends (needle_table numbers those last): the flags of
            # the states before it are all 0, and quiet() does not read them.
            first = next((i for i, ends in enumerate(table[2]) if ends), len(table[2]))
            args = (*table, (roles, DIGITS_HINT, PIECE_HINT, state_flags, first))
        self._quiet = args
        return args

    def usual_args(self) -> tuple | None:
        """What memo_mw._speedups.read_request() needs of these rules to read the usual request:
        quiet()'s four arguments (_quiet_args), the tagger's lexicon, process()'s result for each
        of quiet()'s verdicts 0 and 1, whether the first rules out a recall-everything question
        (so that a user's view may answer the request: MemoryMiddleware), and the first's stage;
        None when quiet() cannot tell."""
        if self._usual is None:
            quiet = self._quiet if self._quiet is not None else self._quiet_args()
            results = (_QUIET[self._any_recall_all is not None], _QUIET[0])
            self._usual = (*quiet, self.topics.c_lexicon(), results, results[0].recall_all is False,
                           results[0].stage) if quiet else ()
        return self._usual or None

    def _process(self, message: str) -> FunnelResult:
        """process() without the one-call look at the usual message (the stages themselves)."""
        cleaned, present = self._clean(message or "")
        # The needles of the message as is_recall_all reads it (cleaning changed nothing): when
        # none of a recall-everything question's are there, recall need not look again.
        recall_all = False if present is not None and self._surely_no_recall_all(present) else None
        # PII is masked first, so no capture can cut an address in half and keep a piece.
        text = self._masked(cleaned, present)
        trace: list[tuple[str, str]] = []
        if not text:
            return FunnelResult("no_trigger", trace=(("trigger", "empty message"),))
        if present is None or text != cleaned:
            present = self._screen.present(text)
        forget = self._forget_request(text, present)
        if forget is None and not self._may_trigger(present):
            trace.append(("trigger", "no trigger matched"))  # as _capture would say, without the sentences
            return FunnelResult("no_trigger", trace=tuple(trace), recall_all=recall_all)
        sentences = self.sentences(text)
        if forget is not None:
            gate, what = forget
            trace.append(("forget", f"{gate.id} ({gate.scope})"))
            candidates: list[Candidate] = []
            if gate.scope == "match":
                # "Forget that I play tennis. I like golf now.": the other sentences still count.
                rest = [s for s in sentences if self._search(gate, s, self._screen.present(s)) is None]
                if rest:
                    candidates = self._capture(text, rest, trace, present)[1]
            return FunnelResult("forget", candidates=tuple(candidates), forget_scope=gate.scope, forget_match=what,
                                trace=tuple(trace), recall_all=recall_all)
        stage, candidates = self._capture(text, sentences, trace, present)
        return FunnelResult(stage, candidates=tuple(candidates), trace=tuple(trace), recall_all=recall_all)

    def _masked(self, text: str, present: frozenset[str] | None) -> str:
        """mask_pii(text), told by ``present`` (the screen's needles of ``text``, if known) which
        masks' hints are there, so that it need not look for them again."""
        if present is None or self._pii_hints is None:
            return mask_pii(text)
        found = self._pii_hints.intersection(present)
        return mask_found(text, frozenset(map(self._pii_hint_of.__getitem__, found))) if found else text

    def _capture(self, text: str, sentences: list[str], trace: list[tuple[str, str]],
                 present: frozenset[str]) -> tuple[str, list[Candidate]]:
        """Trigger, length, negative, sensitive and compression stages over the given sentences
        (``present``: the needles of ``text``)."""
        hits = self._triggers(sentences, text, present)
        if not hits:
            trace.append(("trigger", "no trigger matched"))
            return "no_trigger", []
        trace.append(("trigger", ", ".join(h.trigger.id for h in hits)))

        limit = max(h.rule_file.max_length for h in hits)
        if len(text) > limit:
            trace.append(("length", f"{len(text)} > {limit} characters"))
            return "too_long", []
        trace.append(("length", f"{len(text)} <= {limit}"))

        # Message-wide negatives (a translation request) and sensitive gates apply whatever
        # the language; a sentence's own negatives come from the file of the rule that matched,
        # so a Chinese question gate does not stop an English sentence.
        whole = self._gate_hit(self._negative_message, text)
        kept = self._pass(hits, "negative", trace, lambda hit: whole or self._gate_hit(
            self._negative_sentence[id(hit.rule_file)], hit.sentence))
        if not kept:
            return "negative", []
        whole = self._gate_hit(self._sensitive_message, text)
        private = self._pass(kept, "sensitive", trace, lambda hit: whole or self._gate_hit(
            self._sensitive_sentence, hit.sentence))
        if not private:
            return "sensitive", []

        candidates: dict[tuple[str, int], Candidate] = {}
        for hit in private:
            candidate = self._compress(hit)
            if candidate is None:
                trace.append(("compress", f"{hit.trigger.id}: nothing usable captured"))
            elif (candidate.key, candidate.polarity) not in candidates:
                candidates[(candidate.key, candidate.polarity)] = candidate
                trace.append(("compress", f"{hit.trigger.id} -> {candidate.content}"))
        if not candidates:
            return "unusable", []
        return "captured", list(candidates.values())

    @staticmethod
    def _pass(hits: list[_Hit], stage: str, trace: list[tuple[str, str]], stopper) -> list[_Hit]:
        """The hits no gate stops; ``stopper(hit)`` returns the stopping gate or None."""
        passed = []
        for hit in hits:
            gate = stopper(hit)
            if gate is None:
                passed.append(hit)
            else:
                trace.append((stage, f"{gate.id}: {gate.reason}"))
        return passed

    def _forget_request(self, text: str, present: frozenset[str]) -> tuple[Gate, str | None] | None:
        gates, firsts = self._forget_for[_scripts(text)]
        if firsts is not None and firsts.isdisjoint(present):
            return None  # the usual case: none of the needles
        for gate in gates:
            match = self._search(gate, text, present)
            if match is None:
                continue
            if gate.scope == "all":
                return gate, None
            what = _EDGE_PUNCT.sub("", match.group("what") or "", concurrent=False)
            if what:
                return gate, what
        return None

    def is_recall_all(self, message: str) -> bool:
        """True for questions like "what do you remember about me": recall everything, not just matches."""
        text = nfkc(message or "")
        if self._surely_no_recall_all(self._screen.present(text)):
            return False  # the usual case: none of their needles
        return self._gate_hit(self._recall_all, text, self._screen) is not None

    def _surely_no_recall_all(self, present: frozenset[str]) -> bool:
        """Whether a text holding just these needles is surely no recall-everything question."""
        return self._any_recall_all is not None and self._any_recall_all.isdisjoint(present)

    def _triggers(self, sentences: list[str], text: str, text_present: frozenset[str]) -> list[_Hit]:
        hits = []
        for sentence in sentences:
            present = text_present if sentence == text else self._screen.present(sentence)
            scripts = _scripts(sentence)
            folded = None
            for rule_file in self.rules.files:
                needed = _SCRIPT_OF.get(rule_file.language)
                if needed is not None and needed not in scripts:
                    continue  # a Chinese rule cannot match a sentence without Chinese characters
                # Only the triggers one of whose first needles is there can match (in file order).
                by_needle = self._by_needle[id(rule_file)]
                order = set(self._unscreened[id(rule_file)])
                for needle in present:
                    order.update(by_needle.get(needle, ()))
                hit = None
                for i in sorted(order):
                    trigger = rule_file.triggers[i]
                    if not self._screen.may_match(id(trigger), present):
                        continue
                    if trigger.requires:
                        folded = sentence.casefold() if folded is None else folded
                        if not any(word in folded for word in trigger.requires):
                            continue
                    match = self._search(trigger, sentence)
                    if match is not None:
                        hit = _Hit(sentence, trigger, match, rule_file)
                        break
                if hit is not None:
                    hits.append(hit)
                    break
        return hits

    def _compress(self, hit: _Hit) -> Candidate | None:
        rule_file, trigger = hit.rule_file, hit.trigger
        values = {name: self._tidy(value or "", rule_file, particles=(name == "what"),
                                   pronouns=trigger.pronouns)
                  for name, value in hit.match.groupdict().items()}
        if any(not values.get(name) for name in trigger.summary_fields):
            return None  # a group the summary needs captured nothing
        if len(values.get("what", "")) > rule_file.max_capture:
            return None
        content = _SPACES.sub(" ", render(trigger.summary, values), concurrent=False).strip()
        key = _strip_key_prefixes(memory_key(render(trigger.key, values)), rule_file.key_prefixes)
        if not content or not key:
            return None
        return Candidate(
            type=trigger.type, key=key, polarity=trigger.polarity, content=content,
            excerpt=hit.sentence, rule_id=trigger.id, confidence=trigger.confidence,
            topics=sorted(self.topics.tag(f"{content} {hit.sentence}")),
            ttl_days=trigger.ttl_days, language=rule_file.language,
        )

    @staticmethod
    def _tidy(value: str, rule_file: RuleFile, *, particles: bool, pronouns: bool) -> str:
        """Edge punctuation (and, for the remembered phrase, trailing particles) off; first person to third."""
        value = _EDGE_PUNCT.sub("", value.strip(), concurrent=False)
        changed = particles
        while changed and value:
            changed = False
            for particle in rule_file.trailing:
                if _ends_with_particle(value, particle):
                    value = _EDGE_PUNCT.sub("", value[: -len(particle)], concurrent=False)
                    changed = True
        for pattern, replacement in rule_file.pronouns if pronouns else ():
            value = pattern.sub(replacement, value, concurrent=False)
        return value


class _TemplateFormatter(string.Formatter):
    """``str.format`` plus the spec ``3sg``: the first word as an English third-person verb."""

    def format_field(self, value, format_spec):
        if format_spec == "3sg":
            return third_person(str(value))
        return super().format_field(value, format_spec)


_FORMATTER = _TemplateFormatter()
def render(template: str, values: dict[str, str]) -> str:
    """Render a rule's summary or key template."""
    return _FORMATTER.vformat(template, (), values)


def third_person(phrase: str) -> str:
    """``run at 6am`` -> ``runs at 6am``; ``go`` -> ``goes``; ``study`` -> ``studies``."""
    first, sep, rest = phrase.partition(" ")
    lower = first.lower()
    if lower in _IRREGULAR:
        first = _IRREGULAR[lower]
    elif not lower.isalpha() or lower.endswith("ed") and not lower.endswith("eed"):
        return phrase  # not a verb we can conjugate, or past tense: leave it as said
    elif lower.endswith("s") and not lower.endswith(("ss", "us")):
        return phrase  # already third person
    elif lower.endswith(("sh", "ch", "ss", "us", "x", "o", "z")):
        first += "es"
    elif lower.endswith("y") and len(lower) > 1 and lower[-2] not in "aeiou":
        first = first[:-1] + "ies"
    else:
        first += "s"
    return first + sep + rest


_IRREGULAR = {"have": "has", "be": "is", "am": "is", "do": "does", "go": "goes", "can": "can",
              "will": "will", "must": "must", "should": "should", "may": "may", "might": "might"}


def _strip_key_prefixes(key: str, prefixes: tuple[str, ...]) -> str:
    """``喝乌龙茶`` -> ``乌龙茶``, ``drinking coffee`` -> ``coffee``: one slot however the thing is named.

    A Latin prefix must be a whole word; something must remain after the prefix.
    """
    changed = True
    while changed:
        changed = False
        for prefix in prefixes:
            if not key.startswith(prefix) or len(key) <= len(prefix):
                continue
            rest = key[len(prefix):]
            if prefix[-1].isascii() and prefix[-1].isalnum():
                if not rest[0].isspace():
                    continue
                rest = rest.lstrip()
            if rest:
                key, changed = rest, True
    return key


def _ends_with_particle(value: str, particle: str) -> bool:
    """``value`` ends with ``particle``; a Latin particle must be a whole word ("too", not "tattoo")."""
    if len(value) <= len(particle) or not value.casefold().endswith(particle.casefold()):
        return False
    return not particle[0].isascii() or not particle[0].isalnum() or value[-len(particle) - 1].isspace()
