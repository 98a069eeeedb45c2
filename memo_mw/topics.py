"""Topic tags from the rules' lexicons: what a memory or a message is about.

"What should I cook for lunch?" and "doesn't eat pork" share no word, but both are about
``food``; "周末去哪儿玩" and "喜欢徒步" are both about ``travel``/``sport``. Recall counts a
shared topic as relevance (see :func:`memo_mw.recall.score`).

A lexicon entry in Chinese matches anywhere in the text; an English word matches as a word,
plurals and simple verb forms included (the same light stemming as recall's tokens); an
English phrase matches as a phrase.
"""

from __future__ import annotations

import regex

from .text import nfkc, stem, tokens

_WORDS = regex.compile(r"[\p{L}\p{N}]+")


class TopicTagger:
    """Tags texts with the topics of the lexicons (topic name -> words and phrases)."""

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
        # English phrases match as a run of whole words ("ice cream": ("ice", "cream")), looked up
        # by their first word, longest first; others (Chinese) as substrings, longest first at each
        # place, so "乌龙茶" wins over "茶" where both are listed.
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

    def lexicon(self) -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]]]:
        """The lexicons as this tagger reads them: each English word's stem with its topics, and
        every other entry (a phrase, a Chinese word) as written with its topics (memo_mw.index
        turns them into index terms). New dicts: changing them changes nothing here."""
        return ({stem_: frozenset(topics) for stem_, topics in self._by_stem.items()}, dict(self._phrase_topics))

    def tag(self, text: str) -> frozenset[str]:
        """The topics of ``text``."""
        return self.analyse(text)[1]

    def analyse(self, text: str) -> tuple[frozenset[str], frozenset[str]]:
        """The text's tokens (:func:`memo_mw.text.tokens`) and its topics, found together."""
        text_tokens = tokens(text)
        found: set[str] = set()
        for token in text_tokens:
            found.update(self._by_stem.get(token, ()))
        folded = nfkc(text).casefold()
        found.update(self._phrases(_WORDS.findall(folded)))
        if not folded.isascii():  # the substring entries are the non-ASCII ones
            found.update(self._substrings_in(folded))
        return text_tokens, frozenset(found)

    def _phrases(self, words: list[str]) -> set[str]:
        found: set[str] = set()
        for i, word in enumerate(words):
            for phrase, topics in self._word_phrases.get(word, ()):
                if tuple(words[i:i + len(phrase)]) == phrase:
                    found |= topics
                    break
        return found

    def _substrings_in(self, folded: str) -> set[str]:
        found: set[str] = set()
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
        return found
