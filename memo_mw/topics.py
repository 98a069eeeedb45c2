"""Topic tags from the rules' lexicons: "What should I cook for lunch?" and "doesn't eat pork" share no word,
but both are about ``food``, and recall counts a shared topic as a shared word. A Chinese entry matches anywhere
in the text; an English word as a word, stemmed as :func:`memo_mw.text.tokens` stems; a phrase as whole words."""

import regex

from .text import nfkc, stem, tokens

_WORDS = regex.compile(r"[\p{L}\p{N}]+")


class TopicTagger:
    """Tags texts with the topics of the lexicons (topic name -> words and phrases)."""

    def __init__(self, lexicons: dict[str, tuple[str, ...]]):
        self._by_stem: dict[str, set[str]] = {}
        self._substrings: dict[str, set[str]] = {}  # Chinese entries, found anywhere in the text
        phrases: dict[tuple[str, ...], set[str]] = {}
        for topic, entries in lexicons.items():
            for entry in entries:
                folded = nfkc(entry).casefold()
                if entry.isascii() and " " not in entry:
                    self._by_stem.setdefault(stem(entry), set()).add(topic)
                elif not entry.isascii():
                    self._substrings.setdefault(folded, set()).add(topic)
                elif words := tuple(_WORDS.findall(folded)):
                    phrases.setdefault(words, set()).add(topic)
        # English phrases by their first word, and (like the Chinese entries) the longest first,
        # so that "乌龙茶" wins over "茶" where both are listed.
        self._word_phrases: dict[str, list[tuple[tuple[str, ...], set[str]]]] = {}
        for words, topics in sorted(phrases.items(), key=lambda item: len(item[0]), reverse=True):
            self._word_phrases.setdefault(words[0], []).append((words, topics))
        self._lengths = sorted({len(s) for s in self._substrings}, reverse=True)

    def tag(self, text: str) -> frozenset[str]:
        return self.analyse(text)[1]

    def analyse(self, text: str) -> tuple[frozenset[str], frozenset[str]]:
        """The text's tokens (:func:`memo_mw.text.tokens`) and its topics, found together."""
        text_tokens = tokens(text)
        found = {topic for token in text_tokens for topic in self._by_stem.get(token, ())}
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
        i = 0
        while i < len(folded):
            length = next((n for n in self._lengths
                           if i + n <= len(folded) and folded[i:i + n] in self._substrings), 0)
            found.update(self._substrings.get(folded[i:i + length], ()))
            i += length or 1
        return found
