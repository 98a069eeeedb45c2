"""The memory pipeline shared by the middleware and the CLI: funnel, payload, recall.

The middleware sends payloads to a queue backend; ``memo-mw replay`` applies the same
payloads to the store synchronously. Both build them here, so a replayed chat log is
remembered exactly as live traffic would be.
"""

from __future__ import annotations

import threading
from typing import Any

from .funnel import Funnel, FunnelResult
from .recall import RecallConfig, score
from .store import Store, matches
from .text import normalize, stable_id

REMEMBER = "memo_mw.jobs.remember"
TOUCH = "memo_mw.jobs.touch"
FORGET = "memo_mw.jobs.forget"


def remember_payload(result: FunnelResult, *, user_id: str, session_id: str | None, ts: float,
                     message_id: str | None = None, time_key: Any = None) -> dict[str, Any]:
    """The JSON payload of a ``remember`` job; ``job_key`` is stable for the same user, summary and time."""
    summaries = sorted(normalize(c.content) for c in result.candidates)
    key_time = time_key if time_key is not None else (message_id if message_id is not None else int(ts))
    return {
        "job_key": "memo-remember-" + stable_id(user_id, *summaries, key_time),
        "user_id": user_id,
        "session_id": session_id,
        "ts": int(ts),
        "message_id": message_id,
        "candidates": [c.as_dict() for c in result.candidates],
    }


class Recaller:
    """Reads a user's active memories through one read-only connection per thread, and scores them."""

    def __init__(self, db: str, funnel: Funnel, config: RecallConfig):
        self.db = db
        self.funnel = funnel
        self.config = config
        self._local = threading.local()

    def _store(self) -> Store:
        store = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = Store(self.db, readonly=True)
        return store

    def recall(self, user_id: str, message: str, *, now: float, forgetting: FunnelResult | None = None
               ) -> list[dict[str, Any]]:
        """Top memories for the message; none of those the message itself asks to forget."""
        if forgetting is not None and forgetting.forget_scope == "all":
            return []
        memories = self._store().memories(user_id)
        if forgetting is not None and forgetting.forget_match:
            memories = [m for m in memories if not matches(m, forgetting.forget_match)]
        return score(memories, message, now=now, config=self.config,
                     recall_all=self.funnel.is_recall_all(message))
