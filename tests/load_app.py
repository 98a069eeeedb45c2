"""The chat app the load tests run under gunicorn: it echoes the message it was sent (so a
test can tell its reply from another's) and the contents of the memories recalled for it, and is
wrapped by the middleware, configured from MEMO_DB, MEMO_REDIS_URL and MEMO_SPOOL (default: the
middleware's)."""

from __future__ import annotations

import os

from flask import Flask, jsonify, request

from memo_mw import MemoryMiddleware

app = Flask(__name__)


@app.get("/health")
def health():
    return "ok"


@app.post("/chat")
def chat():
    body = request.get_json()
    message = body["message"]
    if "[MEMORY_END]\n\n" in message:  # the block the middleware put before the message
        message = message.split("[MEMORY_END]\n\n", 1)[1]
    recalled = request.environ.get("memo.memories", [])
    return jsonify(echo=message, memories=len(recalled), recalled=[m.get("content") for m in recalled])


app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=os.environ["MEMO_DB"],
                                redis_url=os.environ.get("MEMO_REDIS_URL") or None, trust_user_header=True,
                                spool=os.environ.get("MEMO_SPOOL") or None)
