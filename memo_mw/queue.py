"""Where the middleware sends work: RQ on Redis, or an in-process thread when no Redis is set.

Both backends take the same call: a job function's dotted path, its JSON arguments
and an optional job id. A job id seen before is not enqueued again, so a retried
request does not make a second job.
"""

from __future__ import annotations

import collections
import importlib
import io
import json
import logging
import pickle
import queue as stdlib_queue
import threading
from typing import Any, Protocol

from . import defaults
from .text import stable_id
from .statecache import CachedUserState
from .userstate import LocalUserState, RedisUserState

#: The jobs the middleware enqueues, by dotted path (functions in memo_mw.jobs).
REMEMBER = "memo_mw.jobs.remember"
TOUCH = "memo_mw.jobs.touch"
FLUSH_TOUCHES = "memo_mw.jobs.flush_touches"
FORGET = "memo_mw.jobs.forget"

log = logging.getLogger(__name__)


class Backend(Protocol):
    #: The short-lived per-user state shared with the jobs (memo_mw.userstate).
    state: RedisUserState | LocalUserState

    def enqueue(self, func: str, args: list[Any], *, job_id: str | None = None,
                pending: dict[str, Any] | None = None) -> bool:
        """Queue ``func(*args)``; False when it was not queued (duplicate id). ``pending``: a
        remember payload to show as the user's pending memory until its job has stored it."""

    def touch(self, db: str, user_id: str, ids: list[int], ts: float) -> None:
        """Count a recall of these stored memories (hits, last_accessed), by a job."""

    def flush(self) -> None:
        """Send what is gathered in this process (counts) now rather than in the background."""

    def close(self) -> None: ...


class JobSerializer:
    """rq serializer: JSON for every job memo-mw enqueues.

    ``rq cron`` enqueues with rq's default (pickle) serializer, so the maintenance job it
    schedules arrives pickled. Those are read with an unpickler that refuses every import:
    only plain values (strings, numbers, tuples, dicts) can load, never an object.
    """

    @staticmethod
    def dumps(obj: Any) -> bytes:
        return json.dumps(obj).encode("utf-8")

    @staticmethod
    def loads(data: bytes) -> Any:
        if data[:1] == b"\x80":  # the pickle protocol marker
            return _PlainUnpickler(io.BytesIO(data)).load()
        return json.loads(data.decode("utf-8"))


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"memo-mw jobs carry plain values only, not {module}.{name}")


