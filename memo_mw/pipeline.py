"""The memory pipeline shared by the middleware and the CLI: funnel, payload, recall.

The middleware sends payloads to a queue backend; ``memo-mw replay`` applies the same
payloads to the store synchronously. Both build them here, so a replayed chat log is
remembered exactly as live traffic would be.
"""

from __future__ import annotations

import collections
import queue
import time
import sqlite3
from typing import Any

from . import defaults, index
from . import index_queries as queries
from .funnel import Funnel, FunnelResult
from .memcache import MemoryCache, RankedMemories, UserMemories
from .recall import RecallConfig, score
from .store import Store
from .userstate import EMPTY, UserState, forgotten, without_forgotten
from .text import normalize, stable_id



def remember_payload(result: FunnelResult, *, user_id: str, session_id: str | None, ts: float,
                     message_id: str | None, time_key: Any, received: float | None = None) -> dict[str, Any]:
    """The JSON payload of a ``remember`` job.

    ``job_key`` is the same for the same user, normalised summaries and ``time_key`` (the
    message time, or whatever stands for it), so a repeated message makes no second memory.
    ``received``: when the server read the message, by its own clock (``ts`` may be the
    client's), to order it against the user's edits (Store.mark_edited).
    """
    summaries = sorted(normalize(c.content) for c in result.candidates)
    payload = {
        "job_key": "memo-remember-" + stable_id(user_id, *summaries, time_key),
        "user_id": user_id,
        "session_id": session_id,
        "ts": int(ts),
        "message_id": message_id,
        "candidates": [c.as_dict() for c in result.candidates],
    }
    if received is not None:
        payload["received"] = float(received)
    return payload


