"""See, correct and delete what is remembered, and the chat history: a Flask blueprint with a JSON API
(``_ROUTES``) and a web page under ``/memo``, for the middleware's user; only the admin token may act
for ``?user=<id>``::

    app.register_blueprint(blueprint_for(middleware, admin_token=os.environ.get("MEMO_ADMIN_TOKEN")))

Another user's memory or message is a 404. Changes need a JSON body, an ``X-Requested-With`` header
or a bearer token, which a cross-site form cannot send."""

import functools
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
from . import insights as profile
from .adapters import BadUserId, header_user, user_id
from .funnel import Funnel
from .middleware import GetUser, MemoryMiddleware
from .queue import LocalQueue, RedisQueue, make_queue
from .rules import RuleSet, load_rules
from .store import Store

log = logging.getLogger(__name__)

#: An admin token shorter than this is refused at start-up: it would be guessable.
MIN_TOKEN_CHARS = 16
#: The longest edited line accepted (characters); captured lines are far shorter.
MAX_EDIT_CHARS = defaults.MAX_MESSAGE_CHARS

_DIGITS = re.compile(r"[0-9]{1,18}")


class _Denied(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class Admin:
    """The settings the routes share; see :func:`create_blueprint`."""

    def __init__(self, db: str, *, user_header_key: str | None, get_user: GetUser | None, admin_token: str | None,
                 queue: RedisQueue | LocalQueue | None, funnel: Any, clock: Callable[[], float]):
        self.db, self.user_header_key, self.get_user, self.queue = db, user_header_key, get_user, queue
        self.admin_token = _checked_token(admin_token)
        # The funnel, not its rules, which may be reloaded: its sensitive gates refuse an edit, its lexicons tag one.
        self.funnel, self.clock = funnel, clock
        # The page's own templates, not the app's: an app template of the same name cannot replace them.
        self.templates = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
                                            autoescape=True)
        self.templates.filters["iso"] = lambda ts: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts or 0))

    def user(self) -> tuple[str, str]:
        """(the user the request acts for, who acts, for the audit); raises _Denied. Without ``?user=``,
        an ``Authorization`` header is the app's: the request acts for its own identity (``get_user``, or
        the user header when trusted: ``user_header_key`` is None otherwise)."""
        if "user" in request.args:
            token = _bearer(request.headers.get("Authorization", ""))
            if token is None:
                raise _Denied(403, "only the admin token may act for another user (?user=)")
            if self.admin_token is None or not hmac.compare_digest(token.encode(), self.admin_token.encode()):
                raise _Denied(401, "the admin token is not valid")
            try:
                user = user_id(request.args.get("user"))
            except BadUserId as exc:
                raise _Denied(400, str(exc)) from None
            if user is None:
                raise _Denied(400, "?user= must name a user")
            return user, "admin token"
        try:
            user = (user_id(self.get_user(request.environ, None)) if self.get_user is not None
                    else header_user(request.environ, self.user_header_key) if self.user_header_key else None)
        except BadUserId as exc:
            raise _Denied(400, str(exc)) from None
        except Exception:
            log.exception("memo-mw: get_user failed; the request has no identity")
            user = None
        if user is None:
            raise _Denied(401, "no user identity on this request")
        return user, "user, memo page or API"

    def sensitive_gate(self, text: str) -> str | None:
        """The id of the first sensitive gate the text hits (a category never stored), or None."""
        for gate in self.funnel.rules.gates("sensitive"):
            try:
                if gate.pattern.search(text, timeout=defaults.REGEX_TIMEOUT) is not None:
                    return gate.id
            except TimeoutError:
                return gate.id  # cannot tell: refuse rather than store it
        return None


def _bearer(authorization: str) -> str | None:
    scheme, _, token = authorization.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def _checked_token(token: str | None) -> str | None:
    if token and (not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS):
        raise ValueError(f"the admin token (MEMO_ADMIN_TOKEN) must be a string of at least {MIN_TOKEN_CHARS} "
                         "characters; generate one with: python -c 'import secrets; print(secrets.token_urlsafe())'")
    return token or None


