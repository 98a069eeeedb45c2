"""Recall: the few memories worth showing the model for this message, and the block they go in.
Candidates come from :meth:`memo_mw.store.Store.search` and the pending statements, less what a recent
forget request names; one :func:`score` ranks them: ``0.7 relevance + 0.1 recency + 0.2 hotness`` with
``recency = exp(-0.01 days since last use)`` and ``hotness = log(1 + hits) / log(1 + max hits)``.
Relevance is a cosine of the tokens and ``topic:`` tags two texts share, each weighted by its idf among the
candidates, as a share of the best candidate's; style memories and an expired task's request for
confirmation are always in; the top ``k`` fit a character budget."""

import contextlib
import itertools
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import regex

from . import defaults, history
from .breaker import CircuitBreaker
from .exceptions import DATABASE_ERRORS, StoreError
from .forgetting import forgotten, without_forgotten
from .state import EMPTY, UserState
from .store import RECALLABLE, Store
from .text import fitting, normalize, tokens

BLOCK_BEGIN = "[MEMORY_BEGIN]"
BLOCK_END = "[MEMORY_END]"
#: Starts the block's section of insight lines (memo_mw.insights).
PROFILE = "[PROFILE]"
#: Starts the block's section of past user messages (memo_mw.history).
HISTORY = "[HISTORY]"


@dataclass(frozen=True)
class RecallConfig:
    k: int = defaults.RECALL_K
    budget: int = defaults.RECALL_BUDGET_CHARS
    w_relevance: float = defaults.WEIGHT_RELEVANCE
    w_recency: float = defaults.WEIGHT_RECENCY
    w_hotness: float = defaults.WEIGHT_HOTNESS
    decay: float = defaults.RECENCY_DECAY
    w_topic: float = defaults.WEIGHT_TOPIC
    hotness_full: int = defaults.HOTNESS_FULL
    history_k: int = defaults.HISTORY_K
    history_budget: int = defaults.HISTORY_BUDGET_TOKENS


def _weight(token: str, seen: int = 0, candidates: int = 0, w_topic: float = defaults.WEIGHT_TOPIC) -> float:
    """A token's weight: BM25's idf over the candidates (a word most of them share says little), less for
    a single CJK character (a bigram says more), ``w_topic`` for a ``topic:`` tag."""
    kind = w_topic if token.startswith("topic:") else 0.8 if len(token) == 1 else 1.0
    return kind * math.log(1 + (candidates - seen + 0.5) / (seen + 0.5))


def relevance(query: frozenset[str], memory: frozenset[str], weight: Callable[[str], float] = _weight) -> float:
    """Weighted overlap of two token sets in [0, 1] (a cosine on sets); ``topic:`` tokens are topics."""
    common, tags = query & memory, {t for t in query | memory if t.startswith("topic:")}
    # Sharing topics alone needs half of the two texts' topics: "has dinner with their parents" (family,
    # food) is not about "what to wear to a wedding" (family, shopping).
    if not common or common <= tags and 2 * len(common) < len(tags):
        return 0.0
    cosine = sum(map(weight, common)) / math.sqrt(sum(map(weight, query)) * sum(map(weight, memory)))
    # Single CJK characters alone, where the query names a topic the memory lacks, are chance (点: 六点, 点外卖).
    return cosine / 10 if tags & query and all(len(t) == 1 for t in common) else cosine


def _words(memory: dict[str, Any], tag: Callable[[str], frozenset[str]] | None) -> frozenset[str]:
    """A memory's tokens (stored with it; a pending one has none yet) and, given ``tag``, its ``topic:`` tags."""
    words = memory.get("words")
    words = frozenset(words.split()) if words else tokens(f"{memory['content']} {memory['key']}")
    return words | {f"topic:{t}" for t in ((memory.get("topics") or tag(memory["content"])) if tag else ())}


