"""Each user's memories, kept in the web process for recall, checked against the database per request.

Loading a user's memories from SQLite and tokenising them costs far more than the chat app's own
work for a request; they change rarely (when a job stores, merges, forgets or counts). So the
recaller keeps them here, with an inverted index of their tokens and topics, and checks one row
per request: the user's version in ``user_versions``, which triggers change with every write to
the user's memories (m004). The cache is bounded by an estimate of the bytes it holds (least
recently used users go first); a user with more memories than ``max_user`` is not cached (recall
reads them through the SQL term index instead).

Two forms, both giving exactly what scoring every memory gives:

* :class:`UserMemories`, for a user with few memories (``RECALL_INDEX_MIN_MEMORIES`` or fewer):
  the memories as dicts, ready to score. A request scores only the memories that could score:
  those sharing a token or a topic with the message, and those always shown (style; an expired
  task awaiting confirmation). That is every memory :func:`memo_mw.recall.score` would keep.
* :class:`RankedMemories`, for a user with many: the rows as compact tuples (a dict is built only
  for a memory a request scores), per-token and per-topic lists, and each memory's best possible
  recency and hotness. A request takes the memories with the best possible score (exact lexical
  relevance from the token lists, the topic bonus, the memory's own recency and hotness), scores
  them with :func:`memo_mw.recall.score`, and checks that nothing left out could have entered
  the top k (the k-th pick scores above the best bound left out, as the SQL term index does);
  when it cannot be sure it scores every memory that could score.
"""

from __future__ import annotations

import collections
import copy
import functools
import heapq
import json
import math
import threading
from array import array
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from . import defaults
from . import text as _text
from .recall import RecallConfig, _weight, line, score, static_features
from .store import MEMORY_COLUMNS, row_to_memory
from .text import tokens

#: Bytes a cached memory costs in each form: the RSS growth of caching a user, per memory
#: (bench/recall.py --sizes: 3.4 KB as dicts; 1.5 KB ranked, of which 0.8 KB stays allocated, the
#: rest is what loading leaves to the allocator). What the cache's byte bound counts.
DICT_BYTES = 3400
RANKED_BYTES = 1500

_COL = {name: i for i, name in enumerate(MEMORY_COLUMNS)}
#: Columns with few distinct values: one string object for all rows of an entry.
_SHARED = tuple(_COL[c] for c in ("user_id", "type", "status", "source_session", "source_ids", "rule_id",
                                  "topics", "language"))
#: The hottest memories a ranked recall always scores: the hotness normalisation is exact when
#: one of them is still visible to the request.
HOTTEST = 8
#: A ranking's recency bounds hold for later requests; it is computed again after this long, so
#: that they stay tight.
RERANK_SECONDS = 3600.0
#: Requests a little earlier than the ranking (threads finish out of order) use it too, their
#: bounds raised by what recency can gain in that time; further back, it is computed again.
RANK_BACK_SECONDS = 60.0


