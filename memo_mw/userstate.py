"""Short-lived per-user state between a request and the jobs it queued.

Three things live here, for :data:`memo_mw.defaults.PENDING_TTL` seconds at most:

* **pending** remember payloads, captured but not stored yet: recall merges them in, so the
  next request reads its own writes; the ``remember`` job drops its payload once stored;
* **forgets**, the user's recent forget requests (when, and hashes of what): recall hides what they
  name from every request until the ``forget`` job has run (after a deletion on the web page
  or by the CLI, which the store has already made, only pending statements), and a
  ``remember`` job that started before the forget does not store what it names;
* **shown** confirmations: expired memories recall has already asked about, so each is
  asked about once even before the ``touch`` job records it;
* **touches** (Redis only): recall counts per memory, applied in batches by one
  ``flush_touches`` job per user rather than one SQLite write per request;
* **topic counts** (:mod:`memo_mw.counters`): noted by the request (``note_topics``, no I/O)
  and sent with the next read of the user's state, in the same round trip; in embedded mode
  handed to the job thread, which adds them to SQLite.

With Redis it is three keys per user, read in one round trip; without (embedded mode) it
is a dictionary in the process.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import hashlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from . import counters, defaults
from .text import apostrophe_tokens, tokens

#: The job that adds one message's topic counts to SQLite in embedded mode (memo_mw.jobs).
COUNT_TOPICS = "memo_mw.jobs.count_topics"

#: Share of a forget phrase's words a memory must contain to count as named by it.
MATCH_SHARE = 0.6


@dataclass(frozen=True, slots=True)
class UserState:
    """A user's short-lived state. A slots class, not a NamedTuple: the request path reads its
    fields, and the interpreter specialises a slot's read, not a named tuple's."""

    pending: list[dict[str, Any]]
    forgets: list[dict[str, Any]]  # forget_marker(): {"tokens": hashes or None (everything), "ts"[, "at"]}
    shown: set[int]

    def _replace(self, **changes: Any) -> "UserState":
        return dataclasses.replace(self, **changes)


EMPTY = UserState([], [], set())


def forget_marker(match: str | None, ts: float, at: float | None = None, *,
                  pending_only: bool = False) -> dict[str, Any]:
    """What is kept of a forget request: when, and the hashes of its words (never the words).

    The marker outlives the request by minutes; holding the very text the user asked to
    forget in Redis that long would defeat the purpose, so it holds one-way hashes that
    can only be compared with a memory's own words.

    ``ts`` is the request's time as its client gave it; ``at``, when the server read it, by
    the server's clock (see :func:`said_by`). ``pending_only``: the deletion itself is done in
    the store at once (the web page, the CLI), so the marker is for what waits (pending
    statements, queued jobs) and recall does not hold stored memories against it: those carry
    only their client's time, which a server time cannot be compared with.
    """
    marker: dict[str, Any] = {"tokens": None if match is None else sorted(_hashed(tokens(match))), "ts": int(ts)}
    if at is not None:
        marker["at"] = float(at)
    if pending_only:
        marker["pending_only"] = True
    return marker


def said_by(said: dict[str, Any], forget: dict[str, Any]) -> bool:
    """Whether what ``said`` holds (a memory, or a pending payload's candidate) was said by the
    time of the forget request ``forget`` (a :func:`forget_marker`).

    When both carry the server's time (a payload's ``received``, a marker's ``at``) they are
    compared: a client's clock then orders nothing, so a deletion on the memories page (the
    server's time) is ordered right against statements from a client whose clock is ahead or
    behind. Otherwise the client times are compared (``source_ts`` with the marker's ``ts``),
    which for a chat's own "forget that" are the same client's clock."""
    received, at = receipt(said), forget.get("at")
    if received is not None and isinstance(at, (int, float)):
        return received <= at
    return (said.get("source_ts") or said.get("created_at") or 0) <= forget["ts"]


def forgotten(memory: dict[str, Any], forgets: list[dict[str, Any]]) -> bool:
    """Whether a forget request made after this memory was said names it (see store.matches)."""
    relevant = [f for f in forgets if said_by(memory, f)]
    if not relevant:
        return False
    if any(f["tokens"] is None for f in relevant):
        return True
    text = " ".join(str(memory.get(f) or "") for f in ("content", "key", "excerpt"))
    # With the tokens words with an apostrophe had before (text.apostrophe_tokens): a marker made
    # then names "John's" as john', and must still find it.
    have = _hashed(tokens(text) | apostrophe_tokens(text))
    return any(f["tokens"] and len(have.intersection(f["tokens"])) / len(f["tokens"]) >= MATCH_SHARE
               for f in relevant)


def _hashed(words: frozenset[str]) -> set[str]:
    return {hashlib.blake2b(w.encode("utf-8"), digest_size=8).hexdigest() for w in words}


def without_forgotten(payload: dict[str, Any], forgets: list[dict[str, Any]]) -> dict[str, Any]:
    """The payload less the candidates a forget request made after it names."""
    said = {"source_ts": payload["ts"], "received": payload.get("received")}
    kept = [c for c in payload.get("candidates", []) if not forgotten({**c, **said}, forgets)]
    return {**payload, "candidates": kept}


# KEYS[1] the user's pending hash; ARGV: job key, the payload's JSON ("": drop it), TTL, channel, user.
_REPLACE_PENDING = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if ARGV[2] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
redis.call('PUBLISH', ARGV[4], ARGV[5])
return 1
"""


def rewrite_pending(state: Any, user_id: str, change: Callable[[dict[str, Any]], dict[str, Any]], *,
                    pending: list[dict[str, Any]] | None = None,
                    replace: Callable[[str, dict[str, Any]], Any] | None = None) -> list[dict[str, Any]]:
    """Replace each of the user's pending payloads that ``change(payload)`` changes (with
    ``replace_pending``, or ``replace``: one whose job ran meanwhile is not put back); the payloads
    as changed that still hold a candidate. ``pending``: the payloads already read (else read from
    ``state``, which may be None when both ``pending`` and ``replace`` are given)."""
    replace = replace or state.replace_pending
    kept_all = []
    for payload in state.read(user_id).pending if pending is None else pending:
        kept = change(payload)
        if kept["candidates"] != payload.get("candidates"):
            replace(user_id, kept)
        if kept["candidates"]:
            kept_all.append(kept)
    return kept_all


def receipt(item: dict[str, Any]) -> float | None:
    """When the server read a payload's message (its own clock, the ``received`` field), or None
    for one made without it."""
    received = item.get("received")
    return float(received) if isinstance(received, (int, float)) else None


def received_at(payload: dict[str, Any]) -> float:
    """When the server read a payload's message (its own clock); ``ts`` for one made without it."""
    received = receipt(payload)
    return received if received is not None else float(payload.get("ts") or 0)


def without_slot(payload: dict[str, Any], key: str, at: float) -> dict[str, Any]:
    """The payload less its candidates on slot ``key`` when its message was read by ``at`` (the
    user edited that slot's memory at ``at``: what was said of it before is not stored over it)."""
    if received_at(payload) > at:
        return payload
    return {**payload, "candidates": [c for c in payload.get("candidates", []) if c.get("key") != key]}


class RedisUserState:
    #: Messages whose topic counts may wait to be sent; beyond it the oldest are dropped.
    MAX_NOTES = 100_000

    def __init__(self, connection: Any, namespace: str):
        self.connection = connection
        self.namespace = namespace
        # Each message's counts as noted (an append, safe from any thread, is all a request does);
        # added up per user when they are sent.
        self._notes: collections.deque[tuple[str, str, list[str]]] = collections.deque(maxlen=self.MAX_NOTES)
        self._noted: dict[str, dict[tuple[str, str], int]] = {}
        self._noted_lock = threading.Lock()

    def _key(self, kind: str, user_id: str) -> str:
        return f"memo:{kind}:{self.namespace}:{user_id}"

    @property
    def channel(self) -> str:
        """Where every write publishes the user id (memo_mw.statecache drops its copy)."""
        return f"memo:changed:{self.namespace}"

    def _add_up_notes(self) -> None:
        """Move the notes into the per-user counts (under ``_noted_lock``)."""
        notes, noted = self._notes, self._noted
        # The notes there now (the request path only appends; whoever takes holds the lock), counted
        # alike together first: most are the same few, a user's "no topic, in English" this week.
        taken = [notes.popleft() for _ in range(len(notes))]
        try:
            alike = collections.Counter(taken)
        except TypeError:  # names given as a list
            alike = collections.Counter((user_id, week, tuple(names)) for user_id, week, names in taken)
        for (user_id, week, names), times in alike.items():
            counts = noted.setdefault(user_id, {})
            for name in names:
                counts[(week, name)] = counts.get((week, name), 0) + times

    def flush_noted(self) -> None:
        """Send every noted topic count now, in one round trip (the web process's sender does)."""
        with self._noted_lock:
            self._add_up_notes()
            noted, self._noted = self._noted, {}
        if noted:
            with self.connection.pipeline(transaction=False) as pipe:
                for user_id, counts in noted.items():
                    counters.redis_increments(pipe, self.namespace, user_id, counts)
                pipe.execute()

    def note_topics(self, db: str, user_id: str, week: str, names: Sequence[str]) -> None:
        """Count a message's topics (memo_mw.counters.count_keys) in ``week``: no I/O here, the
        increments go with the next :meth:`read` of the user's state, in its round trip, or with
        the next :meth:`flush_noted`."""
        self._notes.append((user_id, week, names))

    def topic_notes(self) -> tuple[Any, Callable[[tuple[str, str, Sequence[str]]], None]] | None:
        """note_topics() without the call, for the request path: ``(gate, append)``, where
        ``append((user_id, week, names))`` notes a message's counts whenever ``gate`` is None or
        ``gate.closed``."""
        return None, self._notes.append

    def read(self, user_id: str) -> UserState:
        with self._noted_lock:
            if self._notes:
                self._add_up_notes()
            noted = self._noted.pop(user_id, None) if self._noted else None
        with self.connection.pipeline(transaction=False) as pipe:
            pipe.hvals(self._key("pending", user_id))
            pipe.hvals(self._key("forgets", user_id))
            pipe.smembers(self._key("shown", user_id))
            if noted:
                counters.redis_increments(pipe, self.namespace, user_id, noted)
            pending, forgets, shown = pipe.execute()[:3]
        return UserState([json.loads(p) for p in pending], [json.loads(f) for f in forgets],
                         {int(i) for i in shown})

    def put_pending(self, user_id: str, payload: dict[str, Any], *, pipe: Any = None) -> None:
        """Add or replace a pending payload; one with no candidates left is dropped. With ``pipe``,
        the commands are only queued on it (the caller sends them with its own)."""
        key = self._key("pending", user_id)
        with _pipeline(self.connection, pipe) as p:
            if payload.get("candidates"):
                p.hset(key, payload["job_key"], json.dumps(payload))
                p.expire(key, defaults.PENDING_TTL)
            else:
                p.hdel(key, payload["job_key"])
            p.publish(self.channel, user_id)

    def replace_pending(self, user_id: str, payload: dict[str, Any]) -> None:
        """put_pending() for a payload that is still pending: one whose job ran (and dropped it)
        since it was read is not put back."""
        self.connection.eval(_REPLACE_PENDING, 1, self._key("pending", user_id), payload["job_key"],
                             json.dumps(payload) if payload.get("candidates") else "", defaults.PENDING_TTL,
                             self.channel, user_id)

    def forgets_of(self, user_ids: set[str]) -> dict[str, list[dict[str, Any]]]:
        """The recent forget requests of several users, in one round trip."""
        users = sorted(user_ids)
        with self.connection.pipeline(transaction=False) as pipe:
            for user_id in users:
                pipe.hvals(self._key("forgets", user_id))
            found = pipe.execute()
        return {user: [json.loads(f) for f in forgets] for user, forgets in zip(users, found)}

    def drop_pending_many(self, entries: list[tuple[str, str]]) -> None:
        """Drop several pending payloads ``(user_id, job_key)``, in one round trip."""
        with _pipeline(self.connection) as p:
            for user_id, job_key in entries:
                p.hdel(self._key("pending", user_id), job_key)
            for user_id in {user for user, _ in entries}:
                p.publish(self.channel, user_id)

    def drop_pending(self, user_id: str, job_key: str) -> None:
        with _pipeline(self.connection) as p:
            p.hdel(self._key("pending", user_id), job_key)
            p.publish(self.channel, user_id)

    def add_forget(self, user_id: str, forget: dict[str, Any]) -> None:
        key = self._key("forgets", user_id)
        with _pipeline(self.connection) as p:
            p.hset(key, json.dumps(forget, sort_keys=True), json.dumps(forget))
            p.expire(key, defaults.PENDING_TTL)
            p.publish(self.channel, user_id)

    def add_shown(self, user_id: str, ids: list[int]) -> None:
        key = self._key("shown", user_id)
        with _pipeline(self.connection) as p:
            p.sadd(key, *ids)
            p.expire(key, defaults.PENDING_TTL)
            p.publish(self.channel, user_id)


    def add_touches(self, user_id: str, ids: list[int] | dict[int, int], ts: float) -> None:
        """Count recalls of these memories (once each, or ``{id: times}``), to be applied by one
        ``flush_touches`` job."""
        key = self._key("touches", user_id)
        counts = ids if isinstance(ids, dict) else {i: 1 for i in ids}
        with self.connection.pipeline() as pipe:
            for memory_id, n in counts.items():
                pipe.hincrby(key, str(memory_id), n)
            pipe.hset(key, "@ts", int(ts))
            pipe.expire(key, defaults.TOUCHES_TTL)
            pipe.execute()

    def take_touches(self, user_id: str) -> tuple[dict[int, int], int | None]:
        """The counted recalls, removed in the same transaction: each is applied once."""
        key = self._key("touches", user_id)
        with self.connection.pipeline() as pipe:  # MULTI/EXEC
            pipe.hgetall(key)
            pipe.delete(key)
            counted, _ = pipe.execute()
        ts = counted.pop(b"@ts", None)
        return {int(k): int(v) for k, v in counted.items()}, int(ts) if ts is not None else None


@contextlib.contextmanager
def _pipeline(connection: Any, pipe: Any = None):
    """The caller's pipeline as is, or a new transaction (MULTI/EXEC) sent on leaving the block."""
    if pipe is not None:
        yield pipe
        return
    with connection.pipeline() as own:
        yield own
        own.execute()


class LocalUserState:
    """The same state in this process (embedded mode), each entry kept PENDING_TTL seconds."""

    def __init__(self, enqueue: Callable[..., Any] | None = None) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, str], dict[Any, tuple[float, Any]]] = {}
        #: The job thread's enqueue: topic counts become a ``count_topics`` job (a SQLite write
        #: off the request). None: they are not kept.
        self._enqueue = enqueue

    def note_topics(self, db: str, user_id: str, week: str, names: Sequence[str]) -> None:
        if self._enqueue is not None:
            self._enqueue(COUNT_TOPICS, [db, user_id, week, names])

    def topic_notes(self) -> None:
        """None: counts are noted through note_topics() (a job each)."""
        return None

    def _put(self, kind: str, user_id: str, key: Any, value: Any) -> None:
        self._entries.setdefault((kind, user_id), {})[key] = (time.monotonic(), value)

    def _values(self, kind: str, user_id: str) -> list[Any]:
        oldest = time.monotonic() - defaults.PENDING_TTL
        entries = self._entries.get((kind, user_id), {})
        return [value for added, value in entries.values() if added >= oldest]

    def read(self, user_id: str) -> UserState:
        with self._lock:
            return UserState(self._values("pending", user_id), self._values("forgets", user_id),
                             set(self._values("shown", user_id)))

    def put_pending(self, user_id: str, payload: dict[str, Any]) -> None:
        with self._lock:
            if payload.get("candidates"):
                self._put("pending", user_id, payload["job_key"], payload)
            else:
                self._entries.get(("pending", user_id), {}).pop(payload["job_key"], None)

    def drop_pending(self, user_id: str, job_key: str) -> None:
        with self._lock:
            self._entries.get(("pending", user_id), {}).pop(job_key, None)

    def replace_pending(self, user_id: str, payload: dict[str, Any]) -> None:
        with self._lock:
            if payload["job_key"] in self._entries.get(("pending", user_id), {}):
                if payload.get("candidates"):
                    self._put("pending", user_id, payload["job_key"], payload)
                else:
                    self._entries[("pending", user_id)].pop(payload["job_key"], None)

    def add_forget(self, user_id: str, forget: dict[str, Any]) -> None:
        with self._lock:
            self._put("forgets", user_id, json.dumps(forget, sort_keys=True), forget)

    def add_shown(self, user_id: str, ids: list[int]) -> None:
        with self._lock:
            for memory_id in ids:
                self._put("shown", user_id, memory_id, memory_id)
