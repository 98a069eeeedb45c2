"""The chat app the HTTP figure runs under gunicorn: bare, or wrapped by the middleware when
MEMO_DB is set (MEMO_REDIS_URL for the queue). Its reply depends on the request, as a real app's
would: it parses the body and answers with the message's length."""

from __future__ import annotations

import os

from bench.perf import chat_app

app = chat_app()

if os.environ.get("MEMO_DB"):
    from memo_mw import MemoryMiddleware

    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=os.environ["MEMO_DB"],
                                    redis_url=os.environ.get("MEMO_REDIS_URL") or None, trust_user_header=True)
