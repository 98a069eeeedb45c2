"""rq cron configuration: schedules the maintenance job.

    rq cron --url redis://127.0.0.1:6379/0 memo_mw.cron

Environment: ``MEMO_DB`` (the SQLite file, default ``memo.db``, made absolute here),
``MEMO_MAINTAIN_INTERVAL`` (seconds between runs, default
:data:`memo_mw.defaults.MAINTAIN_INTERVAL`). The job runs on the ``memo`` queue, so the
usual ``memo-mw worker`` runs it.
"""

from __future__ import annotations

import os

from rq import cron

from . import defaults
from .jobs import maintain

cron.register(
    maintain,
    os.environ.get("MEMO_QUEUE", defaults.QUEUE_NAME),
    args=(os.path.abspath(os.environ.get("MEMO_DB", "memo.db")),),
    interval=int(os.environ.get("MEMO_MAINTAIN_INTERVAL", defaults.MAINTAIN_INTERVAL)),
    result_ttl=0,
    name="memo-mw maintenance",
)
