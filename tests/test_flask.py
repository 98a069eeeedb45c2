"""The Flask extension (memo_mw.flask): its MEMO_* settings reach the middleware and the page."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask import Flask, jsonify, request

from memo_mw import Memo, history
from memo_mw.store import Store

from .conftest import free_port

TOKEN = "admin-token-for-tests-0123456789"


def chat_app(tmp_path, **config) -> Flask:
    """A chat app with the extension; the user header is trusted (as behind an auth proxy) unless the
    config says otherwise."""
    app = Flask(__name__, instance_path=str(tmp_path))
    app.config.update({"MEMO_TRUST_USER_HEADER": True, **config})

    @app.post("/talk")
    def talk():
        return jsonify(memories=[m["content"] for m in request.environ.get("memo.memories", [])])

    Memo(app)
    return app


def test_the_settings_reach_the_middleware(tmp_path):
    app = chat_app(tmp_path, MEMO_DB=str(tmp_path / "data" / "memo.db"), MEMO_PATHS=["/talk"],
                   MEMO_USER_HEADER="X-Account")
    client = app.test_client()
    client.post("/talk", json={"message": "I like bossa nova"}, headers={"X-Account": "ana"})
    app.extensions["memo"].middleware.queue.join()  # no MEMO_REDIS_URL: the embedded job thread
    reply = client.post("/talk", json={"message": "any bossa nova albums?"}, headers={"X-Account": "ana"}).json
    assert reply["memories"] == ["likes bossa nova"]
    assert client.post("/talk", json={"message": "any bossa nova albums?"}, headers={"X-User-Id": "ana"}).json \
        == {"memories": []}  # the configured header names the user, not the default one
    assert (tmp_path / "data" / "memo.db").exists()


def test_the_user_header_is_trusted_only_when_configured(tmp_path, caplog):
    app = Flask(__name__, instance_path=str(tmp_path))  # MEMO_TRUST_USER_HEADER left at its default

    @app.post("/chat")
    def chat():
        return jsonify(memories=[m["content"] for m in request.environ.get("memo.memories", [])])

    Memo(app)
    assert app.config["MEMO_TRUST_USER_HEADER"] is False
    assert any("no identity source" in r.getMessage() for r in caplog.records)
    client = app.test_client()
    client.post("/chat", json={"message": "I like bossa nova"}, headers={"X-User-Id": "ana"})
    app.extensions["memo"].middleware.queue.join()
    with Store(tmp_path / "memo.db") as store:
        assert store.list("ana", include_inactive=True) == []  # nothing captured for a header anyone can send
    assert client.get("/memo/api/memories", headers={"X-User-Id": "ana"}).status_code == 401


@pytest.mark.parametrize("on", [True, False])
def test_the_history_settings_reach_the_middleware(tmp_path, on):
    app = chat_app(tmp_path, MEMO_DB=str(tmp_path / "memo.db"), MEMO_PATHS=["/talk"], MEMO_HISTORY=on,
                   MEMO_HISTORY_DAYS=7, MEMO_HISTORY_K=1)
    client = app.test_client()
    client.post("/talk", json={"message": "my neighbour plays the trumpet", "ts": 1_700_000_000},
                headers={"X-User-Id": "ana"})
    app.extensions["memo"].middleware.queue.join()
    with Store(tmp_path / "memo.db") as store:
        kept = history.rows(store.db, "ana")
    assert [(m["text"], m["expires_at"]) for m in kept] == ([("my neighbour plays the trumpet", 1_700_000_000 + 7 * 86400)]
                                                            if on else [])


def test_jobs_wait_in_the_spool_file_while_redis_is_down(tmp_path):
    spool = tmp_path / "jobs.spool"
    app = chat_app(tmp_path, MEMO_DB=str(tmp_path / "memo.db"), MEMO_PATHS=["/talk"], MEMO_SPOOL=str(spool),
                   MEMO_REDIS_URL=f"redis://127.0.0.1:{free_port()}/0")  # a port nothing listens on
    middleware = app.extensions["memo"].middleware
    try:
        response = app.test_client().post("/talk", json={"message": "I like bossa nova"},
                                          headers={"X-User-Id": "ana"})
        assert response.status_code == 200
        assert middleware.stats["spooled"] == 1 and spool.exists()
        assert not Path(str(tmp_path / "memo.db") + ".spool").exists()
    finally:
        middleware.queue.close()


def test_init_app_refuses_a_second_registration(tmp_path):
    app = chat_app(tmp_path)
    with pytest.raises(RuntimeError, match="already registered"):
        Memo().init_app(app)


def test_the_extension_mounts_the_page_and_api(tmp_path):
    app = chat_app(tmp_path, MEMO_DB=str(tmp_path / "memo.db"), MEMO_ADMIN_PREFIX="/me/memory",
                   MEMO_ADMIN_TOKEN=TOKEN)
    client = app.test_client()
    assert client.get("/me/memory/api/memories", headers={"X-User-Id": "a"}).json["count"] == 0
    assert client.get("/me/memory/api/memories?user=a", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    assert client.get("/memo/api/memories", headers={"X-User-Id": "a"}).status_code == 404
    assert app.extensions["memo"].blueprint is not None


def test_the_extension_reads_the_token_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMO_ADMIN_TOKEN", TOKEN)
    response = chat_app(tmp_path).test_client().get("/memo/api/memories?user=a",
                                                    headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200


def test_the_extension_can_leave_the_page_out(tmp_path):
    app = chat_app(tmp_path, MEMO_ADMIN=False)
    assert app.test_client().get("/memo/api/memories", headers={"X-User-Id": "a"}).status_code == 404
    assert app.extensions["memo"].blueprint is None
