"""Short-lived per-user state between a request and the jobs it queued (at most PENDING_TTL seconds): **pending**
payloads not stored yet (recall merges them in: read-your-own-writes), recent **forget** markers (recall hides
what they name until the forget job has run), and the expired memories recall has **shown** once.
:class:`RedisState` (one hash per user, one round trip) and :class:`LocalState` (a dict) share one interface."""

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import redis

from . import defaults
from .forgetting import without_forgotten


@dataclass(frozen=True)
class UserState:
    pending: tuple[dict[str, Any], ...] = ()
    forgets: tuple[dict[str, Any], ...] = ()
    shown: frozenset[int] = field(default_factory=frozenset)


EMPTY = UserState()

# Redis scripts: replace a pending payload only while it is there (its job may have stored it and
# dropped it meanwhile; putting it back would hold text that is no longer pending).
_REPLACE_PENDING = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if ARGV[2] == '' then redis.call('HDEL', KEYS[1], ARGV[1]) else redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 1
"""


class RedisState:
    """The users' state in Redis: ``memo:user:<queue>:<user id>``, a hash of ``p:<job key>``
    (pending payloads), ``f:<id>`` (forget markers) and ``s:<memory id>`` (shown), expiring
    PENDING_TTL after its last write. With a ``breaker`` (the web process's), a call while Redis
    is skipped after a failure does not wait on it: a read finds no state, a write raises."""

    def __init__(self, connection: Any, namespace: str = defaults.QUEUE_NAME, breaker: Any = None):
        self.connection, self.namespace, self.breaker = connection, namespace, breaker
        self._replace = connection.register_script(_REPLACE_PENDING)

    def key(self, user_id: str) -> str:
        return f"memo:user:{self.namespace}:{user_id}"

    def read(self, user_id: str) -> UserState:
        return self._guarded(lambda: _state({name.decode("utf-8"): json.loads(value) for name, value
                                             in self.connection.hgetall(self.key(user_id)).items()}), skipped=EMPTY)

    def put_pending(self, user_id: str, payload: dict[str, Any], *, pipe: Any = None) -> None:
        """Add a pending payload; with ``pipe``, only queued on the caller's pipeline."""
        self._write(user_id, {"p:" + payload["job_key"]: json.dumps(payload)}, pipe)

    def drop_pending(self, user_id: str, job_keys: Iterable[str]) -> None:
        if fields := ["p:" + k for k in job_keys]:
            self._guarded(lambda: self.connection.hdel(self.key(user_id), *fields))

    def add_forget(self, user_id: str, marker: dict[str, Any]) -> None:
        """Record a forget marker, and take what it names out of the pending payloads."""
        self._write(user_id, {f"f:{uuid.uuid4().hex}": json.dumps(marker)})
        for payload in self.read(user_id).pending:
            kept = without_forgotten(payload, [marker])
            if kept["candidates"] != payload.get("candidates"):
                self._guarded(lambda: self._replace(keys=[self.key(user_id)], args=[
                    "p:" + payload["job_key"], json.dumps(kept) if kept["candidates"] else ""]))

    def add_shown(self, user_id: str, ids: Iterable[int]) -> None:
        if fields := {f"s:{int(i)}": 1 for i in ids}:  # HSET takes at least one field
            self._write(user_id, fields)

    def _write(self, user_id: str, fields: dict[str, Any], pipe: Any = None) -> None:
        """Set the user's fields and renew the expiry of the hash (on ``pipe``: only queued)."""
        target = self.connection.pipeline(transaction=False) if pipe is None else pipe
        target.hset(self.key(user_id), mapping=fields)
        target.expire(self.key(user_id), defaults.PENDING_TTL)
        if pipe is None:
            self._guarded(target.execute)

    def _guarded(self, call: Callable[[], Any], skipped: Any = None) -> Any:
        if self.breaker is None:
            return call()
        if not self.breaker.allow():
            if skipped is not None:
                return skipped  # quietly: the request recalls stored memories only
            raise redis.ConnectionError("memo-mw: Redis is skipped for a while after a failure")
        try:
            result = call()
        except (redis.RedisError, OSError):
            self.breaker.failure()
            raise
        self.breaker.success()
        return result


class LocalState:
    """The users' state in this process (embedded mode), with the same expiry."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._users: dict[str, tuple[float, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def read(self, user_id: str) -> UserState:
        with self._lock:
            return _state(self._fields(user_id, create=False))

    def put_pending(self, user_id: str, payload: dict[str, Any]) -> None:
        with self._lock:
            self._fields(user_id)["p:" + payload["job_key"]] = payload

    def drop_pending(self, user_id: str, job_keys: Iterable[str]) -> None:
        with self._lock:
            fields = self._fields(user_id, create=False)
            for key in job_keys:
                fields.pop("p:" + key, None)

    def add_forget(self, user_id: str, marker: dict[str, Any]) -> None:
        with self._lock:
            fields = self._fields(user_id)
            fields[f"f:{uuid.uuid4().hex}"] = marker
            for name in [k for k in fields if k.startswith("p:")]:
                kept = without_forgotten(fields[name], [marker])
                if kept["candidates"]:
                    fields[name] = kept
                else:
                    del fields[name]

    def add_shown(self, user_id: str, ids: Iterable[int]) -> None:
        with self._lock:
            self._fields(user_id).update({f"s:{int(i)}": 1 for i in ids})

    def _fields(self, user_id: str, *, create: bool = True) -> dict[str, Any]:
        """The user's fields (under the lock); a write renews their expiry, as EXPIRE does."""
        now = self.clock()
        expires, fields = self._users.get(user_id, (0.0, {}))
        if expires <= now:
            fields = {}
            if len(self._users) > 10_000:  # drop every expired user now and then, not on every call
                self._users = {u: v for u, v in self._users.items() if v[0] > now}
        if create:
            self._users[user_id] = (now + defaults.PENDING_TTL, fields)
        elif not fields:
            self._users.pop(user_id, None)
        return fields


def _state(fields: dict[str, Any]) -> UserState:
    """A user's state from its fields: ``p:<job key>``, ``f:<id>``, ``s:<memory id>``; each in time order."""
    if not fields:
        return EMPTY
    pending = [v for k, v in fields.items() if k.startswith("p:")]
    forgets = [v for k, v in fields.items() if k.startswith("f:")]
    shown = frozenset(int(k[2:]) for k in fields if k.startswith("s:"))
    return UserState(tuple(sorted(pending, key=_ts)), tuple(sorted(forgets, key=_ts)), shown)


def _ts(item: dict[str, Any]) -> float:
    return float(item.get("received") or item.get("at") or item.get("ts") or 0)
