"""``MemoryMiddleware``: long-term memory for a WSGI chat app (``app.wsgi_app = MemoryMiddleware(app.wsgi_app, ...)``).

On each ``POST`` to a chat path with a JSON body it reads the user and the message (:mod:`~memo_mw.adapters`),
injects the most relevant memories as a block (:mod:`~memo_mw.recall`) and enqueues one job for what the
funnel kept, or for a forget request (:mod:`~memo_mw.queue`). ``environ["memo.memories"]`` holds the memories
recalled; ``"memo.block"``, ``"memo.capture"``, ``"memo.profile"``, ``"memo.history"`` the block, the funnel's
stage, the insights, the past messages recalled; ``"memo.declined"`` why an explicit request to remember was
not kept. Each message also goes to the chat history (:mod:`~memo_mw.history`) unless turned off.
The request path never writes SQLite; a request on which anything goes wrong reaches the app as it came.
"""

import dataclasses
import io
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from . import counters, defaults
from .adapters import BadUserId, Turn, header_user, inject, loopback_request, read_turn, user_id
from .exceptions import StoreError, passing_fault
from .forgetting import forget_marker
from .queue import COUNT_TOPICS, FORGET, REMEMBER, TOUCH, LocalQueue, RedisQueue, make_queue, pending_part
from .recall import RecallConfig, Recaller, format_block
from .reload import make_funnel
from .rules import RuleSet
from .state import EMPTY, UserState
from .store import check_writable, located, spool_for
from .text import json_utf8, normalize, stable_id

log = logging.getLogger(__name__)

ENVIRON_MEMORIES = "memo.memories"
ENVIRON_BLOCK = "memo.block"
ENVIRON_CAPTURE = "memo.capture"
ENVIRON_PROFILE = "memo.profile"
ENVIRON_DECLINED = "memo.declined"
ENVIRON_HISTORY = "memo.history"

GetUser = Callable[[dict, Any], "str | None"]


