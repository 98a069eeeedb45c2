"""The schedule of the maintenance and weekly insights jobs, and the process that keeps it::

    MEMO_DB=var/memo.db MEMO_REDIS_URL=redis://127.0.0.1:6379/0 python -m memo_mw.cron

``maintain`` runs every ``MEMO_MAINTAIN_INTERVAL`` seconds, the first at start; ``insights`` by the
cron string ``MEMO_INSIGHTS_CRON`` (local time), or every ``MEMO_INSIGHTS_INTERVAL`` seconds. Both go
on the ``MEMO_QUEUE`` queue as JSON jobs on ``MEMO_DB``, which ``memo-mw worker`` runs. Not ``rq cron``:
rq 3.0's enqueues with pickle, which the JSON worker cannot read; rq's ``CronJob`` still decides when."""

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
from .store import located
from .jobs import insights, maintain

#: Seconds the loop sleeps at most, as rq cron's own: a changed clock is noticed within a minute.
MAX_SLEEP = 60.0


def schedule(db: str, queue_name: str = defaults.QUEUE_NAME, *, maintain_interval: int = defaults.MAINTAIN_INTERVAL,
             insights_cron: str = defaults.INSIGHTS_CRON, insights_interval: int | None = None) -> list[CronJob]:
    """The two jobs on ``db`` (absolute: the worker may run elsewhere); ValueError for a bad cron string."""
    when = {"interval": insights_interval} if insights_interval else {"cron": insights_cron}
    # result_ttl=0: each job logs what it did; nothing reads a result back.
    return [CronJob(queue_name, func=maintain, args=(db,), interval=maintain_interval, result_ttl=0,
                    name="memo-mw maintenance"),
            CronJob(queue_name, func=insights, args=(db,), **when, result_ttl=0, name="memo-mw insights")]


def json_queue(url: str, name: str) -> Queue:
    """The jobs' rq queue, JSON as the middleware enqueues. Redis is asked now, so an unreachable one
    fails at start, not at the first job: redis.RedisError, or ValueError for a URL it cannot read."""
    connection = redis.Redis.from_url(url)
    connection.ping()
    return Queue(name, connection=connection, serializer=JSONSerializer)


def run(queue: Queue, cron_jobs: list[CronJob]) -> None:
    """Enqueue each job on ``queue`` whenever it is due, until the process is stopped."""
    while True:
        for job in cron_jobs:
            if job.should_run():
                queue.enqueue(job.func, args=job.args, kwargs=job.kwargs, **job.job_options)
                job.set_enqueue_time(datetime.datetime.now(datetime.timezone.utc))
        now = datetime.datetime.now(datetime.timezone.utc)
        waits = [(job.next_enqueue_time - now).total_seconds() for job in cron_jobs if job.next_enqueue_time]
        time.sleep(max(0.0, min([MAX_SLEEP, *waits])))


def main(environ: Mapping[str, str] = os.environ) -> None:
    """The schedule the environment sets, until stopped; a bad value or Redis failing: a one-line error."""
    url = environ.get("MEMO_REDIS_URL", "redis://127.0.0.1:6379/0")
    queue_name = environ.get("MEMO_QUEUE", defaults.QUEUE_NAME)
    try:
        cron_jobs = schedule(located(environ.get("MEMO_DB", "memo.db")), queue_name,
                             maintain_interval=int(environ.get("MEMO_MAINTAIN_INTERVAL", defaults.MAINTAIN_INTERVAL)),
                             insights_cron=environ.get("MEMO_INSIGHTS_CRON", defaults.INSIGHTS_CRON),
                             insights_interval=int(environ.get("MEMO_INSIGHTS_INTERVAL") or 0) or None)
    except ValueError as exc:
        sys.exit(f"memo_mw.cron: cannot schedule the jobs: {exc}")
    try:
        run(json_queue(url, queue_name), cron_jobs)
    except (redis.RedisError, ValueError) as exc:
        sys.exit(f"memo_mw.cron: cannot reach Redis at {url}: {exc}")


if __name__ == "__main__":
    main()