def score(memories: Iterable[dict[str, Any]], query_tokens: frozenset[str], query_topics: frozenset[str] = frozenset(),
          *, now: float, config: RecallConfig = RecallConfig(), recall_all: bool = False,
          tag: Callable[[str], frozenset[str]] | None = None) -> list[dict[str, Any]]:
    """The memories to inject, best first, each with its ``score`` and ``relevance``. ``tag(text)``:
    a memory's topics when stored without them; ``recall_all``: the message asks for every memory."""
    memories = [m for m in memories if m.get("status") == "pending_confirm"
                or m.get("expires_at") is None or m["expires_at"] > now]  # (an expired one: only to confirm)
    # At least 1: with no hits anywhere and hotness_full 0, the scale would be log(1) = 0.
    max_hits = max(1, config.hotness_full, *(int(m.get("hits") or 0) for m in memories))
    # Topics count as words (a "topic:" tag on each side), weighted like them by how rare they are here.
    query = query_tokens | {f"topic:{t}" for t in query_topics}
    words = [_words(m, (tag or (lambda text: frozenset())) if query_topics else None) for m in memories]
    seen = Counter(w for ws in words for w in ws)
    weights = {t: _weight(t, seen[t], len(words), config.w_topic) for t in query | seen.keys()}
    rels = [relevance(query, ws, weights.__getitem__) for ws in words]
    best = max(rels, default=0.0) or 1.0  # relevance counts as a share of the best candidate's, as hotness does
    scored = []
    for memory, rel in zip(memories, rels):
        always = 2 if memory.get("type") == "style" else 1 if memory.get("status") == "pending_confirm" else 0
        if not (rel > 0 or always or recall_all):
            continue
        last = memory.get("last_accessed") or memory.get("source_ts") or memory.get("created_at") or now
        recency = math.exp(-config.decay * max(0.0, (now - float(last)) / 86400))
        hotness = math.log1p(int(memory.get("hits") or 0)) / math.log1p(max_hits)
        total = config.w_relevance * rel / best + config.w_recency * recency + config.w_hotness * hotness
        scored.append(((always, round(total, 6), memory.get("source_ts") or 0, memory["id"] or 0), rel, memory))
    scored.sort(key=lambda entry: entry[0], reverse=True)  # style, confirmations, then score; ties: newer
    fits = fitting(scored, lambda entry: len(line(entry[2])), config.budget)
    return [{**memory, "score": order[1], "relevance": round(rel, 6)}
            for order, rel, memory in itertools.islice(fits, config.k)]


