"""What a forget request names, and which statements were said before it (pure functions, no I/O).
A statement said before the request may still wait (in Redis, the spool, a retry): the request leaves a
*marker*, its times and one-way hashes of its words, that recall, the jobs and the store check."""

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from .text import tokens

#: Share of a forget phrase's words a memory must contain to count as named by it.
MATCH_SHARE = 0.6


def forget_marker(match: str | None, ts: float, at: float | None = None, *,
                  pending_only: bool = False) -> dict[str, Any]:
    """A forget request's marker: ``tokens`` (hashes of its words; None: everything), ``ts`` (client
    time), ``at`` (server time). ``pending_only``: the store deleted at once (the web page, the CLI);
    recall holds only what still waits against it."""
    marker: dict[str, Any] = {"tokens": None if match is None else sorted(hashed(tokens(match))), "ts": int(ts)}
    if at is not None:
        marker["at"] = float(at)
    if pending_only:
        marker["pending_only"] = True
    return marker


def hashed(words: frozenset[str] | set[str]) -> set[str]:
    return {hashlib.blake2b(w.encode("utf-8"), digest_size=8).hexdigest() for w in words}


def receipt(item: dict[str, Any]) -> float | None:
    """When the server read a payload's message (its ``received`` field), or None."""
    received = item.get("received")
    return float(received) if isinstance(received, (int, float)) else None


def received_at(payload: dict[str, Any]) -> float:
    """When the server read a payload's message; its client time ``ts`` when that is not known."""
    received = receipt(payload)
    return received if received is not None else float(payload.get("ts") or 0)


def stored_markers(payload: dict[str, Any], rows: Iterable[tuple[str | None, int, float | None]]) -> list[dict[str, Any]]:
    """Markers from the store's ``(tokens JSON, ts, server time)`` rows, to hold ``payload``
    against: a payload without its server time is ordered by the client times alone."""
    timed = receipt(payload) is not None
    return [{"tokens": json.loads(words) if words else None, "ts": ts, "at": at if timed else None}
            for words, ts, at in rows]


def said_by(said: dict[str, Any], marker: dict[str, Any]) -> bool:
    """Whether ``said`` (a memory, or a pending candidate) was said by the time of the request: by
    the server times when both are known (a client's clock orders nothing against a deletion on the
    web page), else by the client times (a chat's own "forget that" comes from the same client)."""
    received, at = receipt(said), marker.get("at")
    if received is not None and isinstance(at, (int, float)):
        return received <= at
    return (said.get("source_ts") or said.get("created_at") or 0) <= marker["ts"]


def names(marker: dict[str, Any], memory: dict[str, Any]) -> bool:
    """Whether the marker's words name this memory (everything, for a marker without words)."""
    if marker["tokens"] is None:
        return True
    if not marker["tokens"]:
        return False
    have = hashed(tokens(" ".join(str(memory.get(f) or "") for f in ("content", "key", "excerpt"))))
    return len(have.intersection(marker["tokens"])) / len(marker["tokens"]) >= MATCH_SHARE


def forgotten(memory: dict[str, Any], markers: list[dict[str, Any]]) -> bool:
    """Whether a forget request made after this memory was said names it."""
    return any(said_by(memory, m) and names(m, memory) for m in markers)


def without_forgotten(payload: dict[str, Any], markers: list[dict[str, Any]]) -> dict[str, Any]:
    """The payload less the candidates, and the message for the chat history, a later forget request names."""
    if not markers:
        return payload
    said = {"source_ts": payload["ts"], "received": payload.get("received")}
    kept = {**payload, "candidates": [c for c in payload.get("candidates", []) if not forgotten({**c, **said}, markers)]}
    if payload.get("history") and forgotten({"content": payload["history"].get("text"), **said}, markers):
        del kept["history"]
    return kept


def without_slot(payload: dict[str, Any], key: str, at: float) -> dict[str, Any]:
    """The payload less its candidates on slot ``key`` when its message was read by ``at`` (the
    user edited that slot's memory at ``at``: what was said of it before is not stored over it)."""
    if received_at(payload) > at:
        return payload
    return {**payload, "candidates": [c for c in payload.get("candidates", []) if c.get("key") != key]}


def slot_hash(key: str) -> str:
    """A one-way form of a memory's slot, for markers that outlive what they name."""
    return hashlib.blake2b(key.encode("utf-8"), digest_size=12).hexdigest()
