"""Recall: pick the few memories worth showing the model for this message, and format them.

Score (DESIGN): ``w_rel * relevance + w_rec * recency + w_hot * hotness`` with
``recency = exp(-decay * days since last use)`` and ``hotness = log(1 + hits)``
normalised by the hottest candidate. Relevance is lexical on Chinese-aware tokens
(:func:`memo_mw.text.tokens`). ``style`` memories are always included; other memories
need some relevance to the message, unless the message asks what is remembered. An
expired task awaiting confirmation is shown once, marked, whatever the message.
"""

from __future__ import annotations

import math
import operator
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from . import defaults
from .text import tokens

BLOCK_BEGIN = "[MEMORY_BEGIN]"
BLOCK_END = "[MEMORY_END]"
#: Starts the block's section of insight lines (after the memories and their source line).
PROFILE = "[PROFILE]"


@dataclass(frozen=True)
class RecallConfig:
    k: int = defaults.RECALL_K
    budget: int = defaults.RECALL_BUDGET_CHARS
    w_relevance: float = defaults.WEIGHT_RELEVANCE
    w_recency: float = defaults.WEIGHT_RECENCY
    w_hotness: float = defaults.WEIGHT_HOTNESS
    decay: float = defaults.RECENCY_DECAY
    #: Relevance a shared topic adds (capped at 1): "cook lunch" ~ "doesn't eat pork".
    w_topic: float = defaults.WEIGHT_TOPIC
    #: Hits at which hotness is full (the floor of its normalisation).
    hotness_full: int = defaults.HOTNESS_FULL


def _weight(token: str) -> float:
    # A single CJK character is weak evidence; a bigram or a word is strong.
    return 0.3 if len(token) == 1 else 1.0


def relevance(query_tokens: set[str], memory_tokens: set[str], *, q: float | None = None,
              m: float | None = None, weight_of: Callable[[str], float] = _weight) -> float:
    """Weighted overlap of token sets, normalised to [0, 1] (a cosine on sets). ``q`` and ``m``:
    the token weights of the query and the memory, when the caller has them already;
    ``weight_of``: a token's weight (the same as ``_weight``; score() passes a lookup of the
    query's tokens, in C)."""
    common = query_tokens & memory_tokens
    if not common:
        return 0.0
    q = sum(map(_weight, query_tokens)) if q is None else q
    m = sum(map(_weight, memory_tokens)) if m is None else m
    return sum(map(weight_of, common)) / math.sqrt(q * m)


def shown_features(memory: dict[str, Any]) -> tuple[Any, int]:
    """Whether a memory can show, the same for every query: its expiry (None while it awaits
    confirmation: then it shows) and whether it is always shown (2: style, 1: awaiting confirmation)."""
    confirm = memory.get("status") == "pending_confirm"
    return None if confirm else memory.get("expires_at"), 2 if memory.get("type") == "style" else 1 if confirm else 0


def used_features(memory: dict[str, Any]) -> tuple[float | None, float, Any, int]:
    """How a memory ranks besides its relevance, the same for every query: when it was last used
    (None: never, counted as the request's time), ``log1p`` of its hits, and its source time and id
    (which break ties). Raises for a memory outside the schema (hits below zero, a time that is text)."""
    last = memory.get("last_accessed") or memory.get("source_ts") or memory.get("created_at")
    return (float(last) if last else None, math.log1p(int(memory.get("hits") or 0)),
            memory.get("source_ts") or 0, memory["id"] or 0)


def static_features(memory: dict[str, Any]) -> tuple:
    """What :func:`score` reads from a memory besides its text: :func:`shown_features` then
    :func:`used_features`."""
    return shown_features(memory) + used_features(memory)


