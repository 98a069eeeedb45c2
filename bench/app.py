"""The chat app the benchmarks run under gunicorn: bare, or wrapped by the middleware when
MEMO_DB is set (MEMO_REDIS_URL for the queue). Its reply depends on the request, as a real
app's would: it parses the body and answers with the message's length."""

from __future__ import annotations

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
