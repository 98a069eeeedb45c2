"""Where the middleware sends work: RQ on Redis, or an in-process thread when no Redis is set.

Both backends take the same call: a job function's dotted path, its JSON arguments
and an optional job id. A job id seen before is not enqueued again, so a retried
request does not make a second job.
"""

from __future__ import annotations

import collections
import datetime
import hashlib
import importlib
import io
import json
import logging
import pickle
import queue as stdlib_queue
import threading
import time
import zlib
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
        self._no_script = redis.exceptions.NoScriptError
        self._redis_errors_in_reply = redis.exceptions.ResponseError  # a reply, not a lost connection
        self._pending_prefix = self.state.inner._key("pending", "").encode("utf-8")
        self._fast_script = ""  # the enqueue script and the start of its command: on the first job
        self._fast_prefix = b""

    def enqueue(self, func: str, args: list[Any], *, job_id: str | None = None,
                pending: dict[str, Any] | None = None) -> bool:
        """Queue the job; with ``pending`` (a remember payload), also make it the user's pending
        memory. A job with an id takes one round trip, whatever else it carries (a Lua script:
        the pending entry, its change message, and the job unless one with its id waits)."""
        if job_id is not None:
            return self.enqueue_many([(func, args, job_id, pending)])[0]
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

    def enqueue_many(self, jobs: list[tuple[str, list[Any], str, dict[str, Any] | None]]) -> list[bool]:
        """Queue jobs with ids (``(func, args, job_id, pending)``, as :meth:`enqueue` takes them)
        in one round trip, in order (the outbox thread sends what it gathered so); for each, False
        when a job with its id was already queued.

        The job hash is the one rq's unique enqueue saves (its fields and values taken from a job
        rq built: job_template), with only what differs per job computed here: no rq Job object,
        the payload serialised once (the pending entry and the job share it), and each command
        packed in one join (redis-py packs argument by argument)."""
        commands, users = [], set()
        for func, args, job_id, pending in jobs:
            command, user = self._unique_command(func, args, job_id, pending)
            commands.append(command)
            if user is not None:
                users.add(user)
        for user in users:
            self.state.invalidate(user)
        try:
            replies = self._send_many(commands)
            if any(isinstance(r, self._no_script) for r in replies):
                # Every one of them found the script missing (it is gone for all or none): again.
                self.connection.script_load(self._fast_script)
                replies = self._send_many(commands)
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
        finally:
            for user in users:
                self.state.invalidate(user)
        for (_, _, job_id, _), reply in zip(jobs, replies):
            if not reply:
                log.debug("memo-mw: job %s already queued; not queued twice", job_id)
        return [bool(r) for r in replies]

    def _unique_command(self, func: str, args: list[Any], job_id: str, pending: dict[str, Any] | None
                        ) -> tuple[bytes, str | None]:
        """The packed EVALSHA of the enqueue script for one job, and the user whose pending entry
        it writes (None without one)."""
        prefix = self._fast_prefix or self._prepare_fast_path()
        job = job_id.encode("utf-8")
        if pending is not None:
            pending_json = json.dumps(pending)
            user = pending["user_id"]
            user_bytes = user.encode("utf-8")
            entry = (pending["job_key"].encode("utf-8"), pending_json.encode("utf-8"), user_bytes)
        else:
            pending_json, user = None, None
            user_bytes = b""
            entry = (b"", b"", b"")
        data = zlib.compress(job_data(func, args, pending, pending_json))
        parts = (b"rq:job:" + job, self._pending_prefix + user_bytes, job, *entry, b"%d" % defaults.PENDING_TTL,
                 func.encode("utf-8"), data, utcnow().encode("ascii"))
        command = b"".join([b"*%d\r\n" % (5 + len(parts)), prefix,
                            *[b"$%d\r\n%s\r\n" % (len(part), part) for part in parts]])
        return command, user

    def _send_many(self, commands: list[bytes]) -> list[Any]:
        """Packed commands written at once on one pooled connection, and every reply read (an
        error reply is returned in its place, not raised, so the connection stays in step)."""
        pool = self.connection.connection_pool
        conn = pool.get_connection()
        try:
            conn.send_packed_command(commands)
            replies = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except self._redis_errors_in_reply as exc:
                    replies.append(exc)
            return replies
        finally:
            pool.release(conn)

    def _prepare_fast_path(self) -> bytes:
        """Make the enqueue script, rq's job template in it: on the first job, not at start-up
        (rq's preparation of a job asks the server's version, and Redis may be down then)."""
        script = enqueue_script(job_template(self.queue, self._retry), self.state.inner.channel)
        sha = hashlib.sha1(script.encode("utf-8")).hexdigest()
        self._fast_script = script
        # The command's first five parts: EVALSHA, the script, the number of keys (4), and the
        # queue's two keys (the job's and the user's follow).
        head = (b"EVALSHA", sha.encode("ascii"), b"4", self.queue.key.encode("utf-8"),
                self.queue.redis_queues_keys.encode("utf-8"))
        self._fast_prefix = b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in head)
        return self._fast_prefix

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