def score(memories: Iterable[dict[str, Any]], query: str, *, now: float | None = None,
          config: RecallConfig = RecallConfig(), recall_all: bool = False,
          topics: Callable[[str], frozenset[str]] | None = None,
          max_hits: int | None = None,
          features: dict[int, tuple] | None = None,
          analysis: tuple[frozenset[str], frozenset[str]] | None = None
          ) -> list[dict[str, Any]]:
    """The memories to inject for ``query``, best first, each with its ``score``.

    ``topics(text)`` tags text with the rules' topics; a memory sharing a topic with the
    query gains ``config.w_topic`` of relevance (a memory's stored tags are used when it has them).
    ``max_hits``: the most hits among the user's memories, by default the most among ``memories``
    (the index path passes it: it scores only some of them).
    ``features``: by ``id()`` of a memory dict, what is computed here from it otherwise: its tokens,
    their weight, its topics, the length of its line and its :func:`static_features`
    (memo_mw.memcache keeps them with the memories it keeps).
    ``analysis``: the query's tokens and topics (memo_mw.topics.TopicTagger.analyse), when the
    caller has them (``topics`` is then not asked for the query's).
    """
    now = time.time() if now is None else now
    memories = list(memories)
    if not memories:
        return []
    if analysis is not None:
        query_tokens, query_topics = analysis[0], analysis[1] if topics is not None else frozenset()
    else:
        query_tokens = tokens(query)
        query_topics = topics(query) if topics is not None else frozenset()
    # Normalised by the hottest candidate, but never by fewer than HOTNESS_FULL hits: one
    # restatement must not make a memory "hottest" and outrank a more relevant one.
    if max_hits is None:
        max_hits = max(int(m.get("hits") or 0) for m in memories)
    max_hits = max(config.hotness_full, max_hits)
    hot_norm = math.log1p(max_hits) if max_hits else 0.0
    # Each query token's weight (looked up in C for the tokens a memory shares), and their sum, once
    # for every memory.
    weights = {t: _weight(t) for t in query_tokens}
    q = sum(weights.values())
    weight_of = weights.__getitem__
    exp = math.exp
    w_rel, w_rec, w_hot, w_topic, decay = (config.w_relevance, config.w_recency, config.w_hotness,
                                           config.w_topic, config.decay)
    features = features or {}
    scored = []
    for memory in memories:
        known = features.get(id(memory))
        if known is None:
            expires, always = shown_features(memory)
        else:
            memory_tokens, m, memory_topics, width, expires, always, last, log_hits, order_ts, order_id = known
        if expires is not None and expires <= now:
            continue  # expired: not injected until maintenance asks for a confirmation
        if known is None:
            memory_tokens = tokens(f"{memory['content']} {memory['key']}")
            m = width = None
        rel = relevance(query_tokens, memory_tokens, q=q, m=m, weight_of=weight_of)
        if query_topics:
            if known is None:
                memory_topics = set(memory.get("topics") or ()) or topics(memory["content"])
            if query_topics & memory_topics:
                rel = min(1.0, rel + w_topic)
        if not (rel > 0 or always or recall_all):
            continue
        if known is None:  # (only for a memory that scores: a malformed one raises only then)
            last, log_hits, order_ts, order_id = used_features(memory)
        days = max(0.0, (now - (float(now) if last is None else last)) / 86400)
        recency = exp(-decay * days)
        hotness = log_hits / hot_norm if max_hits else 0.0
        total = w_rel * rel + w_rec * recency + w_hot * hotness
        # Always in: how to answer (style), and an expired task's one request for confirmation.
        scored.append((always, round(total, 6), order_ts, order_id, rel, memory, width))
    # Style first, then confirmations, then by score; ties go to the more recent statement.
    scored.sort(key=_ORDER, reverse=True)
    chosen, used = [], 0
    for always, total, _, _, rel, memory, width in scored:
        if len(chosen) >= config.k:
            break
        cost = len(line(memory)) if width is None else width
        if used + cost > config.budget:
            continue
        used += cost
        chosen.append({**memory, "score": total, "relevance": round(rel, 6)})
    return chosen


#: The sort key of a scored entry: (always, score, source_ts, id).
_ORDER = operator.itemgetter(0, 1, 2, 3)


#: Brackets, and the look-alikes a model reads as brackets, become parentheses in memory text.
_BRACKETS = str.maketrans({c: "(" for c in "[［【〔〖⟦"} | {c: ")" for c in "]］】〕〗⟧"})


def _escape(text: str) -> str:
    """Memory text is data: it cannot open, close or forge the block's markers (one line, no brackets)."""
    return " ".join(str(text).split()).translate(_BRACKETS)


#: The dates _day() has written, by day since the epoch.
_DAYS: dict[int, str] = {}


def _day(ts: float) -> str:
    """The UTC date of a Unix time as YYYY-MM-DD (a block writes several: each day's is kept)."""
    key = ts // 86400
    day = _DAYS.get(key)
    if day is None:
        day = time.strftime("%Y-%m-%d", time.gmtime(ts))
        if len(_DAYS) >= 4096:
            _DAYS.clear()
        _DAYS[key] = day
    return day


def line(memory: dict[str, Any]) -> str:
    day = _day(memory.get("source_ts") or memory.get("created_at") or 0)
    marks = [_escape(memory["type"]), day]
    if memory.get("status") == "pending_confirm":
        marks.append("expired, ask whether it still holds")
    return f"- {_escape(memory['content'])} ({', '.join(marks)})"


def profile_line(insight: dict[str, Any]) -> str:
    """One line of the ``[PROFILE]`` section: an insight's text, escaped like memory text."""
    return f"- {_escape(insight['text'])}"


def format_block(memories: list[dict[str, Any]], profile: list[dict[str, Any]] = ()) -> str:
    """The block injected into the request, as in DESIGN::

        [MEMORY_BEGIN]
        - likes jazz (preference, 2024-04-01)
        [SOURCE: s1 / 2024-04-01]
        [PROFILE]
        - asks often about rust (async, types): 12 messages over 4 weeks, ...; confidence: high
        [MEMORY_END]

    The ``[PROFILE]`` section holds the user's insights (memo_mw.insights), when there are any.
    """
    if not memories and not profile:
        return ""
    lines = [BLOCK_BEGIN, *(line(m) for m in memories)]
    if memories:
        latest = max(memories, key=lambda m: m.get("source_ts") or 0)
        day = _day(latest.get("source_ts") or 0)
        lines.append(f"[SOURCE: {_escape(latest.get('source_session') or '-')} / {day}]")
    if profile:
        lines += [PROFILE, *(profile_line(i) for i in profile)]
    lines.append(BLOCK_END)
    return "\n".join(lines)
