"""Job functions, run by the rq worker (or by the in-process thread in embedded mode).

Arguments are plain JSON values, the database path among them: the worker needs only this module
and the file. Every job is idempotent: ``remember`` records its job key; ``forget``, ``maintain``,
``insights`` are safe to repeat; a repeated ``touch`` or ``count_topics`` only nudges a ranking."""

import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from rq import Queue, get_current_job

from . import counters, defaults, maintenance
from . import insights as profile
from .compressor import Compressor, polish_candidates
from .exceptions import passing_fault
from .forgetting import forget_marker, without_forgotten
from .queue import REMEMBER, RETRY_INTERVALS
from .state import RedisState
from .store import Store

log = logging.getLogger(__name__)


def retried_while_passing(job: Callable[..., Any]) -> Callable[..., Any]:
    """A job that a fault which passes by itself (a full disk, a read-only folder, a held lock:
    :func:`memo_mw.store.passing_fault`) keeps retrying under rq once its own retries are spent, every
    ``RETRY_INTERVALS[-1]`` seconds for up to ``JOB_FAILURE_TTL`` after it was enqueued: what the chat
    has taken is stored once the disk has room, not left in the failed registry."""
    @functools.wraps(job)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return job(*args, **kwargs)
        except Exception as exc:
            current = get_current_job()  # (the worker's own Job: it reads retries_left after this)
            if current is not None and not current.retries_left and passing_fault(exc) \
                    and time.time() - current.created_at.timestamp() < defaults.JOB_FAILURE_TTL:
                current.retries_left, current.retry_intervals = 1, [RETRY_INTERVALS[-1]]
                log.warning("memo-mw: %s job %s: %s; retried in %d s", job.__name__, current.id, exc,
                            RETRY_INTERVALS[-1])
            raise
    return run


@retried_while_passing
def remember(db: str, payload: dict[str, Any]) -> list[str]:
    """Store the candidates captured from one message; one outcome each (:meth:`memo_mw.store.Store.remember`).

    Under rq, what a later forget request names is left out, and the payload then leaves the user's
    pending state. The job also stores the capture jobs for the same file waiting right behind it, in
    the same transaction (rq's per-job round trips would cap a worker near a hundred a second), and
    takes them off the queue only once that has committed: a worker that dies in between leaves them
    queued, and their rerun changes nothing. With ``MEMO_COMPRESSOR_URL`` set, a small model may polish
    each summary first (then one job at a time: no write lock is held across model calls)."""
    current = get_current_job()
    state = RedisState(current.connection, current.origin) if current is not None else None
    compressor = Compressor.from_env()
    batching = current is not None and compressor is None and defaults.WORKER_BATCH > 1
    batch = _waiting_batch(current, db) if batching else []
    payloads = [payload, *(job.args[1] for job in batch)]
    if state is not None:
        payloads = [without_forgotten(p, list(state.read(p["user_id"]).forgets)) for p in payloads]
    with Store(db) as store:
        if compressor is not None and payload.get("candidates"):  # (alone: no batch) before the write lock
            def said(key: str, polarity: int) -> list[str]:
                return [m["content"] for m in store.rows("where user_id = ? and key = ? and polarity = ? and active = 1",
                                                         [payload["user_id"], key, polarity])]
            payloads = [polish_candidates(payloads[0], compressor, said)]
        with store.write():
            results = [store.remember(each) for each in payloads]
    if state is not None:
        for each in payloads:
            state.drop_pending(each["user_id"], [each["job_key"]])
    if batch:
        with current.connection.pipeline() as pipe:
            for job in batch:
                job.delete(pipeline=pipe)  # (which takes it off its queue too)
            pipe.execute()
    return results[0]


def _waiting_batch(current: Any, db: str) -> list[Any]:
    """The capture jobs for ``db`` at the head of the current job's queue, up to the first other job
    (a forget request behind them must run in its turn), left on the queue."""
    queue = Queue(current.origin, connection=current.connection, serializer=current.serializer)
    ids = [i for i in queue.get_job_ids(0, defaults.WORKER_BATCH - 1) if i != current.id]  # (it left the queue)
    batch = []
    for job in queue.job_class.fetch_many(ids, connection=current.connection, serializer=current.serializer):
        if job is None or job.func_name != REMEMBER or len(job.args) != 2 or job.args[0] != db \
                or not isinstance(job.args[1], dict):
            break
        batch.append(job)
    return batch


@retried_while_passing
def touch(db: str, user_id: str, ids: list[int], ts: int) -> int:
    with Store(db) as store:
        return store.touch(user_id, ids, ts)


@retried_while_passing
def forget(db: str, user_id: str, match: str | None, ts: int, reason: str = "user request",
           received: float | None = None) -> int:
    """Delete the user's memories, all or those ``match`` names, physically. Under rq, the user's capture
    jobs still waiting in Redis (queued, scheduled, failed) lose what the request names too."""
    with Store(db) as store:
        count = store.forget(user_id, match=match, ts=ts, reason=reason, at=received)
    current = get_current_job()
    if current is not None:
        queue = Queue(current.origin, connection=current.connection, serializer=current.serializer)
        if changed := forget_waiting(queue, user_id, forget_marker(match, ts, received)):
            log.info("memo-mw: a forget request changed %d waiting capture jobs", changed)
    return count


def forget_waiting(queue: Any, user_id: str, marker: dict[str, Any]) -> int:
    """Take what a forget marker names out of the user's waiting capture jobs and pending state;
    a job left with nothing to store is deleted. Returns how many jobs changed."""
    RedisState(queue.connection, queue.name).add_forget(user_id, marker)
    waiting = sorted({*queue.job_ids, *queue.scheduled_job_registry.get_job_ids(),
                      *queue.failed_job_registry.get_job_ids()})
    changed = 0
    for job in queue.job_class.fetch_many(waiting, connection=queue.connection, serializer=queue.serializer):
        if job is None or job.func_name != REMEMBER or len(job.args) < 2 or job.args[1].get("user_id") != user_id:
            continue
        kept = without_forgotten(job.args[1], [marker])
        if kept == job.args[1]:
            continue
        if kept["candidates"] or kept.get("history"):
            job.args = [job.args[0], kept]
            job.save()
        else:
            job.delete()
        changed += 1
    return changed


@retried_while_passing
def count_topics(db: str, counts: dict[str, dict[str, int]], at: float) -> int:
    """Add topic counts (``{user: {"<week>|<name>": n}}``, noted by the web process up to ``at``)
    to SQLite; a user who asked to forget everything after ``at`` is not counted."""
    added = 0
    with Store(db) as store:
        for user_id, noted in counts.items():
            if not store.db.execute("select 1 from forget_markers where user_id = ? and tokens is null"
                                    " and coalesce(server_at, at) >= ?", [user_id, at]).fetchone():
                added += counters.add(store, user_id, {tuple(k.split("|", 1)): n for k, n in noted.items()})
    return added


def insights(db: str, now: float | None = None) -> dict[str, int]:
    """The weekly profile: replace every user's insights (see memo_mw.insights)."""
    with Store(db) as store:
        done = profile.run_all(store, now=time.time() if now is None else float(now))
    log.info("memo-mw insights: %(users)d users, %(insights)d lines", done)
    return done


def maintain(db: str, now: float | None = None) -> dict[str, int]:
    """Expire tasks, delete those left unconfirmed, resolve contradictions (memo_mw.maintenance)."""
    with Store(db) as store:
        counts = maintenance.maintain(store, now=int(time.time() if now is None else now))
    log.info("memo-mw maintenance: %s", maintenance.summary(counts))
    return counts
