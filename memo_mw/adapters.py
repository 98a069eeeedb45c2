"""Request shapes, plain (``{"message": ...}``) and OpenAI chat (``{"messages": [...]}``): where
the user, session and message are in a JSON body, and where the memory block goes (README, "Requests")."""

import contextlib
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


def header_user(environ: dict, key: str) -> str | None:
    """The user id in the header whose WSGI key is ``key`` (``HTTP_X_USER_ID``), or None."""
    header = environ.get(key)
    if isinstance(header, str):  # WSGI gives headers as latin-1: a UTF-8 id must match the same id in a body
        with contextlib.suppress(UnicodeError):
            header = header.encode("latin-1").decode("utf-8")
    return clean_id(header)


def clean_id(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    value = str(value).strip()
    return value if 0 < len(value) <= MAX_ID_CHARS else None


def _message_text(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts: [{"type": "text", "text": ...}, ...]
        texts = [p["text"] for p in content
                 if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)]
        return "\n".join(texts) if texts else None
    return None


def timestamp(value: Any) -> float | None:
    """A plausible epoch time in seconds (not a bool, NaN, infinity or milliseconds), or None."""
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if is_number and 0 < value < 1e11 else None


def read_turn(body: Any) -> Turn | None:
    """The turn in a parsed JSON body, or None when the body is neither shape. A field of the wrong
    type counts as absent, so a fallback still applies."""
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("messages"), list):
        users = [m for m in body["messages"] if isinstance(m, dict) and m.get("role") == "user"]
        message = _message_text(users[-1].get("content")) if users else None
        if message is None:
            return None
        metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        return Turn("openai", message, clean_id(body.get("user")),
                    clean_id(metadata.get("session_id")) or clean_id(body.get("session_id")),
                    clean_id(users[-1].get("id")) or clean_id(metadata.get("message_id")), timestamp(body.get("ts")))
    if isinstance(body.get("message"), str):
        return Turn("plain", body["message"], clean_id(body.get("user_id")), clean_id(body.get("session_id")),
                    clean_id(body.get("message_id")), timestamp(body.get("ts")))
    return None


def inject(body: dict[str, Any], turn: Turn, block: str, *, field: str | None = None) -> dict[str, Any]:
    """A copy of ``body`` with the memory block in place: OpenAI bodies get a system message after any
    leading system messages (``field`` does not apply to them); plain bodies get the block before
    ``message``, or in ``field`` when one is set (``field="message"`` prepends too: never lost)."""
    body = dict(body)
    if turn.shape == "openai":
        messages = list(body["messages"])
        at = next((i for i, m in enumerate(messages) if not (isinstance(m, dict) and m.get("role") == "system")),
                  len(messages))
        body["messages"] = [*messages[:at], {"role": "system", "content": block}, *messages[at:]]
    elif field and field != "message":
        body[field] = block
    else:
        body["message"] = f"{block}\n\n{body['message']}"
    return body