def create_blueprint(db: str, *, url_prefix: str = "/memo", user_header: str = defaults.USER_HEADER,
                     trust_user_header: bool = False, get_user: GetUser | None = None, admin_token: str | None = None,
                     redis_url: str | None = None, queue: RedisQueue | LocalQueue | None = None,
                     queue_name: str = defaults.QUEUE_NAME, rules: Any = None,
                     clock: Callable[[], float] = time.time, name: str = "memo_admin") -> Blueprint:
    """The blueprint for the memories in ``db`` apart from a middleware (another process), the other arguments
    as the middleware's so deletions reach its waiting jobs; ``admin_token`` (16+ characters) acts for ``?user=``;
    the ``user_header`` names the user only with ``trust_user_header`` (behind a proxy that sets it)."""
    db = str(Path(db).resolve())
    if queue is None and redis_url:  # the middleware's own spool file: several processes may share it
        queue = make_queue(redis_url, name=queue_name, spool=db + ".spool")
    header_key = "HTTP_" + user_header.upper().replace("-", "_") if trust_user_header else None
    admin = Admin(db, user_header_key=header_key, get_user=get_user, admin_token=admin_token, queue=queue,
                  funnel=Funnel(rules if isinstance(rules, RuleSet) else load_rules(rules)), clock=clock)
    return _blueprint(admin, name=name, url_prefix=url_prefix)


def blueprint_for(middleware: MemoryMiddleware, *, url_prefix: str = "/memo", admin_token: str | None = None,
                  name: str = "memo_admin") -> Blueprint:
    """The blueprint for a middleware's memories: its database, identity source, queue and rules."""
    header_key = middleware.user_header_key if middleware.trust_user_header else None
    admin = Admin(middleware.db, user_header_key=header_key, get_user=middleware.get_user,
                  admin_token=admin_token, queue=middleware.queue, funnel=middleware.funnel, clock=middleware.clock)
    return _blueprint(admin, name=name, url_prefix=url_prefix)


def _blueprint(admin: Admin, *, name: str, url_prefix: str) -> Blueprint:
    bp = Blueprint(name, __name__, url_prefix=url_prefix.rstrip("/") or None)
    bp.register_error_handler(_Denied, _denied)
    bp.before_request(_refuse_cross_site_changes)
    bp.after_request(_no_store)
    for rule, method, view in _ROUTES:
        bp.add_url_rule(rule, endpoint=view.__name__, view_func=functools.partial(view, admin), methods=[method])
    return bp


def _denied(exc: _Denied) -> tuple[Response, int, dict[str, str]]:
    challenge = {"WWW-Authenticate": 'Bearer realm="memo"'} if exc.status == 401 else {}
    return jsonify(error=exc.message), exc.status, challenge


def _refuse_cross_site_changes() -> None:
    if request.method in ("PATCH", "DELETE", "POST", "PUT"):
        json_body = request.mimetype == "application/json"
        # Not any Authorization: a browser adds a Basic login to cross-site requests by itself.
        bearer = _bearer(request.headers.get("Authorization", "")) is not None
        if not (json_body or "X-Requested-With" in request.headers or bearer):
            raise _Denied(403, "changes need a JSON body, an X-Requested-With header or a bearer token")


def _no_store(response: Response) -> Response:
    response.headers.update({"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"})
    response.headers.setdefault("Referrer-Policy", "no-referrer")
    return response


def _memory(admin: Admin, user: str, memory_id: str) -> dict[str, Any]:
    """The user's memory of that id; 404 for another user's, as for one that does not exist."""
    found = None
    if _DIGITS.fullmatch(memory_id):
        with Store(admin.db) as store:
            found = store.get(user, int(memory_id))
    if found is None:
        raise _Denied(404, "no such memory")
    return found