class Recaller:
    """Reads candidates through one read-only connection per thread, and scores them; ``funnel``
    gives a message's tokens and topics and tells a question about everything remembered."""

    def __init__(self, db: str, funnel: Any, config: RecallConfig = RecallConfig()):
        self.db, self.funnel, self.config = db, funnel, config
        self._local = threading.local()
        #: A fault that made a request wait (PostgreSQL not answering: the pool's timeout) skips reads as long.
        self.breaker = CircuitBreaker(cooldown=defaults.PG_POOL_TIMEOUT)

    @contextlib.contextmanager
    def store(self) -> Iterator[Store]:
        """This thread's read-only store; a failed one is closed, and the next read opens it anew.
        While the breaker is open after a slow fault, a StoreError at once."""
        if not self.breaker.allow():
            raise StoreError("memo-mw: the memory database is skipped for a while after a fault")
        started = time.monotonic()
        try:
            store = self._local.store = getattr(self._local, "store", None) or Store(self.db, readonly=True)
            try:
                yield store
            except Exception:
                self._local.store = None
                store.close()
                raise
        except (StoreError, *DATABASE_ERRORS):
            if time.monotonic() - started >= defaults.SLOW_FAULT:
                self.breaker.failure()
            raise
        self.breaker.success()

    def recall(self, user_id: str, message: str, *, now: float | None = None, state: UserState = EMPTY,
               recall_all: bool | None = None, analysis: tuple[frozenset[str], frozenset[str]] | None = None
               ) -> list[dict[str, Any]]:
        """Top memories for the message, stored and pending, as this request may see them.
        ``analysis``: the message's ``funnel.topics.analyse()``, when the caller has it already."""
        now = time.time() if now is None else now
        recall_all = self.funnel.is_recall_all(message) if recall_all is None else recall_all
        query_tokens, query_topics = analysis or self.funnel.topics.analyse(message)
        with self.store() as store:
            words = set(query_tokens) | {f"topic:{t}" for t in query_topics}
            candidates = store.search(user_id, words, everything=recall_all)
            slots = {c["key"] for p in state.pending for c in p.get("candidates", [])}
            if slots:  # what a pending statement will replace must be there to be replaced
                seen = {m["id"] for m in candidates}
                candidates += [m for m in store.rows(
                    f"where user_id = ? and key in ({','.join('?' * len(slots))}) and {RECALLABLE}",
                    [user_id, *slots]) if m["id"] not in seen]
        return score(visible(candidates, state), query_tokens, query_topics, now=now, config=self.config,
                     recall_all=recall_all, tag=self.funnel.topics.tag)

    def history(self, user_id: str, message: str, *, now: float | None = None, session_id: str | None = None,
                state: UserState = EMPTY, memories: Iterable[dict[str, Any]] = (),
                analysis: tuple[frozenset[str], frozenset[str]] | None = None) -> list[dict[str, Any]]:
        """The user's past messages for the block's [HISTORY] section (:func:`memo_mw.history.rank`),
        as ``{"type": "history", "content", "source_ts", "source_session", "source_ids"}``: none that a
        recent forget request names, none that a recalled memory (``memories``) already says."""
        now = time.time() if now is None else now
        query_tokens = (analysis or self.funnel.topics.analyse(message))[0]
        with self.store() as store:
            found = history.search(store.db, user_id, query_tokens, now=now, session_id=session_id)
        stored_forgets = [f for f in state.forgets if not f.get("pending_only")]
        found = [m for m in found if not forgotten({"content": m["text"], "source_ts": m["ts"]}, stored_forgets)]
        chosen = history.rank(found, query_tokens, now=now, said=[m.get("excerpt") or "" for m in memories],
                              k=self.config.history_k, budget=self.config.history_budget)
        return [{"type": "history", "id": m["id"], "content": m["text"], "source_ts": m["ts"],
                 "source_session": m["session_id"], "source_ids": [m["message_id"]] if m["message_id"] else [],
                 "score": m["score"]} for m in chosen]

    def history_enabled(self, user_id: str) -> bool:
        """False when the user turned their chat history off (the web page)."""
        with self.store() as store:
            return history.enabled(store.db, user_id)

    def profile(self, user_id: str, state: UserState = EMPTY) -> list[dict[str, Any]]:
        """The user's insight lines for the block's [PROFILE] section (none after "forget me")."""
        if any(f["tokens"] is None for f in state.forgets) or defaults.PROFILE_RECALL_K <= 0:
            return []
        with self.store() as store:
            rows = store.db.execute("select topic, text from insights where user_id = ? order by rank limit ?",
                                    [user_id, defaults.PROFILE_RECALL_K]).fetchall()
        insights = [{"topic": topic, "text": text} for topic, text in rows]
        return list(fitting(insights, lambda insight: len(profile_line(insight)), defaults.PROFILE_RECALL_BUDGET_CHARS))


def visible(memories: list[dict[str, Any]], state: UserState) -> list[dict[str, Any]]:
    """Stored memories as this request sees them: pending statements merged in, what a recent
    forget request names left out, expired ones already asked about left out."""
    stored_forgets = [f for f in state.forgets if not f.get("pending_only")]
    memories = [m for m in memories if not forgotten(m, stored_forgets)]
    memories = merge_pending(memories, [without_forgotten(p, list(state.forgets)) for p in state.pending])
    return [m for m in memories if not (m.get("status") == "pending_confirm" and m["id"] in state.shown)]


