"""See, correct and delete what is remembered: a Flask blueprint with a JSON API and a web page.

::

    from memo_mw.admin import blueprint_for
    app.wsgi_app = middleware = MemoryMiddleware(app.wsgi_app, db="var/memo.db", get_user=...)
    app.register_blueprint(blueprint_for(middleware, admin_token=os.environ.get("MEMO_ADMIN_TOKEN")))

(the Flask extension :class:`memo_mw.Memo` does this itself). Routes, under ``url_prefix``
(``/memo`` by default):

=======================================  ==================================================
``GET /memo/``                           the web page: the user's insights, and memories by type
``GET /memo/api/insights``               the user's insights (read-only; made weekly)
``GET /memo/api/memories``               the user's memories; filters ``type``, ``status``, ``q``
``GET /memo/api/memories/<id>``          one memory
``PATCH /memo/api/memories/<id>``        ``{"content": "..."}``: edit its line
``DELETE /memo/api/memories/<id>``       delete it
``DELETE /memo/api/memories``            forget me: delete every memory, insight and topic count of the user
``GET /memo/api/export``                 a JSON download of everything stored about the user (insights
                                         and topic counts included)
=======================================  ==================================================

Who the user is comes from the same place as in the middleware: ``get_user(environ, None)``
when a ``get_user`` callable is configured, else the ``X-User-Id`` header (behind a proxy
that sets it). Nothing in the query string or the body names a user, except with the admin
token (``Authorization: Bearer <token>``), which acts for ``?user=<id>``. No identity: 401;
``?user=`` with a wrong token: 401, without a bearer token: 403. A memory of another user is a
404, the same as an id that does not exist. Without ``?user=``, an ``Authorization`` header is
the app's business (a Basic login in front of it, a bearer token its ``get_user`` reads).

Changes (``PATCH``, ``DELETE``) must come with a JSON ``Content-Type``, an ``X-Requested-With``
header or a bearer token: a cross-site form cannot send any of them, so another site cannot
make a signed-in browser delete anything. Every response is ``Cache-Control: no-store``;
the page allows only its own inline script and style (a nonce) and no framing.

The routes write SQLite from the web process (they are rare and asked for by the user; the
write lock is taken up front, so they wait for the worker rather than fail). Deletions also
reach the queue: the user's waiting ``remember`` jobs and pending memories lose what is
deleted (in Redis, as ``memo-mw forget --url`` does; in embedded mode the job thread is
drained first), so a deleted memory does not come back when a queued job runs.
"""

from __future__ import annotations

import hmac
import logging
import re
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jinja2
from flask import Blueprint, Response, jsonify, request, url_for

from . import defaults, userdata
from .adapters import clean_id
from .funnel import Funnel
from .middleware import GetUser, MemoryMiddleware
from .queue import Backend, make_backend
from .rules import RuleSet, load_rules
from .store import Store
from .userstate import forget_marker, rewrite_pending, without_forgotten, without_slot

log = logging.getLogger(__name__)

#: An admin token shorter than this is refused at start-up: it would be guessable.
MIN_TOKEN_CHARS = 16
#: The longest edited line accepted (characters); captured lines are far shorter.
MAX_EDIT_CHARS = defaults.MAX_MESSAGE_CHARS

# Its own template environment, not the app's: an app template of the same name cannot replace it.
_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"), autoescape=True)
_TEMPLATES.filters["day"] = lambda ts: time.strftime("%Y-%m-%d", time.gmtime(ts or 0))
_TEMPLATES.filters["iso"] = lambda ts: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts or 0))
_TEMPLATES.globals["titles"] = {
    "style": "How to answer", "preference": "Likes and dislikes", "fact": "Facts about you",
    "task": "Tasks and reminders", "commitment": "Promises",
}
_TEMPLATES.globals["status_labels"] = {
    "pending_confirm": "expired: still true?", "superseded": "replaced by a newer one",
}


