"""Literal needles of a pattern: strings one of which every match contains.

Most messages trigger nothing, and most of a rule's patterns cannot match a message that lacks
some literal words of it: ``\\bI\\s+(?:really\\s+)?(?:like|love)\\s+`` needs "like" or "love".
Checking a few substrings (``str.__contains__``, tens of nanoseconds each) rules a pattern out far
faster than running it. :func:`needles` reads a pattern and returns such sets (the most selective
two: "我" and one of "喜欢", "爱", ...), or none when it cannot name one (a pattern made only of
classes, or syntax it does not know): then the pattern is always run. A needle set is only ever
a necessary condition, so screening with it changes no result, only the time spent finding it.

Needles are compared case-insensitively, on text folded by :func:`fold`: the same folding for
the needles and the text, checked against the ``regex`` module's own case-insensitive matching for
every character (tests/test_needles.py). :class:`Screen` holds the needles of many patterns and
finds all those a text holds in one pass.

A ``\\b`` next to an ASCII letter or digit of a needle stays in it, as :data:`MARK`: texts are
searched with a MARK at every edge of a run of ASCII word characters (:func:`marked`), so
``\\b(?:um+|ah)\\b`` needs "ah" as a word, not inside "yeah", and ``\\bown\\b`` is not
screened in by "town". Inside a needle the same marks stand wherever its own characters put
them, so a needle is in a marked text exactly where it was in the text, its edges aside.
"""

from __future__ import annotations

import array
import functools
import operator
import re
import unicodedata
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import ahocorasick

from . import text as _text

#: Most strings an exactly-known piece of a pattern may stand for (a product of alternatives).
MAX_STRINGS = 64
#: Most needles a set may hold: the screen finds them all in one pass, and checks a set
#: against the few a message holds, so a long word list (a sensitive-topic gate) is cheap.
MAX_NEEDLES = 1024

# str.casefold, plus the pairs the regex module's case-insensitive matching joins and casefold
# does not: dotless i and dotted capital I match "i", U+1DF95 matches "ß".
_SPECIAL = str.maketrans({"ı": "i", "İ": "i", "\U0001df95": "ß"})


def fold(text: str) -> str:
    """The form needles and texts are compared in."""
    return text.casefold() if text.isascii() else text.translate(_SPECIAL).casefold()


_NEEDLE = operator.itemgetter(1)  # of what the automaton yields: (end, needle)
#: Stands for a word edge (``\\b``) in needles and marked texts; a pattern's own NUL is not read.
MARK = "\x00"
_ASCII_WORD_RUN = re.compile(r"([0-9A-Za-z_]+)")


def marked(text: str) -> str:
    """``text`` with MARK at both edges of every run of ASCII word characters: at least wherever the
    regex module sees a word boundary next to an ASCII letter, digit or underscore."""
    return MARK.join(_ASCII_WORD_RUN.split(text))


def _ascii_word(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "_")


@functools.lru_cache(maxsize=65536)
def as_needle(string: str) -> str | None:
    """A needle string as the screen looks for it in marked text: the marks its own characters
    make, and a MARK at an edge that the pattern asked for (``\\b``) next to an ASCII word
    character; None when nothing but marks is left."""
    core = string.replace(MARK, "")
    if not core:
        return None
    inner = marked(core)
    inner = inner[1:] if _ascii_word(core[0]) else inner
    inner = inner[:-1] if _ascii_word(core[-1]) else inner
    if string.startswith(MARK) and _ascii_word(core[0]):
        inner = MARK + inner
    if string.endswith(MARK) and _ascii_word(core[-1]):
        inner += MARK
    return inner


