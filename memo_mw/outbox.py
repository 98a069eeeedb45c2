"""When Redis is down: keep the jobs in a local SQLite outbox, and send them when it is back.

:class:`ResilientBackend` wraps :class:`~memo_mw.queue.RQBackend` for the web process. Every
Redis call goes through a :class:`~memo_mw.breaker.CircuitBreaker`: the first failure (a
refused connection, or a timeout of ``REDIS_TIMEOUT`` seconds) opens it, and for the next
``cooldown`` seconds requests do not wait on Redis at all. A job that cannot be enqueued is
written to the outbox file (next to the memory database, ``<db>.outbox``) and a daemon thread
sends it when Redis answers again, oldest first, with its job id: a job that reached Redis
before the failure was noticed is not queued twice, and one that already ran is recognised
by the store (``processed_jobs``). While the circuit is open, recall reads the user's pending
memories and forget requests from the outbox, so what was just said is still recalled.

The outbox is shared by every process using the same database, and each of them drains it;
rows are claimed in a write transaction, so two processes never send the same row. It holds
masked memory text only, like the queue; rows are deleted (``secure_delete``) once sent.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from . import defaults
from .breaker import CircuitBreaker
from .statecache import CachedUserState
from .store import retry_setup
from .text import json_utf8
from .userstate import EMPTY, UserState, forget_marker, without_slot

log = logging.getLogger(__name__)

def _redis_errors() -> tuple[type[BaseException], ...]:
    """What a lost or sick Redis raises through redis-py (and rq, which uses it)."""
    import redis

    # Any error from Redis, not only a lost connection: a server that refuses writes (MISCONF,
    # OOM, READONLY, NOREPLICAS) must not lose the capture either.
    return (redis.RedisError, OSError)


class Outbox:
    """Jobs waiting for Redis, in a SQLite file, in the order they were made."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self._local = threading.local()
        self._checkpointed = 0.0
        #: Set by a forget whose checkpoint readers held back: the outbox thread retries it.
        self.checkpoint_due = False
        #: This process's writers (requests, the outbox thread) take turns here before SQLite's
        #: lock; made again in a forked child (a lock held by a thread at the fork stays held).
        self._writing = threading.Lock()
        _OUTBOXES.add(self)
        # Web workers that start together on a new file race for it (store.retry_setup): a
        # lost race must not fail the worker's boot, which would stop the whole server.
        retry_setup(self._create)

    def _create(self) -> None:
        conn = self._connect()
        conn.execute("create table if not exists outbox (id integer primary key autoincrement, "
                     "func text not null, args text not null, job_id text, user_id text, "
                     "created real not null)")
        conn.execute("create index if not exists outbox_user on outbox (user_id)")
        # One process drains at a time (jobs must reach Redis in order); a lease, so a drainer
        # that died holds nobody up for long.
        conn.execute("create table if not exists drain_lease (id integer primary key check (id = 1),"
                     " holder text, until real)")
        conn.execute("insert or ignore into drain_lease (id, holder, until) values (1, null, 0)")

    def _connect(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            conn = sqlite3.connect(self.path, timeout=defaults.SQLITE_BUSY_TIMEOUT_MS / 1000,
                                   isolation_level=None, check_same_thread=False)
            try:
                # Switched once, by the first connection (a race __init__ retries); the file stays WAL.
                if conn.execute("pragma journal_mode").fetchone()[0] != "wal":
                    conn.execute("pragma journal_mode=wal")
                # A committed row survives the process without an fsync per row (WAL, NORMAL):
                # like a job in Redis, only a crash of the machine itself can lose the last ones.
                conn.execute("pragma synchronous=normal")
                conn.execute("pragma secure_delete=on")
            except BaseException:
                conn.close()
                raise
            self._local.conn, self._local.pid = conn, os.getpid()
        return conn

    def put(self, func: str, args: list[Any], job_id: str | None, user_id: str | None) -> None:
        row = [func, json_utf8(args).decode("utf-8"), job_id, user_id, time.time()]
        conn = self._connect()
        self._take_turn()  # (not _turn(): a request's write skips the context manager's frames)
        try:
            conn.execute("insert into outbox (func, args, job_id, user_id, created) values (?, ?, ?, ?, ?)", row)
        finally:
            self._writing.release()

    def _take_turn(self) -> None:
        """This process's turn to write, waited for no longer than SQLite's own busy timeout."""
        if not self._writing.acquire(timeout=defaults.SQLITE_BUSY_TIMEOUT_MS / 1000):
            raise sqlite3.OperationalError(f"the outbox {self.path} stayed busy")

    @contextlib.contextmanager
    def _turn(self):
        self._take_turn()
        try:
            yield
        finally:
            self._writing.release()

    def count(self) -> int:
        return self._connect().execute("select count(*) from outbox").fetchone()[0]

    def user_rows(self, user_id: str) -> list[tuple[str, list[Any]]]:
        rows = self._connect().execute(
            "select func, args from outbox where user_id = ? order by id", [user_id]).fetchall()
        return [(func, json.loads(args)) for func, args in rows]

    def forget(self, user_id: str, forget: dict[str, Any]) -> int:
        """Take what a forget request names out of the user's waiting remember jobs (deleting
        a job left with nothing to store); the number of jobs changed."""
        from .userstate import without_forgotten

        return self.edit_payloads(user_id, lambda payload: without_forgotten(payload, [forget]))

    def edit_payloads(self, user_id: str, change: Callable[[dict[str, Any]], dict[str, Any]]) -> int:
        """Replace each of the user's waiting remember payloads by ``change(payload)`` (a job left
        with nothing to store is deleted); the number of jobs changed."""
        from .queue import REMEMBER

        conn = self._connect()
        changed = 0
        with self._transaction(conn):
            for row_id, args in conn.execute("select id, args from outbox where user_id = ? and func = ?",
                                             [user_id, REMEMBER]).fetchall():
                args = json.loads(args)
                kept = change(args[1])
                if kept["candidates"] == args[1].get("candidates"):
                    continue
                changed += 1
                if kept["candidates"]:
                    conn.execute("update outbox set args = ? where id = ?",
                                 [json_utf8([args[0], kept, *args[2:]]).decode("utf-8"), row_id])
                else:
                    conn.execute("delete from outbox where id = ?", [row_id])
        # Always, not only when a row changed: rows already sent left old copies in the WAL
        # (sends fold it back only now and then), and a forget leaves no copy anywhere. Without
        # waiting on the request: when readers hold it back, the outbox thread does it.
        self._checkpoint(wait=False)
        return changed

    def _checkpoint(self, *, wait: bool = True) -> bool:
        """Fold the WAL back into the file: the old copies of deleted rows go with it. True when
        done; else (readers held it back) ``checkpoint_due`` stays set for the outbox thread."""
        conn = self._connect()
        if not wait:
            conn.execute("pragma busy_timeout = 0")
        try:
            busy = conn.execute("pragma wal_checkpoint(truncate)").fetchone()[0]
        except sqlite3.OperationalError:  # locked by a writer of another process
            busy = 1
        finally:
            if not wait:
                conn.execute(f"pragma busy_timeout = {int(defaults.SQLITE_BUSY_TIMEOUT_MS)}")
        self.checkpoint_due = bool(busy)
        if not busy:
            self._checkpointed = time.monotonic()
        return not busy

    def drain(self, send: Callable[[str, list[Any], str | None], None], *, batch: int = 50,
              lease: float = 60.0, checkpoint_interval: float = 0.0,
              send_many: Callable[[list[tuple[str, list[Any], str | None]]], None] | None = None) -> int:
        """Send the rows, oldest first, deleting each batch once sent; stop at the first failure
        (and raise it). No write lock is held while sending: a request's put never waits on Redis.
        ``send_many``, when given, sends a batch at once (all of it, or raises: then none of it
        counts as sent, and the next round sends it again). Returns 0 at once when another
        process is draining."""
        conn = self._connect()
        holder = f"{os.getpid()}-{threading.get_ident()}"
        now = time.time()
        with self._turn():
            if conn.execute("update drain_lease set holder = ?, until = ? where id = 1 and (holder is null"
                            " or holder = ? or until < ?)", [holder, now + lease, holder, now]).rowcount == 0:
                return 0
        from .queue import FORGET

        sent, forgets, held = 0, False, True
        try:
            while held:
                rows = conn.execute("select id, func, args, job_id from outbox order by id limit ?",
                                    [batch]).fetchall()
                jobs = [(func, json.loads(args), job_id) for _, func, args, job_id in rows]
                done = []
                try:
                    if send_many is not None and len(jobs) > 1:
                        send_many(jobs)
                        done = [row[0] for row in rows]
                    else:
                        for row, job in zip(rows, jobs):
                            send(*job)
                            done.append(row[0])
                finally:  # what was sent is gone, even when a send failed; one write for it all
                    forgets = forgets or any(row[1] == FORGET for row in rows[:len(done)])
                    with self._transaction(conn):
                        if done:
                            conn.execute(f"delete from outbox where id in ({','.join('?' * len(done))})", done)
                            sent += len(done)
                        if len(done) == len(rows) < batch and not self._has_rows(conn):
                            # None left (rows written while this batch was sent go in the next round).
                            conn.execute("update drain_lease set holder = null where id = 1 and holder = ?", [holder])
                            held = False
                        elif conn.execute("update drain_lease set until = ? where id = 1 and holder = ?",
                                          [time.time() + lease, holder]).rowcount == 0:
                            held = False  # the lease lapsed (a stall): another process sends now
                            log.warning("memo-mw: the outbox send lease lapsed; another process sends")
            return sent
        finally:
            if held:  # a send failed: let another process (or the next round) try
                with self._turn():
                    conn.execute("update drain_lease set holder = null where id = 1 and holder = ?", [holder])
            # Sends happen after every capture: fold the WAL back now and then, not each time
            # (a truncating checkpoint makes the next writer wait for it); at once after a
            # forget request, whose words name what is to be gone.
            if self.checkpoint_due or (sent and (forgets or time.monotonic() - self._checkpointed >= checkpoint_interval)):
                self._checkpoint()

    @contextlib.contextmanager
    def _transaction(self, conn: sqlite3.Connection):
        """One write transaction; this process's writers take turns on a lock first (a request's
        put then waits on the thread's few statements, never on SQLite's sleeping busy handler)."""
        with self._turn():
            conn.execute("begin immediate")
            try:
                yield
            except BaseException:
                conn.execute("rollback")
                raise
            conn.execute("commit")

    @staticmethod
    def _has_rows(conn: sqlite3.Connection) -> bool:
        return conn.execute("select exists (select 1 from outbox)").fetchone()[0] == 1

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


class ResilientBackend:
    """An :class:`~memo_mw.queue.RQBackend` behind a circuit breaker, with an outbox for what it cannot take."""

    def __init__(self, backend: Any, outbox: Outbox, *, breaker: CircuitBreaker | None = None,
                 drain_interval: float | None = None, write_behind: bool | None = None):
        self.backend = backend
        self.outbox = outbox
        #: Every job goes through the outbox, sent at once by the thread (defaults.WRITE_BEHIND).
        self.write_behind = defaults.WRITE_BEHIND if write_behind is None else write_behind
        self.breaker = breaker or CircuitBreaker(cooldown=defaults.REDIS_COOLDOWN)
        self.drain_interval = drain_interval if drain_interval is not None else defaults.OUTBOX_DRAIN_INTERVAL
        self.checkpoint_interval = defaults.OUTBOX_CHECKPOINT_INTERVAL if self.write_behind else 0.0
        self.state = _GuardedState(self)
        self._errors = _redis_errors()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._thread_pid: int | None = None
        self._start_lock = threading.Lock()
        #: spooled (below) in a one-item list (a cell), which memo_mw._speedups.read_request reads
        #: without an attribute lookup.
        self._spooled = [bool(outbox.count())]
        self._ensure_drainer()  # every process drains, whoever spooled: rows are never stranded
        _LIVE.add(self)

    @property
    def spooled(self) -> bool:
        """Jobs wait in the outbox (written by any process using it; refreshed by the drain thread
        every drain_interval). While they do, new jobs queue behind them, in order."""
        return self._spooled[0]

    @spooled.setter
    def spooled(self, value: bool) -> None:
        self._spooled[0] = value

    @property
    def queue(self):
        return self.backend.queue

    def call(self, method: Callable[..., Any], *args: Any, fallback: Any = None) -> Any:
        """``method(*args)`` unless the circuit is open; ``fallback`` when skipped or failed."""
        if not self.breaker.allow():
            return fallback
        try:
            result = method(*args)
        except self._errors as exc:
            self.breaker.failure()
            log.warning("memo-mw: Redis unavailable (%s); skipping it for %.0f s", exc, self.breaker.cooldown)
            return fallback
        self.breaker.success()
        return result

    def enqueue(self, func: str, args: list[Any], *, job_id: str | None = None,
                pending: dict[str, Any] | None = None) -> bool:
        self._ensure_drainer()
        # Older jobs waiting in the outbox go first: this one queues behind them.
        if not self.write_behind and not self.spooled:
            sent = self.call(lambda: self.backend.enqueue(func, args, job_id=job_id, pending=pending),
                             fallback=_SKIPPED)
            if sent is not _SKIPPED:
                return sent
        self.outbox.put(func, args, job_id, _user_of(func, args))
        self.spooled = True
        self._wake.set()
        return True

    def touch(self, db: str, user_id: str, ids: list[int], ts: float) -> None:
        # Recall counts only nudge a ranking: while Redis is down they are dropped, not spooled.
        self.call(self.backend.touch, db, user_id, ids, ts)

    def flush(self) -> None:
        """Send the jobs waiting in the outbox and what the backend gathers (counts), now."""
        self.send_now()
        self.call(self.backend.flush)

    def send_now(self, timeout: float = 10.0) -> int:
        """Send what the outbox holds and return once it is empty (another process or this
        one's thread may be sending it: wait for them), Redis is down, or ``timeout`` passed."""
        sent = 0
        deadline = time.monotonic() + timeout
        while True:
            sent += self.drain()
            if not self.spooled or not self.breaker.allow() or time.monotonic() >= deadline:
                return sent
            time.sleep(_RETRY_SOON)

    def forget_spooled(self, user_id: str, forget: dict[str, Any]) -> int:
        """Apply a forget request (a :func:`~memo_mw.userstate.forget_marker`) to the outbox now,
        so what it names is gone from the local file too, not only once its job runs."""
        return self.outbox.forget(user_id, forget)  # whoever spooled them: another process may have

    def drop_slot_spooled(self, user_id: str, key: str, at: float) -> int:
        """Take the statements of slot ``key`` read by ``at`` out of the outbox now (an edit of the
        slot: memo_mw.userstate.without_slot)."""
        return self.outbox.edit_payloads(user_id, lambda payload: without_slot(payload, key, at))

    def drain(self) -> int:
        """Send what the outbox holds, now; the number sent (0 when Redis is still down)."""
        if not self.breaker.allow():
            return 0
        try:
            if not self.write_behind:
                self.backend.connection.ping()  # after an outage: is it back? (one cheap call)
            sent = self.outbox.drain(self._send, checkpoint_interval=self.checkpoint_interval,
                                     send_many=self._send_many if hasattr(self.backend, "enqueue_many") else None)
        except self._errors as exc:
            self.breaker.failure()
            log.warning("memo-mw: Redis still unavailable (%s); the outbox waits", exc)
            return 0
        self.breaker.success()
        self.spooled = bool(self.outbox.count())
        if sent and not self.write_behind:
            log.info("memo-mw: sent %d job(s) from the outbox to Redis", sent)
        return sent

    def _send(self, func: str, args: list[Any], job_id: str | None) -> None:
        from .queue import REMEMBER

        # A remember job is pending again, as at the request, until it has stored its memory.
        self.backend.enqueue(func, args, job_id=job_id, pending=args[1] if func == REMEMBER else None)

    def _send_many(self, rows: list[tuple[str, list[Any], str | None]]) -> None:
        """A gathered batch in one round trip (jobs with ids; any other goes one by one)."""
        from .queue import REMEMBER

        if any(job_id is None for _, _, job_id in rows):
            for row in rows:
                self._send(*row)
            return
        self.backend.enqueue_many([(func, args, job_id, args[1] if func == REMEMBER else None)
                                   for func, args, job_id in rows])

    def _ensure_drainer(self) -> None:
        """A drain thread in this process (again after a fork: threads do not survive one)."""
        if self._thread_pid == os.getpid() and self._thread.is_alive():  # (set together)
            return
        with self._start_lock:
            if self._thread is None or self._thread_pid != os.getpid() or not self._thread.is_alive():
                # The thread holds the backend weakly: it ends when the backend is dropped or closed.
                self._thread = threading.Thread(target=_drain_loop, args=(weakref.ref(self),),
                                                name="memo-mw-outbox", daemon=True)
                self._thread_pid = os.getpid()
                self._thread.start()

    def close(self) -> None:
        if self.write_behind and self.spooled:
            try:  # an orderly end sends what waits (if Redis answers; else the rows stay in the file)
                self.send_now(timeout=2.0)
            except Exception:
                log.exception("memo-mw: could not send the outbox before closing; its rows wait in the file")
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread_pid == os.getpid():
            self._thread.join(timeout=5)
        self.outbox.close()
        self.backend.close()


_SKIPPED = object()
_OUTBOXES: "weakref.WeakSet[Outbox]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """A forked child starts with locks nobody holds (its parent's threads are not in it)."""
    for outbox in list(_OUTBOXES):
        outbox._writing = threading.Lock()
    for backend in list(_LIVE):
        backend._start_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
#: Seconds before a write-behind thread tries again when rows are left (another process was
#: sending: only one does at a time, and it may have finished before our rows were written).
_RETRY_SOON = 0.02
#: Seconds a write-behind thread, woken by a write, waits for more before sending.
_GATHER = 0.005
#: The backends of this process, for :func:`send_waiting`.
_LIVE: "weakref.WeakSet[ResilientBackend]" = weakref.WeakSet()


@atexit.register
def _send_at_exit() -> None:
    """A process that ends normally (a server's worker told to stop) sends what waits first.
    One killed keeps its rows in the file, and the next process on the database sends them."""
    for backend in list(_LIVE):
        if backend.write_behind and backend.spooled and not backend._stop.is_set():
            try:
                backend.send_now(timeout=2.0)
            except Exception:
                log.exception("memo-mw: could not send the outbox at exit; its rows wait in the file")
    for outbox in list(_OUTBOXES):
        try:  # a lease this process's thread holds ends with it: the next process need not wait
            with outbox._turn():
                outbox._connect().execute("update drain_lease set holder = null where id = 1 and holder like ?",
                                          [f"{os.getpid()}-%"])
        except Exception:
            log.debug("memo-mw: outbox lease not released at exit", exc_info=True)


def send_waiting() -> int:
    """Send now what every outbox of this process holds (write-behind jobs not yet sent, or jobs
    spooled during an outage if Redis is back); the number sent. For tests, and for an orderly
    shutdown: nothing is lost without it, the rows wait in the file for the next process."""
    return sum(backend.send_now() for backend in list(_LIVE) if not backend._stop.is_set())


def _drain_loop(ref: weakref.ref) -> None:
    while True:
        backend = ref()
        if backend is None or backend._stop.is_set() or not os.path.isdir(os.path.dirname(backend.outbox.path)):
            return
        wake, interval = backend._wake, backend.drain_interval
        if backend.write_behind and backend.spooled and backend.breaker.allow():
            interval = _RETRY_SOON  # rows left (another process held the lease): not a whole interval
        del backend  # not held while waiting
        if wake.wait(interval):
            # Woken by a write: a moment for the writes of other requests to join it, so a busy
            # process sends a batch per round rather than racing each request for the outbox.
            time.sleep(_GATHER)
        wake.clear()
        backend = ref()
        if backend is None or backend._stop.is_set():
            return
        try:
            backend.spooled = bool(backend.outbox.count())
            if backend.spooled:
                backend.drain()
            elif backend.outbox.checkpoint_due:  # a forget's checkpoint that readers held back
                backend.outbox._checkpoint()
        except Exception:  # never let the thread die: the next round tries again
            log.exception("memo-mw: outbox drain failed")
        del backend


def _user_of(func: str, args: list[Any]) -> str | None:
    """The user a job is about (remember: the payload's; forget, flush: the second argument)."""
    if len(args) > 1 and isinstance(args[1], dict):
        return args[1].get("user_id")
    return args[1] if len(args) > 1 and isinstance(args[1], str) else None


def _guarded(method: str) -> Callable[..., Any]:
    """The Redis state's ``method``, called through the backend's breaker (skipped while Redis is down)."""
    def call(self: "_GuardedState", *args: Any) -> Any:
        return self._backend.call(getattr(self._backend.backend.state, method), *args)
    call.__name__ = call.__qualname__ = method
    return call


class _GuardedState:
    """The user state in Redis, through the breaker; from the outbox while Redis is down."""

    def __init__(self, backend: ResilientBackend):
        self._backend = backend

    def read(self, user_id: str) -> UserState:
        inner = self._backend.backend.state
        pid = os.getpid()
        if self._backend._thread_pid != pid:  # a fork since (enqueue also checks it lives)
            self._backend._ensure_drainer()
        # The outbox first, then Redis: a row the thread sends in between is in one or the other
        # (the thread drops this process's copy of the user's state before it deletes the row).
        rows = self._backend.outbox.user_rows(user_id) if self._backend.spooled else None
        # A copy kept in this process (memo_mw.statecache) asks nothing of Redis: no breaker.
        state = inner.cached(user_id, pid) if rows is None and isinstance(inner, CachedUserState) else None
        if state is not None:
            return state
        state = self._backend.call(inner.read, user_id, fallback=None)
        if state is not None and rows is None:
            return state  # the usual case: Redis answered and nothing waits in the outbox
        if rows is None:  # Redis did not answer: whatever waits in the outbox now
            rows = self._backend.outbox.user_rows(user_id)
        return _with_outbox(state or EMPTY, rows)

    def note_topics(self, *args: Any) -> None:
        # Counts wait in the process for a send (no I/O here): skipped while Redis is down. Not
        # through call(): a half-open breaker's one trial belongs to a call that reaches Redis.
        if self._backend.breaker.closed:
            self._backend.backend.state.note_topics(*args)

    def topic_notes(self) -> tuple[Any, Callable[..., None]] | None:
        """The Redis state's topic_notes(), gated by the breaker as note_topics() is."""
        notes = getattr(self._backend.backend.state, "topic_notes", lambda: None)()
        return None if notes is None or notes[0] is not None else (self._backend.breaker, notes[1])

    # Writes: skipped while Redis is down. Explicit methods, not a __getattr__, which would have
    # every attribute read (read()'s own included, on each request) go the slow way.
    put_pending = _guarded("put_pending")
    replace_pending = _guarded("replace_pending")
    drop_pending = _guarded("drop_pending")
    add_forget = _guarded("add_forget")
    add_shown = _guarded("add_shown")
    add_touches = _guarded("add_touches")


def _with_outbox(state: UserState, rows: list[tuple[str, list[Any]]]) -> UserState:
    """Add the user's jobs waiting in the outbox (``rows``: Outbox.user_rows): remember payloads as
    pending, forgets as markers."""
    from .queue import FORGET, REMEMBER

    pending, forgets = list(state.pending), list(state.forgets)
    for func, args in rows:
        if func == REMEMBER:
            pending.append(args[1])
        elif func == FORGET:
            # (db, user, match, ts, reason[, received]): the server's time when the job carries it
            forgets.append(forget_marker(args[2], args[3], args[5] if len(args) > 5 else None))
    return state._replace(pending=pending, forgets=forgets)
