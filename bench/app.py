"""The chat app the benchmarks run under gunicorn: bare, or wrapped by the middleware when
MEMO_DB is set (MEMO_REDIS_URL for the queue), or, with MEMO_CONTROL=read, by a wrapper that only
reads the body and puts it back (the HTTP figure's control: what any middleware that reads the
body costs). Its reply depends on the request, as a real app's would: it parses the body and
answers with the message's length."""

from __future__ import annotations

import io
import os

from flask import Flask, jsonify, request

app = Flask(__name__)


@app.post("/chat")
def chat():
    body = request.get_json()
    return jsonify(reply="ok", length=len(body["message"]))


if os.environ.get("MEMO_DB"):
    from memo_mw import MemoryMiddleware

    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=os.environ["MEMO_DB"],
                                    redis_url=os.environ.get("MEMO_REDIS_URL") or None)
elif os.environ.get("MEMO_CONTROL") == "read":
    from memo_mw.middleware import ENVIRON_MEMORIES

    class BodyRead:
        """Reads a chat request's body and puts it back in a BytesIO, as the middleware does, and
        nothing else."""

        def __init__(self, wrapped):
            self.app = wrapped

        def __call__(self, environ, start_response):
            if environ.get("REQUEST_METHOD") == "POST" and environ.get("PATH_INFO") == "/chat":
                environ[ENVIRON_MEMORIES] = []
                length = int(environ.get("CONTENT_LENGTH") or 0)
                environ["wsgi.input"] = io.BytesIO(environ["wsgi.input"].read(length))
            return self.app(environ, start_response)

    app.wsgi_app = BodyRead(app.wsgi_app)