class Screen:
    """The needle sets of many patterns, and one pass over a text to find which needles it holds.

    Each pattern is added under a key with its needle sets (:func:`needles`, and any others the
    caller knows: a trigger's ``requires`` words). ``present(text)`` folds the text and finds
    every needle in it at once (an Aho-Corasick automaton, pyahocorasick: one pass in C whatever
    the number of needles); ``may_match(key, present)`` then says whether that pattern can match:
    every one of its sets has a needle there (a pattern without needle sets always can).
    """

    def __init__(self) -> None:
        self._sets: dict[Any, tuple[frozenset[str], ...]] = {}
        self._automaton: Any = None
        self._table: tuple | None = None  # for memo_mw._speedups.scan_marked (needle_table)
        self._words: set[str] = set()
        self._on = True
        self._recent: dict[str, frozenset[str]] = {}

    @classmethod
    def off(cls) -> "Screen":
        """A screen that knows no needles: every pattern may match every text."""
        screen = cls()
        screen._on = False
        return screen

    def add(self, key: Any, sets: Iterable[frozenset[str]]) -> tuple[frozenset[str], ...]:
        """Screen the pattern under ``key`` by these sets (of :func:`needles`, or any strings one of
        which every match holds, as written: they are put in the screen's form here)."""
        sets = [frozenset(map(as_needle, s)) for s in sets] if self._on else []
        # A string of marks alone stands for nothing: a set holding one says nothing.
        self._sets[key] = sets = tuple(s for s in sets if s and None not in s)
        self._words.update(*sets)
        self._automaton = self._table = None  # built again on the next use
        self._recent = {}
        return sets

    def present(self, text: str) -> frozenset[str]:
        """The needles ``text`` holds (compared folded). The funnel and recall ask about the
        same message: the last few answers are kept."""
        found = self._recent.get(text)
        if found is None:
            found = self._present(text)
            if len(self._recent) >= 256:
                self._recent.clear()
            self._recent[text] = found
        return found

    def _present(self, text: str) -> frozenset[str]:
        automata = self._automaton
        if automata is None:  # built whole before it is shared: threads may ask at once
            # The ASCII needles in an automaton of their own: an ASCII text can hold no other, and
            # the smaller automaton is searched faster (and stays in the CPU's caches better).
            automata = self._automaton = (_automaton(w for w in self._words if w.isascii()),
                                          _automaton(w for w in self._words if not w.isascii()))
        speedups = _text._speedups
        if speedups is not None and text.isascii():
            table = self._table if self._table is not None else self.table()
            if table:  # the same needles as the automaton below, found in C in one step a character
                return speedups.scan_marked(text, *table)
            text = speedups.marked_lower(text)
        else:
            text = marked(fold(text))
        found = frozenset(map(_NEEDLE, automata[0].iter(text))) if automata[0] is not None else frozenset()
        if automata[1] is not None and not text.isascii():
            found |= frozenset(map(_NEEDLE, automata[1].iter(text)))
        return found

    def table(self) -> tuple[bytes, bytes, tuple] | tuple[()]:
        """The ASCII needles as needle_table() gives them (made on the first ask): what
        memo_mw._speedups.scan_marked() and quiet() take. Empty when there is none to give."""
        table = self._table
        if table is None:
            table = self._table = needle_table(w for w in self._words if w.isascii())
        return table

    def sets(self, key: Any) -> tuple[frozenset[str], ...]:
        """The needle sets of the pattern under ``key`` (none: it always may match)."""
        return self._sets.get(key, ())

    def may_match(self, key: Any, present: frozenset[str]) -> bool:
        """False when the pattern under ``key`` surely does not match a text holding just ``present``."""
        for needles_ in self._sets.get(key, ()):
            if needles_.isdisjoint(present):
                return False
        return True


#: Most states needle_table() makes (its table holds 16-bit states).
MAX_TABLE_STATES = 65536


