"""Job functions run by the rq worker (or by the in-process thread in embedded mode).

Importable without Flask. Arguments are plain JSON values, the database path among
them: the worker needs nothing but this module and the file. Every job is idempotent:
``remember`` records its job key; ``forget``, ``maintain`` and ``insights`` are safe to
repeat; a repeated ``touch`` counts one recall twice, which only nudges a ranking (and a
repeated ``count_topics`` one message twice, which only nudges a profile).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from . import counters, defaults, maintenance
from . import insights as profile
from .compressor import Compressor, polish_candidates
from .queue import REMEMBER
from .store import Store
from .userstate import RedisUserState, forget_marker, rewrite_pending, without_forgotten

log = logging.getLogger(__name__)


def remember(db: str, payload: dict[str, Any]) -> list[str]:
    """Store the candidates captured from one message (dedup, supersession, expiry).

    Under rq, what a forget request made after the message names is left out (the forget
    may have run while this job waited or ran), and the payload then leaves the user's
    pending list: recall reads it from the store.

    Under rq, the job also takes up to WORKER_BATCH other remember jobs waiting behind it for
    the same database and stores them all in the same transaction; only once that has committed
    are they taken off the queue. A worker that dies in between leaves them queued, and their
    rerun stores nothing twice (processed_jobs); so does another worker that took one meanwhile.

    With ``MEMO_COMPRESSOR_URL`` set in the worker's environment, each rule summary is first
    offered to a small model for a one-line polish (memo_mw.compressor); the rule summary is
    stored whenever the model's line is not used. (Then jobs are not batched: no write lock
    is held across calls to the model.)
    """
    state = _user_state()
    compressor = Compressor.from_env()
    batch = _waiting_batch(db) if state is not None and compressor is None else []
    payloads = [payload, *(p for _, p in batch)]
    forgets = state.forgets_of({p["user_id"] for p in payloads}) if state else {}
    results = []
    with _open(db) as store, store.write():
        for each in payloads:
            kept = without_forgotten(each, forgets.get(each["user_id"], []))
            if compressor is not None and kept.get("candidates"):
                user_id = kept["user_id"]
                kept = polish_candidates(kept, compressor, lambda key, polarity: _slot_contents(
                    store, user_id, key, polarity))
            outcomes = store.remember(kept)
            results.append(outcomes + ["discarded"] * (len(each.get("candidates", [])) - len(kept.get("candidates", []))))
    if state:
        state.drop_pending_many([(p["user_id"], p["job_key"]) for p in payloads])
    if batch:
        _take_off_queue([job for job, _ in batch])
    return results[0]


def _waiting_batch(db: str) -> list[tuple[Any, dict[str, Any]]]:
    """Remember jobs for ``db`` waiting at the head of the current job's queue (not taken off it)."""
    from rq import Queue, get_current_job
    from rq.job import Job

    current = get_current_job()
    if current is None or defaults.WORKER_BATCH <= 1:
        return []
    queue = Queue(current.origin, connection=current.connection, serializer=current.serializer)
    ids = [i for i in queue.get_job_ids(0, defaults.WORKER_BATCH - 1) if i != current.id]
    batch = []
    for job in Job.fetch_many(ids, connection=current.connection, serializer=current.serializer):
        try:
            if job is not None and job.func_name == REMEMBER and job.args[0] == db and isinstance(job.args[1], dict):
                batch.append((job, job.args[1]))
        except Exception:  # a job that does not decode is left for the worker to report
            continue
    return batch


def _take_off_queue(jobs: list[Any]) -> None:
    """Remove jobs whose payloads are stored from their queue and delete them, in one round trip."""
    from rq import Queue

    first = jobs[0]
    queue = Queue(first.origin, connection=first.connection, serializer=first.serializer)
    with first.connection.pipeline() as pipe:
        for job in jobs:
            queue.remove(job, pipeline=pipe)
            pipe.delete(job.key)
        pipe.execute()


def _slot_contents(store: Store, user_id: str, key: str, polarity: int) -> list[str]:
    """What the user's active memories on this slot and polarity say (for the compressor's merge check)."""
    return [row[0] for row in store.db.execute(
        "select content from memories where user_id = ? and key = ? and polarity = ? and active = 1 order by id",
        [user_id, key, polarity])]


def touch(db: str, user_id: str, ids: list[int], ts: int) -> int:
    """Count a recall of these memories: ``hits + 1`` and ``last_accessed = ts``."""
    with _open(db) as store:
        return store.touch(user_id, ids, ts)


def flush_touches(db: str, user_id: str) -> int:
    """Apply the recalls counted for the user in Redis since the last flush, in one write."""
    state = _user_state()
    if state is None:
        return 0
    counts, ts = state.take_touches(user_id)
    if not counts:
        return 0
    with _open(db) as store:
        return store.touch(user_id, counts, ts if ts is not None else int(time.time()))


def forget(db: str, user_id: str, match: str | None, ts: int, reason: str = "user request",
           received: float | None = None) -> int:
    """Delete the user's memories, all or those matching ``match``, physically.

    ``received``: when the web process read the request, by its clock (userstate.said_by);
    None in jobs queued before it was sent.

    Under rq, the user's ``remember`` jobs still waiting in Redis (queued, scheduled for a
    retry, or failed) lose what the request names too: they hold the text being forgotten,
    and would otherwise store it again.
    """
    with _open(db) as store:
        count = store.forget(user_id, match=match, ts=ts, reason=reason, at=received)
    current = _current_job()
    if current is not None:
        from rq import Queue

        queue = Queue(current.origin, connection=current.connection, serializer=current.serializer)
        changed = forget_waiting(queue, user_id, forget_marker(match, ts, received))
        if changed:
            log.info("memo-mw: forget changed %d waiting remember jobs of a user in Redis", changed)
    return count


