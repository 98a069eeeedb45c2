"""The term index behind recall for users with many memories.

``memory_terms(user_id, term, memory_id)`` holds, for every memory row, the tokens recall scores
it on (:func:`memo_mw.text.tokens` of ``content`` and ``key``) and its stored topic tags
(``topic:food``; ``topic:?`` for a memory stored without tags, whose topics recall computes from
its text). It is written in the transaction that inserts the memory, and a trigger deletes a
memory's terms with the memory, so ``secure_delete`` overwrites them too: a forgotten memory
leaves no term behind. ``memories.terms_norm`` is the memory's token weight (the ``m`` of
:func:`memo_mw.recall.relevance`); NULL means "not indexed" (a row written by other code), and
such rows are always loaded.

Why not FTS5: SQLite 3.40 has no FTS5 ``secure-delete``; deleted entries stay in FTS segments
until a merge, and forgetting must be physical.

:func:`recall` gives exactly what loading every memory and scoring it would give, or ``None``
when it cannot be sure (then the caller loads everything). It loads only:

* the ``RECALL_INDEX_CANDIDATES`` memories with the highest possible score among those sharing a
  query term or topic (an upper bound computed from the index: exact lexical relevance, the
  topic bonus if possible, the memory's own recency and hotness);
* every ``style`` memory and every expired one awaiting confirmation (always shown);
* memories on a slot a pending (not yet stored) statement fills, and rows not indexed;
* the hottest few (for the hotness normalisation), and for "what do you know about me" the
  ``RECALL_INDEX_RECENT`` most recent and hottest.

Then it scores them with the same :func:`memo_mw.recall.score`, and checks that nothing left
out could have entered the top k: the k-th pick must score above the best bound left out. If it
does not, it tries once more with eight times as many candidates, then gives up (None).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import Any

from . import defaults
from . import index_queries as queries
from .recall import RecallConfig, _weight, score
from .text import _HAN_RUN, HAN_STOP, HAN_STOP_BIGRAMS, tokens

TOPIC = "topic:"
#: The term of a memory stored without topic tags: recall tags such a memory from its text.
UNTAGGED = "topic:?"


def memory_terms(content: str, key: str, topics: list[str] | tuple[str, ...]) -> tuple[set[str], float]:
    """The index terms of a memory and its token weight (``terms_norm``)."""
    words = tokens(f"{content} {key}")
    terms = set(words)
    if topics:
        terms.update(TOPIC + t for t in topics)
    else:
        terms.add(UNTAGGED)
    return terms, float(sum(_weight(t) for t in words))


def _phrase_term(phrase: str) -> str | None:
    """A token every text containing ``phrase`` (as the topic tagger finds it) has, or None."""
    if phrase.isascii():
        # Matched as a phrase between word boundaries: its words are words of the text.
        found = sorted(tokens(phrase), key=len, reverse=True)
        return found[0] if found else None
    # Matched anywhere: a Han run of the phrase lies inside a Han run of the text, so its
    # characters and bigrams are tokens of the text (unless they are stop tokens).
    for run in _HAN_RUN.findall(phrase):
        for bigram in (run[i : i + 2] for i in range(len(run) - 1)):
            if bigram not in HAN_STOP_BIGRAMS:
                return bigram
        for char in run:
            if char not in HAN_STOP:
                return char
    return None


def topic_expansion(tagger: Any) -> dict[str, frozenset[str]] | None:
    """For each topic, terms one of which any text the tagger tags with it contains.

    A lexicon entry with no such term (all stop words) maps its topic to ``UNTAGGED`` as well,
    which then brings in every memory without stored tags. None for a tagger this module does
    not know (the caller then cannot use the index for queries with topics).
    """
    try:
        return _EXPANSIONS[tagger]
    except (KeyError, TypeError):  # not yet, or a tagger that cannot be a weak key
        pass
    lexicon = getattr(tagger, "lexicon", None)
    if lexicon is None:
        return None
    by_stem, phrases = lexicon()
    out: dict[str, set[str]] = {}
    for stem_, names in by_stem.items():
        for name in names:
            out.setdefault(name, set()).add(stem_)
    for phrase, names in phrases.items():
        term = _phrase_term(phrase)
        for name in names:
            out.setdefault(name, set()).add(term if term is not None else UNTAGGED)
    expansion = {name: frozenset(terms) for name, terms in out.items()}
    try:
        _EXPANSIONS[tagger] = expansion
    except TypeError:
        pass
    return expansion


#: Each tagger's expansion, made once (a tagger's lexicons do not change; a reload makes a new one).
_EXPANSIONS: "weakref.WeakKeyDictionary[Any, dict[str, frozenset[str]]]" = weakref.WeakKeyDictionary()


def _recency(row: dict[str, Any], now: float, decay: float) -> float:
    last = row.get("last_accessed") or row.get("source_ts") or row.get("created_at") or now
    return math.exp(-decay * max(0.0, (now - float(last)) / 86400))


def _hotness(hits: int | None, max_hits: int, config: RecallConfig) -> float:
    max_hits = max(config.hotness_full, max_hits)
    return math.log1p(int(hits or 0)) / math.log1p(max_hits) if max_hits else 0.0


def recall(store: Any, user_id: str, message: str, *, now: float, config: RecallConfig, recall_all: bool,
           tagger: Any, visible: Callable[[list[dict[str, Any]]], list[dict[str, Any]]],
           pending_keys: set[str], candidates: int = defaults.RECALL_INDEX_CANDIDATES,
           recent: int = defaults.RECALL_INDEX_RECENT) -> list[dict[str, Any]] | None:
    """Recall through the term index; None when the result might differ from scoring every memory.

    ``visible`` applies the request's short-lived state (pending statements, forget requests,
    confirmations already asked) to stored memories, as the load-all path does.
    """
    query_tokens = tokens(message)
    query_topics = tagger.tag(message) if tagger is not None else frozenset()
    topic_terms: set[str] = set()
    if query_topics:
        expansion = topic_expansion(tagger)
        if expansion is None:
            return None
        for name in query_topics:
            topic_terms.add(TOPIC + name)
            topic_terms.update(expansion.get(name, ()))
    # The hottest few: the hotness of every memory is normalised by the hottest one shown.
    hot_n = max(8, recent if recall_all else 0)
    hottest = queries.hottest(store, user_id, hot_n)
    ids = {r["id"] for r in hottest}
    ids |= queries.always_ids(store, user_id)
    if pending_keys:
        ids |= queries.same_key_ids(store, user_id, pending_keys)
    latest: list[dict[str, Any]] = []
    if recall_all:
        latest = queries.latest(store, user_id, recent)
        ids |= {r["id"] for r in latest}
    unindexed = queries.unindexed_ids(store, user_id)
    ids |= unindexed
    matches = queries.matches(store, user_id, query_tokens, topic_terms) if (query_tokens or topic_terms) else []
    # Rank the matches by their best possible score (the hotness normalised by the hottest
    # stored memory for now; the bound of what is left out is computed again below).
    max_hits = max((int(r["hits"] or 0) for r in hottest), default=0)
    q = sum(_weight(t) for t in query_tokens)
    ranked = []
    for row in matches:
        rel = row["common"] / math.sqrt(q * row["terms_norm"]) if row["common"] and row["terms_norm"] else 0.0
        if row["topical"] and query_topics:
            rel = min(1.0, rel + config.w_topic)
        if rel <= 0 and not recall_all:
            continue
        part = config.w_relevance * rel + config.w_recency * _recency(row, now, config.decay)
        ranked.append((part + config.w_hotness * _hotness(row["hits"], max_hits, config), part, row))
    ranked.sort(key=lambda r: (r[0], r[2]["id"]), reverse=True)
    # When the k-th pick does not beat what was left out, try again with more before giving up.
    for size in (candidates, candidates * 8):
        chosen = _try(store, user_id, message, now=now, config=config, recall_all=recall_all, tagger=tagger,
                      visible=visible, ids=ids | {r[2]["id"] for r in ranked[:size]}, left_out=ranked[size:],
                      hottest=hottest, hot_n=hot_n, latest=latest, recent=recent)
        if chosen is not None or len(ranked) <= size:
            return chosen
    return None


def _try(store: Any, user_id: str, message: str, *, now: float, config: RecallConfig, recall_all: bool, tagger: Any,
         visible: Callable[[list[dict[str, Any]]], list[dict[str, Any]]], ids: set[int], left_out: list,
         hottest: list[dict[str, Any]], hot_n: int, latest: list[dict[str, Any]], recent: int
         ) -> list[dict[str, Any]] | None:
    memories = visible(queries.rows(store, user_id, sorted(ids)))
    # The normalising maximum is exact when one of the hottest is still visible: every hotter
    # memory was loaded and went through the same filters.
    hottest_ids = {r["id"] for r in hottest}
    if len(hottest) >= hot_n and not any(m.get("id") in hottest_ids for m in memories):
        return None
    max_hits = max((int(m.get("hits") or 0) for m in memories), default=0)
    chosen = score(memories, message, now=now, config=config, recall_all=recall_all,
                   topics=tagger.tag if tagger is not None else None, max_hits=max_hits)
    # The best score a memory left out could have had.
    best_left_out = max((part + config.w_hotness * _hotness(row["hits"], max_hits, config)
                         for _, part, row in left_out if row["id"] not in ids), default=None)
    if recall_all and (len(latest) >= recent or len(hottest) >= hot_n):
        # A memory matching nothing scores on recency and hotness alone: no more than the last
        # of the most recent and of the hottest loaded, when those lists were cut.
        rec = _recency(latest[-1], now, config.decay) if len(latest) >= recent else 1.0
        hot = _hotness(hottest[-1]["hits"], max_hits, config) if len(hottest) >= hot_n else 1.0
        bound = config.w_recency * rec + config.w_hotness * hot
        best_left_out = bound if best_left_out is None else max(best_left_out, bound)
    if best_left_out is None:
        return chosen
    if len(chosen) < config.k:
        return None
    last = chosen[-1]
    if last.get("type") == "style" or last.get("status") == "pending_confirm":
        return chosen  # all k are always-shown ones: whatever was left out ranks below them
    return chosen if best_left_out < last["score"] - 1e-6 else None
