"""``MemoryMiddleware``: long-term memory for a WSGI chat app.

Install it around the app's WSGI callable::

    from memo_mw import MemoryMiddleware
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db="memo.db", redis_url="redis://localhost:6379/0")

On each ``POST`` to a chat path with a JSON body (UTF-8, with a ``Content-Length``
no larger than ``max_body``) it

1. reads the user id (the ``X-User-Id`` header; or only a ``get_user`` callable, when
   one is given; the body's ``user_id``/``user`` only with ``body_user=True``), the
   session and the last user message;
2. recalls the most relevant memories and injects them as a ``[MEMORY_BEGIN] ...
   [MEMORY_END]`` block (a system message for OpenAI bodies; prepended to ``message``,
   or put in ``inject_field``, for plain bodies), rewriting ``wsgi.input`` and
   ``CONTENT_LENGTH`` to match the new body;
3. runs the message through the capture funnel and enqueues one job for what it
   captured (or for a forget request).

``environ["memo.memories"]`` is a list of memory dicts on every ``POST`` to a chat path:
empty when nothing is recalled or the request is not one the middleware reads.

The request path reads SQLite but never writes it, and does no network I/O but the
enqueue. Every other request, and any request on which something goes wrong (a failing
``get_user``, an unreadable database, a broken queue), reaches the app exactly as it
came: the same body bytes and the same ``CONTENT_LENGTH``. No exception of the
middleware's own reaches the server, and the app's response iterable is returned as is:
the middleware never turns a working request into a failing one.
"""

from __future__ import annotations

import dataclasses
import io
import os
import json
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from . import counters, defaults
from .adapters import Turn, clean_id, inject, read_turn
from .insights import UNKNOWN, ProfileReader
from .statecache import CachedUserState
from .memcache import UserMemories
from .pipeline import Recaller, remember_payload
from .queue import FORGET, REMEMBER, Backend, make_backend
from .reload import ReloadingFunnel
from .recall import RecallConfig, format_block
from .rules import RuleSet
from .text import _speedups, json_utf8, stable_id
from .store import check_writable
from .userstate import EMPTY, UserState, forget_marker, rewrite_pending, without_forgotten

log = logging.getLogger(__name__)

#: environ keys the middleware sets on ``POST`` requests to its paths (block and capture
#: only when there is one).
ENVIRON_MEMORIES = "memo.memories"
ENVIRON_BLOCK = "memo.block"
ENVIRON_CAPTURE = "memo.capture"
#: The user's insights in the block's [PROFILE] section (memo_mw.insights), when any.
ENVIRON_PROFILE = "memo.profile"

GetUser = Callable[[dict, Any], "str | None"]


