"""The users' short-lived state (memo_mw.userstate) kept in the web process, so a request makes no
Redis round trip unless it has something to write.

Every write to a user's state (by any process: web, worker, CLI) publishes the user id on the
channel ``memo:changed:<queue>`` in the same pipeline as the write (RedisUserState does it). A
thread here listens to that channel and drops the user's cached state; the next read fetches it.
Redis 7.4's client-side caching would do the same, for one command at a time; this works on any
Redis and for the three keys of a user at once.

- While the listener is not subscribed (start-up, a lost connection), nothing is served from the
  cache: a missed message can never leave a stale state in use. On reconnecting it starts empty.
- A read that raced with a change (the message arrived while the read was in flight) is not kept.
- An entry is also refreshed after ``max_age`` seconds, a bound for anything else.

The same thread's neighbour, the sender, sends what requests only count (topic counts, recall
counts) every ``send_interval`` seconds in one pipeline, off the request path. Counts only rank and
summarise: a process that dies loses at most one interval of them.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from . import defaults
from .userstate import RedisUserState, UserState

log = logging.getLogger(__name__)


def _write_through(name: str) -> Callable[..., Any]:
    """``inner.<name>(user_id, ...)``, with this process's copy of the user dropped before and after:
    our own write is seen by our next read, whether or not its change message has come."""
    def write(self: "CachedUserState", user_id: str, *args: Any) -> Any:  # (no pipe=: the write is done on return)
        self.invalidate(user_id)
        try:
            return getattr(self.inner, name)(user_id, *args)
        finally:
            self.invalidate(user_id)
    write.__name__ = write.__qualname__ = name
    return write


def _passed_on(name: str) -> Callable[..., Any]:
    """``inner.<name>(...)`` as it is."""
    def method(self: "CachedUserState", *args: Any, **kwargs: Any) -> Any:
        return getattr(self.inner, name)(*args, **kwargs)
    method.__name__ = method.__qualname__ = name
    return method


class CachedUserState:
    """A :class:`~memo_mw.userstate.RedisUserState` with reads served from this process when unchanged."""

    def __init__(self, inner: RedisUserState, *, max_users: int = 10_000, max_age: float | None = None,
                 send_interval: float | None = None, on_send: Any = None):
        self.inner = inner
        self.max_users = max_users
        self.max_age = defaults.STATE_CACHE_MAX_AGE if max_age is None else max_age
        self.send_interval = defaults.COUNTS_SEND_INTERVAL if send_interval is None else send_interval
        self._on_send = on_send  # called by the sender thread each round (the backend's touches)
        self._cache: collections.OrderedDict[str, tuple[UserState, float]] = collections.OrderedDict()
        # Each user's change counter, drawn from one sequence: a user dropped and seen again
        # starts from a value never used before, so no old stamp can match it.
        self._changes = itertools.count(1)
        self._generation: dict[str, int] = collections.defaultdict(self._changes.__next__)
        self._epoch = 0  # moves each time the listener subscribes or loses Redis
        self._lock = threading.Lock()
        self.listening = False
        #: A one-item list (a cell) holding (epoch, the listener's process id) while listening, else
        #: None: what cached(), read(), stamp() and the middleware's one-call read
        #: (memo_mw._speedups.read_request, which reads the cell without an attribute lookup) trust,
        #: in one record (listening is set with it, for those who ask).
        self._trusted: list[tuple[int, int] | None] = [None]
        self.stats: collections.defaultdict[str, int] = collections.defaultdict(int)  # (not Counter: see memcache)
        self._stop = threading.Event()
        self._threads_pid: int | None = None
        self._start_lock = threading.Lock()
        #: Counts only (no I/O, nothing cached changes): straight to the Redis state, which sends them.
        self.note_topics = inner.note_topics
        self.topic_notes = inner.topic_notes

    # -- reads ----------------------------------------------------------------------------

    def cached(self, user_id: str, pid: int | None = None) -> UserState | None:
        """The user's state if this process's copy can be trusted (no I/O), else None. ``pid``:
        os.getpid() as the caller has just asked it (one system call fewer)."""
        # os.getpid() each time (a system call), not an id kept by an at-fork hook: uWSGI forks its
        # workers without running Python's hooks (unless --py-call-osafterfork), and every worker
        # would then trust the listener and copies of the process it was forked from.
        trusted = self._trusted[0]
        if trusted is not None and trusted[1] == (os.getpid() if pid is None else pid):
            with self._lock:
                hit = self._cache.get(user_id)
                if hit is not None and time.monotonic() - hit[1] < self.max_age:
                    self._cache.move_to_end(user_id)
                    return hit[0]
        return None

    def read(self, user_id: str) -> UserState:
        hit = self.cached(user_id)
        if hit is not None:
            return hit
        pid = os.getpid()
        with self._lock:
            generation, trusted = self._generation[user_id], self._trusted[0]
        self.stats["miss"] += 1
        state = self.inner.read(user_id)
        self._ensure_threads()  # once Redis has answered: a listener for a Redis that is not there waits
        if trusted is not None and trusted[1] == pid:  # (listening, in this process's threads)
            with self._lock:
                # Nothing changed while we read: no message about the user, and the listener has
                # not lost Redis and subscribed again meanwhile (messages may have gone unheard).
                if self._generation[user_id] == generation and self._trusted[0] == trusted:
                    self._cache[user_id] = (state, time.monotonic())
                    self._cache.move_to_end(user_id)
                    while len(self._cache) > self.max_users:
                        evicted, _ = self._cache.popitem(last=False)
                        self._generation.pop(evicted, None)
        return state

    def stamp(self, user_id: str) -> tuple[int, int] | None:
        """A mark that changes whenever the user's state may have changed (a message about the
        user, a write from here, the listener losing or regaining Redis); None while nothing can
        be trusted (not listening). Recall keys its copy of the user's version on it (a stored
        memory drops its pending entry, a deletion adds a forget marker: both publish; anything
        else is seen within defaults.RECALL_VERSION_MAX_AGE)."""
        trusted = self._trusted[0]
        if trusted is None or trusted[1] != os.getpid():
            return None
        return trusted[0], self._generation[user_id]

    def invalidate(self, user_id: str) -> None:
        with self._lock:
            self._generation[user_id] = next(self._changes)
            self._cache.pop(user_id, None)

    # -- writes: through to Redis (which publishes), and dropped here at once ---------------

    # Explicit methods, not a __getattr__: a class with one has every attribute read go the slow
    # way, its own included, and this one is read several times a request.
    put_pending = _write_through("put_pending")
    replace_pending = _write_through("replace_pending")
    drop_pending = _write_through("drop_pending")
    add_forget = _write_through("add_forget")
    add_shown = _write_through("add_shown")
    #: Counts, and what jobs and the queue read: nothing cached here changes.
    add_touches = _passed_on("add_touches")
    take_touches = _passed_on("take_touches")
    drop_pending_many = _passed_on("drop_pending_many")
    forgets_of = _passed_on("forgets_of")
    flush_noted = _passed_on("flush_noted")

    @property
    def channel(self) -> str:
        return self.inner.channel

    # -- the listener and the sender -------------------------------------------------------

    def _ensure_threads(self) -> None:
        if self._threads_pid == os.getpid():
            return
        with self._start_lock:
            if self._threads_pid == os.getpid():
                return
            # After a fork: this process starts with nothing it could trust.
            self._listening(False)
            self._threads_pid = os.getpid()
            ref = weakref.ref(self)
            threading.Thread(target=_listen, args=(ref,), name="memo-mw-state-listener", daemon=True).start()
            threading.Thread(target=_send, args=(ref,), name="memo-mw-count-sender", daemon=True).start()

    def _listening(self, listening: bool) -> None:
        """Trust this process's copies from now on (the listener has subscribed) or no longer (it
        lost Redis, or this is a forked process): either way nothing cached before is used again."""
        with self._lock:
            self._cache.clear()
            self._epoch += 1
            self.listening = listening
            self._trusted[0] = (self._epoch, self._threads_pid) if listening else None

    def send_counts(self) -> None:
        """Send the noted topic counts and the backend's recall counts now."""
        self.inner.flush_noted()
        if self._on_send is not None:
            self._on_send()

    def close(self) -> None:
        self._stop.set()
        try:
            self.send_counts()
        except Exception:
            log.debug("memo-mw: counts not sent at close", exc_info=True)


