"""``Memo``: the Flask extension, a thin adapter over the middleware. It reads ``MEMO_*`` settings from
``app.config``, installs :class:`MemoryMiddleware` and mounts the memories page (:mod:`memo_mw.admin`)::

    memo = Memo(app)            # or: memo = Memo(); memo.init_app(app)
"""

import os
import types
from typing import Any

from . import defaults
from .middleware import GetUser, MemoryMiddleware

#: (app.config key, the middleware's keyword argument, default).
SETTINGS = (
    ("MEMO_REDIS_URL", "redis_url", None),  # None: the jobs run on a thread in this process
    ("MEMO_RULES", "rules", None),  # rule files or folders; None: the shipped ones
    ("MEMO_PATHS", "paths", defaults.PATHS),
    ("MEMO_USER_HEADER", "user_header", defaults.USER_HEADER),
    ("MEMO_TRUST_USER_HEADER", "trust_user_header", False),  # True only behind a proxy that sets the header
    ("MEMO_MAX_BODY", "max_body", defaults.MAX_BODY_BYTES),
    ("MEMO_INJECT_FIELD", "inject_field", None),
    ("MEMO_RECALL_K", "recall_k", defaults.RECALL_K),
    ("MEMO_RECALL_BUDGET", "recall_budget", defaults.RECALL_BUDGET_CHARS),
    ("MEMO_QUEUE", "queue_name", defaults.QUEUE_NAME),
    ("MEMO_RULES_RELOAD", "rules_reload_interval", defaults.RULES_RELOAD_INTERVAL),
    ("MEMO_BODY_USER", "body_user", False),
    ("MEMO_SPOOL", "spool", None),  # None: <MEMO_DB>.spool (PostgreSQL: var/memo.spool)
    ("MEMO_HISTORY", "history", True),
    ("MEMO_HISTORY_DAYS", "history_days", defaults.HISTORY_DAYS),
    ("MEMO_HISTORY_K", "history_k", defaults.HISTORY_K),
)


class Memo:
    """Flask extension; the middleware it installs is ``app.extensions["memo"].middleware``, the page's
    blueprint ``app.extensions["memo"].blueprint`` (None with ``MEMO_ADMIN = False``). Besides
    :data:`SETTINGS`: ``MEMO_DB`` (default ``<instance folder>/memo.db``), ``MEMO_ADMIN`` (mount the page,
    default True), ``MEMO_ADMIN_PREFIX`` (``/memo``) and ``MEMO_ADMIN_TOKEN`` (default ``$MEMO_ADMIN_TOKEN``:
    16+ characters that may act for ``?user=``; unset, no one may)."""

    def __init__(self, app: Any = None, *, get_user: GetUser | None = None):
        self.get_user = get_user
        if app is not None:
            self.init_app(app)

    def init_app(self, app: Any) -> None:
        if "memo" in app.extensions:
            raise RuntimeError("memo-mw is already registered on this app; call init_app once per app.")
        config = app.config
        config.setdefault("MEMO_DB", os.path.join(app.instance_path, "memo.db"))
        config.setdefault("MEMO_ADMIN", True)
        config.setdefault("MEMO_ADMIN_PREFIX", "/memo")
        config.setdefault("MEMO_ADMIN_TOKEN", os.environ.get("MEMO_ADMIN_TOKEN") or None)
        options = {argument: config.setdefault(key, default) for key, argument, default in SETTINGS}
        app.wsgi_app = middleware = MemoryMiddleware(app.wsgi_app, db=config["MEMO_DB"], get_user=self.get_user,
                                                     **options)
        blueprint = None
        if config["MEMO_ADMIN"]:
            # Imported here: the rest of memo_mw runs without Flask.
            from .admin import blueprint_for

            blueprint = blueprint_for(middleware, url_prefix=config["MEMO_ADMIN_PREFIX"],
                                      admin_token=config["MEMO_ADMIN_TOKEN"])
            app.register_blueprint(blueprint)
        app.extensions["memo"] = types.SimpleNamespace(middleware=middleware, blueprint=blueprint)