class MemoryMiddleware:
    """Wrap a WSGI app so that it remembers its users.

    :param app: the WSGI application to wrap.
    :param rules: rule files or folders (``None``: the shipped ``rules/zh.yaml`` and
        ``rules/en.yaml``), or an already loaded :class:`~memo_mw.rules.RuleSet`.
    :param db: path of the SQLite file (created, with its folder, when missing); a relative
        path is made absolute here, as the worker may run in another folder.
    :param redis_url: Redis for the job queue; ``None`` runs jobs on an in-process
        thread (the embedded default, for demos and single-process apps).
    :param paths: request paths read on ``POST`` (one path may be given as a string);
        everything else passes through.
    :param user_header: header holding the user id.
    :param get_user: ``get_user(environ, body) -> user id or None``, for apps whose
        identity lives elsewhere (session cookie, auth proxy). When given, it is the only
        identity source: neither the header nor the body's user field is used. If it
        returns None (or raises), the request passes through.
    :param body_user: also take the user id from the body (``user_id``/``user``) when the
        header is absent. Off by default: a client must not name whose memories it reads.
        Turn it on only when the caller is trusted (a backend calling the chat app).
    :param max_body: bodies larger than this many bytes pass through unread.
    :param inject_field: for plain bodies, put the block in this field instead of
        prepending it to ``message`` (OpenAI bodies always get a system message).
    :param recall_k: at most this many memories per request.
    :param recall_budget: character budget of the injected memory lines.
    :param queue_name: the RQ queue jobs go to.
    :param rules_reload_interval: seconds between looks at the rule files: edited files are
        loaded and checked on a thread and used once they pass, a broken edit keeps the last
        good rules (and is logged); ``0`` or ``None``: read the rules once. A ``RuleSet``
        given as ``rules`` is never reloaded.
    :param outbox: with ``redis_url``, the SQLite file where jobs wait while Redis is down
        (default: the database path plus ``.outbox``); see :mod:`memo_mw.outbox`.
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
        body_user: bool = False,
        max_body: int = defaults.MAX_BODY_BYTES,
        inject_field: str | None = None,
        recall_k: int = defaults.RECALL_K,
        recall_budget: int = defaults.RECALL_BUDGET_CHARS,
        queue_name: str = defaults.QUEUE_NAME,
        rules_reload_interval: float | None = defaults.RULES_RELOAD_INTERVAL,
        outbox: str | None = None,
        backend: Backend | None = None,
        clock: Callable[[], float] = time.time,
    ):
        # The one-call read's kept Reader and arguments (see _read), made and dropped under this lock.
        object.__setattr__(self, "_reader_lock", threading.Lock())
        object.__setattr__(self, "_reader_args", None)
        object.__setattr__(self, "_unreadable", None)
        self.app = app
        from .reload import make_funnel

        # Rules from files follow their files (memo_mw.reload); self.funnel.rules is the set in use. Its
        # interval by time.monotonic when the clock is the real one (a wall clock can jump), else by
        # the clock given (tests and replays move it).
        self.funnel = make_funnel(rules, reload_interval=rules_reload_interval,
                                  clock=time.monotonic if clock is time.time else clock)
        self.rules = self.funnel.rules  # as loaded at start-up
        # Absolute: the path travels in the jobs, and the worker may run in another folder.
        self.db = os.path.abspath(db)
        # Create the file and schema now, at start-up: the request path only reads. A corrupt,
        # unwritable or wrong path is a StoreError here, naming it, not a failing job later.
        check_writable(self.db)
        self.paths = frozenset([paths] if isinstance(paths, str) else paths)
        self.user_header_key = "HTTP_" + user_header.upper().replace("-", "_")
        self.get_user = get_user
        self.body_user = body_user
        self.max_body = max_body
        self.inject_field = inject_field
        self.queue = backend if backend is not None else make_backend(
            redis_url, queue_name=queue_name, outbox=outbox or self.db + ".outbox")
        self.recaller = Recaller(self.db, self.funnel, RecallConfig(k=recall_k, budget=recall_budget))
        # With Redis, the user-state listener also tells recall when a user may have changed, so
        # the user's version need not be read from SQLite on every request (memo_mw.statecache).
        state = getattr(getattr(self.queue, "backend", self.queue), "state", None)
        if isinstance(state, CachedUserState):
            self.recaller.changes = state
        #: What memo_mw._speedups.read_request() checks before a user's view answers a request on
        #: its own (_handle's checks of the view: the user's stamp, jobs waiting in the outbox): the
        #: state's cell of what it trusts, its generations, the outbox's cell of spooled (None: no
        #: outbox). A queue with a spooled of no cell of its own: no view answers in C.
        outbox = hasattr(self.queue, "spooled")
        spool = getattr(self.queue, "_spooled", None) if outbox else None
        self._quick = (state._trusted, state._generation, spool) \
            if isinstance(state, CachedUserState) and (spool is not None or not outbox) else None
        self.profiles = ProfileReader(self.db, version_of=lambda user: self.recaller.versions.get(user, UNKNOWN))
        self._views: dict[str, _UserView] = {}
        #: Each quick view's (the key set of its copy (UserMemories.key_set) by weak reference, whether
        #: it answers a message sharing none of its keys on its own (no insights), its stamp's epoch
        #: and generation, its until): read_request() checks the message against the keys, and where
        #: the view still answers, answers the request (a dict of its own: one lookup, no attribute read).
        self._view_keys: dict[str, tuple] = {}
        self._reloading = isinstance(self.funnel, ReloadingFunnel)
        # How the request notes its topic counts without a call, when the state offers it.
        self._topic_notes = getattr(getattr(self.queue, "state", None), "topic_notes", lambda: None)()
        # [(the UTC day's first second, the next day's, the day's ISO week)]: see _week_of
        self._week: list[tuple[float, float, str]] = [(0.0, -1.0, "")]
        self.clock = clock

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") == "POST" and environ.get("PATH_INFO") in self.paths:
            environ[ENVIRON_MEMORIES] = []
            try:
                # Read the body, handle the turn, and leave a body the app can read, whatever
                # happens (here, not in a method of its own: one Python call fewer a request).
                try:
                    # The usual request read, parsed, looked at and, where the user's view answers
                    # it (nothing to recall, nothing to capture), done in one call
                    # (memo_mw._speedups.read_request), with the arguments kept from the last
                    # request (a Reader); False where Python must read it, or look at the rules' files first.
                    reader = self._reader
                    got = reader(environ) if reader is not None else False
                    if got is False:
                        got = self._read(environ)
                except Exception:  # nothing was read (or nothing can be put back): leave the request alone
                    log.exception("memo-mw: could not read the request body; request passed through")
                    got = None
                if got is True:
                    pass  # answered in the one call: the body is back, the counts noted
                elif type(got) is tuple and len(got) == 5:
                    # Answered by the user's view (read_request: nothing to recall, nothing to capture):
                    # what _handle() would do then is to count the message's topics.
                    try:
                        environ[ENVIRON_CAPTURE] = got[4].stage
                        self._count_topics(got[1], got[2], got[3], self.clock())
                    except Exception:
                        log.exception("memo-mw: could not count the message's topics")
                    finally:
                        environ["wsgi.input"] = io.BytesIO(got[0])
                elif got is not None:
                    parts = got if type(got) is tuple else None
                    raw = got if parts is None else parts[0]
                    content_length = environ.get("CONTENT_LENGTH")
                    if self.get_user is not None:
                        environ["wsgi.input"] = io.BytesIO(raw)  # readable again by get_user (the app's: below)
                    new_raw = None
                    try:
                        # A short body is a broken request: the app should see it as it is.
                        if parts is not None or len(raw) == self._body_length(environ):
                            new_raw = self._handle(environ, raw, parts)
                    except Exception:  # never break the chat: log and let the request through as it is
                        log.exception("memo-mw: memory step failed; request passed through unchanged")
                        environ[ENVIRON_MEMORIES] = []
                        environ.pop(ENVIRON_BLOCK, None)
                    finally:
                        # Also undoes a get_user that read or replaced the body.
                        if new_raw is None:
                            environ["wsgi.input"] = io.BytesIO(raw)
                            environ["CONTENT_LENGTH"] = content_length
                        else:
                            environ["wsgi.input"] = io.BytesIO(new_raw)
                            environ["CONTENT_LENGTH"] = str(len(new_raw))
            except Exception:  # the steps handle their own failures; this is the last net
                log.exception("memo-mw: memory step failed; request passed through")
        # The app's own response iterable, as is: the server calls its close(). (An attribute read,
        # then a call: the interpreter specializes the read, not a method load of an attribute.)
        app = self.app
        return app(environ, start_response)

    def __setattr__(self, name: str, value: Any) -> None:
        # The one-call read's arguments are made from the attributes: whatever is set, they are made
        # again (under the lock _read() makes them in: no Reader of the old values is kept after this).
        # (getattr, not self.__dict__: an instance whose __dict__ was asked for has its attribute
        # reads no longer specialized by the interpreter, each going through the type's lookup.)
        object.__setattr__(self, name, value)
        if name != "_reader":
            lock = getattr(self, "_reader_lock", None)
            if lock is None:
                object.__setattr__(self, "_reader", None)
            else:
                with lock:
                    object.__setattr__(self, "_reader", None)

    # -- the request path ------------------------------------------------------------

    def _read(self, environ: dict) -> Any:
        """The request read (what memo_mw._speedups.read_request gives, or the body, or None), after the
        rules' files were looked at if a look is due; the arguments of the one-call read made again
        and kept when the next requests may use them without a look (see __call__)."""
        funnel = self.funnel
        if self._reloading:
            funnel.check()  # (a look only where one is due)
        if _read_request is None:
            return self._read_body(environ)
        with self._reader_lock:  # (the rules and the attributes read, and the Reader kept, at once)
            rules = funnel._funnel if self._reloading else funnel
            usual = rules._usual if rules._usual is not None else rules.usual_args()
            args = self._reader_args
            if self._reader is None or args is None or args[4] is not usual:
                args = self._read_args(usual)
                object.__setattr__(self, "_reader_args", args)
                self._keep_reader(args, funnel)
        got = _read_request(environ, *args)
        return self._read_body(environ) if got is False else got

    def _read_args(self, usual: Any) -> tuple:
        """read_request()'s arguments after the environ, for these rules' usual_args()."""
        # With the clock read_request() knows (time.time's, for the week the counts go to), it
        # finishes the request the user's view answers on its own.
        tally = None
        if self._topic_notes is not None and self.clock is time.time:
            gate, append = self._topic_notes  # (a breaker by its cell: no attribute lookup a request)
            tally = (self._week, getattr(gate, "closed_cell", gate), append, _EN_ONLY, ENVIRON_CAPTURE, io.BytesIO)
        return (_PLAIN_JSON, self.max_body, self.user_header_key if self.get_user is None else None, _SCAN, usual,
                self._view_keys, self._quick, tally)

    def _keep_reader(self, args: tuple, funnel: Any) -> None:
        """Keep a Reader of args (the arguments checked once) where it may read the next requests on
        its own: rules that are never reloaded, or whose look it tells is due by the clock it knows
        (time.monotonic's); else none, and each request goes through _read()."""
        if not self._reloading:
            fresh = None
        elif funnel.clock is time.monotonic:
            fresh = (funnel._watch, float(funnel.interval))
        else:
            return
        if _Reader is None or args[4] is self._unreadable:
            return
        try:
            object.__setattr__(self, "_reader", _Reader(*args, fresh))
        except Exception:  # rules it cannot read: read_request() gives their requests' bodies to Python
            object.__setattr__(self, "_unreadable", args[4])
            log.warning("memo-mw: the one-call read cannot read these rules; their requests are read in Python",
                        exc_info=True)

    def _body_length(self, environ: dict) -> int | None:
        """The body's length when the body is ours to read (JSON, a plain known length, under the cap)."""
        content_type = environ.get("CONTENT_TYPE", "")
        if content_type not in _PLAIN_JSON and not self._json_type(content_type):
            return None
        if "HTTP_TRANSFER_ENCODING" in environ and "chunked" in environ["HTTP_TRANSFER_ENCODING"].lower():
            return None  # the length, if any, is not the body's
        encoding = environ.get("HTTP_CONTENT_ENCODING")  # (most requests: none)
        if encoding is not None and encoding.strip().lower() not in ("", "identity"):
            return None  # compressed: not readable as JSON here
        try:
            length = int(environ.get("CONTENT_LENGTH") or "")
        except ValueError:
            return None  # no length (chunked) or a bad one
        if length <= 0 or length > self.max_body:
            return None
        return length

    @staticmethod
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

    def _read_body(self, environ: dict) -> bytes | None:
        """The body when it is ours to read (as much of it as comes), else None."""
        length = self._body_length(environ)
        if length is None:
            return None
        return bytes(environ["wsgi.input"].read(length))

    def _user(self, environ: dict, body: Any, turn: Turn) -> str | None:
        if self.get_user is not None:
            return clean_id(self.get_user(environ, body))
        header = environ.get(self.user_header_key)
        if isinstance(header, str) and not header.isascii():
            try:  # WSGI hands headers over as latin-1; a UTF-8 id should match the same id in a body
                header = header.encode("latin-1").decode("utf-8")
            except UnicodeError:
                pass
        return clean_id(header) or (turn.body_user if self.body_user else None)

    def _handle(self, environ: dict, raw: bytes, parts: tuple | None = None) -> bytes | None:
        """Recall, inject and enqueue for one request; the new body, or None to leave it as it came.
        ``parts``: the request as memo_mw._speedups.read_request() read it, when it did."""
        if parts is None:
            try:
                # Strict UTF-8 (json.loads would also take UTF-16/32, a BOM and encoded surrogates)
                # and strict JSON (no NaN or Infinity, which could not be re-encoded as valid JSON).
                body = _decode(raw.decode("utf-8"))
            except ValueError:
                return None
            turn = _turn_of(body, raw)
            if turn is None:
                return None
            user_id = self._user(environ, body, turn)
            if user_id is None:
                return None
            message, result, analysis = turn.message, None, None
        else:  # the funnel's result for the usual message (None: it looks closer), and its analysis
            _, body, message, user_id, result, analysis = parts
            turn = None  # read from the body where needed (an injection, a capture); body None: read
            # in place, the object made then
        now = self.clock()
        if result is None:
            try:
                result = self.funnel.process(message)
            except Exception:
                log.exception("memo-mw: capture funnel failed; recalling without capture")
        if result is not None:
            environ[ENVIRON_CAPTURE] = result.stage
        forget = result is not None and result.stage == "forget"
        if result is not None and not forget:
            # Count the message's topics for the weekly insights (memo_mw.counters), tagged as
            # recall tags them; no I/O here, they are sent with other counts. The message's
            # analysis (tokens, topics) is read once for this and recall: read already, or here
            # (not cached: a new message is not read again); None if it failed.
            try:
                if analysis is None:
                    analysis = self.funnel.topics.analyse_once(message)
                self._count_topics(user_id, message, analysis[1], now)
            except Exception:
                log.exception("memo-mw: could not count the message's topics")
                analysis = None
        else:
            analysis = None
        # The user's view kept from an earlier request, while nothing says the user changed, and
        # the user's stamp, taken before anything is read, to keep a new one under (None: no view
        # now: a forget request, no user-state listener, or jobs waiting in the outbox, which a
        # read of the state joins).
        view = stamp = None
        changes = self.recaller.changes
        if not forget and changes is not None and not getattr(self.queue, "spooled", False):
            stamp = changes.stamp(user_id)
            view = self._views.get(user_id) if stamp is not None else None
            if view is not None and not (view.stamp == stamp and time.monotonic() < view.until):
                self._drop_view(user_id)  # outdated: what it holds (a pending text, say) is not kept
                view = None
        copy = view.memories_ref() if view is not None else None
        if copy is not None:  # the usual request: the user as the last one read it
            state = view.state
            recall_all = result.recall_all if result is not None else None
            # analysis[0] None: read_request() found that the message shares no token or topic with
            # the key set analysis[2] (without making its tokens), the copy's when it is this view's.
            if view.quick and recall_all is False and analysis is not None and (
                    analysis[2] is copy.key_set if analysis[0] is None else
                    copy.by_token.keys().isdisjoint(analysis[0]) and copy.by_topic.keys().isdisjoint(analysis[1])):
                memories = []  # recall_copy()'s answer when no memory shares a token or topic, without the calls
            else:
                try:
                    memories = self.recaller.recall_copy(copy, message, now=now, state=state,
                                                         analysis=_whole(analysis), recall_all=recall_all)
                except Exception:
                    log.exception("memo-mw: recall failed; request passed through without memories")
                    memories = []
            profile = list(view.profile) if view.profile else []
        else:
            if forget and turn is None:
                turn, body = _turn_and_body(body, raw)
            ts = turn.ts if turn is not None and turn.ts is not None else now  # (read for a forget request)
            memories, profile, state = self._read_user(user_id, message, now, result, ts, forget, stamp,
                                                       _whole(analysis))

        new_raw = None
        if memories or profile:
            block = format_block(memories, profile)
            if turn is None:
                turn, body = _turn_and_body(body, raw)
            new_body = inject(body, turn, block, field=self.inject_field)
            new_raw = json_utf8(new_body)
            environ[ENVIRON_MEMORIES] = memories
            environ[ENVIRON_BLOCK] = block
            if profile:
                environ[ENVIRON_PROFILE] = profile
            stored_ids = [m["id"] for m in memories if m["id"] is not None]  # pending ones have none yet
            if stored_ids:
                try:
                    self.queue.touch(self.db, user_id, stored_ids, now)
                except Exception:
                    log.exception("memo-mw: could not count a recall; the chat request goes on without it")
            asked = [m["id"] for m in memories if m.get("status") == "pending_confirm"]
            if asked:  # asked once: not again, even before the touch job records it
                self._state_call("add_shown", user_id, asked)

        if result is None or not (forget or result.candidates):
            return new_raw
        if turn is None:
            turn, body = _turn_and_body(body, raw)
        ts = turn.ts if turn.ts is not None else now
        if forget:
            # A job id, so a retried request does not queue the same forget twice.
            self._enqueue(FORGET, [self.db, user_id, result.forget_match, int(ts), "user request", now],
                          job_id="memo-forget-" + stable_id(user_id, result.forget_match or "", int(ts)))
        if result.candidates:
            # Without a message id or time from the client, a retry within the same minute
            # carries the same job id and is not queued twice.
            time_key = turn.ts if turn.ts is not None else (turn.message_id or int(now // 60))
            payload = remember_payload(result, user_id=user_id, session_id=turn.session_id, ts=ts,
                                       message_id=turn.message_id, time_key=time_key, received=now)
            # Pending with the enqueue (one round trip), so the job's drop always comes after.
            self._enqueue(REMEMBER, [self.db, payload], job_id=payload["job_key"], pending=payload)
        return new_raw

    def _count_topics(self, user_id: str, message: str, topics: Any, now: float) -> None:
        """Note the message's topics (None or a set) for the weekly insights (memo_mw.counters)."""
        # Most messages: no topic, in English (count_keys' answer then, without the calls).
        names = counters.count_keys(topics, message) if topics or not message.isascii() else _EN_ONLY
        start, end, week = self._week[0]
        if not start <= now < end:  # (two comparisons: no float division a request)
            week = self._week_of(now)
        notes = self._topic_notes  # (gate, append) of the state's topic_notes(), or None
        if notes is None:
            self.queue.state.note_topics(self.db, user_id, week, names)
        elif notes[0] is None or notes[0].closed:
            notes[1]((user_id, week, names))

    def _read_user(self, user_id: str, message: str, now: float, result: Any, ts: float, forget: bool,
                   stamp: tuple | None, analysis: tuple | None) -> tuple[list, list, UserState]:
        """The user's state, memories for the message and insights, read where they are kept (and
        kept together as the user's view when ``stamp`` is given and all were read)."""
        until = time.monotonic() + defaults.RECALL_VERSION_MAX_AGE
        state = self._user_state(user_id)
        if forget:
            state = self._note_forget(user_id, forget_marker(result.forget_match, ts, now), state)
        copy = None
        try:
            memories, copy = self.recaller.recall_and_copy(
                user_id, message, now=now, state=state, recall_all=result.recall_all if result is not None else None,
                analysis=analysis)
        except Exception:  # e.g. the database became unreadable: no memories, capture still queued
            log.exception("memo-mw: recall failed; request passed through without memories")
            memories, stamp = [], None
        try:
            profile = self.profiles.profile(user_id, state=state)
        except Exception:
            log.exception("memo-mw: could not read the user's insights; recalling without them")
            profile, stamp = [], None
        if forget:
            self._drop_view(user_id)  # nothing of what the request names stays in this process
        elif stamp is not None and copy is not None and self.recaller.changes.cached(user_id) is state:
            # Only the state the listener vouches for (not one the outbox or a failed read made up),
            # and not past the time recall would read the user's version again.
            read_at = self.recaller.version_read_at(user_id, stamp)
            if read_at is not None:
                until = min(until, read_at + defaults.RECALL_VERSION_MAX_AGE)
            if len(self._views) >= _VIEWS_KEPT:
                self._views.clear()
                self._view_keys.clear()
            # The copy by weak reference: the memory cache alone decides how long it is kept.
            quick = type(copy) is UserMemories and not copy.always and \
                not (state.pending or state.forgets or state.shown)
            keys = copy.key_set if quick else None
            self._views[user_id] = _UserView(stamp, until, state, weakref.ref(copy), tuple(profile), quick)
            if keys is not None:
                # (what _handle checks of the view, for read_request() to check: see _speedups.c)
                self._view_keys[user_id] = (weakref.ref(keys), not profile, *stamp, float(until))
            else:
                self._view_keys.pop(user_id, None)
        return memories, profile, state

    def _drop_view(self, user_id: str) -> None:
        """Forget the user's view, and its key set with it."""
        self._views.pop(user_id, None)
        self._view_keys.pop(user_id, None)

    def _enqueue(self, func: str, args: list, *, job_id: str | None = None, pending: dict | None = None) -> None:
        try:
            self.queue.enqueue(func, args, job_id=job_id, **({"pending": pending} if pending is not None else {}))
        except Exception:
            log.exception("memo-mw: could not enqueue %s; the chat request goes on without it", func)

    def _week_of(self, now: float) -> str:
        """counters.week_of(now), kept for the rest of the UTC day (asked by every request)."""
        week = counters.week_of(now)
        start = now // 86400 * 86400
        self._week[0] = (start, start + 86400, week)  # one tuple: a request reads all from the same day
        return week

    def _state_call(self, method: str, *args: Any) -> None:
        try:
            getattr(self.queue.state, method)(*args)
        except Exception:
            log.exception("memo-mw: could not update the user's pending state (%s)", method)

    def _user_state(self, user_id: str) -> UserState:
        try:
            return self.queue.state.read(user_id)
        except Exception:
            log.exception("memo-mw: could not read the user's pending state; recalling stored memories only")
            return EMPTY

    def _note_forget(self, user_id: str, forget: dict, state: UserState) -> UserState:
        """Record a forget request for recall and the jobs; take what it names out of pending payloads."""
        self._state_call("add_forget", user_id, forget)
        spooled = getattr(self.queue, "forget_spooled", None)  # jobs waiting for Redis in the outbox
        if spooled is not None:
            try:
                spooled(user_id, forget)
            except Exception:
                log.exception("memo-mw: could not apply a forget request to the outbox")
        # The state as read, each replacement guarded: a failing backend must not stop the rest.
        pending = rewrite_pending(None, user_id, lambda payload: without_forgotten(payload, [forget]),
                                  pending=state.pending,
                                  replace=lambda user, kept: self._state_call("replace_pending", user, kept))
        return state._replace(pending=pending, forgets=[*state.forgets, forget])


@dataclasses.dataclass(frozen=True, slots=True)
class _UserView:
    """What a request reads of one user, kept for the next ones while the user-state listener's
    stamp for the user stays the same (no write to the user's state or memories has been announced,
    the listener has not lost Redis) and for at most RECALL_VERSION_MAX_AGE, the age up to which
    recall trusts the user's version unread (the state itself is trusted for longer). Slots: read
    on every request (the interpreter specialises a slot's read, not a named tuple's)."""

    stamp: tuple
    until: float  # time.monotonic()
    state: UserState
    memories_ref: Callable[[], Any]  # the recaller's copy of the user's memories, by weak reference
    profile: tuple
    #: Whether recall finds nothing for a message that shares no token or topic with the copy's
    #: memories, and no recall-everything question (Recaller.recall_copy: a small user's copy
    #: with no memory always shown, and nothing pending, forgotten or shown in the state).
    quick: bool = False


#: The counts of a message with no topic in English (count_keys' answer), one tuple for all.
_EN_ONLY = ("@en",)

#: Users whose view is kept; beyond it, start over (a view holds no memories, only a reference).
_VIEWS_KEPT = 10_000


#: What almost every client sends as its content type (anything else is parsed by _json_type).
_PLAIN_JSON = frozenset({"application/json", "application/json; charset=utf-8", "application/json;charset=utf-8",
                         "application/json; charset=UTF-8", "application/json;charset=UTF-8"})


def _turn_of(body: Any, raw: bytes) -> Turn | None:
    """The turn in a parsed body (read_turn), its text with no lone surrogate (raw: the body's bytes)."""
    turn = read_turn(body)
    # find(), not `in`: bytes' `in` tries its operand as an int first, raising and clearing a TypeError.
    if turn is not None and raw.find(b"\\u") >= 0 and (raw.find(b"\\ud") >= 0 or raw.find(b"\\uD") >= 0):
        turn = _without_lone_surrogates(turn)
    return turn


def _whole(analysis: tuple | None) -> tuple | None:
    """The analysis as recall takes it: None where read_request() left its tokens unmade (only the
    topics and the key set they were checked against), for recall to make them."""
    return None if analysis is not None and analysis[0] is None else analysis


def _turn_and_body(body: Any, raw: bytes) -> tuple[Turn | None, Any]:
    """The turn of a body and the body, parsed here when read_request() read it in place (None)."""
    if body is None:
        body = _decode(raw.decode("utf-8"))
    return _turn_of(body, raw), body


def _without_lone_surrogates(turn: Turn) -> Turn:
    """The turn with any lone surrogate in its text (a ``\\ud800`` escape alone, valid JSON with no
    character behind it, which nothing can encode as UTF-8 to hash or store) read as U+FFFD: in
    the message, the user, session and message ids; the app's body is left as it came."""
    changes = {}
    for name in ("message", "body_user", "session_id", "message_id"):
        value = getattr(turn, name)
        if value is not None and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                changes[name] = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return dataclasses.replace(turn, **changes) if changes else turn


def _reject_constant(name: str) -> None:
    raise ValueError(f"non-standard JSON constant {name}")


def _finite_float(text: str) -> float:
    """A JSON number as a float; one too large for a float (1e400) is refused, as it could
    only be written back as Infinity, which is not JSON."""
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number out of range: {text}")
    return value


# One decoder (json.loads with these hooks would build one per call).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
_SCAN = _DECODER.scan_once  # its scanner (in C), which decode() runs after skipping whitespace
_JSON_SPACE = " \t\n\r"
#: The usual request read in one call (memo_mw/_speedups.c), when the extension was built.
_read_request = getattr(_speedups, "read_request", None)
_Reader = getattr(_speedups, "Reader", None)


def _decode(text: str) -> Any:
    """``_DECODER.decode(text)``: a body that starts with its value is scanned without decode()'s
    own steps around the scanner (two Python frames and two whitespace matches)."""
    if text[:1] not in ("{", "["):
        return _DECODER.decode(text)
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return _DECODER.decode(text)  # its error, with decode()'s message
    if end != len(text) and text[end:].strip(_JSON_SPACE):
        return _DECODER.decode(text)  # "Extra data"
    return value
