"""The demo app: what `make demo` runs, exercised through its own routes."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from memo_mw.demo import create_app
from memo_mw.recall import BLOCK_BEGIN


def login(client, user):
    """Log in as the chat page does: the user goes into the demo's signed session cookie."""
    response = client.post("/login", json={"user": user})
    assert response.status_code == 200 and response.json == {"user": user}
    return response


def post(client, message, user="visitor"):
    login(client, user)
    return client.post("/chat", json={"message": message, "session_id": "s"})


def test_demo_remembers_and_shows_what_it_recalled(tmp_path):
    app = create_app(db=str(tmp_path / "var" / "memo.db"))  # redis_url=None: the embedded default
    client = app.test_client()
    first = post(client, "I like bossa nova").json
    assert first == {"reply": "Noted, I'll remember that.", "memories": [], "prompt": "I like bossa nova"}
    app.wsgi_app.queue.join()
    second = post(client, "any bossa nova albums for tonight?").json
    assert [m["content"] for m in second["memories"]] == ["likes bossa nova"]
    assert second["prompt"].startswith(BLOCK_BEGIN) and second["prompt"].endswith("any bossa nova albums for tonight?")
    assert "- likes bossa nova" in second["reply"]
    assert post(client, "any bossa nova albums?", user="someone-else").json["memories"] == []


def test_demo_page_and_forgetting(tmp_path):
    app = create_app(db=str(tmp_path / "memo.db"))
    client = app.test_client()
    page = client.get("/")
    assert page.status_code == 200 and b'id="chat"' in page.data and b'fetch("login"' in page.data
    assert b"X-User-Id" not in page.data and b"document.cookie" not in page.data
    post(client, "我不吃香菜")
    app.wsgi_app.queue.join()
    assert post(client, "这道菜放香菜吗").json["memories"]
    assert post(client, "忘了我吧").json["reply"].startswith("Done")
    app.wsgi_app.queue.join()
    assert post(client, "这道菜放香菜吗").json["memories"] == []


def test_the_demo_reads_its_user_from_the_signed_session_only(tmp_path, monkeypatch):
    monkeypatch.delenv("MEMO_SECRET_KEY", raising=False)
    app = create_app(db=str(tmp_path / "memo.db"))
    client = app.test_client()
    assert 'href="/memo/"' in client.get("/").data.decode()
    post(client, "I like bossa nova", user="ana")
    post(client, "I like jazz", user="ben")
    app.wsgi_app.queue.join()
    # A bare cookie, a header, a body field or a session signed with another key name no one.
    other = create_app(db=str(tmp_path / "other.db")).test_client()  # another random key
    forged = login(other, "ana").headers["Set-Cookie"].partition(";")[0].partition("=")[2]
    for cookies, headers in [({}, {}), ({"memo_user": "ana"}, {}), ({}, {"X-User-Id": "ana"}),
                             ({"session": forged}, {}), ({"session": "eyJ1c2VyIjoiYW5hIn0"}, {})]:  # {"user":"ana"}
        stranger = app.test_client()
        for name, value in cookies.items():
            stranger.set_cookie(name, value)
        assert stranger.get("/memo/", headers=headers).status_code == 401
        reply = stranger.post("/chat", json={"message": "any bossa nova albums?", "user_id": "ana"}, headers=headers)
        assert reply.json["memories"] == []
    # Logged in through the page: the chat and the memories page speak for ana, and only for her.
    response = login(client, "ana")
    assert "HttpOnly" in response.headers["Set-Cookie"] and "SameSite=Strict" in response.headers["Set-Cookie"]
    html = client.get("/memo/").data.decode()
    assert "likes bossa nova" in html and "likes jazz" not in html
    reply = client.post("/chat", json={"message": "any bossa nova albums?", "session_id": "s"})
    assert [m["content"] for m in reply.json["memories"]] == ["likes bossa nova"]
    assert client.post("/chat", json={"message": "any jazz records?", "user_id": "ben"}).json["memories"] == []
    login(client, "ben")
    (jazz,) = client.get("/memo/api/memories").json["memories"]
    login(client, "ana")
    response = client.delete(f"/memo/api/memories/{jazz['id']}", headers={"X-Requested-With": "x"})
    assert response.status_code == 404  # ben's memory, asked for by ana
    login(client, "小明")
    assert client.get("/memo/api/memories").json["user_id"] == "小明"