class MemoryMiddleware:
    """Wrap a WSGI app so that it remembers its users. Every option is keyword-only; the README's
    configuration table gives each default, and :class:`memo_mw.Memo` reads them as ``MEMO_*``.

    :param rules: rule files or folders (``None``: the shipped ones), or a loaded ``RuleSet``.
    :param db: the SQLite file, made absolute (the worker may run in another folder), or a
        ``postgresql://`` URL (docs/deployment.md). A configuration
        mistake raises :class:`~memo_mw.exceptions.StoreError`; a full disk or a read-only folder
        starts the middleware degraded (docs/reliability.md, "SQLite").
    :param redis_url: Redis for the jobs; ``None``: one thread of this process runs them (embedded).
    :param get_user: ``get_user(environ, body) -> user id or None``: then the only identity source.
    :param trust_user_header: take the user id from ``user_header`` (off: any client could send one;
        on only behind an auth proxy that sets it). With neither, no request has a user: no memory.
    :param body_user: also take the user id from the body (off: a client must not name whose
        memories it reads).
    :param inject_field: for plain bodies, the field for the block instead of ``message``.
    :param spool: with ``redis_url``, where jobs wait while Redis is down (default ``<db>.spool``;
        with PostgreSQL ``var/memo.spool``).
    :param queue: a queue to use instead of the one ``redis_url`` implies.
    :param history: keep each user message (masked; never a sensitive one) as chat history, and
        bring back the few past messages a request is about (``[HISTORY]``).
    :param history_days: days a message is kept in the history (fixed as it is written).
    :param history_k: past messages at most in the block.
    :param clock: the current time in epoch seconds (tests and replays).
    """

    def __init__(self, app: Callable, *, rules: str | Sequence[str] | RuleSet | None = None,
                 db: str = "memo.db", redis_url: str | None = None, paths: Iterable[str] = defaults.PATHS,
                 user_header: str = defaults.USER_HEADER, trust_user_header: bool = False,
                 get_user: GetUser | None = None, body_user: bool = False, max_body: int = defaults.MAX_BODY_BYTES,
                 inject_field: str | None = None, recall_k: int = defaults.RECALL_K,
                 recall_budget: int = defaults.RECALL_BUDGET_CHARS, queue_name: str = defaults.QUEUE_NAME,
                 rules_reload_interval: float | None = defaults.RULES_RELOAD_INTERVAL,
                 spool: str | None = None, queue: RedisQueue | LocalQueue | None = None,
                 history: bool = True, history_days: float = defaults.HISTORY_DAYS,
                 history_k: int = defaults.HISTORY_K, clock: Callable[[], float] = time.time):
        self.app = app
        # The rule files are looked at by the monotonic clock, or by the clock given (tests, replays).
        self.funnel = make_funnel(rules, reload_interval=rules_reload_interval,
                                  clock=time.monotonic if clock is time.time else clock)
        self.db = located(db)
        self._quiet_until = 0.0  # (monotonic) until then a failing read of the database is not logged again
        self._check_database()
        self.paths = frozenset([paths] if isinstance(paths, str) else paths)
        self.user_header, self.user_header_key = user_header, "HTTP_" + user_header.upper().replace("-", "_")
        self.trust_user_header, self.get_user, self.body_user = trust_user_header, get_user, body_user
        self._warned_exposed = False
        if get_user is None and not trust_user_header and not body_user:
            log.warning("memo-mw: no identity source, so no request has a user and none gets memory: pass "
                        "get_user, or trust_user_header=True behind an auth proxy that sets %s", user_header)
        self.max_body = max_body
        self.inject_field = inject_field
        self.queue = queue if queue is not None else make_queue(redis_url, name=queue_name,
                                                                 spool=spool or spool_for(self.db))
        self.recaller = Recaller(self.db, self.funnel, RecallConfig(k=recall_k, budget=recall_budget,
                                                                    history_k=history_k))
        self.history, self.history_days = history, history_days
        self.clock = clock
        # Topic counts for the weekly insights, sent as one job every COUNTS_SEND_INTERVAL seconds.
        self._counts: dict[str, dict[str, int]] = {}
        self._counts_since = clock()
        self._counts_lock = threading.Lock()

    def _check_database(self) -> None:
        """A configuration mistake (a folder, not a memo-mw database) is an error at start-up, not a failing
        job later. A fault that passes by itself (a full disk, a read-only folder) starts the middleware
        degraded instead: under gunicorn a failed boot stops the whole server, for good."""
        try:
            check_writable(self.db)
        except StoreError as exc:
            if not passing_fault(exc):
                raise
            log.warning("memo-mw: starting degraded, the memory database cannot be written now (%s): the chat "
                        "passes through, recall reads what it can, captures go to the queue as usual", exc)
            self._quiet_until = time.monotonic() + defaults.FAULT_LOG_INTERVAL

    def _log_fault(self, what: str) -> None:
        """Log a failed read of the database with its traceback, at most once every FAULT_LOG_INTERVAL
        seconds: a database that cannot be read fails every request until it recovers."""
        if time.monotonic() >= self._quiet_until:
            self._quiet_until = time.monotonic() + defaults.FAULT_LOG_INTERVAL
            log.exception("memo-mw: %s (logged again at most every %d s)", what, defaults.FAULT_LOG_INTERVAL)

    @property
    def stats(self) -> Any:
        """Counters of the queue: ``spooled``, ``lost``, ``sent_from_spool``, ``failed``."""
        return self.queue.stats

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") == "POST" and environ.get("PATH_INFO") in self.paths:
            environ[ENVIRON_MEMORIES] = []
            try:
                length = self._body_length(environ)
                raw = None if length is None else bytes(environ["wsgi.input"].read(length))
            except Exception:
                log.exception("memo-mw: could not read the request body; request passed through")
                raw = None
            refused = None if raw is None else self._handle_safely(environ, raw)
            if refused is not None:
                body = json_utf8({"error": refused})
                start_response("400 Bad Request", [("Content-Type", "application/json"),
                                                   ("Content-Length", str(len(body)))])
                return [body]
        return self.app(environ, start_response)

    def _handle_safely(self, environ: dict, raw: bytes) -> str | None:
        """Handle the turn, and leave a body the app can read whatever happens; the reason when the
        request names its user in a way that names no one (it is refused: 400)."""
        content_length = environ.get("CONTENT_LENGTH")
        new_raw = None
        try:
            if len(raw) == self._body_length(environ):  # a short body is a broken request: left as it is
                environ["wsgi.input"] = io.BytesIO(raw)  # readable by get_user
                new_raw = self._handle(environ, raw)
        except BadUserId as exc:
            return str(exc)
        except Exception:
            log.exception("memo-mw: memory step failed; request passed through unchanged")
            environ[ENVIRON_MEMORIES] = []
            for key in (ENVIRON_BLOCK, ENVIRON_PROFILE, ENVIRON_HISTORY):
                environ.pop(key, None)
        environ["wsgi.input"] = io.BytesIO(raw if new_raw is None else new_raw)
        environ["CONTENT_LENGTH"] = content_length if new_raw is None else str(len(new_raw))
        return None

    # -- reading the request -----------------------------------------------------------

    def _body_length(self, environ: dict) -> int | None:
        """The body's length when the body is ours to read (JSON, a known length under the cap)."""
        if not _json_type(environ.get("CONTENT_TYPE", "")):
            return None
        if "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower():
            return None
        if environ.get("HTTP_CONTENT_ENCODING", "identity").strip().lower() not in ("", "identity"):
            return None  # compressed: not readable as JSON here
        try:
            length = int(environ.get("CONTENT_LENGTH") or "")
        except ValueError:
            return None
        return length if 0 < length <= self.max_body else None

    def _user(self, environ: dict, body: Any, turn: Turn) -> str | None:
        if self.get_user is not None:
            return user_id(self.get_user(environ, body))
        if self.trust_user_header and not self._warned_exposed and not loopback_request(environ):
            self._warned_exposed = True  # once: the server's address does not change
            log.warning("memo-mw: trusting the %s header on a server reached as %r: any client that can reach "
                        "it can claim any user unless a proxy sets that header", self.user_header,
                        environ.get("HTTP_HOST") or environ.get("SERVER_NAME"))
        user = header_user(environ, self.user_header_key) if self.trust_user_header else None
        return user or (user_id(turn.body_user) if self.body_user else None)

    # -- one turn ----------------------------------------------------------------------

    def _handle(self, environ: dict, raw: bytes) -> bytes | None:
        """Recall, inject and enqueue for one request: the new body, or None to leave it as it came."""
        try:
            body = _DECODER.decode(raw.decode("utf-8"))
        except ValueError:
            return None
        except RecursionError:  # (a hostile body: one line, not a traceback each time)
            log.warning("memo-mw: a JSON body nested too deeply to read; passed through unchanged")
            return None
        turn = read_turn(body)
        if turn is None:
            return None
        turn = _without_lone_surrogates(turn)
        user_id = self._user(environ, body, turn)
        if user_id is None:
            return None
        now = self.clock()
        ts = turn.ts if turn.ts is not None else now
        try:
            result = self.funnel.process(turn.message)
            environ[ENVIRON_CAPTURE] = result.stage
            if result.declined:
                environ[ENVIRON_DECLINED] = result.declined
        except Exception:
            log.exception("memo-mw: capture funnel failed; recalling without capture")
            result = None
        forget = result is not None and result.stage == "forget"
        analysis = self.funnel.topics.analyse(turn.message)  # (tokens, topics): for the counts and recall
        if result is not None and result.stage not in ("forget", "sensitive"):
            # A message the sensitive gates stopped leaves nothing, not even a count on its topics.
            self._count_topics(user_id, turn.message, analysis[1], now)
        state = self._call_state("read", user_id, failed=EMPTY)
        if forget:
            state = self._note_forget(user_id, forget_marker(result.forget_match, ts, now), state)
        new_raw = self._inject(environ, body, turn, user_id, state, result, now, analysis)
        said = self._history_text(user_id, result)
        if forget:
            self._enqueue(FORGET, [self.db, user_id, result.forget_match, int(ts), "user request", now], user_id,
                          job_id="memo-forget-" + stable_id(user_id, result.forget_match or "", int(ts)))
        if result is not None and (result.candidates or said):
            # Said with a forget request ("forget that I play tennis, I like golf now"): after it.
            received = now + 0.001 if forget else now
            payload = remember_payload(result, user_id=user_id, turn=turn, ts=ts, received=received,
                                       history={"text": said, "days": self.history_days} if said else None)
            self._enqueue(REMEMBER, [self.db, payload], user_id, job_id=payload["job_key"],
                          pending=pending_part(payload))
        return new_raw

    def _history_text(self, user_id: str, result: Any) -> str | None:
        """The message as the chat history keeps it, or None: history off (here or by the user), a
        forget request, a sensitive message, or a fault (the chat goes on without it)."""
        if not self.history or result is None:
            return None
        try:
            return self.funnel.history_text(result) if self.recaller.history_enabled(user_id) else None
        except Exception:
            self._log_fault("could not prepare the message for the chat history")
            return None

    def _inject(self, environ: dict, body: Any, turn: Turn, user_id: str, state: UserState, result: Any,
                now: float, analysis: tuple) -> bytes | None:
        """Recall for the message and put the block in the body; the new body, or None."""
        try:
            memories = self.recaller.recall(user_id, turn.message, now=now, state=state, analysis=analysis,
                                            recall_all=result.recall_all if result is not None else None)
            past = self.recaller.history(user_id, turn.message, now=now, session_id=turn.session_id, state=state,
                                         memories=memories, analysis=analysis) if self.history else []
            profile = self.recaller.profile(user_id, state)
        except Exception:  # e.g. the database became unreadable: no memories, the capture still goes
            self._log_fault("recall failed; request passed through without memories")
            return None
        if not memories and not profile and not past:
            return None
        block = format_block(memories, profile, past)
        # The new body first: the environ, hit counts and "asked once" mark are for a block the app gets.
        new_raw = json_utf8(inject(body, turn, block, field=self.inject_field))
        environ[ENVIRON_MEMORIES] = memories
        environ[ENVIRON_BLOCK] = block
        if profile:
            environ[ENVIRON_PROFILE] = profile
        if past:
            environ[ENVIRON_HISTORY] = past
        if stored := [m["id"] for m in memories if m["id"] is not None]:  # pending ones have none yet
            self._enqueue(TOUCH, [self.db, user_id, stored, int(now)], user_id)
        asked = [m["id"] for m in memories if m.get("status") == "pending_confirm"]
        if asked:  # asked once: not again, even before the touch job records it
            self._call_state("add_shown", user_id, asked)
        return new_raw

    def _count_topics(self, user_id: str, message: str, topics: frozenset[str], now: float) -> None:
        """Note the message's topics for the weekly insights (names and counts, never text)."""
        week = counters.week_of(now)
        names = counters.count_keys(topics, message)
        with self._counts_lock:
            counts = self._counts.setdefault(user_id, {})
            for name in names:
                counts[f"{week}|{name}"] = counts.get(f"{week}|{name}", 0) + 1
            if 0 <= now - self._counts_since < defaults.COUNTS_SEND_INTERVAL:
                return  # (a clock stepped back sends them now rather than hold them until it catches up)
            taken, self._counts, self._counts_since = self._counts, {}, now
        self._enqueue(COUNT_TOPICS, [self.db, taken, now], None)

    def _note_forget(self, user_id: str, marker: dict, state: UserState) -> UserState:
        """Record a forget request for recall and the jobs; what it names leaves the pending payloads."""
        self._call_state("add_forget", user_id, marker)
        if marker["tokens"] is None:  # forget me: the topic counts not sent yet go too
            with self._counts_lock:
                self._counts.pop(user_id, None)
        if isinstance(self.queue, RedisQueue):
            try:
                self.queue.forget_spooled(user_id, marker)
            except Exception:
                log.exception("memo-mw: could not apply a forget request to the spool")
        return dataclasses.replace(state, forgets=(*state.forgets, marker))

    def _call_state(self, method: str, *args: Any, failed: Any = None) -> Any:
        """The user state's ``method(*args)``, or ``failed`` when it raises: the request goes on without."""
        try:
            return getattr(self.queue.state, method)(*args)
        except Exception:
            log.warning("memo-mw: could not use the user's pending state (%s)", method, exc_info=True)
            return failed

    def _enqueue(self, func: str, args: list, user_id: str | None, *, job_id: str | None = None,
                 pending: dict | None = None) -> None:
        try:
            self.queue.enqueue(func, args, job_id=job_id, user_id=user_id, pending=pending)
        except Exception:
            log.exception("memo-mw: could not enqueue %s for user %r; the chat request goes on", func, user_id)


