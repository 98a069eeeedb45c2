"""``memo-mw worker``'s loop: rq's worker, started again whenever Redis goes away.

rq's ``Worker.work()`` rides out Redis going away only while it waits for a job. Redis down at start,
during a job or in rq's own bookkeeping ends it with the Redis error (rq's loop logs it and quits; its
teardown, which cannot tell Redis that the worker stopped, raises it again). :func:`run` catches that,
waits, and starts a new worker; a job that was running is retried by rq (its started registry), or
still waits on the queue."""

import logging
import signal
import time
from collections.abc import Callable

import redis
from rq import SimpleWorker, Worker
from rq.logutils import setup_loghandlers

from . import defaults
from .cron import json_queue

log = logging.getLogger(__name__)

#: Seconds of the first wait for Redis; each next one doubles, up to ``run``'s ``retry_max``.
FIRST_WAIT = 1.0


def new_worker(url: str, queue_name: str, *, name: str | None, simple: bool) -> Worker:
    """rq's worker (``simple``: its SimpleWorker) on the JSON queue; redis.RedisError if Redis does not answer."""
    queue = json_queue(url, queue_name)
    return (SimpleWorker if simple else Worker)([queue], connection=queue.connection, serializer=queue.serializer,
                                                name=name, maintenance_interval=defaults.WORKER_MAINTENANCE_INTERVAL)


def run(start: Callable[[], Worker], url: str, *, retry_max: float) -> None:
    """Run the worker ``start()`` returns until it stops on request (SIGTERM, SIGINT). While Redis at
    ``url`` does not answer, at start or later, log it and wait (1 s, doubling up to ``retry_max``),
    then start a new worker."""
    setup_loghandlers("INFO", name=__name__)  # rq's log format, on stdout like rq's own lines
    wait, stale = min(FIRST_WAIT, retry_max), None
    while True:
        worker = None
        try:
            if stale is not None:  # what the last one's teardown could not tell Redis; frees its --name
                stale.register_death()
                stale = None
            worker = start()
            wait = min(FIRST_WAIT, retry_max)  # Redis answered
            worker.max_connection_wait_time = retry_max  # rq's own cap, while it waits for a job
            worker.work(with_scheduler=True)
            return
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            # Asked to stop while Redis was away (rq's first SIGTERM or SIGINT sets its cold-shutdown handler).
            if worker is not None and signal.getsignal(signal.SIGTERM) == worker.request_force_stop:
                return
            if worker is not None:
                stale = worker
                if worker.pubsub_thread is not None:
                    worker.pubsub_thread.stop(timeout=0)  # it would retry on its own, a log line every 2 s
            # A stop signal while waiting ends the process at once (rq's handlers would ask Redis first).
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            log.warning("memo-mw worker: waiting for Redis at %s (%s); next try in %g s", url, exc, wait)
            time.sleep(wait)
            wait = min(wait * 2, retry_max)