def count_topics(db: str, user_id: str, week: str, names: list[str]) -> int:
    """Add one message's topic counts to SQLite (embedded mode; with Redis they wait there)."""
    with _open(db) as store:
        return counters.add(store, user_id, {(week, name): 1 for name in names})


def flush_topic_counts(db: str, user_id: str | None = None) -> int:
    """Move the topic counts waiting in Redis (one user's, or every user's) to SQLite."""
    current = _current_job()
    if current is None:
        return 0
    return counters.flush_redis(current.connection, current.origin, db, user_id)


def insights(db: str, now: float | None = None) -> dict[str, int]:
    """The weekly profile: move the topic counts from Redis to SQLite, then replace every
    user's insights (users with counts or memories; see memo_mw.insights)."""
    moved = flush_topic_counts(db)
    with _open(db) as store:
        done = profile.run_all(store, now=profile.now_or(now))
    done["counts_moved"] = moved
    log.info("memo-mw insights: %(users)d users, %(insights)d lines, %(counts_moved)d counts moved", done)
    return done


def maintain(db: str, now: float | None = None) -> dict[str, int]:
    """Expire tasks, delete those left unconfirmed, resolve contradictions (see memo_mw.maintenance)."""
    with _open(db) as store:
        counts = maintenance.maintain(store, now=int(time.time() if now is None else now))
    log.info("memo-mw maintenance: %s", maintenance.summary(counts))
    return counts


def forget_waiting(queue: Any, user_id: str, forget: dict[str, Any]) -> int:
    """Take what a forget request names out of the user's waiting remember jobs and pending list.

    A job left with nothing to store is deleted; one with other statements keeps them. A
    request to forget everything also deletes the user's topic counts waiting in Redis.
    Returns how many jobs changed.
    """
    state = RedisUserState(queue.connection, queue.name)
    state.add_forget(user_id, forget)
    if forget["tokens"] is None:  # forget me: the topic counts waiting for the weekly job too
        counters.delete_redis(queue.connection, queue.name, user_id)
    rewrite_pending(state, user_id, lambda payload: without_forgotten(payload, [forget]))
    waiting = sorted({*queue.job_ids, *queue.scheduled_job_registry.get_job_ids(),
                      *queue.failed_job_registry.get_job_ids()})
    changed = 0
    for job_id, job in _fetch_many(queue, waiting):
        if job is None:  # gone meanwhile: its id is dropped from the queue, as rq's fetch_job does
            queue.remove(job_id)
            continue
        if job.origin != queue.name or job.func_name != REMEMBER or len(job.args) < 2:
            continue
        payload = job.args[1]
        if payload.get("user_id") != user_id:
            continue
        kept = without_forgotten(payload, [forget])
        if kept["candidates"] == payload.get("candidates"):
            continue
        if kept["candidates"]:
            job.args = [job.args[0], kept]
            if not _save_unchanged(queue.connection, job):
                continue  # it started or ran meanwhile: the store's forget marker stops it
        else:
            job.delete()
        changed += 1
    return changed


def _save_unchanged(connection: Any, job: Any) -> bool:
    """``job.save()`` only while the job is still there and in the state it was read in: a job
    that ran (and was deleted, having no result to keep) is not made again, with no expiry,
    holding the user's statements; one that started is not written over."""
    import redis

    status = job.get_status(refresh=False)
    with connection.pipeline() as pipe:
        try:
            pipe.watch(job.key)
            now = pipe.hget(job.key, "status")
            if now is None or now.decode() != getattr(status, "value", status):
                return False
            pipe.multi()
            job.save(pipeline=pipe)
            pipe.execute()
        except redis.WatchError:
            return False
    return True


#: Waiting jobs read per round trip by forget_waiting (a long queue is read in pipelined chunks).
_FETCH_CHUNK = 500


def _fetch_many(queue: Any, job_ids: list[str]) -> Iterator[tuple[str, Any]]:
    """Each id with its job (None for one gone meanwhile), a chunk per round trip."""
    for start in range(0, len(job_ids), _FETCH_CHUNK):
        chunk = job_ids[start:start + _FETCH_CHUNK]
        yield from zip(chunk, queue.job_class.fetch_many(chunk, connection=queue.connection,
                                                         serializer=queue.serializer))


def _current_job() -> Any:
    from rq import get_current_job

    return get_current_job()


_stores = threading.local()


@contextlib.contextmanager
def _open(db: str) -> Iterator[Store]:
    """The database, opened once per worker process and thread and kept open between jobs
    (opening, with its pragmas and migration check, costs more than storing a memory).

    Reopened when the file at the path is another one (replaced, restored) than the one opened.
    """
    cache = _stores.__dict__.setdefault("by_path", {})
    try:
        inode = os.stat(db).st_ino
    except FileNotFoundError:
        inode = None
    entry = cache.get(db)
    if entry is None or entry[1] != inode or entry[2] != os.getpid():
        if entry is not None and entry[2] == os.getpid():
            entry[0].close()
        store = Store(db)
        entry = cache[db] = (store, os.stat(db).st_ino, os.getpid())
    try:
        yield entry[0]
    except BaseException:
        cache.pop(db, None)  # a failure may have left it in a bad state: the next job opens anew
        entry[0].close()
        raise


def _user_state() -> RedisUserState | None:
    """The short-lived user state of the queue the current rq job came from (None outside rq)."""
    current = _current_job()
    return RedisUserState(current.connection, current.origin) if current is not None else None