@dataclass(frozen=True)
class UserMemories:
    version: int | None
    memories: list[dict[str, Any]]
    by_token: dict[str, tuple[int, ...]]
    by_topic: dict[str, tuple[int, ...]]
    always: tuple[int, ...]
    max_hits: int
    #: What recall.score computes from each memory (by id() of its dict): tokens, their weight,
    #: topics, the length of its line, then recall.static_features.
    features: dict[int, tuple]
    #: The user's ``touched`` (recall counts) when loaded: a small user is simply loaded again.
    touched: int = 0
    #: The memories on each slot (key): a pending statement on one replaces them.
    by_key: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @classmethod
    def build(cls, version: int | None, memories: list[dict[str, Any]],
              tag: Callable[[str], frozenset[str]], touched: int = 0) -> "UserMemories":
        by_token: dict[str, list[int]] = collections.defaultdict(list)
        by_topic: dict[str, list[int]] = collections.defaultdict(list)
        by_key: dict[str, list[int]] = collections.defaultdict(list)
        always = []
        features = {}
        for i, memory in enumerate(memories):
            by_key[memory["key"]].append(i)
            words = tokens(f"{memory['content']} {memory['key']}")
            for token in words:
                by_token[token].append(i)
            topics = frozenset(memory.get("topics") or ()) or tag(memory["content"])
            for topic in topics:
                by_topic[topic].append(i)
            if memory.get("type") == "style" or memory.get("status") == "pending_confirm":
                always.append(i)
            try:
                static = static_features(memory)
            except (KeyError, TypeError, ValueError):  # outside the schema: scored from the dict, raising there
                continue
            features[id(memory)] = (words, sum(_weight(t) for t in words), topics, len(line(memory)), *static)
        return cls(version, memories, {t: tuple(v) for t, v in by_token.items()},
                   {t: tuple(v) for t, v in by_topic.items()}, tuple(always),
                   max((int(m.get("hits") or 0) for m in memories), default=0), features, touched,
                   {k: tuple(v) for k, v in by_key.items()})

    @property
    def size(self) -> int:
        return len(self.memories)

    @functools.cached_property
    def key_set(self) -> Any:
        """The keys of by_token and by_topic as a memo_mw._speedups.KeySet (made on first use, 8 to 16
        bytes a key), against which read_request() checks a message without making its tokens;
        None without the C speedups."""
        speedups = _text._speedups
        return speedups.KeySet(self.by_token, self.by_topic) if speedups is not None else None

    @property
    def cost(self) -> int:
        return len(self.memories) * DICT_BYTES

    def hottest_on(self, keys: set[str]) -> bool:
        """Whether a memory as hot as the hottest fills one of these slots (a pending statement
        there would hide it, and hotness is normalised by the hottest memory the request sees)."""
        return any(int(self.memories[i].get("hits") or 0) >= self.max_hits
                   for key in keys for i in self.by_key.get(key, ()))

    def candidates(self, message_tokens: frozenset[str] | set[str], message_topics: frozenset[str],
                   keys: set[str] | frozenset[str] = frozenset()) -> list[dict[str, Any]]:
        """The memories that may score for a message with these tokens and topics, in stored order,
        and those on the slots ``keys`` (which pending statements replace or repeat)."""
        picked = set(self.always)
        for key in keys:
            picked.update(self.by_key.get(key, ()))
        # The message's tokens and topics that hold memories (most hold none), found in C.
        by_token, by_topic = self.by_token, self.by_topic
        for token in by_token.keys() & message_tokens:
            picked.update(by_token[token])
        if message_topics:
            for topic in by_topic.keys() & message_topics:
                picked.update(by_topic[topic])
        return [self.memories[i] for i in sorted(picked)] if picked else []


@dataclass(frozen=True)
class _Ranking:
    """Best possible recency and hotness of each memory, for requests at ``now`` or later."""
    key: tuple
    now: float
    static: array  # w_recency * recency + w_hotness * hotness at ``now``, hottest normalised as stored
    order: array  # every memory, best static first
    by_topic: dict[str, array]  # each topic's memories, best static first


def _last_used(row: list | tuple) -> float:
    """When a memory row was last used, as recency counts it (nan: never, counted as now)."""
    last = row[_COL["last_accessed"]] or row[_COL["source_ts"]] or row[_COL["created_at"]]
    return float(last) if last else math.nan


def _postings(indexes: list[int]) -> tuple[int, ...] | array:
    # A short list as a tuple (of shared int objects), a long one as 4 bytes an entry.
    return tuple(indexes) if len(indexes) < 16 else array("I", indexes)