def needle_table(words: Iterable[str]) -> tuple[bytes, bytes, tuple] | tuple[()]:
    """ASCII needles as the table of memo_mw._speedups.scan_marked(text, *table): an Aho-Corasick
    automaton made deterministic, so that each character of the text is one lookup. ``classes``
    (128 bytes) maps a character to its column (0 for every character no needle holds), ``table``
    (native 16-bit integers, a row of columns per state) gives the next state, and ``outputs``
    holds for each state the needles that end there (None for none), the states where some end
    numbered after all others. Empty when there are no needles or more than MAX_TABLE_STATES states
    (the caller then uses the automaton)."""
    words = sorted(set(words))
    if not words:
        return ()
    chars = sorted({c for w in words for c in w})
    if any(ord(c) > 127 for c in chars):
        raise ValueError("needle_table: ASCII needles only")
    column = {c: i for i, c in enumerate(chars, 1)}
    width = len(chars) + 1
    goto: list[dict[int, int]] = [{}]
    ends: dict[int, frozenset[str]] = {}  # of the states where needles end (few)
    for word in words:  # the trie
        state = 0
        for c in word:
            nxt = goto[state].get(column[c])
            if nxt is None:
                nxt = goto[state][column[c]] = len(goto)
                goto.append({})
            state = nxt
        ends[state] = ends.get(state, frozenset()) | {word}
    if len(goto) > MAX_TABLE_STATES:
        return ()
    table = array.array("H", bytes(2 * width * len(goto)))
    fail = [0] * len(goto)
    queue: deque[int] = deque()
    for col, nxt in goto[0].items():
        table[col] = nxt
        queue.append(nxt)
    while queue:  # breadth first: a state's failure state is done before it
        state = queue.popleft()
        if fail[state] in ends:
            ends[state] = ends.get(state, frozenset()) | ends[fail[state]]
        row, fail_row = state * width, fail[state] * width
        for col in range(width):
            nxt = goto[state].get(col)
            if nxt is None:
                table[row + col] = table[fail_row + col]
            else:
                fail[nxt] = table[fail_row + col]
                table[row + col] = nxt
                queue.append(nxt)
    # Numbered again so that the states where needles end come last (the root stays 0): a scanner
    # that finds a state before the first of them knows that no needle ends there without reading
    # outputs (memo_mw._speedups.quiet: one cache line fewer for most steps of a text).
    order = [i for i in range(len(goto)) if i not in ends] + sorted(ends)
    number = [0] * len(goto)
    for new, old in enumerate(order):
        number[old] = new
    renumbered = array.array("H", [number[nxt] for old in order for nxt in table[old * width:(old + 1) * width]])
    classes = bytes(column.get(chr(c), 0) for c in range(128))
    return classes, renumbered.tobytes(), tuple(tuple(sorted(ends[i])) if i in ends else None for i in order)


def _automaton(words: Iterable[str]) -> Any:
    """An Aho-Corasick automaton finding these strings (None when there are none)."""
    automaton = ahocorasick.Automaton()
    for word in words:
        automaton.add_word(word, word)
    if not len(automaton):
        return None
    automaton.make_automaton()
    return automaton


class _Unknown(Exception):
    """Syntax this reader does not know: the pattern gets no needles."""


@dataclass
class _Info:
    #: Every string the piece can match, when they are few and known (folded); else None.
    exact: frozenset[str] | None
    #: Needle sets of the piece: every match contains a string of each one.
    needs: tuple[frozenset[str], ...] = ()
    #: Strings every match starts with one of, and ends with one of (``x+``: "x" both), when known.
    head: frozenset[str] | None = None
    tail: frozenset[str] | None = None


_EMPTY = _Info(frozenset({""}))  # zero-width: an anchor, a boundary, a lookaround
_ANY = _Info(None)  # one character of a class, or anything unknown that consumes
_COMMENT = _Info(frozenset({""}))  # (?#...): nothing, but a quantifier after it is not its own

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "v": "\v", "a": "\a", "e": "\x1b"}
_ZERO_WIDTH_ESCAPES = set("BAZGKmM")
_BOUNDARY = _Info(frozenset({MARK}))  # \b, ^, $: a word edge (kept only where marked() surely marks it)
# One character that is never an ASCII word character (\s, \W, [,.;]): what comes before and
# after it in a match meets a word edge there.
_EDGE_CLASS = _Info(None, head=frozenset({MARK}), tail=frozenset({MARK}))
_CLASS_ESCAPES = set("dDwWsSX")


@functools.lru_cache(maxsize=65536)  # asked again for the same sets as a pattern is read (cleared after)
def _useful(strings: frozenset[str] | None) -> frozenset[str] | None:
    """A needle set (in the screen's form, :func:`as_needle`) without the strings that contain
    another of it (they add nothing), or None when it says little (empty, holding the empty
    string or a lone Latin letter or digit not bounded on both sides, which most texts have, or
    too large to be worth checking)."""
    if not strings or len(strings) > MAX_NEEDLES:
        return None
    strings = frozenset(map(as_needle, strings))
    if any(s is None or (len(s.strip(MARK)) == 1 and s.isascii() and s.strip(MARK).isalnum()
                         and not (s.startswith(MARK) and s.endswith(MARK))) for s in strings):
        return None
    if len(strings) > MAX_STRINGS:
        return strings  # (the check below is quadratic; a long list is used as it is)
    return frozenset(s for s in strings if not any(o != s and o in s for o in strings))


def _rank(strings: frozenset[str]) -> tuple[int, int]:
    """Selectivity: a longer shortest needle first, then fewer needles."""
    return min(map(len, strings)), -len(strings)


