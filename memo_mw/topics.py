"""Topic tags from the rules' lexicons: what a memory or a message is about.

"What should I cook for lunch?" and "doesn't eat pork" share no word, but both are about
``food``; "周末去哪儿玩" and "喜欢徒步" are both about ``travel``/``sport``. Recall counts a
shared topic as relevance (see :func:`memo_mw.recall.score`).

A lexicon entry in Chinese matches anywhere in the text; an English word matches as a word,
plurals and simple verb forms included (the same light stemming as recall's tokens); an
English phrase matches as a phrase.
"""

from __future__ import annotations

import functools
from typing import Any

import regex

from . import text as _text
from .text import STOPWORDS, ascii_tokens, nfkc, stem, tokens


_WORDS = regex.compile(r"[\p{L}\p{N}]+")
_NO_TOPICS: frozenset[str] = frozenset()


class TopicTagger:
    def __init__(self, lexicons: dict[str, tuple[str, ...]]):
        self._by_stem: dict[str, set[str]] = {}
        phrases: dict[str, set[str]] = {}
        for topic, words in lexicons.items():
            for word in words:
                if word.isascii() and " " not in word:
                    self._by_stem.setdefault(stem(word), set()).add(topic)
                else:
                    phrases.setdefault(word, set()).add(topic)
        self._phrase_topics = {phrase: frozenset(topics) for phrase, topics in phrases.items()}
        # English phrases match as a run of whole words ("ice cream": ("ice", "cream"), "eat out"),
        # looked up by their first word; others (Chinese) as substrings, longest first at each
        # place, so "乌龙茶" wins over "茶" where both are listed. Lookups, not one big
        # alternation: a message is tagged in microseconds whatever the size of the lexicons.
        self._word_phrases: dict[str, list[tuple[tuple[str, ...], frozenset[str]]]] = {}
        self._substrings: dict[str, frozenset[str]] = {}
        for phrase, topics in phrases.items():
            folded = nfkc(phrase).casefold()
            if phrase.isascii():
                words = tuple(_WORDS.findall(folded))
                if words:
                    self._word_phrases.setdefault(words[0], []).append((words, frozenset(topics)))
            else:
                self._substrings[folded] = frozenset(topics) | self._substrings.get(folded, frozenset())
        for entries in self._word_phrases.values():
            entries.sort(key=lambda entry: len(entry[0]), reverse=True)
        self._lengths = sorted({len(p) for p in self._substrings}, reverse=True)
        self._stems = frozenset(self._by_stem)
        # Each phrase's first two words: a text holding none of these pairs holds no phrase, which
        # one set intersection (in C) says. A phrase of one word (an entry like "x !") has no
        # pair: then every place is looked at.
        self._pairs = frozenset((entry[0][0], entry[0][1]) for entries in self._word_phrases.values()
                                for entry in entries if len(entry[0]) > 1)
        self._firsts = frozenset(self._word_phrases)  # and the first words alone, looked for first
        self._single = any(len(entry[0]) == 1 for entries in self._word_phrases.values() for entry in entries)
        #: ``analyse(text)``: the text's tokens (memo_mw.text.tokens) and topics, found together
        #: (a message is read once for both: its counts and recall each ask).
        self.analyse = functools.lru_cache(maxsize=4096)(self._analyse)
        #: ``analyse(text)``, not cached: for a text read once (a new message, whose analysis the
        #: caller passes on), which would only push out of the cache the texts read again.
        self.analyse_once = self._analyse
        self._lexicon: Any = None  # c_lexicon(), made on first use

    def c_lexicon(self) -> Any:
        """The words this tagger looks up as memo_mw._speedups.ascii_analysis() reads them (a
        Lexicon of the stopwords, the stems and the phrases' first words), or None without it."""
        if self._lexicon is None and _text._speedups is not None:
            self._lexicon = _text._speedups.Lexicon(STOPWORDS, self._by_stem, self._word_phrases, _NO_TOPICS)
        return self._lexicon

    def lexicon(self) -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]]]:
        """The lexicons as this tagger reads them: each English word's stem with its topics, and
        every other entry (a phrase, a Chinese word) as written with its topics (memo_mw.index
        turns them into index terms). New dicts: changing them changes nothing here."""
        return ({stem_: frozenset(topics) for stem_, topics in self._by_stem.items()}, dict(self._phrase_topics))

    def tag(self, text: str) -> frozenset[str]:
        """The topics of ``text``."""
        return self.analyse(text)[1]

    def _analyse(self, text: str) -> tuple[frozenset[str], frozenset[str]]:
        folded = (text if text.isascii() else nfkc(text)).casefold()
        words: list[str] | None
        if folded.isascii():
            speedups = _text._speedups
            if speedups is not None:  # what follows for an ASCII text, in C (memo_mw/_speedups.c)
                return speedups.ascii_analysis(folded, self._lexicon or self.c_lexicon())
            text_tokens, words = ascii_tokens(folded)
            if "'" in folded:  # "what's": "what", "s"
                words = list(filter(None, "'".join(words).split("'")))
        else:
            text_tokens, words = tokens(text), None
        stems = self._stems.intersection(text_tokens)  # the few words with a topic, in C
        found: set[str] = set().union(*map(self._by_stem.__getitem__, stems)) if stems else set()
        if self._word_phrases:
            if words is None:
                words = _WORDS.findall(folded, concurrent=False)
            if self._single or not (self._firsts.isdisjoint(words) or self._pairs.isdisjoint(zip(words, words[1:]))):
                for i, word in enumerate(words):
                    for phrase, topics in self._word_phrases.get(word, ()):
                        if tuple(words[i:i + len(phrase)]) == phrase:
                            found |= topics
                            break
        if self._substrings and not folded.isascii():
            i, end = 0, len(folded)
            while i < end:
                for length in self._lengths:
                    topics = self._substrings.get(folded[i:i + length]) if i + length <= end else None
                    if topics is not None:
                        found |= topics
                        i += length
                        break
                else:
                    i += 1
        return text_tokens, (frozenset(found) if found else _NO_TOPICS)
