"""The demo app: what `make demo` runs, exercised through its own routes."""

from __future__ import annotations

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