#: The fields of rq's job hash that differ from job to job; every other field of a memo-mw job
#: has the value rq gives it for any job (job_template).
VARYING_FIELDS = ("created_at", "data", "description", "enqueued_at")


def job_template(queue: Any, retry: Any) -> list[tuple[str, bytes | None]]:
    """The hash rq 3 saves for a job memo-mw enqueues, field by field in rq's order, as redis-py
    would send it: a job built by rq itself (``Job.create`` and the queue's own preparation, with
    the options every memo-mw job has), each field of :data:`VARYING_FIELDS` as None."""
    from rq.job import Job

    job = Job.create(REMEMBER, args=[], connection=queue.connection, id="memo-template", description=REMEMBER,
                     result_ttl=0, failure_ttl=defaults.JOB_FAILURE_TTL, retry=retry, serializer=queue.serializer)
    queue._prepare_for_queue(job)  # origin, enqueue time, timeout, status: as queue.enqueue does
    if job.ttl is not None or job.meta or job._dependency_ids:
        raise RuntimeError("memo-mw: rq gave the job a TTL, metadata or dependencies: the enqueue script "
                           "does not write them")
    encode = queue.connection.get_encoder().encode
    return [(key, None if key in VARYING_FIELDS else encode(value))
            for key, value in job.to_dict().items() if value is not None]


def enqueue_script(template: list[tuple[str, bytes | None]], channel: str) -> str:
    """One round trip for a job with an id (a captured message's, a forget's, a flush's): its
    pending entry if any (and the message that it changed), then the job as rq's unique enqueue
    saves it, refused while a job with its id exists.

    KEYS: the queue, rq's set of queues, the job's hash, the user's pending entries.
    ARGV: job id; pending field, its JSON and the user ("" when the job has no pending entry); the
    pending TTL; the description (the function); the compressed data; the time (created, enqueued).
    """
    value = {"created_at": "ARGV[8]", "enqueued_at": "ARGV[8]", "data": "ARGV[7]", "description": "ARGV[6]"}
    fields = ", ".join(f"{_lua_string(key.encode())}, {value[key] if raw is None else _lua_string(raw)}"
                       for key, raw in template)
    return f"""
redis.call("SADD", KEYS[2], KEYS[1])
if ARGV[2] ~= "" then
    redis.call("HSET", KEYS[4], ARGV[2], ARGV[3])
    redis.call("EXPIRE", KEYS[4], ARGV[5])
    redis.call("PUBLISH", {_lua_string(channel.encode())}, ARGV[4])
end
if redis.call("EXISTS", KEYS[3]) == 1 then
    return 0
end
redis.call("HSET", KEYS[3], {fields})
redis.call("RPUSH", KEYS[1], ARGV[1])
return 1
"""


def _lua_string(raw: bytes) -> str:
    """A Lua string literal for these bytes (anything but plain characters as decimal escapes)."""
    return '"' + "".join(chr(b) if b in _LUA_PLAIN else f"\\{b:03d}" for b in raw) + '"'


_LUA_PLAIN = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-.:,;[]{}()/@+=*#")


def job_data(func: str, args: list[Any], shared: Any = None, shared_json: str | None = None) -> bytes:
    """``JobSerializer.dumps((func, None, args, {}))``: rq's job tuple as memo-mw's serializer
    writes it, with ``shared`` (an argument also sent as the pending entry) taken as ``shared_json``
    rather than serialised a second time."""
    encoded = ", ".join(shared_json if arg is shared and shared_json is not None else json.dumps(arg) for arg in args)
    return f"[{json.dumps(func)}, null, [{encoded}], {{}}]".encode("utf-8")


_second: tuple[int, str] = (-1, "")  # the last second formatted (one tuple: threads share it)


def utcnow() -> str:
    """Now as rq writes a job's times (``rq.utils.utcformat``: ``%Y-%m-%dT%H:%M:%S.%fZ``, UTC)."""
    global _second
    now = time.time()
    second, prefix = _second
    if int(now) != second:
        second = int(now)
        prefix = datetime.datetime.fromtimestamp(second, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.")
        _second = (second, prefix)
    return f"{prefix}{int((now - second) * 1_000_000):06d}Z"


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