def import_function(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


class RQBackend:
    """Jobs on the ``memo`` queue of a Redis server, run by ``memo-mw worker`` (or ``rq worker``)."""

    def __init__(self, redis_url: str, *, queue_name: str = defaults.QUEUE_NAME,
                 timeout: float = defaults.REDIS_TIMEOUT):
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry as RedisRetry
        from rq import Queue, Retry

        # One attempt per call, bounded by the timeout: no retries inside redis-py. A failure
        # is the circuit breaker's to handle (memo_mw.outbox), not the chat request's to wait on.
        self.connection = redis.Redis.from_url(
            redis_url, socket_connect_timeout=timeout, socket_timeout=timeout,
            retry=RedisRetry(NoBackoff(), 0))
        self.queue = Queue(queue_name, connection=self.connection, serializer=defaults.SERIALIZER)
        # The users' state, read from this process while unchanged (memo_mw.statecache); its
        # sender thread also sends the recall counts gathered here, off the request path.
        self.state = CachedUserState(RedisUserState(self.connection, queue_name), on_send=self.send_touches)
        # Retries cover a worker that died or a database that stayed locked; rq runs them
        # from its scheduler (`memo-mw worker` starts one; plain rq needs --with-scheduler).
        self._retry = Retry(max=3, interval=[1, 10, 60])
        self._touches: dict[tuple[str, str], tuple[collections.Counter, float]] = {}
        self._touches_lock = threading.Lock()
        self._enqueue_script = self.connection.register_script(_ENQUEUE_SCRIPT)

    def enqueue(self, func: str, args: list[Any], *, job_id: str | None = None,
                pending: dict[str, Any] | None = None) -> bool:
        """Queue the job; with ``pending`` (a remember payload), also make it the user's pending
        memory. A job with an id takes one round trip, whatever else it carries (a Lua script:
        the pending entry, its change message, and the job unless one with its id waits)."""
        if job_id is not None:
            return self._enqueue_unique(func, args, job_id, pending)
        if pending is not None:
            self.state.put_pending(pending["user_id"], pending)
        from rq.exceptions import DuplicateJobError

        try:
            # The description is what rq logs and shows: the function only, never the
            # memory text in the arguments. No result is kept (result_ttl=0): a finished
            # job leaves nothing in Redis, and a repeated one is recognised by the store.
            self.queue.enqueue(func, *args, job_id=job_id, unique=job_id is not None, description=func,
                               result_ttl=0, failure_ttl=defaults.JOB_FAILURE_TTL, retry=self._retry)
        except DuplicateJobError:
            log.debug("memo-mw: job %s already queued; not queued twice", job_id)
            return False
        return True

    def _enqueue_unique(self, func: str, args: list[Any], job_id: str, pending: dict[str, Any] | None) -> bool:
        from rq.job import Job

        job = Job.create(func, args=args, connection=self.connection, id=job_id, description=func, result_ttl=0,
                         failure_ttl=defaults.JOB_FAILURE_TTL, retry=self._retry,
                         serializer=self.queue.serializer)
        self.queue._prepare_for_queue(job)  # origin, enqueue time, timeout, status: as queue.enqueue does
        fields = [x for key, value in job.to_dict().items() if value is not None
                  for x in (key, value if isinstance(value, (bytes, str)) else str(value))]
        inner = self.state.inner
        user = pending["user_id"] if pending is not None else ""
        if pending is not None:
            self.state.invalidate(user)
        queued = self._enqueue_script(
            keys=[job.key, self.queue.key, self.queue.redis_queues_keys, inner._key("pending", user)],
            args=[job_id, job.ttl if job.ttl is not None else -1,
                  pending["job_key"] if pending is not None else "",
                  json.dumps(pending) if pending is not None else "", defaults.PENDING_TTL, inner.channel, user,
                  *fields])
        if pending is not None:
            self.state.invalidate(user)
        if not queued:
            log.debug("memo-mw: job %s already queued; not queued twice", job_id)
        return bool(queued)

    def touch(self, db: str, user_id: str, ids: list[int], ts: float) -> None:
        """Count a recall: kept here, sent within a second by the state's sender thread (to the
        user's counts in Redis, applied by one flush job per user). No I/O on the request."""
        with self._touches_lock:
            counts, _ = self._touches.get((db, user_id)) or (collections.Counter(), ts)
            counts.update(ids)
            self._touches[(db, user_id)] = (counts, ts)

    def send_touches(self) -> None:
        """Send the gathered recall counts: each user's added in Redis, and a flush job queued
        unless one already waits (many recalls make one SQLite write)."""
        with self._touches_lock:
            touches, self._touches = self._touches, {}
        for (db, user_id), (counts, ts) in touches.items():
            self.state.add_touches(user_id, counts, ts)
            self.enqueue(FLUSH_TOUCHES, [db, user_id], job_id="memo-touches-" + stable_id(self.queue.name, user_id))

    def flush(self) -> None:
        """Send what this process has gathered (recall and topic counts) now, not within the second."""
        self.state.send_counts()

    def close(self) -> None:
        self.state.close()  # sends what is counted
        self.connection.close()


#: One round trip for a captured message: its pending entry (and the message that it changed),
#: then the job as rq's unique enqueue saves it: refused while a job with its id exists.
_ENQUEUE_SCRIPT = """
redis.call("SADD", KEYS[3], KEYS[2])
if ARGV[3] ~= "" then
    redis.call("HSET", KEYS[4], ARGV[3], ARGV[4])
    redis.call("EXPIRE", KEYS[4], ARGV[5])
    redis.call("PUBLISH", ARGV[6], ARGV[7])
end
if redis.call("EXISTS", KEYS[1]) == 1 then
    return 0
end
redis.call("HSET", KEYS[1], unpack(ARGV, 8))
local ttl = tonumber(ARGV[2])
if ttl and ttl > 0 then
    redis.call("EXPIRE", KEYS[1], ttl)
end
redis.call("RPUSH", KEYS[2], ARGV[1])
return 1
"""


class ThreadBackend:
    """The embedded default: the same job functions, run one at a time on a daemon thread.

    Good for a demo, a test or a single-process app. Jobs still queued when the
    process exits are lost, which is why production should run Redis and a worker.
    """

    _warned = False
    _SEEN_IDS = 10_000

    def __init__(self) -> None:
        self._jobs: stdlib_queue.Queue = stdlib_queue.Queue()
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()
        self.state = LocalUserState(enqueue=self.enqueue)  # topic counts: a job on this thread
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="memo-mw-jobs", daemon=True)
        self._thread.start()
        if not ThreadBackend._warned:
            ThreadBackend._warned = True
            log.warning("memo-mw: no redis_url given; running memory jobs on an in-process thread. "
                        "In production set redis_url and run `memo-mw worker`.")

    def enqueue(self, func: str, args: list[Any], *, job_id: str | None = None,
                pending: dict[str, Any] | None = None) -> bool:
        if pending is not None:
            self.state.put_pending(pending["user_id"], pending)
        if job_id is not None:
            with self._lock:
                if job_id in self._seen:
                    return False
                self._seen[job_id] = None
                if len(self._seen) > self._SEEN_IDS:
                    self._seen.popitem(last=False)
        self._jobs.put((func, args))
        return True

    def touch(self, db: str, user_id: str, ids: list[int], ts: float) -> None:
        """Count a recall: one job on the thread (in one process there is nothing to batch)."""
        self.enqueue(TOUCH, [db, user_id, ids, int(ts)])

    def flush(self) -> None:
        """Everything queued here has run (the thread has nothing gathered to send)."""
        self.join()

    def join(self) -> None:
        """Block until every queued job has run (for tests and orderly shutdown)."""
        self._jobs.join()

    def close(self) -> None:
        self.join()

    def _run(self) -> None:
        while True:
            func, args = self._jobs.get()
            try:
                import_function(func)(*args)
                if func == REMEMBER:  # stored: no longer pending
                    self.state.drop_pending(args[1]["user_id"], args[1]["job_key"])
            except Exception:
                log.exception("memo-mw: job %s failed", func)
            finally:
                self._jobs.task_done()


def make_backend(redis_url: str | None, *, queue_name: str = defaults.QUEUE_NAME,
                 outbox: str | None = None) -> Backend:
    """RQ on ``redis_url`` (behind a circuit breaker, with ``outbox`` for when Redis is down), else a thread."""
    if not redis_url:
        return ThreadBackend()
    backend = RQBackend(redis_url, queue_name=queue_name)
    if outbox is None:
        return backend
    from .outbox import Outbox, ResilientBackend

    return ResilientBackend(backend, Outbox(outbox))