def merge_pending(stored: list[dict[str, Any]], payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored memories plus pending ones (``id`` None), as the store will have them after the jobs:
    a pending statement already stored adds nothing; one on a slot a stored memory fills replaces it."""
    memories = list(stored)
    for payload in sorted(payloads, key=lambda p: p.get("ts") or 0):
        ts = int(payload["ts"])
        for c in payload.get("candidates", []):
            same_slot = [m for m in memories if m["key"] == c["key"] and m.get("status") != "pending_confirm"]
            stored = [m for m in same_slot
                      if m["polarity"] == c["polarity"] and normalize(m["content"]) == normalize(c["content"])]
            # The statement wins its slot, stored already (its job may commit between two reads) or not yet.
            memories = [m for m in memories if m not in same_slot or m in stored]
            if stored:
                continue
            memories.append({
                "id": None, "user_id": payload["user_id"], "type": c["type"], "key": c["key"],
                "polarity": c["polarity"], "content": c["content"], "excerpt": c["excerpt"], "active": True,
                "status": "pending", "source_session": payload.get("session_id"), "source_ts": ts,
                "confidence": c["confidence"], "hits": 0, "last_accessed": None, "created_at": ts,
                "expires_at": int(ts + c["ttl_days"] * 86400) if c.get("ttl_days") else None,
                "rule_id": c.get("rule_id"), "topics": c.get("topics") or [], "language": c.get("language")})
    return memories


# Every opening and closing punctuation mark (Unicode Ps, Pe; the quotes Pi, Pf are not brackets)
# and the angle brackets; control and bidirectional-format characters.
_OPENING = regex.compile(r"[\p{Ps}<＜﹤]")
_CLOSING = regex.compile(r"[\p{Pe}>＞﹥]")
_CONTROL = regex.compile(r"[\p{Cc}\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(text: str) -> str:
    """Memory text, past messages and session ids are data: one line, without control characters,
    and no bracket of any script that could open, close or forge a marker: each is "(" or ")"."""
    text = _CONTROL.sub(" ", str(text))
    return _CLOSING.sub(")", _OPENING.sub("(", " ".join(text.split())))


def _day(ts: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(ts or 0))


def line(memory: dict[str, Any]) -> str:
    marks = [_escape(memory["type"]), _day(memory.get("source_ts") or memory.get("created_at") or 0)]
    if memory.get("status") == "pending_confirm":
        marks.append("expired, ask whether it still holds")
    return f"- {_escape(memory['content'])} ({', '.join(marks)})"


def profile_line(insight: dict[str, Any]) -> str:
    return f"- {_escape(insight['text'])}"


def history_line(said: dict[str, Any]) -> str:
    return f"- {_day(said['source_ts'])}: {_escape(said['content'])}"


def format_block(memories: list[dict[str, Any]], profile: list[dict[str, Any]] = (),
                 past: list[dict[str, Any]] = ()) -> str:
    """The block injected into the request (``past``: messages from the chat history)::

        [MEMORY_BEGIN]
        - likes jazz (preference, 2024-04-01)
        [SOURCE: s1 / 2024-04-01]
        [HISTORY]
        - 2024-03-02: last weekend I finally visited my grandmother's village
        [PROFILE]
        - asks often about rust: 12 messages over 4 weeks; confidence: high
        [MEMORY_END]
    """
    if not memories and not profile and not past:
        return ""
    lines = [BLOCK_BEGIN, *(line(m) for m in memories)]
    if memories:
        latest = max(memories, key=lambda m: m.get("source_ts") or 0)
        lines.append(f"[SOURCE: {_escape(latest.get('source_session') or '-')} / {_day(latest.get('source_ts'))}]")
    if past:
        lines += [HISTORY, *(history_line(m) for m in past)]
    if profile:
        lines += [PROFILE, *(profile_line(i) for i in profile)]
    lines.append(BLOCK_END)
    return "\n".join(lines)
