"""Job functions run by the rq worker (or by the in-process thread in embedded mode).

Importable without Flask. Arguments are plain JSON values, the database path among
them: the worker needs nothing but this module and the file. Every job is idempotent:
``remember`` records its job key; ``forget`` and ``maintain`` are safe to repeat; a
repeated ``touch`` counts one recall twice, which only nudges a ranking.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from . import maintenance
from .queue import REMEMBER, pending_key
from .store import Store, matches

log = logging.getLogger(__name__)


def remember(db: str, payload: dict[str, Any]) -> list[str]:
    """Store the candidates captured from one message (dedup, supersession, expiry).

    Under rq, the payload then leaves the user's pending list: recall reads it from the store.
    """
    with Store(db) as store:
        outcomes = store.remember(payload)
    from rq import get_current_job

    current = get_current_job()
    if current is not None:
        current.connection.hdel(pending_key(current.origin, payload["user_id"]), payload["job_key"])
    return outcomes


def touch(db: str, user_id: str, ids: list[int], ts: int) -> int:
    """Count a recall of these memories: ``hits + 1`` and ``last_accessed = ts``."""
    with Store(db) as store:
        return store.touch(user_id, ids, ts)


def forget(db: str, user_id: str, match: str | None, ts: int, reason: str = "user request") -> int:
    """Delete the user's memories, all or those matching ``match``, physically.

    Under rq, the user's ``remember`` jobs still waiting in Redis (queued, scheduled for a
    retry, or failed) are deleted too: they hold the text being forgotten, and a queued
    one would otherwise store it again.
    """
    with Store(db) as store:
        count = store.forget(user_id, match=match, ts=ts, reason=reason)
    purged = purge_waiting_jobs(user_id, match)
    if purged:
        log.info("memo-mw: forget removed %d waiting remember jobs of a user from Redis", purged)
    return count


def maintain(db: str, now: float | None = None) -> dict[str, int]:
    """Expire tasks, delete those left unconfirmed, resolve contradictions (see memo_mw.maintenance)."""
    with Store(db) as store:
        counts = maintenance.maintain(store, now=int(time.time() if now is None else now))
    log.info("memo-mw maintenance: %s", maintenance.summary(counts))
    return counts


def purge_waiting_jobs(user_id: str, match: str | None) -> int:
    """Delete this user's waiting ``remember`` jobs from the queue the current rq job came from."""
    from rq import Queue, get_current_job

    current = get_current_job()
    if current is None:  # the in-process thread: nothing waits in Redis
        return 0
    queue = Queue(current.origin, connection=current.connection, serializer=current.serializer)
    waiting = {*queue.job_ids, *queue.scheduled_job_registry.get_job_ids(),
               *queue.failed_job_registry.get_job_ids()}
    purged = 0
    for job_id in waiting:
        job = queue.fetch_job(job_id)
        if job is None or job.func_name != REMEMBER or len(job.args) < 2:
            continue
        payload = job.args[1]
        if payload.get("user_id") != user_id:
            continue
        if match is None or any(matches(c, match) for c in payload.get("candidates", [])):
            job.delete()
            purged += 1
    return purged