def page(admin: Admin) -> Response:
    try:
        user, _ = admin.user()
    except _Denied as exc:
        return _render(admin, "admin_denied.html", status=exc.status, message=exc.message)
    filters = {"type": request.args.get("type") or None, "status": request.args.get("status") or None,
               "q": (request.args.get("q") or "").strip() or None}
    if filters["type"] not in (None, *userdata.TYPES) or filters["status"] not in (None, *userdata.STATUSES):
        filters["type"] = filters["status"] = None
    with Store(admin.db) as store:
        found = userdata.memories(store, user, **filters)
        total = len(found) if not any(filters.values()) else len(userdata.memories(store, user))
        insights = profile.read(store, user)
        said, keeping = userdata.history(store, user, q=filters["q"]), userdata.history_enabled(store, user)
    groups = [(t, [m for m in found if m["type"] == t]) for t in userdata.TYPES]
    return _render(admin, "admin.html", user=user, groups=[g for g in groups if g[1]], count=len(found),
                   insights=insights, total=total, filters=filters, types=userdata.TYPES,
                   statuses=userdata.STATUSES, api=url_for(".list_memories"), export=url_for(".export"),
                   max_chars=MAX_EDIT_CHARS, history=said, keeping=keeping, history_api=url_for(".list_history"))


def list_memories(admin: Admin) -> Response:
    user, _ = admin.user()
    filters = {}
    for field, allowed in (("type", userdata.TYPES), ("status", userdata.STATUSES)):
        filters[field] = value = request.args.get(field)
        if value is not None and value not in allowed:
            raise _Denied(400, f"{field} must be one of {', '.join(allowed)}")
    with Store(admin.db) as store:
        found = userdata.memories(store, user, q=request.args.get("q"), **filters)
    return jsonify(user_id=user, count=len(found), memories=found)


def get_memory(admin: Admin, memory_id: str) -> Response:
    user, _ = admin.user()
    return jsonify(memory=_memory(admin, user, memory_id))


def edit_memory(admin: Admin, memory_id: str) -> Response:
    user, reason = admin.user()
    before = _memory(admin, user, memory_id)
    body = request.get_json(silent=True)
    if not isinstance(body, dict) or set(body) != {"content"}:
        raise _Denied(400, 'send a JSON object {"content": "the new line"} and nothing else')
    content = body["content"]
    if not isinstance(content, str) or not content.strip():
        raise _Denied(400, "content must be a non-empty string")
    if len(content) > MAX_EDIT_CHARS:
        raise _Denied(400, f"content is longer than {MAX_EDIT_CHARS} characters")
    cleaned = userdata.clean_content(content)
    if (gate := admin.sensitive_gate(cleaned)) is not None:  # never stored: an edit cannot add one either
        raise _Denied(422, f"this is a sensitive category that is never stored ({gate})")
    at = admin.clock()  # to the fraction of a second: waiting statements are ordered against it
    with Store(admin.db) as store:
        done = userdata.edit(store, user, before["id"], content, at=at, reason=reason,
                             topics=sorted(admin.funnel.topics.tag(cleaned)))
    if done is None:
        raise _Denied(404, "no such memory")  # deleted meanwhile
    outcome, found = done
    if outcome != "unchanged":
        userdata.drop_pending_slot(admin.queue, user, before["key"], at)
    return jsonify(outcome=outcome, memory=found, masked=cleaned != userdata.one_line(content))


def delete_memory(admin: Admin, memory_id: str) -> Response:
    user, reason = admin.user()
    found = _memory(admin, user, memory_id)
    at = admin.clock()  # to the fraction of a second: waiting statements are ordered against it
    reached = userdata.forget_waiting(admin.queue, user, found["content"], int(at), at)
    with Store(admin.db) as store:
        if userdata.delete(store, user, found["id"], ts=int(at), reason=reason) is None:
            raise _Denied(404, "no such memory")  # deleted meanwhile
    return jsonify(deleted=1, id=found["id"], queue_reached=reached)