def _needs(*sets: frozenset[str] | None) -> tuple[frozenset[str], ...]:
    found = sorted({u for u in map(_useful, sets) if u is not None}, key=_rank, reverse=True)
    # A set whose every needle holds one of a later set's makes that one say nothing more.
    return tuple(s for i, s in enumerate(found) if not any(_implies(t, s) for t in found[:i]))


def _implies(strong: frozenset[str], weak: frozenset[str]) -> bool:
    """Whether every string of ``strong`` holds one of ``weak`` (a text with the first has the second)."""
    return len(strong) * len(weak) <= MAX_STRINGS and all(any(w in s for w in weak) for s in strong)


def _all_needs(info: _Info) -> tuple[frozenset[str], ...]:
    return _needs(*info.needs, info.exact)


def _known(strings: frozenset[str] | None) -> frozenset[str] | None:
    """First or last strings that say something: None for none, or for one that may be empty."""
    return None if not strings or "" in strings else strings


def _union_of(sets: list[frozenset[str] | None]) -> frozenset[str] | None:
    """The strings of all these sets, when each is known and together they are not too many."""
    if any(s is None for s in sets):
        return None
    union = frozenset().union(*sets)
    return _known(union) if len(union) <= MAX_STRINGS else None


def _product(a: frozenset[str], b: frozenset[str]) -> frozenset[str] | None:
    if len(a) * len(b) > MAX_STRINGS:
        return None
    return frozenset(x + y for x in a for y in b)


