"""Where the middleware sends work: rq on Redis, or a thread in this process (embedded mode). Both take
``enqueue(func, args, job_id=, user_id=, pending=)``; with Redis the job and the pending payload go in one
MULTI/EXEC, jobs wait in the spool (:mod:`memo_mw.spool`) while Redis is down and one thread sends them
once it answers; a job neither takes is logged with the user id and counted in ``stats["lost"]``."""

import collections
import logging
import queue
import threading
from collections.abc import Iterable
from typing import Any

import redis
from rq import Queue, Retry
from rq.serializers import JSONSerializer
from rq.utils import import_attribute

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

#: Seconds before each retry of a failed job (run by the scheduler of ``memo-mw worker``): a
#: database locked by another writer is free again in seconds; a broken one needs a person.
RETRY_INTERVALS = (5, 60, 600)

class Counters(collections.Counter):
    """A queue's ``stats``: counts kept by several threads (requests, the spool's), so under a lock."""

    def __init__(self, *counts: Any) -> None:  # (Counter.copy passes the counts)
        super().__init__(*counts)
        self._lock = threading.Lock()

    def add(self, name: str, n: int = 1) -> None:
        with self._lock:
            self[name] += n


class RedisQueue:
    """rq on Redis, with the spool while Redis is down.

    :param retry_intervals: seconds before each retry of a failed job (as many retries).
    :param spool_interval: seconds between the spool thread's tries while Redis is down."""

    def __init__(self, url: str, *, name: str = defaults.QUEUE_NAME, spool: str,
                 timeout: float = defaults.REDIS_TIMEOUT, cooldown: float = defaults.REDIS_COOLDOWN,
                 retry_intervals: Iterable[int] = RETRY_INTERVALS,
                 spool_interval: float = defaults.SPOOL_RETRY_INTERVAL):
        self.connection = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        self.rq = Queue(name, connection=self.connection, serializer=JSONSerializer)
        #: After a failure, requests skip Redis for ``cooldown`` seconds instead of waiting on it.
        self.breaker = CircuitBreaker(cooldown=cooldown)
        self.state = RedisState(self.connection, name, self.breaker)
        self.spool, self.spool_interval = Spool(spool), spool_interval
        intervals = list(retry_intervals)
        self.retry = Retry(max=len(intervals), interval=intervals) if intervals else None
        #: ``spooled``, ``sent_from_spool``, ``lost``: jobs by where they went.
        self.stats = Counters()
        self._drain_lock = threading.Lock()
        self._drainer: threading.Thread | None = None
        self._closing = threading.Event()
        try:
            if len(self.spool):  # left by a process that stopped while Redis was down
                self._start_drain()
        except Exception:  # a fallback that cannot be read must not stop the chat app from starting
            log.warning("memo-mw: could not read the spool %s", self.spool.path, exc_info=True)

    def enqueue(self, func: str, args: list[Any], *, job_id: str | None = None, user_id: str | None = None,
                pending: dict[str, Any] | None = None) -> None:
        job = {"func": func, "args": args, "job_id": job_id, "user_id": user_id, "pending": pending}
        # While this process sends its spool, new jobs queue behind it: a statement must not
        # overtake an older one on the same slot (the one stored last wins).
        if self._drainer is None and self.breaker.allow() and self._send([job]):
            return
        try:
            self.spool.put(job)
        except Exception:
            log.exception("memo-mw: could not spool a %s job; trying Redis once more", func)
            if self._send([job]):
                return
            self.stats.add("lost")
            log.error("memo-mw: lost a %s job of user %r: neither Redis nor the spool %s took it",
                      func, user_id, self.spool.path)
            return
        self.stats.add("spooled")
        self._start_drain()

    def forget_spooled(self, user_id: str, marker: dict[str, Any]) -> int:
        """Take what a forget request names out of the user's capture jobs waiting in the spool;
        how many changed (a job left with nothing to store is dropped)."""
        def change(job: dict[str, Any]) -> dict[str, Any] | None:
            if job["func"] != REMEMBER or job["user_id"] != user_id:
                return job
            kept = without_forgotten(job["args"][1], [marker])
            if not kept["candidates"] and not kept.get("history"):
                return None
            return {**job, "args": [job["args"][0], kept], "pending": pending_part(kept)}
        return self.spool.rewrite(change)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the spool thread (a clean shutdown, tests); its jobs wait in the spool file for the next process."""
        self._closing.set()
        if (drainer := self._drainer) is not None:
            drainer.join(timeout)
        self._drainer = None

    def _send(self, jobs: list[dict[str, Any]]) -> bool:
        try:
            with self.connection.pipeline() as pipe:
                # rq's enqueue_call makes the pipeline a MULTI/EXEC transaction, which redis-py
                # allows only while nothing is queued on it: start it before the first command.
                pipe.multi()
                for job in jobs:
                    self.rq.enqueue_call(job["func"], args=job["args"], job_id=job["job_id"], pipeline=pipe,
                                         retry=self.retry, result_ttl=0, failure_ttl=defaults.JOB_FAILURE_TTL)
                    if job["pending"]:
                        self.state.put_pending(job["user_id"], job["pending"], pipe=pipe)
                pipe.execute()
        except (redis.RedisError, OSError) as exc:  # unreachable, hung, or refusing the write (ResponseError)
            self.breaker.failure()
            log.warning("memo-mw: Redis did not take %d job(s): %s", len(jobs), exc)
            return False
        self.breaker.success()
        return True

    def _start_drain(self) -> None:
        with self._drain_lock:
            if not self._closing.is_set() and (self._drainer is None or not self._drainer.is_alive()):
                self._drainer = threading.Thread(target=self._drain, name="memo-mw-spool", daemon=True)
                self._drainer.start()

    def _drain(self) -> None:
        """Send the spooled jobs, oldest first, until none is left (or :meth:`close`); then end. Jobs Redis
        took that the spool cannot delete (a full disk) are not sent again by this thread: it goes on
        with the rest and ends, and new jobs go straight to Redis."""
        unremoved: list[int] = []
        while not self._closing.is_set():
            try:
                with self._drain_lock:  # "none left" and "no thread" change together
                    batch = self.spool.peek(after=max(unremoved, default=0))
                    if not batch:
                        self._drainer = None
                        return
                if self.breaker.allow() and self._send([job for _, job in batch]):
                    # Removed only once Redis took them: a process that dies in between sends
                    # them again, which their job ids make harmless.
                    self.stats.add("sent_from_spool", len(batch))
                    unremoved += [i for i, _ in batch]
                    self.spool.remove(unremoved)
                    unremoved = []
                    continue
            except Exception:  # e.g. the spool file went bad: the thread must not die with jobs left
                log.exception("memo-mw: could not send the spool %s; trying again", self.spool.path)
            self._closing.wait(self.spool_interval)


class LocalQueue:
    """Embedded mode: jobs run one at a time on one thread of this process, started on first use."""

    def __init__(self) -> None:
        self.state = LocalState()
        self.stats = Counters()  #: ``failed``: jobs that raised (each logged with its user id).
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

    close = join  # a clean shutdown lets the jobs enqueued so far finish (RedisQueue.close stops its spool thread)

    def _run(self) -> None:
        while True:
            func, args, user_id, pending = self._jobs.get()
            try:
                import_attribute(func)(*args)
                if pending:
                    self.state.drop_pending(user_id, [pending["job_key"]])
            except Exception:  # (no retries here: a database that cannot be written loses the job, counted)
                self.stats.add("failed")
                log.exception("memo-mw: the %s job of user %r failed and is lost (embedded mode does not retry)",
                              func, user_id)
            finally:
                self._jobs.task_done()


def pending_part(payload: dict[str, Any]) -> dict[str, Any] | None:
    """What of a capture job recall shows before it runs: its candidates (not the history text), or None."""
    return {k: v for k, v in payload.items() if k != "history"} if payload.get("candidates") else None


def make_queue(redis_url: str | None, *, name: str = defaults.QUEUE_NAME, spool: str) -> RedisQueue | LocalQueue:
    return RedisQueue(redis_url, name=name, spool=spool) if redis_url else LocalQueue()
