"""The demo app: what `make demo` runs, exercised through its own routes."""

from __future__ import annotations

import http.server
import json
import threading

from memo_mw.demo import create_app
from memo_mw.recall import BLOCK_BEGIN


def post(client, message, user="visitor"):
    return client.post("/chat", json={"message": message, "session_id": "s"}, headers={"X-User-Id": user})


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
    assert page.status_code == 200 and b'id="chat"' in page.data and b"X-User-Id" in page.data
    post(client, "我不吃香菜")
    app.wsgi_app.queue.join()
    assert post(client, "这道菜放香菜吗").json["memories"]
    assert post(client, "忘了我吧").json["reply"].startswith("Done")
    app.wsgi_app.queue.join()
    assert post(client, "这道菜放香菜吗").json["memories"] == []


def test_demo_links_to_the_memories_page_which_reads_the_user_from_a_cookie(tmp_path):
    app = create_app(db=str(tmp_path / "memo.db"))
    client = app.test_client()
    page = client.get("/").data.decode()
    assert 'href="/memo/"' in page and "memo_user=" in page and "SameSite=Strict" in page
    post(client, "I like bossa nova", user="ana")
    post(client, "I like jazz", user="ben")
    app.wsgi_app.queue.join()
    assert client.get("/memo/").status_code == 401  # no header, no cookie: nobody
    client.set_cookie("memo_user", "ana")
    html = client.get("/memo/").data.decode()
    assert "likes bossa nova" in html and "likes jazz" not in html
    # The header wins over the cookie, for the chat and the page alike.
    listed = client.get("/memo/api/memories", headers={"X-User-Id": "ben"}).json
    assert [m["content"] for m in listed["memories"]] == ["likes jazz"]
    reply = client.post("/chat", json={"message": "any bossa nova albums?", "session_id": "s"})
    assert [m["content"] for m in reply.json["memories"]] == ["likes bossa nova"]  # from the cookie
    # A user id from the body names no one: anyone could write one.
    assert client.post("/chat", json={"message": "any jazz records?", "user_id": "ben"}).json["memories"] == []
    response = client.delete(f"/memo/api/memories/{listed['memories'][0]['id']}", headers={"X-Requested-With": "x"})
    assert response.status_code == 404  # ben's memory, asked for by ana
    client.set_cookie("memo_user", "%E5%B0%8F%E6%98%8E")  # the page encodes the id; 小明
    assert client.get("/memo/api/memories").json["user_id"] == "小明"


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
        response = client.post("/chat", json=body, headers={"X-User-Id": "v"})
        assert response.status_code == 200 and response.json["memories"] == []


def test_a_deeply_nested_body_is_a_400_and_one_log_line(tmp_path, caplog):
    client = create_app(db=str(tmp_path / "memo.db")).test_client()
    nested = "[" * 100_000 + "]" * 100_000
    for _ in range(3):
        response = client.post("/chat", data=nested, content_type="application/json", headers={"X-User-Id": "v"})
        assert response.status_code == 400 and response.json == {"error": "the JSON body is nested too deeply"}
    records = [r for r in caplog.records if r.name.startswith("memo_mw")]
    assert len(records) == 3 and all(r.exc_info is None and "nested too deeply" in r.getMessage() for r in records)
