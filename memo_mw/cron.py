"""rq cron configuration: schedules the maintenance job and the weekly insights job.

    rq cron --url redis://127.0.0.1:6379/0 memo_mw.cron

Environment: ``MEMO_DB`` (the SQLite file, default ``memo.db``, made absolute here),
``MEMO_MAINTAIN_INTERVAL`` (seconds between maintenance runs, default
:data:`memo_mw.defaults.MAINTAIN_INTERVAL`), ``MEMO_INSIGHTS_CRON`` (when the insights job
runs, a cron string in the cron process's local time, default
:data:`memo_mw.defaults.INSIGHTS_CRON`: Mondays at 03:00) or ``MEMO_INSIGHTS_INTERVAL``
(seconds between insights runs instead, the first at start). The jobs run on the ``memo``
queue, so the usual ``memo-mw worker`` runs them.
"""

from __future__ import annotations

import os

from rq import cron

from . import defaults
from .jobs import insights, maintain

_QUEUE = os.environ.get("MEMO_QUEUE", defaults.QUEUE_NAME)
_DB = os.path.abspath(os.environ.get("MEMO_DB", "memo.db"))

cron.register(
    maintain,
    _QUEUE,
    args=(_DB,),
    interval=int(os.environ.get("MEMO_MAINTAIN_INTERVAL", defaults.MAINTAIN_INTERVAL)),
    result_ttl=0,
    name="memo-mw maintenance",
)

# Weekly: move the topic counts from Redis to SQLite, then replace every user's insights.
_insights_interval = os.environ.get("MEMO_INSIGHTS_INTERVAL")
cron.register(
    insights,
    _QUEUE,
    args=(_DB,),
    **({"interval": int(_insights_interval)} if _insights_interval
       else {"cron": os.environ.get("MEMO_INSIGHTS_CRON", defaults.INSIGHTS_CRON)}),
    result_ttl=0,
    name="memo-mw insights",
)