class _Reader:
    """A recursive-descent reader of the ``regex`` module's syntax (version 0), as far as needles need."""

    def __init__(self, pattern: str):
        self.p = pattern
        self.i = 0
        #: Whether \b, \W and classes mean what marked() marks here (not under a scoped (?a:), where
        #: "ı" is no word character though it folds to "i", nor (?w:) or (?L:)).
        self.bounds = True

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.p[j] if j < len(self.p) else ""

    def alternation(self) -> _Info:
        branches = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        if len(branches) == 1:
            return branches[0]
        exact = None
        if all(b.exact is not None for b in branches):
            union = frozenset().union(*(b.exact for b in branches))
            exact = union if len(union) <= MAX_STRINGS else None
        # Every match is a match of one branch: a needle set of each branch, joined, is one of
        # the whole. Joined twice: the best set of each branch, and the smallest of each.
        options = [_all_needs(b) for b in branches]
        needs: list[frozenset[str] | None] = []
        if all(options):
            needs.append(frozenset().union(*(o[0] for o in options)))
            needs.append(frozenset().union(*(min(o, key=len) for o in options)))
        # A match starts as its branch's matches start: with one of the branches' first strings
        # (so "\b(?:um+|ah)" needs a word edge before "um" or "ah"); so for the ends.
        head = _union_of([b.exact if b.exact is not None else b.head for b in branches])
        tail = _union_of([b.exact if b.exact is not None else b.tail for b in branches])
        return _Info(exact, _needs(*needs, head, tail), head=head, tail=tail)

    def sequence(self) -> _Info:
        run: frozenset[str] = frozenset({""})  # the exact strings of the items since the last break
        found: list[frozenset[str]] = []
        whole = True  # every item so far exact: the run is the sequence's exact set
        head: frozenset[str] | None = None  # what every match starts with, once the first run ends
        while self.i < len(self.p) and self.peek() not in "|)":
            item = self.quantified()
            if item.exact is not None:
                joined = _product(run, item.exact)
                if joined is not None:
                    run = joined
                    continue
                found.append(run)  # too many: keep what the run had, start again from this item
                if whole:
                    head = run
                run = item.exact
            else:  # the run ends here, or with the item's first strings ("u" then "m+": "um")
                found.append((_product(run, item.head) if item.head else None) or run)
                if whole:
                    head = found[-1]
                found += item.needs
                run = item.tail or frozenset({""})
            whole = False
        if whole:
            return _Info(run, _needs(run))
        # Every match ends with the run since the last break (the item's last strings, then exact ones).
        return _Info(None, _needs(*found, run), head=_known(head), tail=_known(run))

    def quantified(self) -> _Info:
        atom = self.atom()
        if atom is _COMMENT and self.peek() in ("*", "+", "?", "{"):
            raise _Unknown("a quantifier after a comment")  # it applies to what came before
        low, high = self.quantifier()
        if low is None:
            return atom
        if self.peek() in ("?", "+"):  # lazy or possessive: the same strings
            self.i += 1
        needs = _all_needs(atom) if low >= 1 else ()
        exact = None
        if atom.exact is not None and high is not None and high <= 3:
            strings: set[str] = set()
            power = frozenset({""})
            for count in range(high + 1):
                if count >= low:
                    strings.update(power)
                if count < high:
                    power = _product(power, atom.exact)
                    if power is None:
                        strings = set()
                        break
            if strings and len(strings) <= MAX_STRINGS:
                exact = frozenset(strings)
        if exact is None and low >= 1 and atom.exact is not None:
            return _Info(None, needs, head=atom.exact, tail=atom.exact)
        if exact is None and low >= 1 and (atom.head or atom.tail):  # \s+: still a word edge each side
            return _Info(None, needs, head=atom.head, tail=atom.tail)
        return _Info(exact, needs)

    def quantifier(self) -> tuple[int | None, int | None]:
        c = self.peek()
        if c == "*":
            self.i += 1
            return 0, None
        if c == "+":
            self.i += 1
            return 1, None
        if c == "?":
            self.i += 1
            return 0, 1
        if c == "{":
            end = self.p.find("}", self.i)
            if end < 0:
                raise _Unknown("{")
            body = self.p[self.i + 1 : end]
            low, comma, high = body.partition(",")
            # Exactly {m}, {m,}, {,n} or {m,n}: anything else ({ 2}, {1, 2}, fuzzy {e<=1}) is
            # literal text or syntax not read here.
            if not (low.isascii() and high.isascii() and (low.isdigit() or (comma and low == ""))
                    and (high.isdigit() or high == "")):
                raise _Unknown(body)
            self.i = end + 1
            low_n = int(low) if low else 0
            if not comma:
                return low_n, low_n
            return low_n, int(high) if high else None
        return None, None

    def atom(self) -> _Info:
        c = self.peek()
        if c == "(":
            return self.group()
        if c == "[":
            return _EDGE_CLASS if self.char_class() and self.bounds else _ANY
        if c == ".":
            self.i += 1
            return _ANY
        if c in "^$":
            self.i += 1
            return _BOUNDARY
        if c == "\\":
            return self.escape()
        if c in "*+?{":
            raise _Unknown(c)  # a quantifier with nothing before it
        self.i += 1
        return _literal(c)

    def escape(self) -> _Info:
        self.i += 1
        c = self.peek()
        self.i += 1
        if c == "":
            raise _Unknown("\\")
        if c == "b":
            return _BOUNDARY if self.bounds else _EMPTY
        if c in _ZERO_WIDTH_ESCAPES:
            return _EMPTY
        if c in "sW":
            return _EDGE_CLASS if self.bounds else _ANY
        if c in _CLASS_ESCAPES:
            return _ANY
        if c in "pP":
            if self.peek() == "{":
                end = self.p.find("}", self.i)
                if end < 0:
                    raise _Unknown("\\p")
                self.i = end + 1
            else:
                self.i += 1
            return _ANY
        if c in _ESCAPES:
            return _literal(_ESCAPES[c])
        if c in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[c]
            if c == "x" and self.peek() == "{":
                end = self.p.find("}", self.i)
                digits = self.p[self.i + 1 : end] if end > 0 else ""
                self.i = end + 1
            else:
                digits = self.p[self.i : self.i + width]
                self.i += width
            try:
                return _literal(chr(int(digits, 16)))
            except ValueError:
                raise _Unknown("\\" + c) from None
        if c.isalnum():
            raise _Unknown("\\" + c)  # backreferences, named lists, \N{...}, octal: not read here
        return _literal(c)  # an escaped punctuation character stands for itself

    def char_class(self) -> bool:
        """Skip a character class (it matches one character, never a known literal); True when
        no ASCII word character can be that character (only punctuation, spaces, \\s, \\W)."""
        start = self.i = self.i + 1
        if self.peek() == "^":
            self.i += 1
        if self.peek() == "]":
            self.i += 1  # a leading "]" is a member
        while True:
            c = self.peek()
            if c == "":
                raise _Unknown("[")
            if c == "\\":
                self.i += 2
                continue
            if c == "[":
                if self.peek(1) == ":":  # a POSIX class, [:alpha:]
                    end = self.p.find(":]", self.i + 2)
                    if end < 0:
                        raise _Unknown("[:")
                    self.i = end + 2
                    continue
                raise _Unknown("nested set")
            self.i += 1
            if c == "]":
                return _never_word(self.p[start:self.i - 1])

    def group(self) -> _Info:
        self.i += 1
        lookaround = False
        if self.peek() == "?":
            self.i += 1
            c = self.peek()
            if c == ":":
                self.i += 1
            elif c == ">":  # atomic: matches what its content matches
                self.i += 1
            elif c in "=!":
                self.i += 1
                lookaround = True
            elif c == "<" and self.peek(1) in "=!":
                self.i += 2
                lookaround = True
            elif c == "P" and self.peek(1) == "<" or c == "<":
                end = self.p.find(">", self.i)
                if end < 0:
                    raise _Unknown("(?P<")
                self.i = end + 1
            elif c == "(":  # a conditional, (?(name)yes|no): one branch or the other, or nothing
                end = self.p.find(")", self.i)
                if end < 0:
                    raise _Unknown("(?(")
                self.i = end + 1
                self.alternation()
                if self.peek() != ")":
                    raise _Unknown("(")
                self.i += 1
                return _ANY
            elif c == "#":
                end = self.p.find(")", self.i)
                if end < 0:
                    raise _Unknown("(?#")
                self.i = end + 1
                return _COMMENT
            else:
                # Scoped flags, (?-i:...) or (?s:...): the content's needles stand. Global
                # flags, (?x) or (?V1), change how the rest reads: not read here.
                j = self.i
                while j < len(self.p) and (self.p[j].isalpha() or self.p[j] == "-"):
                    j += 1
                flags = self.p[self.i : j]
                if j >= len(self.p) or self.p[j] != ":" or "x" in flags.lower() or "V" in flags:
                    raise _Unknown("(?" + flags)
                self.i = j + 1
                if any(f in flags for f in "awL"):  # another meaning of word characters inside
                    bounds, self.bounds = self.bounds, False
                    try:
                        return self._group_body(lookaround)
                    finally:
                        self.bounds = bounds
        return self._group_body(lookaround)

    def _group_body(self, lookaround: bool) -> _Info:
        inner = self.alternation()
        if self.peek() != ")":
            raise _Unknown("(")
        self.i += 1
        return _EMPTY if lookaround else inner


