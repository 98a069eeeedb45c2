"""``MemoryMiddleware``: long-term memory for a WSGI chat app.

Install it around the app's WSGI callable::

    from memo_mw import MemoryMiddleware
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db="memo.db", redis_url="redis://localhost:6379/0")

On each ``POST`` to a chat path with a JSON body it

1. reads the user id (``X-User-Id`` header, a ``get_user`` callable, or the body),
   the session and the last user message;
2. recalls the most relevant memories and injects them as a ``[MEMORY_BEGIN] ...
   [MEMORY_END]`` block (a system message for OpenAI bodies; prepended to ``message``
   for plain bodies), and always puts them in ``environ["memo.memories"]``;
3. runs the message through the capture funnel and enqueues one job for what it
   captured (or for a forget request).

The request path reads SQLite but never writes it, and does no network I/O but the
enqueue. Every other request, and any request on which something goes wrong, reaches
the app exactly as it came: the middleware never turns a working request into a failing one.
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from . import defaults
from .adapters import Turn, clean_id, inject, read_turn
from .funnel import Funnel
from .pipeline import FORGET, REMEMBER, TOUCH, Recaller, remember_payload
from .queue import Backend, make_backend
from .recall import RecallConfig, format_block
from .rules import RuleSet, load_rules
from .store import Store

log = logging.getLogger(__name__)

#: environ keys the middleware sets on intercepted requests.
ENVIRON_MEMORIES = "memo.memories"
ENVIRON_BLOCK = "memo.block"
ENVIRON_CAPTURE = "memo.capture"

GetUser = Callable[[dict, Any], "str | None"]


class MemoryMiddleware:
    """Wrap a WSGI app so that it remembers its users.

    :param app: the WSGI application to wrap.
    :param rules: rule files or folders (``None``: the shipped ``rules/zh.yaml`` and
        ``rules/en.yaml``), or an already loaded :class:`~memo_mw.rules.RuleSet`.
    :param db: path of the SQLite file (created, with its folder, when missing).
    :param redis_url: Redis for the job queue; ``None`` runs jobs on an in-process
        thread (the embedded default, for demos and single-process apps).
    :param paths: request paths read on ``POST``; everything else passes through.
    :param user_header: header holding the user id.
    :param get_user: ``get_user(environ, body) -> user id or None``, for apps whose
        identity lives elsewhere (session cookie, auth proxy). When given, it is the only
        identity source: the body's user field is never trusted.
    :param max_body: bodies larger than this many bytes pass through unread.
    :param inject_field: for plain bodies, put the block in this field instead of
        prepending it to ``message``.
    :param recall_k: at most this many memories per request.
    :param recall_budget: character budget of the injected memory lines.
    :param queue_name: the RQ queue jobs go to.
    :param backend: a queue backend to use instead of the one ``redis_url`` implies.
    :param clock: returns the current time in epoch seconds (for tests and replays).
    """

    def __init__(
        self,
        app: Callable,
        *,
        rules: str | Sequence[str] | RuleSet | None = None,
        db: str = "memo.db",
        redis_url: str | None = None,
        paths: Iterable[str] = defaults.PATHS,
        user_header: str = defaults.USER_HEADER,
        get_user: GetUser | None = None,
        max_body: int = defaults.MAX_BODY_BYTES,
        inject_field: str | None = None,
        recall_k: int = defaults.RECALL_K,
        recall_budget: int = defaults.RECALL_BUDGET_CHARS,
        queue_name: str = defaults.QUEUE_NAME,
        backend: Backend | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.app = app
        self.rules = rules if isinstance(rules, RuleSet) else load_rules(rules)
        self.funnel = Funnel(self.rules)
        self.db = str(db)
        # Create the file and schema now, at start-up: the request path only reads.
        Store(self.db).close()
        self.paths = frozenset(paths)
        self.user_header_key = "HTTP_" + user_header.upper().replace("-", "_")
        self.get_user = get_user
        self.max_body = max_body
        self.inject_field = inject_field
        self.queue = backend if backend is not None else make_backend(redis_url, queue_name=queue_name)
        self.recaller = Recaller(self.db, self.funnel, RecallConfig(k=recall_k, budget=recall_budget))
        self.clock = clock

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") == "POST" and environ.get("PATH_INFO") in self.paths:
            try:
                self._handle(environ)
            except Exception:  # never break the chat: log and let the request through as it is
                log.exception("memo-mw: memory step failed; request passed through unchanged")
        return self.app(environ, start_response)

    # -- the request path ------------------------------------------------------------

    def _read_body(self, environ: dict) -> bytes | None:
        """The body, when it is JSON of a known length under the cap; it is put back for the app."""
        content_type = environ.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
        if content_type != "application/json" and not content_type.endswith("+json"):
            return None
        try:
            length = int(environ.get("CONTENT_LENGTH") or "")
        except ValueError:
            return None  # no length (chunked) or a bad one: not ours to read
        if length <= 0 or length > self.max_body:
            return None
        raw = environ["wsgi.input"].read(length)
        # From here on the app must find the body where it expects it, whatever happens next.
        environ["wsgi.input"] = io.BytesIO(raw)
        environ["CONTENT_LENGTH"] = str(len(raw))
        return raw

    def _user(self, environ: dict, body: Any, turn: Turn) -> str | None:
        if self.get_user is not None:
            return clean_id(self.get_user(environ, body))
        return clean_id(environ.get(self.user_header_key)) or turn.body_user

    def _handle(self, environ: dict) -> None:
        raw = self._read_body(environ)
        if raw is None:
            return
        try:
            body = json.loads(raw)
        except ValueError:
            return
        turn = read_turn(body)
        if turn is None:
            return
        user_id = self._user(environ, body, turn)
        if user_id is None:
            return
        now = self.clock()
        environ[ENVIRON_MEMORIES] = []
        result = self.funnel.process(turn.message)
        environ[ENVIRON_CAPTURE] = result.stage

        memories = self.recaller.recall(user_id, turn.message, now=now,
                                        forgetting=result if result.stage == "forget" else None)
        if memories:
            environ[ENVIRON_MEMORIES] = memories
            block = format_block(memories)
            environ[ENVIRON_BLOCK] = block
            new_raw = json.dumps(inject(body, turn, block, field=self.inject_field), ensure_ascii=False).encode()
            environ["wsgi.input"] = io.BytesIO(new_raw)
            environ["CONTENT_LENGTH"] = str(len(new_raw))
            self._enqueue(TOUCH, [self.db, user_id, [m["id"] for m in memories], int(now)])

        ts = turn.ts if turn.ts is not None else now
        if result.captured:
            # Without a message id or time from the client, a retry within the same minute
            # carries the same job id and is not queued twice.
            time_key = turn.ts if turn.ts is not None else (turn.message_id or int(now // 60))
            payload = remember_payload(result, user_id=user_id, session_id=turn.session_id, ts=ts,
                                       message_id=turn.message_id, time_key=time_key)
            self._enqueue(REMEMBER, [self.db, payload], job_id=payload["job_key"])
        elif result.stage == "forget":
            self._enqueue(FORGET, [self.db, user_id, result.forget_match, int(ts), "user request"])

    def _enqueue(self, func: str, args: list, *, job_id: str | None = None) -> None:
        try:
            self.queue.enqueue(func, args, job_id=job_id)
        except Exception:
            log.exception("memo-mw: could not enqueue %s; the chat request goes on without it", func)
