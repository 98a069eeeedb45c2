"""Request shapes, plain (``{"message": ...}``) and OpenAI chat (``{"messages": [...]}``): where
the user, session and message are in a JSON body, and where the memory block goes (README, "Requests")."""

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

MAX_ID_CHARS = 256
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class BadUserId(ValueError):
    """A user id that is there but names no one (not UTF-8, or with a control character): the request
    is refused with a 400, never read as some other user's."""


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
    """The user id in the header whose WSGI key is ``key`` (``HTTP_X_USER_ID``), or None. WSGI gives a
    header's bytes as Latin-1 text; an id is those bytes read as UTF-8, the one way: ``\xe9t1`` is not
    ``ét1`` (``\xc3\xa9t1``) but refused (BadUserId), as is a control character. (Text that is not
    Latin-1, from a server or test client that decoded it already, is taken as it is.)"""
    header = environ.get(key)
    if not isinstance(header, str):
        return None
    try:
        raw = header.encode("latin-1")
    except UnicodeEncodeError:
        return user_id(header)
    try:
        return user_id(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadUserId("the user id header is not UTF-8") from None


def loopback_request(environ: dict) -> bool:
    """Whether the request came to a loopback name (``SERVER_NAME`` and the ``Host`` header: localhost,
    127.0.0.0/8, ::1), as on a server only this machine can reach; a name that is absent counts as one."""
    return all(_loopback(environ.get(key) or "localhost") for key in ("SERVER_NAME", "HTTP_HOST"))


def _loopback(host: str) -> bool:
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:5000
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:  # name:port
        host = host.partition(":")[0]
    try:
        return host.rstrip(".") == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def user_id(value: Any) -> str | None:
    """A user id as :func:`clean_id` reads it; BadUserId for one with a control character (job keys,
    hashes and logs must not read two users as one)."""
    cleaned = clean_id(value)
    if cleaned is not None and _CONTROL.search(cleaned):
        raise BadUserId("a user id must not contain control characters")
    return cleaned


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
