"""Request shapes: where the user, session and message are in a JSON body, and how to inject.

Two shapes out of the box:

* plain: ``{"user_id": ..., "session_id": ..., "message": "..."}``
* OpenAI chat: ``{"messages": [{"role": "user", "content": "..."}, ...], "user": ...}``;
  the last user message is the one read, and the memory block goes in as a system message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_ID_CHARS = 256


@dataclass(slots=True)
class Turn:
    """What the middleware needs from a request body."""

    shape: str  # "plain" or "openai"
    message: str
    body_user: str | None
    session_id: str | None
    message_id: str | None
    ts: float | None


def clean_id(value: Any) -> str | None:
    """An id as a non-empty string of reasonable length, or None."""
    if value is None:
        return None  # most often: the field is not there
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    value = str(value).strip()
    return value if 0 < len(value) <= MAX_ID_CHARS else None


def _message_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: [{"type": "text", "text": ...}, ...]
        parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        texts = [p for p in parts if isinstance(p, str)]
        return "\n".join(texts) if texts else None
    return None


def _ts(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 < value < 1e11 else None


def read_turn(body: Any) -> Turn | None:
    """The turn in a parsed JSON body, or None when the body is neither shape."""
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("messages"), list):
        users = [m for m in body["messages"] if isinstance(m, dict) and m.get("role") == "user"]
        message = _message_text(users[-1].get("content")) if users else None
        if message is None:
            return None
        metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        # A field of the wrong type counts as absent, so the fallback still applies.
        return Turn("openai", message, clean_id(body.get("user")),
                    clean_id(metadata.get("session_id")) or clean_id(body.get("session_id")),
                    clean_id(users[-1].get("id")) or clean_id(metadata.get("message_id")),
                    _ts(body.get("ts")))
    message = body.get("message")
    if isinstance(message, str):
        # Most bodies hold none of the other fields: None without a call.
        user, session, message_id, ts = (body.get("user_id"), body.get("session_id"), body.get("message_id"),
                                         body.get("ts"))
        return Turn("plain", message, None if user is None else clean_id(user),
                    None if session is None else clean_id(session),
                    None if message_id is None else clean_id(message_id), None if ts is None else _ts(ts))
    return None


def inject(body: dict[str, Any], turn: Turn, block: str, *, field: str | None = None) -> dict[str, Any]:
    """A copy of ``body`` with the memory block in place.

    OpenAI bodies get a system message after any leading system messages (``field`` does
    not apply to them); plain bodies get the block prepended to ``message``, or put in
    ``field`` when one is set (``field="message"`` prepends too: the message is never lost).
    """
    body = dict(body)
    if turn.shape == "openai":
        messages = list(body["messages"])
        at = 0
        while at < len(messages) and isinstance(messages[at], dict) and messages[at].get("role") == "system":
            at += 1
        messages.insert(at, {"role": "system", "content": block})
        body["messages"] = messages
    elif field and field != "message":
        body[field] = block
    else:
        body["message"] = f"{block}\n\n{body['message']}"
    return body
