"""A small chat app wrapped by the middleware: ``make demo`` runs it.

The bot needs no language model: it answers by showing what it remembers about you,
which is exactly what the middleware injected into the request.
"""

from __future__ import annotations

import os
from typing import Any

from flask import Flask, jsonify, render_template, request

from .middleware import ENVIRON_CAPTURE, ENVIRON_MEMORIES, MemoryMiddleware

_ACK = {
    "captured": "Noted, I'll remember that.",
    "forget": "Done: I'm forgetting that.",
}


def create_app(db: str = "var/memo.db", redis_url: str | None = None, rules: Any = None,
               **middleware_options: Any) -> Flask:
    """The demo chat app, its ``wsgi_app`` wrapped by :class:`MemoryMiddleware`."""
    app = Flask(__name__)

    @app.get("/")
    def index():
        return render_template("demo.html")

    @app.post("/chat")
    def chat():
        body = request.get_json(silent=True) or {}
        prompt = body.get("message", "")
        memories = request.environ.get(ENVIRON_MEMORIES, [])
        stage = request.environ.get(ENVIRON_CAPTURE)
        lines = [_ACK[stage]] if stage in _ACK else []
        if memories:
            lines.append("Here is what I remember that may matter now:")
            lines.extend(f"- {m['content']}" for m in memories)
        elif stage not in _ACK:
            lines.append("I don't remember anything relevant yet. Tell me what you like, or how I should answer.")
        return jsonify(reply="\n".join(lines), memories=memories, prompt=prompt)

    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url, rules=rules, **middleware_options)
    return app


def main() -> None:  # pragma: no cover - exercised by `make demo`
    db = os.environ.get("MEMO_DB", "var/memo.db")
    app = create_app(db=db, redis_url=os.environ.get("MEMO_REDIS_URL") or None)
    port = int(os.environ.get("PORT", "5000"))
    print(f"memo-mw demo: http://127.0.0.1:{port}/  (memories in {db})")
    app.run(host="127.0.0.1", port=port, threaded=True)


if __name__ == "__main__":  # pragma: no cover
    main()