def forget_me(admin: Admin) -> Response:
    user, reason = admin.user()
    at = admin.clock()
    reached = userdata.forget_waiting(admin.queue, user, None, int(at), at)
    with Store(admin.db) as store:
        count = store.forget(user, ts=int(at), reason=reason, at=at, now=True)
    return jsonify(deleted=count, queue_reached=reached)


def list_history(admin: Admin) -> Response:
    user, _ = admin.user()
    with Store(admin.db) as store:
        found = userdata.history(store, user, q=request.args.get("q"))
        keeping = userdata.history_enabled(store, user)
    return jsonify(user_id=user, count=len(found), enabled=keeping, history=found)


def delete_message(admin: Admin, message_id: str) -> Response:
    """One message of the user's history; 404 for another user's, as for one that does not exist."""
    user, reason = admin.user()
    count = 0
    if _DIGITS.fullmatch(message_id):
        with Store(admin.db) as store:
            count = userdata.delete_history(store, user, int(message_id), ts=int(admin.clock()), reason=reason)
    if not count:
        raise _Denied(404, "no such message")
    return jsonify(deleted=count, id=int(message_id))


def delete_history(admin: Admin) -> Response:
    user, reason = admin.user()
    with Store(admin.db) as store:
        count = userdata.delete_history(store, user, ts=int(admin.clock()), reason=reason)
    return jsonify(deleted=count)


def set_history(admin: Admin) -> Response:
    """Turn the user's chat history on or off (off deletes what is kept)."""
    user, reason = admin.user()
    body = request.get_json(silent=True)
    if not isinstance(body, dict) or set(body) != {"enabled"} or not isinstance(body["enabled"], bool):
        raise _Denied(400, 'send a JSON object {"enabled": true or false} and nothing else')
    with Store(admin.db) as store:
        count = userdata.set_history(store, user, body["enabled"], ts=int(admin.clock()), reason=reason)
    return jsonify(enabled=body["enabled"], deleted=count)


def list_insights(admin: Admin) -> Response:
    user, _ = admin.user()
    with Store(admin.db) as store:
        found = profile.read(store, user)
    return jsonify(user_id=user, count=len(found), insights=found)


def export(admin: Admin) -> tuple[Response, dict[str, str]]:
    user, _ = admin.user()
    with Store(admin.db) as store:
        data = userdata.export(store, user, now=int(admin.clock()))
    data["pending"] = userdata.pending(admin.queue, user)
    slug = re.sub(r"[^A-Za-z0-9_-]+", "_", user)[:64] or "user"
    return jsonify(data), {"Content-Disposition": f'attachment; filename="memo-export-{slug}.json"'}


_ROUTES = (
    ("/", "GET", page),
    ("/api/insights", "GET", list_insights),
    ("/api/memories", "GET", list_memories),
    ("/api/memories/<memory_id>", "GET", get_memory),
    ("/api/memories/<memory_id>", "PATCH", edit_memory),
    ("/api/memories/<memory_id>", "DELETE", delete_memory),
    ("/api/memories", "DELETE", forget_me),
    ("/api/history", "GET", list_history),
    ("/api/history/<message_id>", "DELETE", delete_message),
    ("/api/history", "DELETE", delete_history),
    ("/api/history/enabled", "PUT", set_history),
    ("/api/export", "GET", export),
)


def _render(admin: Admin, template: str, *, status: int = 200, **context: Any) -> Response:
    nonce = secrets.token_urlsafe(16)  # the page runs its own inline script and style, nothing else
    html = admin.templates.get_template(template).render(nonce=nonce, **context)
    return Response(html, status=status, mimetype="text/html", headers={"Content-Security-Policy": (
        f"default-src 'none'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; connect-src 'self'; "
        "img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")})