def _never_word(members: str) -> bool:
    """Whether a class body (between its brackets) holds only members that are no word character
    (nor case-insensitively one): escaped punctuation, \\s, \\W, \\t, \\n, \\r, \\f, \\v and
    literal characters that are not letters, digits or "_". Negated sets and ranges: no."""
    if not members or members[0] == "^":
        return False
    i = 0
    while i < len(members):
        c = members[i]
        if c == "\\":
            escaped = members[i + 1 : i + 2]
            if escaped not in ("s", "W", "t", "n", "r", "f", "v") and not _never_word_char(escaped):
                return False
            i += 2
            continue
        if c == "-" and 0 < i < len(members) - 1 or c == "[" or not _never_word_char(c):
            return False
        i += 1
    return True


def _never_word_char(c: str) -> bool:
    """Whether ``c`` is surely no word character, and matches none case-insensitively: ASCII
    punctuation and space, or a character Python's Unicode data calls punctuation, a space or a
    symbol whose folded form holds no ASCII letter or digit (the regex module may know a newer
    Unicode: a character Python has no category for might be a letter to it)."""
    if len(c) != 1:
        return False
    if c.isascii():
        return not (c.isalnum() or c == "_")
    return unicodedata.category(c)[0] in "PZS" and not any(map(_ascii_word, fold(c)))


def _literal(c: str) -> _Info:
    if c == MARK:
        return _ANY  # a pattern's own NUL: not told apart from the marks, so not a needle
    return _Info(frozenset({fold(c)}))


def needles(pattern: str, *, most: int = 2) -> tuple[frozenset[str], ...]:
    """Needle sets (folded) of ``pattern``: every match contains a string of each set; the
    ``most`` most selective ones. Empty when none is known (the pattern must always be run).

    ``pattern`` is read as the rules compile it: the ``regex`` module's version 0 syntax,
    case-insensitive. Anything this reader does not know gives no needles.
    """
    reader = _Reader(pattern)
    try:
        info = reader.alternation()
        if reader.i != len(pattern):
            return ()  # an unbalanced ")"
        return _all_needs(info)[:most]
    except (_Unknown, RecursionError):
        return ()
    finally:
        _useful.cache_clear()  # it serves one reading: kept, it would hold every set a rule file made
