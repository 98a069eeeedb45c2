"""``python -m memo_mw.cron`` as a real process against a real redis-server: it enqueues the
maintenance and insights jobs as JSON, which a JSON rq worker runs; a bad setting is a one-line error."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import redis
from rq import Queue
from rq.serializers import JSONSerializer

from memo_mw import defaults, postgres
from memo_mw.adapters import Turn
from memo_mw.funnel import Funnel
from memo_mw.middleware import remember_payload
from memo_mw.rules import load_rules
from memo_mw.store import Store, located

from .conftest import drain, wait_until

DAY = 86400


def cron_env(redis_url, db, **settings):
    return {**os.environ, "MEMO_REDIS_URL": redis_url, "MEMO_DB": db if postgres.is_url(db) else os.path.relpath(db),
            **settings}


def remember_a_task(db, ts):
    """A reminder, said at ``ts``, as the worker stores it (shipped rules)."""
    text = "remind me to water the plants"
    result = Funnel(load_rules()).process(text)
    turn = Turn(shape="plain", message=text, body_user=None, session_id="s", message_id=None, ts=ts)
    with Store(db) as store:
        assert store.remember(remember_payload(result, user_id="u", turn=turn, ts=ts, received=ts)) == ["stored"]


def run_cron(env, until, timeout=20.0):
    """Start the cron process, wait for ``until()``, stop it; (whether until() came true, its stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "memo_mw.cron"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        reached = wait_until(until, timeout)
    finally:
        proc.terminate()
        _, errors = proc.communicate(timeout=10)
    return reached, errors.decode()


def json_queue(redis_url, name=defaults.QUEUE_NAME):
    return Queue(name, connection=redis.Redis.from_url(redis_url), serializer=JSONSerializer)


@pytest.mark.both_engines
def test_both_jobs_are_due_at_start_and_arrive_as_json_the_worker_runs(redis_url, db):
    remember_a_task(db, int(time.time()) - 30 * DAY)  # long expired: maintenance asks about it
    queue = json_queue(redis_url)
    env = cron_env(redis_url, db, MEMO_MAINTAIN_INTERVAL="3600", MEMO_INSIGHTS_INTERVAL="3600")
    reached, errors = run_cron(env, lambda: queue.count == 2)
    assert reached, errors
    assert sorted(job.func_name for job in queue.jobs) == ["memo_mw.jobs.insights", "memo_mw.jobs.maintain"]
    assert all(job.args == [located(db)] for job in queue.jobs)  # a path made absolute: the worker runs elsewhere
    assert drain(redis_url) == 2  # drain fails on a job the JSON worker cannot read
    with Store(db) as store:
        (memory,) = store.list("u", include_inactive=True)
    assert memory["status"] == "pending_confirm"  # the maintenance job ran on MEMO_DB


def test_maintenance_is_enqueued_again_every_interval(redis_url, db):
    queue = json_queue(redis_url)
    maintains = lambda: sum(job.func_name == "memo_mw.jobs.maintain" for job in queue.jobs)
    env = cron_env(redis_url, db, MEMO_MAINTAIN_INTERVAL="1", MEMO_INSIGHTS_INTERVAL="3600")
    reached, errors = run_cron(env, lambda: maintains() >= 3)
    assert reached, errors
    assert sum(job.func_name == "memo_mw.jobs.insights" for job in queue.jobs) == 1  # not due again yet


def test_the_queue_is_the_one_memo_queue_names(redis_url, db):
    mine, default = json_queue(redis_url, "memo-other"), json_queue(redis_url)
    env = cron_env(redis_url, db, MEMO_QUEUE="memo-other", MEMO_INSIGHTS_CRON="0 3 * * 1")
    reached, errors = run_cron(env, lambda: mine.count >= 1)
    assert reached, errors
    assert [job.func_name for job in mine.jobs] == ["memo_mw.jobs.maintain"]  # insights: Mondays at 03:00
    assert default.count == 0


@pytest.mark.parametrize("settings, message", [
    pytest.param({"MEMO_INSIGHTS_CRON": "every monday"}, "memo_mw.cron: cannot schedule the jobs: ", id="cron"),
    pytest.param({"MEMO_MAINTAIN_INTERVAL": "hourly"}, "memo_mw.cron: cannot schedule the jobs: ", id="interval"),
    pytest.param({"MEMO_INSIGHTS_INTERVAL": "weekly"}, "memo_mw.cron: cannot schedule the jobs: ", id="insights"),
    pytest.param({"MEMO_REDIS_URL": "redis://127.0.0.1:1/0"},
                 "memo_mw.cron: cannot reach Redis at redis://127.0.0.1:1/0", id="redis-down"),
    pytest.param({"MEMO_REDIS_URL": "http://example/0"}, "memo_mw.cron: cannot reach Redis at http://example/0",
                 id="not-a-redis-url"),
])
def test_a_bad_setting_stops_it_with_a_one_line_error(redis_url, db, settings, message):
    proc = subprocess.run([sys.executable, "-m", "memo_mw.cron"], env=cron_env(redis_url, db, **settings),
                          check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stderr.startswith(message)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert json_queue(redis_url).count == 0