class Recaller:
    """Reads a user's active memories through pooled read-only connections, and scores them.

    A pool rather than one connection per thread: threaded servers start a thread per
    request, and a connection per thread would be opened and thrown away each time.
    """

    def __init__(self, db: str, funnel: Funnel, config: RecallConfig, *, indexed: bool = True,
                 index_min: int = defaults.RECALL_INDEX_MIN_MEMORIES,
                 index_candidates: int = defaults.RECALL_INDEX_CANDIDATES,
                 cache_bytes: int = defaults.RECALL_CACHE_BYTES,
                 cache_user: int = defaults.RECALL_CACHE_USER_MEMORIES,
                 cache_candidates: int = defaults.RECALL_CACHE_CANDIDATES):
        self.db = db
        self.funnel = funnel
        self.config = config
        #: Read through the term index for users with more than ``index_min`` active memories.
        self.indexed = indexed
        self.index_min = index_min
        self.index_candidates = index_candidates
        #: How many recalls went through the index, and how many of those fell back to loading all;
        #: cached large users: how many needed more candidates, and every memory that could score.
        #: The version of each user as the last request read it (ProfileReader keys on it).
        self.versions: dict[str, int | None] = {}
        #: Something whose ``stamp(user_id)`` moves whenever the user may have changed (the
        #: user-state cache's listener, memo_mw.statecache); None: read the version every time.
        self.changes: Any = None
        self._known: dict[str, tuple[Any, float, tuple[int | None, int]]] = {}
        # defaultdict, not Counter: Counter's own __delitem__ sends every += through a Python slot.
        self.stats = collections.defaultdict(int, indexed=0, fallback=0, ranked=0, ranked_retry=0, ranked_full=0)
        self._pool: queue.SimpleQueue[Store] = queue.SimpleQueue()
        #: Users' memories kept in this process (memo_mw.memcache); None: read them every time.
        #: Up to ``index_min`` memories as dicts, more (up to ``cache_user``) in the ranked form.
        self.cache = MemoryCache(max_bytes=cache_bytes, max_user=cache_user) if cache_bytes else None
        self.cache_candidates = cache_candidates

    def recall(self, user_id: str, message: str, *, now: float, state: UserState = EMPTY,
               config: RecallConfig | None = None, recall_all: bool | None = None) -> list[dict[str, Any]]:
        """Top memories for the message, from the store and the user's short-lived state.

        Pending payloads are merged in (read-your-own-writes); whatever a recent forget
        request names is left out, from the request that asks until long after its job has
        run; an expired memory already asked about is not asked about again.

        A user with many memories is read through the term index (memo_mw.index), which gives
        the same memories as loading and scoring all of them, or says it cannot be sure (then
        all are loaded).
        """
        return self.recall_and_copy(user_id, message, now=now, state=state, config=config, recall_all=recall_all)[0]

    def recall_and_copy(self, user_id: str, message: str, *, now: float, state: UserState = EMPTY,
                        config: RecallConfig | None = None, recall_all: bool | None = None,
                        analysis: tuple[frozenset[str], frozenset[str]] | None = None
                        ) -> tuple[list[dict[str, Any]], UserMemories | RankedMemories | None]:
        """recall(), and the cached copy of the user's memories it scored (None when it read them
        otherwise): the copy recall_copy() takes while the user stays unchanged (memo_mw.middleware
        keeps it, with the user's state, for as long as the user-state listener says so).
        ``analysis``: the message's ``funnel.topics.analyse()``, when the caller has it."""
        config = config or self.config
        if recall_all is None:  # (the funnel's result may tell: FunnelResult.recall_all)
            recall_all = self.funnel.is_recall_all(message)
        lease = _Lease(self._pool, self.db)  # a connection only if something must be read
        try:
            cached = self._cached(lease, user_id)
            if cached is not None:
                chosen = self.recall_copy(cached, message, now=now, state=state, config=config,
                                          recall_all=recall_all, analysis=analysis)
            else:
                chosen = None
                store = lease.store
                if self.indexed and queries.active_count(store, user_id) > self.index_min and \
                        queries.has_index(store):
                    self.stats["indexed"] += 1
                    pending_keys = {c["key"] for p in state.pending for c in p.get("candidates", [])}
                    chosen = index.recall(store, user_id, message, now=now, config=config, recall_all=recall_all,
                                          tagger=self.funnel.topics, pending_keys=pending_keys,
                                          candidates=self.index_candidates,
                                          visible=lambda rows: visible(rows, state))
                    if chosen is None:
                        self.stats["fallback"] += 1
                if chosen is None:
                    chosen = score(visible(store.recall_candidates(user_id), state), message, now=now,
                                   config=config, recall_all=recall_all, topics=self.funnel.topics.tag)
        except BaseException:
            lease.close()  # a connection that failed is not put back
            raise
        lease.release()
        return chosen, cached

    def _cached(self, lease: "_Lease", user_id: str) -> UserMemories | RankedMemories | None:
        """The user's memories from the cache (loaded into it when missing or changed), or None
        when the user has too many to cache (or the cache is off, or the database predates it).
        A user whose version is known and whose copy is current costs no read (the usual case)."""
        if self.cache is None:
            return None
        try:
            version, touched = self._known_versions(lease, user_id)
        except sqlite3.OperationalError:  # a database older than user_versions, opened read-only
            return None
        if len(self.versions) >= _VERSIONS_KEPT:
            self.versions.clear()
        self.versions[user_id] = version  # for the insights read next (ProfileReader)
        entry = self.cache.get(user_id, version)
        if entry is not None and entry.touched != touched:
            # Only recall counts changed (hits, last_accessed): a large user's copy takes them in
            # (one narrow read); a small one is loaded again, which costs about the same.
            entry = self._retouched(lease.store, user_id, entry) if isinstance(entry, RankedMemories) else None
        if entry is None:
            store = lease.store
            count = queries.active_count(store, user_id)
            if count > self.cache.max_user:
                return None
            # Read the version again after the rows: a write in between must not be cached as
            # the version before it (the next request would trust stale rows).
            store.db.execute("begin")
            try:
                version, touched = _versions(store, user_id)
                if count > self.index_min:
                    entry = RankedMemories(version, queries.raw_rows(store, user_id), self.funnel.topics.tag, touched)
                else:
                    entry = UserMemories.build(version, store.recall_candidates(user_id), self.funnel.topics.tag,
                                               touched)
            finally:
                store.db.execute("commit")
            self.cache.put(user_id, entry)
        return entry

    def version_read_at(self, user_id: str, stamp: Any) -> float | None:
        """When (time.monotonic()) the user's version that recall trusts under ``stamp`` was read,
        or None when none is kept under that stamp."""
        known = self._known.get(user_id)
        return known[1] if known is not None and known[0] == stamp else None

    def _known_versions(self, lease: "_Lease", user_id: str) -> tuple[int | None, int]:
        """The user's version and touched: from SQLite, or as last read while nothing said the
        user changed (``changes``, the user-state listener) and for at most VERSION_MAX_AGE."""
        stamp = self.changes.stamp(user_id) if self.changes is not None else None
        if stamp is not None:
            known = self._known.get(user_id)
            if known is not None and known[0] == stamp and time.monotonic() - known[1] < defaults.RECALL_VERSION_MAX_AGE:
                return known[2]
        versions = _versions(lease.store, user_id)  # read after the stamp: a change meanwhile moves it
        if stamp is not None:
            if len(self._known) >= _VERSIONS_KEPT:
                self._known.clear()
            self._known[user_id] = (stamp, time.monotonic(), versions)
        return versions

    def _retouched(self, store: Store, user_id: str, entry: RankedMemories) -> RankedMemories | None:
        store.db.execute("begin")
        try:
            version, touched = _versions(store, user_id)
            if version != entry.version:
                return None  # changed for real meanwhile: load it all
            self.stats["retouched"] += 1
            entry = entry.retouched(touched, store.db.execute(
                f"select id, hits, last_accessed from memories where user_id = ? and {queries.POOL}", [user_id]))
        finally:
            store.db.execute("commit")
        self.cache.put(user_id, entry)
        return entry

    def recall_copy(self, entry: UserMemories | RankedMemories, message: str, *, now: float,
                    state: UserState = EMPTY, config: RecallConfig | None = None, recall_all: bool | None = None,
                    analysis: tuple[frozenset[str], frozenset[str]] | None = None) -> list[dict[str, Any]]:
        """recall() from a copy recall_and_copy() gave, for a user known not to have changed since."""
        if config is None:
            config = self.config
        if recall_all is None:
            recall_all = self.funnel.is_recall_all(message)
        pending_keys = {c["key"] for p in state.pending for c in p.get("candidates", [])} if state.pending else _NO_KEYS
        if isinstance(entry, RankedMemories):
            self.stats["ranked"] += 1
            return entry.recall(message, now=now, config=config, recall_all=recall_all, tag=self.funnel.topics.tag,
                                visible=lambda memories: visible(memories, state), pending_keys=pending_keys,
                                candidates=self.cache_candidates, stats=self.stats, analysis=analysis)
        if recall_all or state.forgets or state.shown or (pending_keys and entry.hottest_on(pending_keys)):
            # Everything may show, or what is hidden changes the hottest memory (hotness is
            # normalised by the hottest visible one).
            memories, max_hits = entry.memories, None
        else:
            # Only what shares a token or topic with the message can score (and style,
            # confirmations), and a pending statement meets only the memories on its own slot.
            memories, max_hits = entry.candidates(*(analysis or self.funnel.topics.analyse(message)),
                                                  pending_keys), entry.max_hits
            if not memories and not state.pending:
                return []  # the usual case: nothing the message could recall
        return score(visible(memories, state), message, now=now, config=config, recall_all=recall_all,
                     topics=self.funnel.topics.tag, max_hits=max_hits, features=entry.features, analysis=analysis)