def remember_payload(result: Any, *, user_id: str, turn: Turn, ts: float, received: float,
                     history: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON payload of a ``remember`` job. Its ``job_key`` is the same for the same user,
    summaries, history text and message time (or id, or minute, when the client gives no time), so a
    retried request makes no second memory. ``received``: the server's time, to order it against
    edits. ``history``: ``{"text", "days"}``, the message for the chat history."""
    time_key = turn.ts if turn.ts is not None else (turn.message_id or int(received // 60))
    summaries = sorted(normalize(c.content) for c in result.candidates)
    said = [normalize(history["text"])] if history else []
    payload = {"job_key": "memo-remember-" + stable_id(user_id, *summaries, *said, time_key), "user_id": user_id,
               "session_id": turn.session_id, "ts": int(ts), "message_id": turn.message_id,
               "candidates": [c.as_dict() for c in result.candidates], "received": float(received)}
    return {**payload, "history": history} if history else payload


def _json_type(content_type: str) -> bool:
    """A JSON media type, in UTF-8 if a charset is given."""
    media_type, _, params = content_type.partition(";")
    media_type = media_type.strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        return False
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in ("utf-8", "utf8"):
            return False  # JSON is UTF-8; a body declared otherwise is not ours to rewrite
    return True


def _without_lone_surrogates(turn: Turn) -> Turn:
    """The turn with a lone surrogate (a ``\\ud800`` escape alone: valid JSON that no UTF-8 text
    holds) read as U+FFFD in its strings; the app's body is left as it came."""
    changes = {}
    for name in ("message", "body_user", "session_id", "message_id"):
        value = getattr(turn, name)
        if value is not None and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                changes[name] = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return dataclasses.replace(turn, **changes) if changes else turn


def _finite_float(text: str) -> float:
    """A JSON number or constant as a float, refused when not finite: NaN, Infinity and a number too
    large for a float (1e400) could not be written back as valid JSON."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"not a finite number: {text}")
    return value


_DECODER = json.JSONDecoder(parse_constant=_finite_float, parse_float=_finite_float)
