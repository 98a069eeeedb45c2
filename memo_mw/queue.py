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

    def enqueue(self, func: str, args: list[Any], *, job_id: str | None = None) -> bool:
        """Queue ``func(*args)``; False when it was not queued (duplicate id)."""

    def touch(self, db: str, user_id: str, ids: list[int], ts: float) -> None:
        """Count a recall of these stored memories (hits, last_accessed), by a job."""

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
        self.state = RedisUserState(self.connection, queue_name)
        # Retries cover a worker that died or a database that stayed locked; rq runs them
        # from its scheduler (`memo-mw worker` starts one; plain rq needs --with-scheduler).
        self._retry = Retry(max=3, interval=[1, 10, 60])

    def enqueue(self, func: str, args: list[Any], *, job_id: str | None = None) -> bool:
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

    def touch(self, db: str, user_id: str, ids: list[int], ts: float) -> None:
        """Count a recall: added to the user's counts in Redis, applied by one flush job per user.

        While a flush job of the user waits in the queue, no second one is queued (the same
        job id): many recalls make one SQLite write.
        """
        self.state.add_touches(user_id, ids, ts)
        self.enqueue(FLUSH_TOUCHES, [db, user_id], job_id="memo-touches-" + stable_id(self.queue.name, user_id))

    def close(self) -> None:
        self.connection.close()


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

    def enqueue(self, func: str, args: list[Any], *, job_id: str | None = None) -> bool:
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
