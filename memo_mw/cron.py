"""The schedule of the maintenance job and the weekly insights job, and the process that runs it::

    MEMO_DB=var/memo.db MEMO_REDIS_URL=redis://127.0.0.1:6379/0 python -m memo_mw.cron

``maintain`` runs every ``MEMO_MAINTAIN_INTERVAL`` seconds (:data:`~memo_mw.defaults.MAINTAIN_INTERVAL`),
the first at start; ``insights`` by the cron string ``MEMO_INSIGHTS_CRON``, in this process's local
time (:data:`~memo_mw.defaults.INSIGHTS_CRON`: Mondays at 03:00), or every ``MEMO_INSIGHTS_INTERVAL``
seconds instead. Both go on the ``MEMO_QUEUE`` queue (``memo``) as JSON jobs on ``MEMO_DB`` (made
absolute here), so the usual ``memo-mw worker`` runs them.

Not ``rq cron``: in rq 3.0 it enqueues with rq's default serializer, pickle (``CronJob.enqueue``
builds a ``Queue`` without one), which the JSON worker cannot read, so every job it enqueued would
fail. rq's ``CronJob`` (rq 3.0's ``cron.register`` arguments) still decides when each job is due.
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from collections.abc import Mapping

import redis
from rq import Queue
from rq.cron import CronJob
from rq.serializers import JSONSerializer

from . import defaults
from .jobs import insights, maintain

#: Seconds the loop sleeps at most, as rq cron's own: a changed clock is noticed within a minute.
MAX_SLEEP = 60.0


def schedule(db: str, queue_name: str = defaults.QUEUE_NAME, *, maintain_interval: int = defaults.MAINTAIN_INTERVAL,
             insights_cron: str = defaults.INSIGHTS_CRON, insights_interval: int | None = None) -> list[CronJob]:
    """The two jobs, on the database ``db`` (an absolute path: the worker may run elsewhere).
    ValueError for a cron string that does not parse."""
    when = {"interval": insights_interval} if insights_interval else {"cron": insights_cron}
    # result_ttl=0: each job logs what it did; nothing reads a result back.
    return [CronJob(queue_name, func=maintain, args=(db,), interval=maintain_interval, result_ttl=0,
                    name="memo-mw maintenance"),
            CronJob(queue_name, func=insights, args=(db,), **when, result_ttl=0, name="memo-mw insights")]


def run(queue: Queue, cron_jobs: list[CronJob]) -> None:
    """Enqueue each job on ``queue`` whenever it is due, until the process is stopped."""
    while True:
        for job in cron_jobs:
            if job.should_run():
                queue.enqueue(job.func, args=job.args, kwargs=job.kwargs, **job.job_options)
                job.set_enqueue_time(datetime.datetime.now(datetime.UTC))
        now = datetime.datetime.now(datetime.UTC)
        waits = [(job.next_enqueue_time - now).total_seconds() for job in cron_jobs if job.next_enqueue_time]
        time.sleep(max(0.0, min([MAX_SLEEP, *waits])))


def main(environ: Mapping[str, str] = os.environ) -> None:
    """``python -m memo_mw.cron``: the schedule as the environment sets it, until stopped. A value
    that does not parse, or Redis failing, ends it with a one-line error and exit status 1."""
    url = environ.get("MEMO_REDIS_URL", "redis://127.0.0.1:6379/0")
    queue_name = environ.get("MEMO_QUEUE", defaults.QUEUE_NAME)
    try:
        cron_jobs = schedule(os.path.abspath(environ.get("MEMO_DB", "memo.db")), queue_name,
                             maintain_interval=int(environ.get("MEMO_MAINTAIN_INTERVAL", defaults.MAINTAIN_INTERVAL)),
                             insights_cron=environ.get("MEMO_INSIGHTS_CRON", defaults.INSIGHTS_CRON),
                             insights_interval=int(environ.get("MEMO_INSIGHTS_INTERVAL") or 0) or None)
    except ValueError as exc:
        sys.exit(f"memo_mw.cron: cannot schedule the jobs: {exc}")
    try:
        connection = redis.Redis.from_url(url)
        connection.ping()  # an unreachable Redis is an error at start, not at the first job
        run(Queue(queue_name, connection=connection, serializer=JSONSerializer), cron_jobs)
    except (redis.RedisError, ValueError) as exc:  # ValueError: a URL redis-py cannot read
        sys.exit(f"memo_mw.cron: cannot reach Redis at {url}: {exc}")

if __name__ == "__main__":
    main()
