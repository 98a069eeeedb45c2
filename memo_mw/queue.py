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
import time
from typing import Any, Protocol

from . import defaults

#: The jobs the middleware enqueues, by dotted path (functions in memo_mw.jobs).
REMEMBER = "memo_mw.jobs.remember"
TOUCH = "memo_mw.jobs.touch"
FORGET = "memo_mw.jobs.forget"

log = logging.getLogger(__name__)


class Backend(Protocol):
    def enqueue(self, func: str, args: list[Any], *, job_id: str | None = None) -> bool:
        """Queue ``func(*args)``; False when it was not queued (duplicate id)."""

    # Read-your-own-writes: a remember payload is "pending" from its enqueue until its job
    # has stored it (or PENDING_TTL has passed), and recall merges pending memories in.
    def add_pending(self, user_id: str, payload: dict[str, Any]) -> None: ...

    def pending(self, user_id: str) -> list[dict[str, Any]]: ...

    def drop_pending(self, user_id: str, job_keys: list[str] | None = None) -> None:
        """Drop these pending payloads of the user (all of them when ``job_keys`` is None)."""

    def close(self) -> None: ...


def pending_key(queue_name: str, user_id: str) -> str:
    """The Redis hash of a user's pending remember payloads: job key -> JSON payload."""
    return f"memo:pending:{queue_name}:{user_id}"


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
        from rq import Queue, Retry

        self.connection = redis.Redis.from_url(
            redis_url, socket_connect_timeout=timeout, socket_timeout=timeout)
        self.queue = Queue(queue_name, connection=self.connection, serializer=defaults.SERIALIZER)
        self.queue_name = queue_name
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

    def add_pending(self, user_id: str, payload: dict[str, Any]) -> None:
        key = pending_key(self.queue_name, user_id)
        with self.connection.pipeline() as pipe:
            pipe.hset(key, payload["job_key"], json.dumps(payload))
            pipe.expire(key, defaults.PENDING_TTL)
            pipe.execute()

    def pending(self, user_id: str) -> list[dict[str, Any]]:
        return [json.loads(v) for v in self.connection.hvals(pending_key(self.queue_name, user_id))]

    def drop_pending(self, user_id: str, job_keys: list[str] | None = None) -> None:
        key = pending_key(self.queue_name, user_id)
        if job_keys is None:
            self.connection.delete(key)
        elif job_keys:
            self.connection.hdel(key, *job_keys)

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
        self._pending: dict[str, dict[str, tuple[float, dict[str, Any]]]] = {}
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

    def add_pending(self, user_id: str, payload: dict[str, Any]) -> None:
        with self._lock:
            self._pending.setdefault(user_id, {})[payload["job_key"]] = (time.monotonic(), payload)

    def pending(self, user_id: str) -> list[dict[str, Any]]:
        oldest = time.monotonic() - defaults.PENDING_TTL
        with self._lock:
            entries = self._pending.get(user_id, {})
            return [payload for added, payload in entries.values() if added >= oldest]

    def drop_pending(self, user_id: str, job_keys: list[str] | None = None) -> None:
        with self._lock:
            if job_keys is None:
                self._pending.pop(user_id, None)
                return
            entries = self._pending.get(user_id, {})
            for job_key in job_keys:
                entries.pop(job_key, None)
            if not entries:
                self._pending.pop(user_id, None)

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
                    self.drop_pending(args[1]["user_id"], [args[1]["job_key"]])
            except Exception:
                log.exception("memo-mw: job %s failed", func)
            finally:
                self._jobs.task_done()


def make_backend(redis_url: str | None, *, queue_name: str = defaults.QUEUE_NAME) -> Backend:
    return RQBackend(redis_url, queue_name=queue_name) if redis_url else ThreadBackend()
