"""Job functions run by the rq worker (or by the in-process thread in embedded mode).

Importable without Flask. Arguments are plain JSON values, the database path among
them: the worker needs nothing but this module and the file. Every job is idempotent:
``remember`` records its job key; ``forget``, ``maintain`` and ``insights`` are safe to
repeat; a repeated ``touch`` counts one recall twice, which only nudges a ranking (and a
repeated ``count_topics`` one message twice, which only nudges a profile).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from . import counters, maintenance
from . import insights as profile
from .compressor import Compressor, polish_candidates
from .queue import REMEMBER
from .store import Store
from .userstate import RedisUserState, forget_marker, without_forgotten

log = logging.getLogger(__name__)


def remember(db: str, payload: dict[str, Any]) -> list[str]:
    """Store the candidates captured from one message (dedup, supersession, expiry).

    Under rq, what a forget request made after the message names is left out (the forget
    may have run while this job waited or ran), and the payload then leaves the user's
    pending list: recall reads it from the store.

    With ``MEMO_COMPRESSOR_URL`` set in the worker's environment, each rule summary is first
    offered to a small model for a one-line polish (memo_mw.compressor); the rule summary is
    stored whenever the model's line is not used.
    """
    state = _user_state()
    kept = without_forgotten(payload, state.read(payload["user_id"]).forgets) if state else payload
    compressor = Compressor.from_env()
    with Store(db) as store:
        if compressor is not None and kept.get("candidates"):
            user_id = kept["user_id"]
            kept = polish_candidates(kept, compressor, lambda key, polarity: _slot_contents(
                store, user_id, key, polarity))
        outcomes = store.remember(kept)
    outcomes += ["discarded"] * (len(payload.get("candidates", [])) - len(kept.get("candidates", [])))
    if state:
        state.drop_pending(payload["user_id"], payload["job_key"])
    return outcomes


def _slot_contents(store: Store, user_id: str, key: str, polarity: int) -> list[str]:
    """What the user's active memories on this slot and polarity say (for the compressor's merge check)."""
    return [row[0] for row in store.db.execute(
        "select content from memories where user_id = ? and key = ? and polarity = ? and active = 1 order by id",
        [user_id, key, polarity])]


def touch(db: str, user_id: str, ids: list[int], ts: int) -> int:
    """Count a recall of these memories: ``hits + 1`` and ``last_accessed = ts``."""
    with Store(db) as store:
        return store.touch(user_id, ids, ts)


def flush_touches(db: str, user_id: str) -> int:
    """Apply the recalls counted for the user in Redis since the last flush, in one write."""
    state = _user_state()
    if state is None:
        return 0
    counts, ts = state.take_touches(user_id)
    if not counts:
        return 0
    with Store(db) as store:
        return store.touch(user_id, counts, ts if ts is not None else int(time.time()))


def forget(db: str, user_id: str, match: str | None, ts: int, reason: str = "user request") -> int:
    """Delete the user's memories, all or those matching ``match``, physically.

    Under rq, the user's ``remember`` jobs still waiting in Redis (queued, scheduled for a
    retry, or failed) lose what the request names too: they hold the text being forgotten,
    and would otherwise store it again.
    """
    with Store(db) as store:
        count = store.forget(user_id, match=match, ts=ts, reason=reason)
    current = _current_job()
    if current is not None:
        from rq import Queue

        queue = Queue(current.origin, connection=current.connection, serializer=current.serializer)
        changed = forget_waiting(queue, user_id, forget_marker(match, ts))
        if changed:
            log.info("memo-mw: forget changed %d waiting remember jobs of a user in Redis", changed)
    return count


def count_topics(db: str, user_id: str, week: str, names: list[str]) -> int:
    """Add one message's topic counts to SQLite (embedded mode; with Redis they wait there)."""
    with Store(db) as store:
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
    with Store(db) as store:
        done = profile.run_all(store, now=profile.now_or(now))
    done["counts_moved"] = moved
    log.info("memo-mw insights: %(users)d users, %(insights)d lines, %(counts_moved)d counts moved", done)
    return done


def maintain(db: str, now: float | None = None) -> dict[str, int]:
    """Expire tasks, delete those left unconfirmed, resolve contradictions (see memo_mw.maintenance)."""
    with Store(db) as store:
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
    for payload in state.read(user_id).pending:
        state.put_pending(user_id, without_forgotten(payload, [forget]))
    waiting = {*queue.job_ids, *queue.scheduled_job_registry.get_job_ids(),
               *queue.failed_job_registry.get_job_ids()}
    changed = 0
    for job_id in waiting:
        job = queue.fetch_job(job_id)
        if job is None or job.func_name != REMEMBER or len(job.args) < 2:
            continue
        payload = job.args[1]
        if payload.get("user_id") != user_id:
            continue
        kept = without_forgotten(payload, [forget])
        if kept["candidates"] == payload.get("candidates"):
            continue
        if kept["candidates"]:
            job.args = [job.args[0], kept]
            job.save()
        else:
            job.delete()
        changed += 1
    return changed


def _current_job() -> Any:
    from rq import get_current_job

    return get_current_job()


def _user_state() -> RedisUserState | None:
    """The short-lived user state of the queue the current rq job came from (None outside rq)."""
    current = _current_job()
    return RedisUserState(current.connection, current.origin) if current is not None else None
