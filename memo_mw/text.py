"""Text normalisation and tokens, shared by the funnel, the store and recall. Chinese has no spaces,
so Latin script gives words (case-folded, lightly stemmed) and CJK text gives overlapping character
bigrams plus single characters."""

import hashlib
import json
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import regex

_PUNCT = regex.compile(r"[\p{P}\p{S}\s]+")
_LATIN_WORD = regex.compile(r"[\p{Latin}\p{N}][\p{Latin}\p{N}'’]*")
_HAN_RUN = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]+")
_LEADING_DETERMINERS = regex.compile(r"^(?:(?:a|an|the|some|my)\s+)+", regex.IGNORECASE)

# Words too common to count as evidence that a memory is relevant to a query.
STOPWORDS = frozenset(
    """a an the and or but if of to in on at for with about from by as is are was were be been am
    i me my mine you your it its this that these those what which who how do does did doing have has
    had can could would should will shall may might must not no so very really just also too please
    some any there here when where why than then them they their we our us he she his her him
    s t don doesn didn isn aren wasn won can't i'm i've i'd i'll let let's get got
    like love enjoy prefer dislike hate want need usually always often""".split()
)
# Single characters and bigrams that say nothing about the topic ("喜欢" is in every preference).
HAN_STOP = frozenset("我你他她它的了是在和也都就很吗呢吧啊呀么这那个有喜欢")
HAN_STOP_BIGRAMS = frozenset(
    "喜欢 不喜 讨厌 一下 什么 怎么 可以 一个 没有 不是 就是 还是 觉得 知道 我们 你们 他们 这个 那个 一些".split()
)
# What may follow an apostrophe and still leave the word before it ("John's", "parents'", "we're");
# "O'Brien" stays one word, and a negation ("don't") says nothing of what a message is about.
_CLITICS = frozenset({"s", "re", "ve", "ll", "d", "m", ""})


def json_utf8(value: object) -> bytes:
    """``value`` as compact UTF-8 JSON. A lone surrogate has no UTF-8 form: then ASCII JSON."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":")).encode("ascii")


def nfkc(text: str) -> str:
    """Unicode NFKC: full-width letters, digits and punctuation become their ASCII forms."""
    return unicodedata.normalize("NFKC", text)


def normalize(text: str) -> str:
    """NFKC, case-folded, punctuation removed, whitespace collapsed: the form compared for equality."""
    return " ".join(_PUNCT.sub(" ", nfkc(text).casefold()).split())


def memory_key(text: str) -> str:
    """The slot a memory fills: normalised, without leading determiners ("the", "my", ...)."""
    return _LEADING_DETERMINERS.sub("", normalize(text)).strip()


def stem(word: str) -> str:
    """A deliberately light English stemmer: plural and verb endings only."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 5 and word.endswith("ing"):
        return word[:-3]
    if len(word) > 4 and word.endswith(("ches", "shes", "sses", "xes")):
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    if len(word) > 4 and word.endswith("ed"):
        return word[:-2]
    return word


def _word_token(word: str) -> str | None:
    """A Latin word's token (stemmed), or None for a negation, a stopword or a single letter."""
    word = word.replace("’", "'")
    base, apostrophe, clitic = word.partition("'")
    if apostrophe and clitic == "t":
        return None
    if apostrophe and clitic in _CLITICS:
        word = base
    stemmed = stem(word)
    return stemmed if len(word) > 1 and word not in STOPWORDS and stemmed not in STOPWORDS else None


def tokens(text: str) -> frozenset[str]:
    """Lexical tokens for matching: stemmed Latin words and CJK characters and bigrams."""
    folded = nfkc(text).casefold()
    out = set(map(_word_token, _LATIN_WORD.findall(folded)))
    out.discard(None)
    for run in _HAN_RUN.findall(folded):
        out.update(c for c in run if c not in HAN_STOP)
        out.update(b for b in (run[i : i + 2] for i in range(len(run) - 1)) if b not in HAN_STOP_BIGRAMS)
    return frozenset(out)


def weight(token: str) -> float:
    """A token's weight as evidence of relevance: a single CJK character is weak."""
    return 0.3 if len(token) == 1 else 1.0


def fitting(items: Iterable[Any], cost: Callable[[Any], int], budget: int) -> Iterator[Any]:
    """The items, in order, each whose ``cost`` fits what those before it left of ``budget`` (one too
    long is skipped; a shorter one after it may still fit)."""
    used = 0
    for item in items:
        if used + (size := cost(item)) <= budget:
            used += size
            yield item


def index_terms(user_id: str, words: Iterable[str]) -> list[str]:
    """Words as the full-text indexes hold them: hashed with the user id (only that user's postings,
    no readable word)."""
    return [hashlib.blake2b(f"{user_id}\x1f{w}".encode(), digest_size=8).hexdigest() for w in words]


def stable_id(*parts: object) -> str:
    """A short stable hash of the parts: the same inputs always give the same id, and different
    parts never the same input (they are JSON-encoded, so no separator inside a part can shift them)."""
    encoded = json.dumps([str(p) for p in parts], ensure_ascii=False).encode("utf-8", "surrogatepass")
    return hashlib.sha1(encoded).hexdigest()[:24]