@pytest.mark.parametrize("request_", [
    pytest.param({"json": {"user": ""}}, id="empty"),
    pytest.param({"json": {"user": "a\nb"}}, id="control-character"),
    pytest.param({"json": ["ana"]}, id="not-an-object"),
    pytest.param({"data": {"user": "ana"}}, id="a-form"),  # what a cross-site form could send
])
def test_a_login_that_names_no_one_is_refused(tmp_path, request_):
    client = create_app(db=str(tmp_path / "memo.db")).test_client()
    response = client.post("/login", **request_)
    assert response.status_code == 400 and "Set-Cookie" not in response.headers


def test_the_session_key_comes_from_the_environment_or_is_random_per_process(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("MEMO_SECRET_KEY", raising=False)
    create_app(db=str(tmp_path / "a.db"))
    assert any("no MEMO_SECRET_KEY" in r.getMessage() for r in caplog.records)
    caplog.clear()
    # With a key, two processes (gunicorn workers) read each other's sessions.
    monkeypatch.setenv("MEMO_SECRET_KEY", "a-key-for-tests-0123456789abcdef")
    first, second = create_app(db=str(tmp_path / "b.db")), create_app(db=str(tmp_path / "b.db"))
    assert not caplog.records
    client = first.test_client()
    post(client, "I like bossa nova", user="ana")
    first.wsgi_app.queue.join()
    cookie = client.get_cookie("session")
    other = second.test_client()
    other.set_cookie("session", cookie.value)
    assert other.get("/memo/api/memories").json["user_id"] == "ana"


def test_demo_reads_the_admin_token_from_the_environment(tmp_path, monkeypatch):
    token = "demo-admin-token-0123456789"
    monkeypatch.setenv("MEMO_ADMIN_TOKEN", token)
    client = create_app(db=str(tmp_path / "memo.db")).test_client()
    post(client, "I like bossa nova", user="ana")
    assert client.get("/memo/api/memories?user=ana", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert client.get("/memo/api/memories?user=ana", headers={"Authorization": "Bearer " + "x" * 24}).status_code == 401


class _StandIn(http.server.BaseHTTPRequestHandler):
    """A stand-in for an OpenAI-compatible server (no model runs here): it echoes the prompt."""

    def do_POST(self):  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _StandIn.seen.append((self.path, body))
        answer = {"choices": [{"message": {"role": "assistant", "content": "LLM saw: " + body["messages"][-1]["content"]}}]}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_demo_asks_an_openai_compatible_server_when_configured(tmp_path, monkeypatch):
    _StandIn.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{server.server_port}/v1")
        app = create_app(db=str(tmp_path / "memo.db"))
        client = app.test_client()
        post(client, "I like bossa nova")
        app.wsgi_app.queue.join()
        reply = post(client, "any bossa nova albums?").json["reply"]
        assert reply.startswith("LLM saw: " + BLOCK_BEGIN) and "likes bossa nova" in reply
        path, body = _StandIn.seen[-1]
        assert path == "/v1/chat/completions" and body["messages"][0]["role"] == "system"
    finally:
        server.shutdown()
        server.server_close()
    # The server is gone: the demo answers from memory instead of failing.
    assert "- likes bossa nova" in post(client, "any bossa nova albums?").json["reply"]


def test_demo_answers_bodies_of_another_shape(tmp_path):
    client = create_app(db=str(tmp_path / "memo.db")).test_client()
    for body in ([1, 2], "text", None, {"message": 5}):
        login(client, "v")
        response = client.post("/chat", json=body)
        assert response.status_code == 200 and response.json["memories"] == []


def test_a_deeply_nested_body_is_a_400_and_one_log_line(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("MEMO_SECRET_KEY", "a-key-for-tests-0123456789abcdef")  # no line about a random key
    client = create_app(db=str(tmp_path / "memo.db")).test_client()
    login(client, "v")
    nested = "[" * 100_000 + "]" * 100_000
    for _ in range(3):
        response = client.post("/chat", data=nested, content_type="application/json")
        assert response.status_code == 400 and response.json == {"error": "the JSON body is nested too deeply"}
    records = [r for r in caplog.records if r.name.startswith("memo_mw")]
    assert len(records) == 3 and all(r.exc_info is None and "nested too deeply" in r.getMessage() for r in records)