class _Denied(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class Admin:
    """The settings the routes share; see :func:`create_blueprint`."""

    def __init__(self, db: str, *, user_header: str, get_user: GetUser | None, admin_token: str | None,
                 backend: Backend | None, funnel: Any, clock: Callable[[], float]):
        self.db = db
        self.user_header_key = "HTTP_" + user_header.upper().replace("-", "_")
        self.get_user = get_user
        self.admin_token = _checked_token(admin_token)
        self.backend = backend
        # The funnel's rules at the time of the request (they may be reloaded): its sensitive
        # gates refuse an edit, its topic lexicons tag one.
        self.funnel = funnel
        self.clock = clock

    # -- who is asking -----------------------------------------------------------------

    def user(self) -> tuple[str, bool]:
        """(the user the request acts for, whether by the admin token); raises _Denied.

        Only a request naming ``?user=`` is an admin request: an ``Authorization`` header
        without it is left to the app (a Basic login in front, a bearer token its own
        ``get_user`` reads), and the request acts for its own identity.
        """
        if "user" in request.args:
            token = _bearer(request.headers.get("Authorization", ""))
            if token is None:
                raise _Denied(403, "only the admin token may act for another user (?user=)")
            if self.admin_token is None or not hmac.compare_digest(token.encode(), self.admin_token.encode()):
                raise _Denied(401, "the admin token is not valid")
            user = clean_id(request.args.get("user"))
            if user is None:
                raise _Denied(400, "?user= must name a user")
            return user, True
        user = self._own_identity(request.environ)
        if user is None:
            raise _Denied(401, "no user identity on this request")
        return user, False

    def _own_identity(self, environ: dict) -> str | None:
        if self.get_user is not None:
            try:
                return clean_id(self.get_user(environ, None))
            except Exception:
                log.exception("memo-mw: get_user failed; the request has no identity")
                return None
        header = environ.get(self.user_header_key)
        if isinstance(header, str):
            try:  # WSGI hands headers over as latin-1; the middleware reads them as UTF-8 too
                header = header.encode("latin-1").decode("utf-8")
            except UnicodeError:
                pass
        return clean_id(header)

    # -- what the routes share ---------------------------------------------------------

    def store(self) -> Store:
        return Store(self.db)

    def now(self) -> int:
        return int(self.clock())

    def sensitive_gate(self, text: str) -> str | None:
        """The id of the first sensitive gate the text hits (a category never stored), or None."""
        for gate in self.funnel.rules.gates("sensitive"):
            try:
                if gate.pattern.search(text, timeout=defaults.REGEX_TIMEOUT) is not None:
                    return gate.id
            except TimeoutError:
                return gate.id  # cannot tell: refuse rather than store it
        return None

    def forget_queued(self, user_id: str, match: str | None, ts: int, at: float) -> bool:
        """Take what a deletion names out of the user's waiting jobs and pending memories (those
        whose message the server read by ``at``, its own time of the deletion).

        Before the deletion itself, so a job that starts meanwhile already sees the request.
        False when the queue could not be reached (the deletion in SQLite still happens).
        """
        if self.backend is None:
            return True
        marker = forget_marker(match, ts, at, pending_only=True)  # the store deletes at once
        try:
            spooled = getattr(self.backend, "forget_spooled", None)
            if spooled is not None:  # jobs waiting in the outbox while Redis is down
                spooled(user_id, marker)
            queue = getattr(self.backend, "queue", None)
            if queue is not None:  # rq on Redis
                from .jobs import forget_waiting

                forget_waiting(queue, user_id, marker)
            else:  # the in-process job thread: let what it holds run first, then delete
                state = self.backend.state
                state.add_forget(user_id, marker)
                rewrite_pending(state, user_id, lambda payload: without_forgotten(payload, [marker]))
                join = getattr(self.backend, "join", None)
                if join is not None:
                    join()
        except Exception:
            log.exception("memo-mw: could not reach the queue to drop the user's waiting jobs")
            return False
        return True

    def drop_pending_slot(self, user_id: str, key: str, at: float) -> None:
        """Take the statements of slot ``key`` read by ``at`` out of the user's pending memories:
        recall shows pending statements until their jobs run, and after an edit of the slot the
        store no longer stores them (Store.mark_edited)."""
        if self.backend is None:
            return
        try:
            spooled = getattr(self.backend, "drop_slot_spooled", None)
            if spooled is not None:  # jobs waiting in the outbox (written behind, or Redis down)
                spooled(user_id, key, at)
            rewrite_pending(self.backend.state, user_id, lambda payload: without_slot(payload, key, at))
        except Exception:
            log.exception("memo-mw: could not take an edited slot out of the user's pending memories")

    def pending(self, user_id: str) -> list[dict[str, Any]]:
        """The user's captured memories still waiting for their job (for the export)."""
        if self.backend is None:
            return []
        try:
            return self.backend.state.read(user_id).pending
        except Exception:
            log.exception("memo-mw: could not read the user's pending memories")
            return []


def _bearer(authorization: str) -> str | None:
    scheme, _, token = authorization.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _checked_token(token: str | None) -> str | None:
    if not token:
        return None
    if not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS:
        raise ValueError(f"the admin token (MEMO_ADMIN_TOKEN) must be a string of at least {MIN_TOKEN_CHARS} "
                         "characters; generate one with: python -c 'import secrets; print(secrets.token_urlsafe())'")
    return token


def create_blueprint(db: str, *, url_prefix: str = "/memo", user_header: str = defaults.USER_HEADER,
                     get_user: GetUser | None = None, admin_token: str | None = None,
                     redis_url: str | None = None, backend: Backend | None = None,
                     queue_name: str = defaults.QUEUE_NAME, rules: Any = None,
                     clock: Callable[[], float] = time.time, name: str = "memo_admin") -> Blueprint:
    """The blueprint for the memories in ``db``.

    :param url_prefix: where it is mounted.
    :param user_header: the header holding the user id (as in the middleware).
    :param get_user: ``get_user(environ, None) -> user id or None``; when given, the only
        identity source (a session cookie, an auth proxy), as in the middleware.
    :param admin_token: the token (at least 16 characters) that may act for ``?user=``;
        ``None``: no one may.
    :param redis_url: the middleware's Redis, so deletions reach the user's waiting jobs;
        or ``backend``, the middleware's queue backend itself. Neither: SQLite only.
    :param rules: the rules whose sensitive gates refuse an edit and whose topic lexicons
        tag it (``None``: the shipped rules).
    """
    if backend is None and redis_url:
        backend = make_backend(redis_url, queue_name=queue_name)
    funnel = Funnel(rules if isinstance(rules, RuleSet) else load_rules(rules))
    admin = Admin(str(Path(db).resolve()), user_header=user_header, get_user=get_user, admin_token=admin_token,
                  backend=backend, funnel=funnel, clock=clock)
    return _blueprint(admin, name=name, url_prefix=url_prefix)


def blueprint_for(middleware: MemoryMiddleware, *, url_prefix: str = "/memo", admin_token: str | None = None,
                  name: str = "memo_admin") -> Blueprint:
    """The blueprint for a middleware's memories: its database, identity source, queue and rules."""
    admin = Admin(middleware.db, user_header="X", get_user=middleware.get_user, admin_token=admin_token,
                  backend=middleware.queue, funnel=middleware.funnel, clock=middleware.clock)
    admin.user_header_key = middleware.user_header_key
    return _blueprint(admin, name=name, url_prefix=url_prefix)


_DIGITS = re.compile(r"[0-9]{1,18}")


def _memory_id(text: str) -> int:
    if not _DIGITS.fullmatch(text):
        raise _Denied(404, "no such memory")
    return int(text)


def _blueprint(admin: Admin, *, name: str, url_prefix: str) -> Blueprint:
    bp = Blueprint(name, __name__, url_prefix=url_prefix.rstrip("/") or None)
    bp.memo_admin = admin  # type: ignore[attr-defined]  # for tests and callers

    @bp.errorhandler(_Denied)
    def denied(exc: _Denied):
        response = jsonify(error=exc.message)
        response.status_code = exc.status
        if exc.status == 401:
            response.headers["WWW-Authenticate"] = 'Bearer realm="memo"'
        return response

    @bp.before_request
    def refuse_cross_site_changes():
        if request.method in ("PATCH", "DELETE", "POST", "PUT"):
            json_body = request.mimetype == "application/json"
            # Not any Authorization: a browser adds a Basic login to cross-site requests by itself.
            bearer = _bearer(request.headers.get("Authorization", "")) is not None
            if not (json_body or "X-Requested-With" in request.headers or bearer):
                raise _Denied(403, "changes need a JSON body, an X-Requested-With header or a bearer token")

    @bp.after_request
    def no_store(response: Response) -> Response:
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        return response

    @bp.get("/")
    def page():
        try:
            user, _ = admin.user()
        except _Denied as exc:
            return _render("admin_denied.html", status=exc.status, message=exc.message)
        filters = {"type": request.args.get("type") or None, "status": request.args.get("status") or None,
                   "q": (request.args.get("q") or "").strip() or None}
        if filters["type"] not in (None, *userdata.TYPES) or filters["status"] not in (None, *userdata.STATUSES):
            filters["type"] = filters["status"] = None
        with admin.store() as store:
            found = userdata.memories(store, user, **filters)
            total = len(found) if not any(filters.values()) else len(userdata.memories(store, user))
            insights = userdata.insights(store, user)
        groups = [(t, [m for m in found if m["type"] == t]) for t in userdata.TYPES]
        return _render("admin.html", user=user, groups=[g for g in groups if g[1]], count=len(found),
                       insights=insights,
                       total=total, filters=filters, types=userdata.TYPES, statuses=userdata.STATUSES,
                       api=url_for(f"{name}.list_memories"), export=url_for(f"{name}.export"),
                       max_chars=MAX_EDIT_CHARS)

    @bp.get("/api/memories")
    def list_memories():
        user, _ = admin.user()
        filters = {}
        for field, allowed in (("type", userdata.TYPES), ("status", userdata.STATUSES)):
            value = request.args.get(field)
            if value is not None:
                if value not in allowed:
                    raise _Denied(400, f"{field} must be one of {', '.join(allowed)}")
                filters[field] = value
        with admin.store() as store:
            found = userdata.memories(store, user, q=request.args.get("q"), **filters)
        return jsonify(user_id=user, count=len(found), memories=found)

    @bp.get("/api/memories/<memory_id>")
    def get_memory(memory_id: str):
        user, _ = admin.user()
        with admin.store() as store:
            found = userdata.memory(store, user, _memory_id(memory_id))
        if found is None:
            raise _Denied(404, "no such memory")
        return jsonify(memory=found)

    @bp.patch("/api/memories/<memory_id>")
    def edit_memory(memory_id: str):
        user, by_admin = admin.user()
        number = _memory_id(memory_id)
        body = request.get_json(silent=True)
        if not isinstance(body, dict) or set(body) != {"content"}:
            raise _Denied(400, 'send a JSON object {"content": "the new line"} and nothing else')
        content = body["content"]
        if not isinstance(content, str) or not content.strip():
            raise _Denied(400, "content must be a non-empty string")
        if len(content) > MAX_EDIT_CHARS:
            raise _Denied(400, f"content is longer than {MAX_EDIT_CHARS} characters")
        cleaned = userdata.clean_content(content)
        gate = admin.sensitive_gate(cleaned)
        if gate is not None:
            # The store never keeps these categories; an edit cannot add one.
            raise _Denied(422, f"this is a sensitive category that is never stored ({gate})")
        at = admin.clock()  # to the fraction of a second: statements are ordered against it
        with admin.store() as store:
            before = userdata.memory(store, user, number)
            done = userdata.edit(store, user, number, content, ts=int(at), at=at, reason=_reason(by_admin),
                                 topics=sorted(admin.funnel.topics.tag(cleaned)))
        if done is None or before is None:
            raise _Denied(404, "no such memory")
        outcome, found = done
        if outcome != "unchanged":
            admin.drop_pending_slot(user, before["key"], at)
        return jsonify(outcome=outcome, memory=found, masked=cleaned != userdata.one_line(content))

    @bp.delete("/api/memories/<memory_id>")
    def delete_memory(memory_id: str):
        user, by_admin = admin.user()
        number = _memory_id(memory_id)
        with admin.store() as store:
            found = userdata.memory(store, user, number)
        if found is None:
            raise _Denied(404, "no such memory")
        # The server's time, to the fraction of a second: waiting statements are ordered against it.
        at = admin.clock()
        ts = int(at)
        reached = admin.forget_queued(user, found["content"], ts, at)
        with admin.store() as store:
            deleted = userdata.delete(store, user, number, ts=ts, reason=_reason(by_admin), at=at)
        if deleted is None:  # deleted meanwhile
            raise _Denied(404, "no such memory")
        return jsonify(deleted=1, id=number, queue_reached=reached)

    @bp.get("/api/insights")
    def list_insights():
        user, _ = admin.user()
        with admin.store() as store:
            found = userdata.insights(store, user)
        return jsonify(user_id=user, count=len(found), insights=found)

    @bp.delete("/api/memories")
    def forget_me():
        user, by_admin = admin.user()
        at = admin.clock()
        ts = int(at)
        reached = admin.forget_queued(user, None, ts, at)
        with admin.store() as store:
            count = store.forget(user, ts=ts, reason=_reason(by_admin), at=at, now=True)
        return jsonify(deleted=count, queue_reached=reached)

    @bp.get("/api/export")
    def export():
        user, _ = admin.user()
        with admin.store() as store:
            data = userdata.export(store, user, now=admin.now())
        data["pending"] = admin.pending(user)
        response = jsonify(data)
        slug = re.sub(r"[^A-Za-z0-9_-]+", "_", user)[:64] or "user"
        response.headers["Content-Disposition"] = f'attachment; filename="memo-export-{slug}.json"'
        return response

    return bp


def _reason(by_admin: bool) -> str:
    return "admin token" if by_admin else "user, memo page or API"


def _render(template: str, *, status: int = 200, **context: Any) -> Response:
    nonce = secrets.token_urlsafe(16)
    html = _TEMPLATES.get_template(template).render(nonce=nonce, **context)
    response = Response(html, status=status, mimetype="text/html")
    response.headers["Content-Security-Policy"] = (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; connect-src 'self'; "
        "img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
    return response
