"""Security: whose memories a request reads, and what memory text can do to the prompt.

One user never sees, changes or deletes another's memories (recall, capture, forget, CLI);
the user id comes from the configured identity source, never from the body unless allowed;
memory text cannot break out of the injected block.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from flask import Flask
from hypothesis import given, settings
from hypothesis import strategies as st

from memo_mw import MemoryMiddleware
from memo_mw.recall import BLOCK_BEGIN, BLOCK_END, format_block

from .conftest import drain
from .test_middleware import contents, echo_app, seed


def wrapped(db, redis_url=None, **options):
    """The echo app behind the middleware; the user header is trusted (as behind an auth proxy) unless
    the test says otherwise."""
    options.setdefault("trust_user_header", True)
    app = echo_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url, **options)
    return app


@pytest.fixture
def two_users(db):
    seed(db, "alice", "likes green tea", "green tea", topics=["drink"])  # as the shipped rules tag them
    seed(db, "bob", "likes black coffee", "black coffee", topics=["drink"])
    return db


def test_body_user_is_not_an_identity_by_default(two_users):
    client = wrapped(two_users).test_client()
    # No header: the body's user field does not make the request alice's.
    response = client.post("/chat", json={"user_id": "alice", "message": "any green tea tips? I like oolong"})
    assert response.json["memories"] == []
    assert response.json["received"]["message"] == "any green tea tips? I like oolong"  # untouched
    # With a header, the body cannot name someone else either.
    response = client.post("/chat", json={"user_id": "alice", "message": "any green tea tips?"},
                           headers={"X-User-Id": "bob"})
    assert [m["content"] for m in response.json["memories"]] == ["likes black coffee"]
    client.application.wsgi_app.queue.join()
    assert contents(two_users, "alice") == ["likes green tea"]  # nothing captured for alice


def test_the_user_header_names_no_one_unless_trusted(two_users):
    """Any client can send X-User-Id: by default it names no one, for the chat, the page and the API."""
    from memo_mw.admin import blueprint_for

    app = wrapped(two_users, trust_user_header=False)
    app.register_blueprint(blueprint_for(app.wsgi_app))
    client = app.test_client()
    response = client.post("/chat", json={"message": "any green tea tips? I like oolong"}, headers={"X-User-Id": "alice"})
    assert response.json["memories"] == []
    assert response.json["received"]["message"] == "any green tea tips? I like oolong"  # untouched
    app.wsgi_app.queue.join()
    assert contents(two_users, "alice") == ["likes green tea"]  # nothing captured for alice
    for method, url in [("GET", "/memo/"), ("GET", "/memo/api/memories"), ("GET", "/memo/api/export"),
                        ("DELETE", "/memo/api/memories")]:
        headers = {"X-User-Id": "alice", "X-Requested-With": "x"}
        assert client.open(url, method=method, headers=headers).status_code == 401
    assert contents(two_users, "alice") == ["likes green tea"]  # nothing deleted either


def test_body_user_when_allowed(two_users):
    client = wrapped(two_users, body_user=True).test_client()
    response = client.post("/chat", json={"user_id": "alice", "message": "any green tea tips?"})
    assert [m["content"] for m in response.json["memories"]] == ["likes green tea"]
    client.application.wsgi_app.queue.join()


def test_get_user_is_the_only_identity_source(two_users):
    sessions = {"cookie-a": "alice"}
    app = wrapped(two_users, body_user=True,  # ignored: get_user is configured
                  get_user=lambda environ, body: sessions.get(environ.get("HTTP_X_SESSION", "")))
    client = app.test_client()
    forged = client.post("/chat", json={"user_id": "bob", "message": "any coffee tips?"},
                         headers={"X-User-Id": "bob"})
    assert forged.json["memories"] == []  # neither header nor body: no session, no memories
    own = client.post("/chat", json={"user_id": "bob", "message": "any green tea tips?"},
                      headers={"X-User-Id": "bob", "X-Session": "cookie-a"})
    assert [m["content"] for m in own.json["memories"]] == ["likes green tea"]
    app.wsgi_app.queue.join()


@pytest.mark.parametrize("message", ["forget everything you know about me", "forget that I like black coffee",
                                     "忘掉关于我的一切"])
def test_a_forget_request_reaches_only_its_own_user(two_users, redis_url, message):
    client = wrapped(two_users, redis_url).test_client()
    client.post("/chat", json={"message": message}, headers={"X-User-Id": "alice"})
    drain(redis_url)
    assert contents(two_users, "bob") == ["likes black coffee"]


def test_captures_land_with_their_own_user_only(db, redis_url):
    client = wrapped(db, redis_url).test_client()
    for user, thing in [("alice", "kalimba"), ("bob", "sitar"), ("carol", "oboe")]:
        client.post("/chat", json={"message": f"I like the {thing}", "user_id": "mallory"}, headers={"X-User-Id": user})
    drain(redis_url)
    assert contents(db, "alice") == ["likes the kalimba"]
    assert contents(db, "bob") == ["likes the sitar"]
    assert contents(db, "mallory") == []


def cli(*args):
    return subprocess.run([sys.executable, "-m", "memo_mw", *args], capture_output=True, text=True, timeout=60)


def test_cli_reads_and_deletes_one_user_at_a_time(two_users):
    shown = cli("memories", "--db", two_users, "--user", "bob", "--json")
    assert shown.returncode == 0, shown.stderr
    assert [m["content"] for m in json.loads(shown.stdout)] == ["likes black coffee"]
    recalled = cli("recall", "--db", two_users, "--user", "bob", "green tea")
    assert "green tea" not in recalled.stdout
    deleted = cli("forget", "--db", two_users, "--user", "bob")
    assert deleted.returncode == 0, deleted.stderr
    assert contents(two_users, "bob") == []
    assert contents(two_users, "alice") == ["likes green tea"]


memory_text = st.lists(st.sampled_from(list("ab [](){}<>\n\r\t\u2028\u0085［］【】〔〕⟦⟧:-#") + [
    BLOCK_BEGIN, BLOCK_END, "[SOURCE:", "SYSTEM:", "\n- ", "忽略之前的指令"]), max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(contents_=st.lists(memory_text, min_size=1, max_size=4), session=memory_text, type_=memory_text)
def test_memory_text_cannot_break_out_of_the_block(contents_, session, type_):
    memories = [{"content": c, "type": type_, "source_ts": 1_700_000_000, "source_session": session}
                for c in contents_]
    lines = format_block(memories).split("\n")
    assert len(lines) == len(memories) + 3  # begin, one line per memory, source, end
    assert lines[0] == BLOCK_BEGIN and lines[-1] == BLOCK_END
    body = lines[1:-1]
    for text in body:
        assert BLOCK_BEGIN not in text and BLOCK_END not in text
        assert not any(c in text for c in "[]［］【】") or text.startswith("[SOURCE: ")
        assert all(c.isprintable() or c == " " for c in text)
    assert all(text.startswith("- ") for text in body[:-1])
    assert body[-1].startswith("[SOURCE: ") and body[-1].count("[") == 1 and body[-1].count("]") == 1


@pytest.mark.parametrize("body_user, recalled", [(False, []), (True, ["likes green tea"])])
def test_the_flask_extension_reads_memo_body_user(two_users, tmp_path, body_user, recalled):
    from memo_mw import Memo

    app = echo_app()
    app.config.update(MEMO_DB=two_users, MEMO_BODY_USER=body_user, MEMO_SPOOL=str(tmp_path / "spool"))
    Memo(app)
    response = app.test_client().post("/chat", json={"user_id": "alice", "message": "any green tea tips?"})
    assert [m["content"] for m in response.json["memories"]] == recalled
    middleware = app.extensions["memo"].middleware
    assert middleware.body_user is body_user
    middleware.queue.join()


def test_the_admin_token_is_compared_in_constant_time(db, monkeypatch):
    """Every admin request's token goes through hmac.compare_digest (timing does not leak how
    much of a guess was right); a wrong guess of the right length is refused like any other."""
    import hmac

    from memo_mw.admin import create_blueprint

    token = "admin-token-0123456789abcdef"
    compared = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append((a, b)) or real(a, b))
    seed(db, "bob", "likes black coffee")
    app = Flask(__name__)
    app.register_blueprint(create_blueprint(db, admin_token=token))
    client = app.test_client()
    for guess, status in [(token, 200), (token[:-1] + "x", 401), ("x" * len(token), 401)]:
        response = client.get("/memo/api/memories?user=bob", headers={"Authorization": f"Bearer {guess}"})
        assert response.status_code == status
        assert compared[-1] == (guess.encode(), token.encode())
    assert len(compared) == 3
