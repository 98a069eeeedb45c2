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

import regex

from .text import nfkc, stem, tokens


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
        self._phrase_topics = phrases
        # Longest first, so "乌龙茶" wins over "茶" where both are listed.
        alternatives = [regex.escape(p) if not p.isascii() else rf"\b{regex.escape(p)}\b"
                        for p in sorted(phrases, key=len, reverse=True)]
        self._phrases = regex.compile("|".join(alternatives)) if alternatives else None
        self.tag = functools.lru_cache(maxsize=65536)(self._tag)

    def _tag(self, text: str) -> frozenset[str]:
        found: set[str] = set()
        for token in tokens(text):
            found |= self._by_stem.get(token, set())
        if self._phrases is not None:
            for phrase in self._phrases.findall(nfkc(text).casefold()):
                found |= self._phrase_topics[phrase]
        return frozenset(found)