def _listen(ref: weakref.ref) -> None:
    """Subscribe, and drop each user named on the channel; resubscribe after a failure."""
    backoff = 0.1
    while True:
        cache = ref()
        if cache is None or cache._stop.is_set():
            return
        pubsub = cache.inner.connection.pubsub(ignore_subscribe_messages=True)
        channel = cache.inner.channel
        del cache
        try:
            pubsub.subscribe(channel)
            pubsub.get_message(timeout=1.0)  # the subscribe confirmation: from now on nothing is missed
            cache = ref()
            if cache is None:
                return
            cache._listening(True)
            del cache
            backoff = 0.1
            while True:
                message = pubsub.get_message(timeout=1.0)
                cache = ref()
                if cache is None or cache._stop.is_set():
                    return
                if message is not None and message.get("type") == "message":
                    cache.invalidate(message["data"].decode("utf-8", "replace"))
                del cache
        except Exception as exc:  # Redis gone: serve nothing from the cache until resubscribed
            cache = ref()
            if cache is None:
                return
            cache._listening(False)
            stop = cache._stop
            del cache
            log.debug("memo-mw: state listener lost Redis (%s); retrying", exc)
            if stop.wait(backoff):
                return
            backoff = min(backoff * 2, 5.0)
        finally:
            try:
                pubsub.close()
            except Exception:
                pass


def _send(ref: weakref.ref) -> None:
    while True:
        cache = ref()
        if cache is None:
            return
        stop, interval = cache._stop, cache.send_interval
        del cache
        if stop.wait(interval):
            return
        cache = ref()
        if cache is None:
            return
        try:
            cache.send_counts()
        except Exception as exc:  # Redis down: the counts wait for the next round
            log.debug("memo-mw: counts not sent (%s)", exc)
        del cache
