"""Where the middleware sends work: rq on Redis, or a thread in this process (embedded mode).

Both take the same call, ``enqueue(func, args, job_id=..., user_id=..., pending=...)``: a job
function's dotted path (:mod:`memo_mw.jobs`), its JSON arguments, an id that makes a retried
request harmless, and, for a capture, the payload the user's state holds as pending until the
job has stored it (read-your-own-writes). Each queue has a ``state`` (:mod:`memo_mw.state`).

With Redis, the pending payload and the rq job go in one pipeline: one round trip. When Redis
cannot be reached, the job goes to the spool (:mod:`memo_mw.spool`), and one thread sends the
spooled jobs once Redis answers, then ends. A capture is never silently dropped: if the spool
cannot be written either, the job is tried on Redis once more; if both fail, the loss is logged
with the user id and counted in ``stats["lost"]``.
"""

from __future__ import annotations

import collections
import importlib
import logging
import queue
import threading
import time
from typing import Any

import redis
from rq import Queue, Retry
from rq.serializers import JSONSerializer

from . import defaults
from .breaker import CircuitBreaker
from .forgetting import without_forgotten
from .spool import Spool
from .state import LocalState, RedisState

log = logging.getLogger(__name__)

REMEMBER = "memo_mw.jobs.remember"
FORGET = "memo_mw.jobs.forget"
TOUCH = "memo_mw.jobs.touch"
COUNT_TOPICS = "memo_mw.jobs.count_topics"

#: What an unreachable or failing Redis raises.
REDIS_ERRORS = (redis.ConnectionError, redis.TimeoutError, redis.ResponseError, OSError)


def import_function(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


class RedisQueue:
    """rq on Redis, with the spool while Redis is down."""

    def __init__(self, url: str, *, name: str = defaults.QUEUE_NAME, spool: str,
                 timeout: float = defaults.REDIS_TIMEOUT, cooldown: float = defaults.REDIS_COOLDOWN):
        self.connection = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        self.rq = Queue(name, connection=self.connection, serializer=JSONSerializer)
        self.state = RedisState(self.connection, name)
        self.spool = Spool(spool)
        #: After a failure, requests skip Redis for ``cooldown`` seconds instead of waiting on it.
        self.breaker = CircuitBreaker(cooldown=cooldown)
        self.stats: collections.Counter[str] = collections.Counter()
        self._drain_lock = threading.Lock()
        self._drainer: threading.Thread | None = None
        if len(self.spool):  # left by a process that stopped while Redis was down
            self._start_drain()

    def enqueue(self, func: str, args: list[Any], *, job_id: str | None = None, user_id: str | None = None,
                pending: dict[str, Any] | None = None) -> None:
        job = {"func": func, "args": args, "job_id": job_id, "user_id": user_id, "pending": pending}
        if self.breaker.allow() and self._try_send([job]):
            return
        try:
            self.spool.put(job)
        except Exception:
            log.exception("memo-mw: could not spool a %s job; trying Redis once more", func)
            if self._try_send([job]):
                return
            self.stats["lost"] += 1
            log.error("memo-mw: lost a %s job of user %r: neither Redis nor the spool took it", func, user_id)
            return
        self.stats["spooled"] += 1
        self._start_drain()

    def forget_spooled(self, user_id: str, marker: dict[str, Any]) -> int:
        """Take what a forget request names out of the user's capture jobs waiting in the spool."""
        def change(job: dict[str, Any]) -> dict[str, Any] | None:
            if job["func"] != REMEMBER or job["user_id"] != user_id:
                return job
            kept = without_forgotten(job["args"][1], [marker])
            if not kept["candidates"]:
                return None
            return {**job, "args": [job["args"][0], kept], "pending": kept}
        return self.spool.rewrite(change) if len(self.spool) else 0

    def _try_send(self, jobs: list[dict[str, Any]]) -> bool:
        try:
            with self.connection.pipeline(transaction=False) as pipe:
                for job in jobs:
                    if job["pending"]:
                        self.state.put_pending(job["user_id"], job["pending"], pipe=pipe)
                    self.rq.enqueue_call(job["func"], args=job["args"], job_id=job["job_id"], pipeline=pipe,
                                         retry=Retry(max=3, interval=[5, 60, 600]),
                                         failure_ttl=defaults.JOB_FAILURE_TTL)
                pipe.execute()
        except REDIS_ERRORS as exc:
            self.breaker.failure()
            log.warning("memo-mw: Redis did not take %d job(s): %s", len(jobs), exc)
            return False
        self.breaker.success()
        return True

    def _start_drain(self) -> None:
        with self._drain_lock:
            if self._drainer is None or not self._drainer.is_alive():
                self._drainer = threading.Thread(target=self._drain, name="memo-mw-spool", daemon=True)
                self._drainer.start()

    def _drain(self) -> None:
        """Send the spooled jobs, oldest first, until none is left; then end."""
        while True:
            with self._drain_lock:
                batch = self.spool.peek()
                if not batch:
                    self._drainer = None
                    return
            if self.breaker.allow() and self._try_send([job for _, job in batch]):
                self.spool.remove([i for i, _ in batch])
                self.stats["sent_from_spool"] += len(batch)
            else:
                time.sleep(defaults.SPOOL_RETRY_INTERVAL)


class LocalQueue:
    """Embedded mode: jobs run one at a time on one thread of this process, started on first use."""

    def __init__(self) -> None:
        self.state = LocalState()
        self.stats: collections.Counter[str] = collections.Counter()
        self._jobs: queue.Queue[tuple[str, list[Any], str | None, dict | None]] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def enqueue(self, func: str, args: list[Any], *, job_id: str | None = None, user_id: str | None = None,
                pending: dict[str, Any] | None = None) -> None:
        if pending:
            self.state.put_pending(user_id, pending)
        self._jobs.put((func, args, user_id, pending))
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="memo-mw-jobs", daemon=True)
                self._thread.start()

    def join(self) -> None:
        """Wait until every job enqueued so far has run (tests, the CLI, a clean shutdown)."""
        self._jobs.join()

    def _run(self) -> None:
        while True:
            func, args, user_id, pending = self._jobs.get()
            try:
                import_function(func)(*args)
                if pending:
                    self.state.drop_pending(user_id, [pending["job_key"]])
            except Exception:
                self.stats["failed"] += 1
                log.exception("memo-mw: the %s job failed", func)
            finally:
                self._jobs.task_done()


def make_queue(redis_url: str | None, *, name: str = defaults.QUEUE_NAME, spool: str) -> RedisQueue | LocalQueue:
    return RedisQueue(redis_url, name=name, spool=spool) if redis_url else LocalQueue()
