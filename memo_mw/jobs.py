"""Job functions run by the rq worker (or by the in-process thread in embedded mode).

Importable without Flask. Arguments are plain JSON values, the database path among
them: the worker needs nothing but this module and the file. Every job is idempotent:
``remember`` records its job key, ``touch`` and ``forget`` are safe to repeat.
"""

from __future__ import annotations

from typing import Any

from .store import Store


def remember(db: str, payload: dict[str, Any]) -> list[str]:
    """Store the candidates captured from one message (dedup, supersession, expiry)."""
    with Store(db) as store:
        return store.remember(payload)


def touch(db: str, user_id: str, ids: list[int], ts: int) -> int:
    """Count a recall of these memories: ``hits + 1`` and ``last_accessed = ts``."""
    with Store(db) as store:
        return store.touch(user_id, ids, ts)


def forget(db: str, user_id: str, match: str | None, ts: int, reason: str = "user request") -> int:
    """Delete the user's memories, all or those matching ``match``, physically."""
    with Store(db) as store:
        return store.forget(user_id, match=match, ts=ts, reason=reason)