class RankedMemories:
    """A user with many memories, kept compact, recalled through bounds (see the module doc)."""

    def __init__(self, version: int | None, rows: Iterable[tuple], tag: Callable[[str], frozenset[str]],
                 touched: int = 0):
        """``rows``: the user's recallable memories in ``MEMORY_COLUMNS`` order, oldest first; best
        a cursor (one row at a time: a list of raw rows would double the peak of memory)."""
        self.version = version
        #: The user's recall-count version these rows hold (see :meth:`retouched`).
        self.touched = touched
        self._position: dict[int, int] | None = None
        shared: dict[Any, Any] = {}
        kept, norms, hits, lasts = [], array("d"), array("q"), array("d")
        by_token: dict[str, list[int]] = collections.defaultdict(list)
        by_topic: dict[str, list[int]] = collections.defaultdict(list)
        topic_sets: dict[frozenset[str], frozenset[str]] = {}
        topics_of, always, keys = [], [], []
        # Not through the tokens() cache: ten thousand lines would push out the ones recall reuses.
        tokenize = getattr(tokens, "__wrapped__", tokens)
        c_content, c_key, c_excerpt, c_topics = _COL["content"], _COL["key"], _COL["excerpt"], _COL["topics"]
        c_type, c_status, c_hits = _COL["type"], _COL["status"], _COL["hits"]
        for i, row in enumerate(rows):
            row = list(row)
            for c in _SHARED:
                value = row[c]
                if isinstance(value, str):
                    row[c] = shared.setdefault(value, value)
            if row[c_excerpt] == row[c_content]:
                row[c_excerpt] = row[c_content]
            row = tuple(row)
            kept.append(row)
            words = tokenize(f"{row[c_content]} {row[c_key]}")
            for token in words:
                by_token[token].append(i)
            norms.append(float(sum(_weight(t) for t in words)))
            stored = row[c_topics]
            topic_set = frozenset(json.loads(stored) if stored and stored != "[]" else ()) or tag(row[c_content])
            topic_set = topic_sets.setdefault(topic_set, topic_set)
            topics_of.append(topic_set)
            for topic in topic_set:
                by_topic[topic].append(i)
            if row[c_type] == "style" or row[c_status] == "pending_confirm":
                always.append(i)
            hits.append(int(row[c_hits] or 0))
            lasts.append(_last_used(row))
            keys.append(row[c_key])
        self.rows = kept
        self.norms, self.hits, self.lasts = norms, hits, lasts
        self.by_token = {t: _postings(v) for t, v in by_token.items()}
        self.by_topic = {t: _postings(v) for t, v in by_topic.items()}
        self.topics_of = topics_of
        self.always = tuple(always)
        self.max_hits = max(hits, default=0)
        self.hottest = tuple(heapq.nsmallest(HOTTEST, range(len(kept)), key=lambda i: (-hits[i], kept[i][0])))
        self._keys = keys
        self._by_key: dict[str, list[int]] | None = None
        self._ranking: _Ranking | None = None

    @property
    def size(self) -> int:
        return len(self.rows)

    def retouched(self, touched: int, counts: Iterable[tuple[int, int, Any]]) -> "RankedMemories":
        """A copy holding the recall counts the store has now: ``counts`` is ``(id, hits,
        last_accessed)`` of the user's recallable memories. Only counts changed since the copy
        was made (``touched`` moved, ``version`` did not): tokens, topics and postings are
        shared; the ranking is made again on the next recall."""
        position = self._position
        if position is None:
            position = self._position = {row[0]: i for i, row in enumerate(self.rows)}
        c_hits, c_last = _COL["hits"], _COL["last_accessed"]
        new = copy.copy(self)
        new.touched = touched
        rows = hits = lasts = None
        for memory_id, hit_count, last_accessed in counts:
            i = position.get(memory_id)
            if i is None:
                continue
            row = self.rows[i]
            if row[c_hits] == hit_count and row[c_last] == last_accessed:
                continue
            if rows is None:
                rows, hits, lasts = list(self.rows), array("q", self.hits), array("d", self.lasts)
            row = list(row)
            row[c_hits], row[c_last] = hit_count, last_accessed
            rows[i] = tuple(row)
            hits[i] = int(hit_count or 0)
            lasts[i] = _last_used(row)
        if rows is not None:
            new.rows, new.hits, new.lasts = rows, hits, lasts
            new.max_hits = max(hits, default=0)
            new.hottest = tuple(heapq.nsmallest(HOTTEST, range(len(rows)), key=lambda i: (-hits[i], rows[i][0])))
            new._ranking = None
        return new

    @property
    def cost(self) -> int:
        return len(self.rows) * RANKED_BYTES

    def ranking(self, config: RecallConfig, now: float) -> _Ranking:
        key = (config.w_recency, config.w_hotness, config.decay, config.hotness_full)
        ranking = self._ranking
        if ranking is not None and ranking.key == key \
                and ranking.now - RANK_BACK_SECONDS <= now < ranking.now + RERANK_SECONDS:
            return ranking
        most = max(config.hotness_full, self.max_hits)
        norm = math.log1p(most) if most else 0.0
        w_rec, w_hot, decay = config.w_recency, config.w_hotness, config.decay
        static = array("d", (
            w_rec * (1.0 if last != last else math.exp(-decay * max(0.0, (now - last) / 86400)))
            + (w_hot * math.log1p(h) / norm if norm else 0.0)
            for last, h in zip(self.lasts, self.hits)))
        best = static.__getitem__
        ranking = _Ranking(key, now, static, array("I", sorted(range(len(static)), key=best, reverse=True)),
                           {t: array("I", sorted(v, key=best, reverse=True)) for t, v in self.by_topic.items()})
        self._ranking = ranking  # one assignment: a request sees this ranking or the last
        return ranking

    def same_key(self, keys: set[str]) -> list[int]:
        """The memories on these slots (a pending statement on one replaces them)."""
        by_key = self._by_key
        if by_key is None:
            by_key = collections.defaultdict(list)
            for i, key in enumerate(self._keys):
                by_key[key].append(i)
            self._by_key = by_key = dict(by_key)
        return [i for k in keys for i in by_key.get(k, ())]

    def recall(self, message: str, *, now: float, config: RecallConfig, recall_all: bool,
               tag: Callable[[str], frozenset[str]] | None,
               visible: Callable[[list[dict[str, Any]]], list[dict[str, Any]]], pending_keys: set[str],
               candidates: int = defaults.RECALL_CACHE_CANDIDATES,
               stats: collections.Counter | None = None,
               analysis: tuple[frozenset[str], frozenset[str]] | None = None) -> list[dict[str, Any]]:
        """What :func:`memo_mw.recall.score` picks from every memory ``visible`` lets through.

        ``stats`` counts the requests that needed more candidates (``ranked_retry``) or every
        memory that could score (``ranked_full``). ``analysis``: the message's tokens and topics
        (memo_mw.topics.TopicTagger.analyse), when the caller has them.
        """
        if analysis is not None:
            query_tokens, query_topics = analysis[0], analysis[1] if tag is not None else frozenset()
        else:
            query_tokens = tokens(message)
            query_topics = tag(message) if tag is not None else frozenset()
        analysis = (query_tokens, query_topics)  # for the scoring below
        ranking = self.ranking(config, now)
        static = ranking.static
        # A request before the ranking's time: recency may be higher than ranked, by at most this.
        back = config.w_recency * math.expm1(config.decay * (ranking.now - now) / 86400) if now < ranking.now else 0.0
        # Exact lexical relevance of every memory sharing a token: the weight in common, counted
        # in C (Counter.update) for words and bigrams (weight 1) and single characters (0.3) apart.
        words: collections.Counter = collections.Counter()
        chars: collections.Counter = collections.Counter()
        for token in query_tokens:
            postings = self.by_token.get(token)
            if postings:
                (chars if len(token) == 1 else words).update(postings)
        w_rel, w_topic = config.w_relevance, config.w_topic
        ubs: list[float] = []  # the best score each memory sharing a token could have
        ids: list[int] = []
        if words or chars:
            q = sum(_weight(t) for t in query_tokens)
            norms, topics_of, sqrt = self.norms, self.topics_of, math.sqrt
            weight = _weight("xx")
            light = _weight("字")
            ids = list((words | chars) if chars and words else (words or chars))
            wget, cget = words.get, chars.get
            for i in ids:
                rel = (wget(i, 0) * weight + cget(i, 0) * light) / sqrt(q * norms[i])
                if query_topics and not query_topics.isdisjoint(topics_of[i]):
                    rel = min(1.0, rel + w_topic)
                ubs.append(w_rel * rel + static[i])
        # Best first (sorted in C, with no tuple per memory: fewer objects for the collector).
        lexical = sorted(range(len(ubs)), key=ubs.__getitem__, reverse=True)
        topic_lists = [ranking.by_topic[t] for t in query_topics if t in ranking.by_topic]
        topic_only = w_rel * min(1.0, w_topic)  # the relevance of a memory sharing a topic and no token
        hottest_ids = {self.rows[i][0] for i in self.hottest}
        fixed = set(self.always) | set(self.hottest)
        if pending_keys:
            fixed.update(self.same_key(pending_keys))
        for size in (candidates, candidates * 8):
            if size != candidates and stats is not None:
                stats["ranked_retry"] += 1
            picked = set(fixed)
            bounds = []
            picked.update(ids[j] for j in lexical[:size])
            if len(lexical) > size:
                bounds.append(ubs[lexical[size]])
            for memories in topic_lists:
                picked.update(memories[:size])
                if len(memories) > size:
                    bounds.append(topic_only + static[memories[size]])
            if recall_all:
                picked.update(ranking.order[:size])
                if len(ranking.order) > size:
                    bounds.append(static[ranking.order[size]])
            chosen, most = self._score(picked, message, now, config, recall_all, tag, visible, hottest_ids, analysis)
            if most is None:
                break  # the hottest memories are all hidden: the normalisation needs every memory
            if not bounds:  # nothing that could score was left out
                return chosen
            if len(chosen) >= config.k:
                last = chosen[-1]
                if last.get("type") == "style" or last.get("status") == "pending_confirm":
                    return chosen  # all k are always shown: whatever was left out ranks below them
                # Hotness is normalised by the hottest visible memory, which may be below the
                # hottest stored one (a forget request hides it): the bounds grow by as much.
                floor = max(config.hotness_full, most)
                stretch = (math.log1p(max(config.hotness_full, self.max_hits)) / math.log1p(floor) - 1.0) \
                    if floor else 0.0
                if max(bounds) + config.w_hotness * stretch + back + 1e-9 < last["score"] - 1e-6:
                    return chosen
        if stats is not None:
            stats["ranked_full"] += 1
        if most is not None and not recall_all:
            # Not sure: every memory that could score (shares a token or a topic, or always shown).
            picked = set(fixed)
            picked.update(ids)
            for memories in topic_lists:
                picked.update(memories)
            chosen, most = self._score(picked, message, now, config, recall_all, tag, visible, hottest_ids, analysis)
            if most is not None:
                return chosen
        return score(visible([row_to_memory(r) for r in self.rows]), message, now=now, config=config,
                     recall_all=recall_all, topics=tag, analysis=analysis)

    def _score(self, picked: set[int], message: str, now: float, config: RecallConfig, recall_all: bool,
               tag: Callable[[str], frozenset[str]] | None,
               visible: Callable[[list[dict[str, Any]]], list[dict[str, Any]]], hottest_ids: set[int],
               analysis: tuple[frozenset[str], frozenset[str]] | None = None
               ) -> tuple[list[dict[str, Any]], int | None]:
        """The picks among these memories, and the most hits among the visible ones (None when
        none of the hottest is visible: then that is not the most among all)."""
        rows = self.rows
        memories = visible([row_to_memory(rows[i]) for i in sorted(picked)])
        if len(self.hottest) >= HOTTEST and not any(m["id"] in hottest_ids for m in memories):
            return [], None
        most = max((int(m.get("hits") or 0) for m in memories), default=0)
        return score(memories, message, now=now, config=config, recall_all=recall_all, topics=tag,
                     max_hits=most, analysis=analysis), most