_NO_KEYS: frozenset[str] = frozenset()


class _Lease:
    """One of the pool's read-only connections, taken the first time it is asked for."""

    __slots__ = ("_pool", "_db", "_store")

    def __init__(self, pool: queue.SimpleQueue, db: str):
        self._pool, self._db, self._store = pool, db, None

    @property
    def store(self) -> Store:
        if self._store is None:
            try:
                self._store = self._pool.get_nowait()
            except queue.Empty:
                self._store = Store(self._db, readonly=True)
        return self._store

    def release(self) -> None:
        if self._store is not None:
            self._pool.put(self._store)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


#: Users whose last-read version is kept for the insights read; beyond it, start over.
_VERSIONS_KEPT = 100_000


def _versions(store: Store, user_id: str) -> tuple[int | None, int]:
    """The user's ``version`` and ``touched`` (recall counts) in ``user_versions``."""
    try:
        row = store.db.execute("select version, touched from user_versions where user_id = ?", [user_id]).fetchone()
    except sqlite3.OperationalError as exc:
        if "touched" not in str(exc):
            raise
        # A database from before m007, opened read-only: every change moves `version`.
        row = store.db.execute("select version, 0 from user_versions where user_id = ?", [user_id]).fetchone()
    return (row[0], row[1]) if row else (None, 0)


def visible(memories: list[dict[str, Any]], state: UserState) -> list[dict[str, Any]]:
    """Stored memories as this request sees them: pending statements merged in, whatever a recent
    forget request names left out, expired ones already asked about left out."""
    # Each side against the forget requests by its own times (userstate.said_by): a pending
    # statement by when the server read it, a stored memory by its source time.
    stored_forgets = [f for f in state.forgets if not f.get("pending_only")] if state.forgets else None
    if stored_forgets:
        memories = [m for m in memories if not forgotten(m, stored_forgets)]
    if state.pending:
        pending = [without_forgotten(p, state.forgets) for p in state.pending] if state.forgets else state.pending
        memories = merge_pending(memories, pending)
    if state.shown:
        memories = [m for m in memories if not (m.get("status") == "pending_confirm" and m["id"] in state.shown)]
    return memories


def merge_pending(stored: list[dict[str, Any]], payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stored memories plus the pending ones, as the store will have them once the jobs run.

    A pending statement already stored adds nothing; one on a slot (key) an active stored
    memory fills replaces it, as the job will. Pending memories have ``id`` None.
    """
    memories = list(stored)
    for payload in sorted(payloads, key=lambda p: p.get("ts") or 0):
        for c in payload.get("candidates", []):
            same_slot = [m for m in memories if m["key"] == c["key"] and m.get("status") != "pending_confirm"]
            if any(m["polarity"] == c["polarity"] and normalize(m["content"]) == normalize(c["content"])
                   for m in same_slot):
                continue
            memories = [m for m in memories if m not in same_slot]
            ts = int(payload["ts"])
            memories.append({
                "id": None, "user_id": payload["user_id"], "type": c["type"], "key": c["key"],
                "polarity": c["polarity"], "content": c["content"], "excerpt": c["excerpt"],
                "active": True, "status": "pending", "source_session": payload.get("session_id"),
                "source_ts": ts, "source_ids": [payload["message_id"]] if payload.get("message_id") else [],
                "confidence": c["confidence"], "hits": 0, "last_accessed": None, "created_at": ts,
                "expires_at": int(ts + c["ttl_days"] * 86400) if c.get("ttl_days") else None,
                "rule_id": c.get("rule_id"), "language": c.get("language"),
            })
    return memories
