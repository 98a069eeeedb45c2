"""``Memo``: the Flask extension. It reads ``MEMO_*`` settings, installs :class:`MemoryMiddleware`
and mounts the memories page and API (:mod:`memo_mw.admin`).

::

    memo = Memo(app)            # or: memo = Memo(); memo.init_app(app)

Settings (each defaults to the middleware's keyword argument of the same name):

=====================  ===========================================  =====================
key                    meaning                                      default
=====================  ===========================================  =====================
MEMO_DB                SQLite file                                  ``memo.db`` (instance folder)
MEMO_REDIS_URL         Redis for the job queue; unset: in-process   ``None``
MEMO_RULES             rule files or folders (list or one path)     shipped rules
MEMO_PATHS             chat paths read on POST                      ``/chat``, ``/v1/chat/completions``
MEMO_USER_HEADER       header holding the user id                   ``X-User-Id``
MEMO_MAX_BODY          larger bodies pass through unread (bytes)    262144
MEMO_INJECT_FIELD      plain bodies: field for the block            ``None`` (prepend to message)
MEMO_RECALL_K          memories per request                         5
MEMO_RECALL_BUDGET     characters of memory lines per request       600
MEMO_QUEUE             RQ queue name                                ``memo``
MEMO_RULES_RELOAD      seconds between looks at the rule files      2.0 (0 or None: never)
MEMO_BODY_USER         also take the user id from the body          ``False``
MEMO_SPOOL             jobs wait here while Redis is down           ``<MEMO_DB>.spool``
MEMO_ADMIN             mount the memories page and API              ``True``
MEMO_ADMIN_PREFIX      where they are mounted                       ``/memo``
MEMO_ADMIN_TOKEN       token that may act for ``?user=`` (16+       ``$MEMO_ADMIN_TOKEN``
                       characters); unset: no one may
=====================  ===========================================  =====================

The page and the API (:mod:`memo_mw.admin`) take the user from the same place as the
middleware: ``get_user`` when given (a session cookie), else the ``MEMO_USER_HEADER``
header, which only a proxy in front of the app should set. Set ``MEMO_ADMIN = False``
to leave them out.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from . import defaults
from .middleware import GetUser, MemoryMiddleware

log = logging.getLogger(__name__)


class Memo:
    """Flask extension; the middleware it installs is ``app.extensions["memo"].middleware``."""

    def __init__(self, app: Any = None, *, get_user: GetUser | None = None):
        self.get_user = get_user
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Any) -> None:
        if "memo" in app.extensions:
            raise RuntimeError("memo-mw is already registered on this app; call init_app once per app.")
        config = app.config
        config.setdefault("MEMO_DB", os.path.join(app.instance_path, "memo.db"))
        config.setdefault("MEMO_REDIS_URL", None)
        config.setdefault("MEMO_RULES", None)
        config.setdefault("MEMO_PATHS", list(defaults.PATHS))
        config.setdefault("MEMO_USER_HEADER", defaults.USER_HEADER)
        config.setdefault("MEMO_MAX_BODY", defaults.MAX_BODY_BYTES)
        config.setdefault("MEMO_INJECT_FIELD", None)
        config.setdefault("MEMO_RECALL_K", defaults.RECALL_K)
        config.setdefault("MEMO_RECALL_BUDGET", defaults.RECALL_BUDGET_CHARS)
        config.setdefault("MEMO_QUEUE", defaults.QUEUE_NAME)
        config.setdefault("MEMO_RULES_RELOAD", defaults.RULES_RELOAD_INTERVAL)
        config.setdefault("MEMO_BODY_USER", False)
        config.setdefault("MEMO_SPOOL", None)
        config.setdefault("MEMO_ADMIN", True)
        config.setdefault("MEMO_ADMIN_PREFIX", "/memo")
        config.setdefault("MEMO_ADMIN_TOKEN", os.environ.get("MEMO_ADMIN_TOKEN") or None)
        middleware = MemoryMiddleware(
            app.wsgi_app,
            rules=config["MEMO_RULES"],
            db=config["MEMO_DB"],
            redis_url=config["MEMO_REDIS_URL"],
            paths=config["MEMO_PATHS"],
            user_header=config["MEMO_USER_HEADER"],
            get_user=self.get_user,
            max_body=config["MEMO_MAX_BODY"],
            inject_field=config["MEMO_INJECT_FIELD"],
            recall_k=config["MEMO_RECALL_K"],
            recall_budget=config["MEMO_RECALL_BUDGET"],
            queue_name=config["MEMO_QUEUE"],
            rules_reload_interval=config["MEMO_RULES_RELOAD"],
            body_user=config["MEMO_BODY_USER"],
            spool=config["MEMO_SPOOL"],
        )
        app.wsgi_app = middleware
        blueprint = None
        if config["MEMO_ADMIN"]:
            from .admin import blueprint_for

            if self.get_user is None:
                log.warning("memo-mw: the memories page and API at %s take the user from the %s header: make "
                            "sure only your proxy sets it, or pass get_user, or set MEMO_ADMIN = False",
                            config["MEMO_ADMIN_PREFIX"], config["MEMO_USER_HEADER"])
            blueprint = blueprint_for(middleware, url_prefix=config["MEMO_ADMIN_PREFIX"],
                                      admin_token=config["MEMO_ADMIN_TOKEN"])
            app.register_blueprint(blueprint)
        app.extensions["memo"] = _State(middleware, blueprint)


class _State:
    def __init__(self, middleware: MemoryMiddleware, blueprint: Any = None):
        self.middleware = middleware
        #: The memories page and API (memo_mw.admin), or None when MEMO_ADMIN is off.
        self.blueprint = blueprint