Entry = UserMemories | RankedMemories


class MemoryCache:
    """A bounded, thread-safe map of user id to its cached memories (either form)."""

    def __init__(self, *, max_bytes: int, max_user: int):
        self.max_bytes = max_bytes
        self.max_user = max_user
        self._users: collections.OrderedDict[str, Entry] = collections.OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        # defaultdict, not Counter: Counter's own __delitem__ sends every += through a Python slot.
        self.stats: collections.defaultdict[str, int] = collections.defaultdict(int)

    @property
    def bytes(self) -> int:
        """The estimated bytes of what is cached."""
        return self._bytes

    def get(self, user_id: str, version: int | None) -> Entry | None:
        with self._lock:
            entry = self._users.get(user_id)
            if entry is None or entry.version != version:
                self.stats["miss"] += 1
                if entry is not None:  # stale: dropped now, not kept alive while its successor loads
                    del self._users[user_id]
                    self._bytes -= entry.cost
                return None
            self._users.move_to_end(user_id)
            self.stats["hit"] += 1
            return entry

    def put(self, user_id: str, entry: Entry) -> None:
        if entry.size > self.max_user or entry.cost > self.max_bytes:
            with self._lock:  # too large to keep; an older copy must not be served either
                old = self._users.pop(user_id, None)
                if old is not None:
                    self._bytes -= old.cost
            return
        with self._lock:
            old = self._users.pop(user_id, None)
            if old is not None:
                self._bytes -= old.cost
            self._users[user_id] = entry
            self._bytes += entry.cost
            while self._bytes > self.max_bytes and len(self._users) > 1:
                _, evicted = self._users.popitem(last=False)
                self._bytes -= evicted.cost
                self.stats["evicted"] += 1

    def clear(self) -> None:
        with self._lock:
            self._users.clear()
            self._bytes = 0
