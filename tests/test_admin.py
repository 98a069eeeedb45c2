"""The memories and chat history API and page (memo_mw.admin): every route, every way of asking, real
SQLite and Redis."""

from __future__ import annotations

import json
import time

import pytest
from flask import Flask, jsonify, request
from werkzeug.http import parse_cookie

from memo_mw import MemoryMiddleware, userdata
from memo_mw.adapters import Turn
from memo_mw.admin import blueprint_for, create_blueprint
from memo_mw.middleware import remember_payload
from memo_mw.rules import load_rules
from memo_mw.store import Store
from memo_mw.text import index_terms

from .conftest import all_redis_text, database_bytes, drain


TOKEN = "admin-token-for-tests-0123456789"


@pytest.fixture(scope="module")
def rules():
    return load_rules(None)


def make_app(db, rules, *, redis_url=None, token=TOKEN, get_user=None) -> Flask:
    """A chat app wrapped by the middleware, with the blueprint built from that middleware."""
    app = Flask(__name__)

    @app.post("/chat")
    def chat():
        return jsonify(memories=request.environ.get("memo.memories"))

    app.wsgi_app = middleware = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url, rules=rules,
                                                 get_user=get_user, trust_user_header=True)
    app.register_blueprint(blueprint_for(middleware, admin_token=token))
    return app


def say(client, user, *messages, ts=1_700_000_000):
    for i, message in enumerate(messages):
        response = client.post("/chat", json={"message": message, "session_id": "s", "ts": ts + i},
                               headers={"X-User-Id": user})
        assert response.status_code == 200


def settle(app, redis_url=None):
    """Run the jobs the chat requests queued: a real rq worker, or the embedded job thread."""
    if redis_url:
        drain(redis_url)
    else:
        app.wsgi_app.queue.join()


def as_user(user):
    return {"X-User-Id": user, "X-Requested-With": "test"}


def contents(db, user):
    with Store(db) as store:
        return sorted(m["content"] for m in store.list(user, include_inactive=True))


def audit_rows(db, user):
    with Store(db) as store:
        return [(a["action"], a["count"], a["reason"]) for a in store.audit(user)]


def history_texts(db, user):
    with Store(db) as store:
        return [m["text"] for m in userdata.history(store, user)]


def stored(db, user, memory_id):
    with Store(db) as store:
        return store.get(user, memory_id)


def active(db, user):
    with Store(db) as store:
        return [m["content"] for m in store.list(user)]


@pytest.fixture
def two_users(db, rules):
    """alice and bob, each with memories of several types (bob's are never shown to alice)."""
    app = make_app(db, rules)
    client = app.test_client()
    say(client, "alice", "I like running", "from now on answer in Chinese", "I play tennis every sunday",
        "我喜欢喝乌龙茶", "I'm not into running anymore")
    say(client, "bob", "I love zanzibarian oolong", "I live in Reykjavik")
    settle(app)
    return app, client


def alice_id(db, content):
    with Store(db) as store:
        return next(m["id"] for m in store.list("alice", include_inactive=True) if m["content"] == content)


def bob_ids(db):
    with Store(db) as store:
        return [m["id"] for m in store.list("bob", include_inactive=True)]


BOB_WORDS = (b"zanzibarian", b"Reykjavik")

# -- who may ask ----------------------------------------------------------------------

ROUTES = [
    pytest.param("get", "/memo/api/memories", id="list"),
    pytest.param("get", "/memo/api/memories/{id}", id="get"),
    pytest.param("patch", "/memo/api/memories/{id}", id="patch"),
    pytest.param("delete", "/memo/api/memories/{id}", id="delete"),
    pytest.param("delete", "/memo/api/memories", id="forget-me"),
    pytest.param("get", "/memo/api/export", id="export"),
    pytest.param("get", "/memo/api/history", id="history"),
    pytest.param("delete", "/memo/api/history/{id}", id="delete-message"),
    pytest.param("delete", "/memo/api/history", id="delete-history"),
    pytest.param("put", "/memo/api/history/enabled", id="history-off"),
]

AUTH_CASES = [
    pytest.param({}, "", 401, id="no-identity"),
    pytest.param({"X-User-Id": ""}, "", 401, id="empty-header"),
    pytest.param({"Authorization": "Bearer wrong-token-wrong-token"}, "?user=alice", 401, id="wrong-token"),
    pytest.param({"Authorization": "Bearer " + TOKEN[:-1]}, "?user=alice", 401, id="token-prefix"),
    pytest.param({"Authorization": f"Bearer {TOKEN}x"}, "?user=alice", 401, id="token-longer"),
    pytest.param({"X-User-Id": "bob"}, "?user=alice", 403, id="user-param-without-token"),
    pytest.param({"Authorization": f"Basic {TOKEN}"}, "?user=alice", 403, id="not-bearer"),
    pytest.param({"Authorization": f"Bearer {TOKEN}"}, "?user=", 400, id="token-with-empty-user"),
    pytest.param({"Authorization": f"Bearer {TOKEN}"}, "", 401, id="token-names-no-one"),
]


@pytest.mark.parametrize("method, path", ROUTES)
@pytest.mark.parametrize("headers, query, status", AUTH_CASES)
def test_requests_without_a_valid_identity_are_refused(two_users, db, method, path, headers, query, status):
    app, client = two_users
    memory_id = alice_id(db, "plays tennis every sunday")
    kwargs = {"json": {"content": "plays golf"}} if method == "patch" else {"json": {"enabled": False}} \
        if method == "put" else {}
    response = getattr(client, method)(path.format(id=memory_id) + query,
                                       headers={**headers, "X-Requested-With": "test"}, **kwargs)
    assert response.status_code == status
    assert set(response.json) == {"error"}  # an error, nothing of anyone's memories
    assert b"tennis" not in response.data
    if status == 401:
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert contents(db, "alice") == ["answer style: answer in Chinese", "dislikes running", "likes running",
                                     "plays tennis every sunday", "喜欢喝乌龙茶"]
    assert audit_rows(db, "alice") == [] and audit_rows(db, "bob") == []
    assert len(history_texts(db, "alice")) == 5


def test_without_user_param_an_authorization_header_is_the_apps_business(two_users, db):
    """A Basic login in front of the app, or the app's own bearer token: the request acts for its own user."""
    app, client = two_users
    for authorization in (f"Basic {TOKEN}", "Bearer the-apps-own-jwt", f"Bearer {TOKEN}"):
        listed = client.get("/memo/api/memories", headers={"X-User-Id": "bob", "Authorization": authorization}).json
        assert listed["user_id"] == "bob" and listed["count"] == 2
    # A Basic login is sent cross-site by the browser itself: it does not pass for a deliberate request.
    memory_id = bob_ids(db)[0]
    response = client.delete(f"/memo/api/memories/{memory_id}", headers={"X-User-Id": "bob",
                                                                         "Authorization": "Basic Ym9iOnB3"})
    assert response.status_code == 403 and len(contents(db, "bob")) == 2
    response = client.delete(f"/memo/api/memories/{memory_id}", headers={"X-User-Id": "bob",
                                                                         "Authorization": "Bearer the-apps-own-jwt"})
    assert response.status_code == 200 and len(contents(db, "bob")) == 1


def test_no_admin_token_configured_means_no_bearer_is_accepted(db, rules):
    app = make_app(db, rules, token=None)
    client = app.test_client()
    say(client, "alice", "I like running")
    settle(app)
    for token, status in (("", 403), ("None", 401), ("null", 401), (TOKEN, 401)):
        response = client.get("/memo/api/memories?user=alice", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == status and b"running" not in response.data
    assert client.get("/memo/api/memories", headers=as_user("alice")).json["count"] == 1


@pytest.mark.parametrize("token", ["", None])
def test_an_empty_token_is_no_token(db, rules, token):
    app = make_app(db, rules, token=token)
    client = app.test_client()
    assert client.get("/memo/api/memories?user=a", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 401
    assert client.get("/memo/api/memories?user=a", headers={"Authorization": "Bearer "}).status_code == 403


def test_a_short_admin_token_is_refused_at_start_up(db, rules):
    with pytest.raises(ValueError, match="at least 16 characters"):
        make_app(db, rules, token="short")


def test_the_admin_token_acts_for_the_user_named(two_users, db):
    app, client = two_users
    admin = {"Authorization": f"Bearer {TOKEN}"}
    listed = client.get("/memo/api/memories?user=bob", headers=admin).json
    assert listed["user_id"] == "bob"
    assert sorted(m["content"] for m in listed["memories"]) == ["likes zanzibarian oolong", "lives in Reykjavik"]
    memory_id = bob_ids(db)[0]
    assert client.get(f"/memo/api/memories/{memory_id}?user=bob", headers=admin).json["memory"]["user_id"] == "bob"
    # A memory of another user than the one named is a 404, for the admin too.
    assert client.get(f"/memo/api/memories/{memory_id}?user=alice", headers=admin).status_code == 404
    edited = client.patch(f"/memo/api/memories/{memory_id}?user=bob", headers=admin, json={"content": "likes rooibos"})
    assert edited.status_code == 200 and edited.json["memory"]["content"] == "likes rooibos"
    assert client.delete(f"/memo/api/memories/{memory_id}?user=bob", headers=admin).json["deleted"] == 1
    export = client.get("/memo/api/export?user=bob", headers=admin)
    assert export.json["user_id"] == "bob" and len(export.json["memories"]) == 1
    assert client.delete("/memo/api/memories?user=bob", headers=admin).json["deleted"] == 1
    assert contents(db, "bob") == [] and len(contents(db, "alice")) == 5
    # An edit and a deletion take the messages that stated the memory out of the history too.
    assert audit_rows(db, "bob") == [("forget_history", 1, "memory edited"), ("edit", 1, "admin token"),
                                     ("delete", 1, "admin token"), ("forget_all", 1, "admin token"),
                                     ("forget_history", 1, "admin token")]


def test_identity_from_get_user_only_when_configured(db, rules):
    """With get_user (a session cookie here), the header names no one, as in the middleware."""
    bodies = []

    def from_cookie(environ, body):
        bodies.append(body)
        return parse_cookie(environ).get("session_user")  # the middleware calls it outside Flask

    app = make_app(db, rules, get_user=from_cookie)
    client = app.test_client()
    client.set_cookie("session_user", "carol")
    client.post("/chat", json={"message": "I like running", "session_id": "s"})
    settle(app)
    assert [m["content"] for m in client.get("/memo/api/memories").json["memories"]] == ["likes running"]
    assert bodies[-1] is None  # the API has no chat body to offer
    client.delete_cookie("session_user")
    assert client.get("/memo/api/memories", headers={"X-User-Id": "carol"}).status_code == 401


def test_a_failing_get_user_means_no_identity(db, rules):
    def broken(environ, body):
        raise RuntimeError("session store down")

    client = make_app(db, rules, get_user=broken).test_client()
    assert client.get("/memo/api/memories").status_code == 401
    assert client.get("/memo/").status_code == 401


# -- reading --------------------------------------------------------------------------

@pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)
def test_list_is_the_users_own_every_status(two_users, db):
    app, client = two_users
    listed = client.get("/memo/api/memories", headers=as_user("alice")).json
    assert listed["user_id"] == "alice" and listed["count"] == 5
    by_content = {m["content"]: m for m in listed["memories"]}
    assert by_content["likes running"]["status"] == "superseded"
    assert by_content["dislikes running"]["status"] == "active"
    assert all(m["user_id"] == "alice" for m in listed["memories"])
    response = client.get("/memo/api/memories", headers=as_user("alice"))
    for word in BOB_WORDS:
        assert word not in response.data


@pytest.mark.parametrize("query, expected", [  # the filters themselves: tests/test_userdata.py
    pytest.param("status=active&type=preference", ["dislikes running", "喜欢喝乌龙茶"], id="status-and-type"),
    pytest.param("q=running&status=active", ["dislikes running"], id="q-and-status"),
    pytest.param("q=oolong", [], id="q-another-users-word"),
])
def test_list_filters(two_users, query, expected):
    app, client = two_users
    listed = client.get(f"/memo/api/memories?{query}", headers=as_user("alice")).json
    assert sorted(m["content"] for m in listed["memories"]) == expected
    assert listed["count"] == len(expected)


@pytest.mark.parametrize("query", ["type=habit", "status=deleted", "type="])
def test_list_refuses_unknown_filters(two_users, query):
    app, client = two_users
    response = client.get(f"/memo/api/memories?{query}", headers=as_user("alice"))
    assert response.status_code == 400 and "must be one of" in response.json["error"]


@pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)
def test_get_one_own_and_nothing_of_another(two_users, db):
    app, client = two_users
    memory_id = alice_id(db, "喜欢喝乌龙茶")
    got = client.get(f"/memo/api/memories/{memory_id}", headers=as_user("alice")).json["memory"]
    assert got["content"] == "喜欢喝乌龙茶" and got["excerpt"] == "我喜欢喝乌龙茶" and got["type"] == "preference"
    for bob_memory in bob_ids(db):
        response = client.get(f"/memo/api/memories/{bob_memory}", headers=as_user("alice"))
        assert response.status_code == 404 and response.json == {"error": "no such memory"}
    unknown = client.get("/memo/api/memories/999999", headers=as_user("alice"))
    assert unknown.status_code == 404 and unknown.json == {"error": "no such memory"}
    for bad in ("abc", "-1", "1.5", "1e3", "99999999999999999999999"):
        assert client.get(f"/memo/api/memories/{bad}", headers=as_user("alice")).status_code == 404


# -- editing --------------------------------------------------------------------------

@pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)
def test_patch_edits_the_line_and_the_old_text_is_gone(two_users, db):
    app, client = two_users
    memory_id = alice_id(db, "plays tennis every sunday")
    assert b"tennis every sunday" in database_bytes(db)
    response = client.patch(f"/memo/api/memories/{memory_id}", headers=as_user("alice"),
                            json={"content": "plays jazz piano on mondays"})
    assert response.status_code == 200
    assert response.json["outcome"] == "edited" and response.json["masked"] is False
    memory = response.json["memory"]
    assert memory["id"] == memory_id and memory["content"] == "plays jazz piano on mondays"
    assert memory["excerpt"] == "plays jazz piano on mondays"  # the old sentence is not kept either
    assert memory["topics"] == ["music"]  # tagged again from the new line (was sport)
    assert stored(db, "alice", memory_id)["content"] == "plays jazz piano on mondays"
    assert b"tennis every sunday" not in database_bytes(db)
    assert audit_rows(db, "alice") == [("forget_history", 1, "memory edited"), ("edit", 1, "user, memo page or API")]
    # The term index follows the edit: recall finds the new words.
    reply = client.post("/chat", json={"message": "any jazz piano tips?", "session_id": "s"}, headers={"X-User-Id": "alice"})
    assert "plays jazz piano on mondays" in [m["content"] for m in reply.json["memories"]]  # beside the style one
    same = client.patch(f"/memo/api/memories/{memory_id}", headers=as_user("alice"),
                        json={"content": "plays jazz piano on mondays"})
    assert same.json["outcome"] == "unchanged"


def test_patch_masks_personal_data(two_users, db):
    app, client = two_users
    memory_id = alice_id(db, "plays tennis every sunday")
    response = client.patch(f"/memo/api/memories/{memory_id}", headers=as_user("alice"),
                            json={"content": "plays tennis with bob@example.com, call 13812345678"})
    assert response.status_code == 200 and response.json["masked"] is True
    assert response.json["memory"]["content"] == "plays tennis with [email], call [phone]"
    assert b"bob@example.com" not in database_bytes(db) and b"13812345678" not in database_bytes(db)
    wide = client.patch(f"/memo/api/memories/{memory_id}", headers=as_user("alice"),
                        json={"content": "plays  ｔｅｎｎｉｓ\non fridays"})  # full width, a line break
    assert wide.json["masked"] is False and wide.json["memory"]["content"] == "plays tennis on fridays"


@pytest.mark.parametrize("content", [
    pytest.param("has diabetes", id="health-en"),
    pytest.param("votes for the green party", id="politics-en"),
    pytest.param("有抑郁症", id="health-zh"),
])
def test_patch_refuses_a_sensitive_category(two_users, db, content):
    app, client = two_users
    memory_id = alice_id(db, "plays tennis every sunday")
    response = client.patch(f"/memo/api/memories/{memory_id}", headers=as_user("alice"), json={"content": content})
    assert response.status_code == 422 and "sensitive" in response.json["error"]
    assert stored(db, "alice", memory_id)["content"] == "plays tennis every sunday"
    assert content.encode() not in database_bytes(db)


@pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)
def test_patch_into_a_duplicate_merges(two_users, db):
    app, client = two_users
    say(client, "alice", "I like running", ts=1_700_000_100)  # another "likes running", active again
    settle(app)
    with Store(db) as store:  # the active one, not the superseded "likes running"
        kept_id = next(m["id"] for m in store.list("alice") if m["content"] == "likes running")
    kept_before = stored(db, "alice", kept_id)
    edited_id = alice_id(db, "plays tennis every sunday")
    edited_before = stored(db, "alice", edited_id)
    response = client.patch(f"/memo/api/memories/{edited_id}", headers=as_user("alice"),
                            json={"content": "Likes  running!"})
    assert response.status_code == 200 and response.json["outcome"] == "merged"
    assert response.json["memory"]["id"] == kept_id and response.json["memory"]["content"] == "likes running"
    assert stored(db, "alice", edited_id) is None  # deleted, for real
    assert stored(db, "alice", kept_id)["hits"] == kept_before["hits"] + edited_before["hits"] + 1
    assert b"tennis every sunday" not in database_bytes(db)
    assert active(db, "alice").count("likes running") == 1
    assert audit_rows(db, "alice")[-1] == ("edit_merge", 1, "user, memo page or API")


@pytest.mark.parametrize("kwargs", [
    pytest.param({"data": "content=x", "content_type": "application/json"}, id="not-json"),
    pytest.param({"json": ["plays golf"]}, id="array"),
    pytest.param({"json": {}}, id="no-content"),
    pytest.param({"json": {"content": "plays golf", "user_id": "bob"}}, id="extra-field"),
    pytest.param({"json": {"content": 5}}, id="not-a-string"),
    pytest.param({"json": {"content": "   "}}, id="blank"),
    pytest.param({"json": {"content": "x" * 201}}, id="too-long"),
])
def test_patch_refuses_a_bad_body(two_users, db, kwargs):
    app, client = two_users
    memory_id = alice_id(db, "plays tennis every sunday")
    response = client.patch(f"/memo/api/memories/{memory_id}", headers=as_user("alice"), **kwargs)
    assert response.status_code == 400 and response.json["error"]
    assert stored(db, "alice", memory_id)["content"] == "plays tennis every sunday"


def test_patch_of_another_users_memory_is_a_404(two_users, db):
    app, client = two_users
    for memory_id in [*bob_ids(db), 999999]:
        response = client.patch(f"/memo/api/memories/{memory_id}", headers=as_user("alice"),
                                json={"content": "hacked"})
        assert response.status_code == 404 and response.json == {"error": "no such memory"}
    assert contents(db, "bob") == ["likes zanzibarian oolong", "lives in Reykjavik"]


# -- deleting -------------------------------------------------------------------------

@pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)
def test_delete_one_is_physical_and_audited(two_users, db):
    app, client = two_users
    memory_id = alice_id(db, "plays tennis every sunday")
    assert index_terms("alice", ["tennis"])[0].encode() in database_bytes(db)
    response = client.delete(f"/memo/api/memories/{memory_id}", headers=as_user("alice"))
    assert response.status_code == 200 and response.json["deleted"] == 1 and response.json["id"] == memory_id
    assert stored(db, "alice", memory_id) is None
    assert b"tennis every sunday" not in database_bytes(db)
    assert index_terms("alice", ["tennis"])[0].encode() not in database_bytes(db)  # nor its index entries
    assert audit_rows(db, "alice") == [("delete", 1, "user, memo page or API"),
                                       ("forget_history", 1, "user, memo page or API")]
    assert client.delete(f"/memo/api/memories/{memory_id}", headers=as_user("alice")).status_code == 404
    assert len(contents(db, "alice")) == 4


def test_delete_of_another_users_memory_is_a_404(two_users, db):
    app, client = two_users
    for memory_id in [*bob_ids(db), 999999, "x"]:
        response = client.delete(f"/memo/api/memories/{memory_id}", headers=as_user("alice"))
        assert response.status_code == 404 and response.json == {"error": "no such memory"}
    assert contents(db, "bob") == ["likes zanzibarian oolong", "lives in Reykjavik"]
    assert audit_rows(db, "alice") == []  # probing another user's ids leaves no trace of a deletion


@pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)
def test_forget_me_deletes_every_memory_of_the_user_only(two_users, db):
    app, client = two_users
    response = client.delete("/memo/api/memories", headers=as_user("alice"))
    assert response.status_code == 200 and response.json["deleted"] == 5
    assert contents(db, "alice") == []
    assert contents(db, "bob") == ["likes zanzibarian oolong", "lives in Reykjavik"]
    for word in (b"tennis", "乌龙茶".encode(), b"running"):
        assert word not in database_bytes(db)
    assert audit_rows(db, "alice") == [("forget_all", 5, "user, memo page or API"),
                                       ("forget_history", 5, "user, memo page or API")]
    assert client.delete("/memo/api/memories", headers=as_user("alice")).json["deleted"] == 0


@pytest.mark.parametrize("headers, kwargs", [
    pytest.param({}, {}, id="no-header"),
    pytest.param({}, {"data": "x=1", "content_type": "application/x-www-form-urlencoded"}, id="form"),
    pytest.param({}, {"data": "{}", "content_type": "text/plain"}, id="text-plain"),
])
def test_changes_a_cross_site_form_could_send_are_refused(two_users, db, headers, kwargs):
    """A cross-site form or a simple request cannot set X-Requested-With, a JSON type or Authorization."""
    app, client = two_users
    memory_id = alice_id(db, "plays tennis every sunday")
    message_id = client.get("/memo/api/history", headers={"X-User-Id": "alice"}).json["history"][0]["id"]
    for method, path in (("delete", f"/memo/api/memories/{memory_id}"), ("delete", "/memo/api/memories"),
                         ("patch", f"/memo/api/memories/{memory_id}"), ("delete", f"/memo/api/history/{message_id}"),
                         ("delete", "/memo/api/history"), ("put", "/memo/api/history/enabled")):
        response = getattr(client, method)(path, headers={"X-User-Id": "alice", **headers}, **kwargs)
        assert response.status_code == 403 and "X-Requested-With" in response.json["error"]
    assert len(contents(db, "alice")) == 5 and len(history_texts(db, "alice")) == 5
    assert client.post("/memo/api/memories", headers={"X-User-Id": "alice"}).status_code == 405


# -- chat history ---------------------------------------------------------------------

ALICE_SAID = ["I like running", "from now on answer in Chinese", "I play tennis every sunday", "我喜欢喝乌龙茶",
              "I'm not into running anymore"]


@pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)
def test_history_lists_the_users_own_messages(two_users, db):
    app, client = two_users
    listed = client.get("/memo/api/history", headers={"X-User-Id": "alice"}).json
    assert (listed["user_id"], listed["count"], listed["enabled"]) == ("alice", 5, True)
    assert [m["text"] for m in listed["history"]] == ALICE_SAID
    assert [m["text"] for m in client.get("/memo/api/history?q=RUNNING", headers={"X-User-Id": "alice"}).json[
        "history"]] == ["I like running", "I'm not into running anymore"]
    assert client.get("/memo/api/history?q=oolong", headers={"X-User-Id": "alice"}).json["count"] == 0
    by_token = client.get("/memo/api/history?user=bob", headers={"Authorization": f"Bearer {TOKEN}"}).json
    assert [m["text"] for m in by_token["history"]] == ["I love zanzibarian oolong", "I live in Reykjavik"]


@pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)
def test_delete_one_message_is_physical_and_audited(two_users, db):
    app, client = two_users
    say(client, "alice", "Tell me a joke about penguins", ts=1_700_000_100)
    settle(app)
    penguins = client.get("/memo/api/history?q=penguins", headers={"X-User-Id": "alice"}).json["history"][0]["id"]
    assert b"penguins" in database_bytes(db) and index_terms("alice", ["penguin"])[0].encode() in database_bytes(db)
    response = client.delete(f"/memo/api/history/{penguins}", headers=as_user("alice"))
    assert response.status_code == 200 and response.json == {"deleted": 1, "id": penguins}
    assert history_texts(db, "alice") == ALICE_SAID
    assert b"penguins" not in database_bytes(db)
    assert index_terms("alice", ["penguin"])[0].encode() not in database_bytes(db)
    assert audit_rows(db, "alice") == [("delete_history", 1, "user, memo page or API")]
    assert client.delete(f"/memo/api/history/{penguins}", headers=as_user("alice")).status_code == 404


def test_delete_of_another_users_message_is_a_404(two_users, db):
    app, client = two_users
    bobs = [m["id"] for m in client.get("/memo/api/history", headers={"X-User-Id": "bob"}).json["history"]]
    for message_id in [*bobs, 999999, "x", "enabled"]:
        response = client.delete(f"/memo/api/history/{message_id}", headers=as_user("alice"))
        assert response.status_code == 404 and response.json == {"error": "no such message"}
    assert history_texts(db, "bob") == ["I love zanzibarian oolong", "I live in Reykjavik"]
    assert audit_rows(db, "alice") == [] and len(history_texts(db, "alice")) == 5


def test_delete_all_history_is_the_users_own_and_keeps_the_memories(two_users, db):
    app, client = two_users
    say(client, "alice", "Tell me a joke about penguins", ts=1_700_000_100)
    settle(app)
    response = client.delete("/memo/api/history", headers=as_user("alice"))
    assert response.status_code == 200 and response.json == {"deleted": 6}
    assert history_texts(db, "alice") == [] and b"penguins" not in database_bytes(db)
    assert history_texts(db, "bob") == ["I love zanzibarian oolong", "I live in Reykjavik"]
    assert len(contents(db, "alice")) == 5
    assert audit_rows(db, "alice") == [("delete_history", 6, "user, memo page or API")]


@pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)
def test_turning_history_off_deletes_it_and_keeps_no_more_messages(two_users, db):
    app, client = two_users
    response = client.put("/memo/api/history/enabled", json={"enabled": False}, headers={"X-User-Id": "alice"})
    assert response.status_code == 200 and response.json == {"enabled": False, "deleted": 5}
    assert client.get("/memo/api/history", headers={"X-User-Id": "alice"}).json["enabled"] is False
    assert audit_rows(db, "alice") == [("delete_history", 5, "user, memo page or API")]
    say(client, "alice", "Any news about the comet", ts=1_700_000_100)  # through the middleware
    settle(app)
    assert history_texts(db, "alice") == [] and b"comet" not in database_bytes(db)
    assert len(history_texts(db, "bob")) == 2
    assert client.put("/memo/api/history/enabled", json={"enabled": True},
                      headers={"X-User-Id": "alice"}).json == {"enabled": True, "deleted": 0}
    say(client, "alice", "Any news about the eclipse", ts=1_700_000_200)
    settle(app)
    assert history_texts(db, "alice") == ["Any news about the eclipse"]


@pytest.mark.parametrize("kwargs", [
    pytest.param({"json": {"enabled": "no"}}, id="not-a-bool"),
    pytest.param({"json": {"enabled": 0}}, id="a-number"),
    pytest.param({"json": {}}, id="empty"),
    pytest.param({"json": {"enabled": False, "also": 1}}, id="more"),
    pytest.param({"headers": {"X-Requested-With": "t"}}, id="no-body"),
])
def test_history_switch_refuses_a_bad_body(two_users, db, kwargs):
    app, client = two_users
    headers = {"X-User-Id": "alice", **kwargs.pop("headers", {})}
    response = client.put("/memo/api/history/enabled", headers=headers, **kwargs)
    assert response.status_code == 400 and "enabled" in response.json["error"]
    assert len(history_texts(db, "alice")) == 5


# -- export ---------------------------------------------------------------------------

@pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)
def test_export_is_a_json_download_of_everything_about_the_user(two_users, db):
    app, client = two_users
    client.delete(f"/memo/api/memories/{alice_id(db, 'plays tennis every sunday')}", headers=as_user("alice"))
    response = client.get("/memo/api/export", headers={"X-User-Id": "alice"})
    assert response.status_code == 200 and response.mimetype == "application/json"
    assert response.headers["Content-Disposition"] == 'attachment; filename="memo-export-alice.json"'
    assert response.headers["Cache-Control"] == "no-store"
    data = json.loads(response.data)
    assert set(data) == {"user_id", "generated_at", "memories", "history", "history_enabled", "audit", "pending",
                         "insights", "topic_counts"}
    assert data["insights"] == []  # none made yet (tests/test_insights.py exports some)
    assert data["user_id"] == "alice" and isinstance(data["generated_at"], int)
    assert sorted(m["content"] for m in data["memories"]) == [
        "answer style: answer in Chinese", "dislikes running", "likes running", "喜欢喝乌龙茶"]
    assert {m["status"] for m in data["memories"]} == {"active", "superseded"}
    assert [m["text"] for m in data["history"]] == [  # the deleted memory's message went with it
        "I like running", "from now on answer in Chinese", "我喜欢喝乌龙茶", "I'm not into running anymore"]
    assert set(data["history"][0]) == {"id", "session_id", "message_id", "ts", "text"}
    assert data["history_enabled"] is True
    assert [(a["action"], a["count"]) for a in data["audit"]] == [("delete", 1), ("forget_history", 1)]
    assert data["pending"] == []
    for word in BOB_WORDS:
        assert word not in response.data


def test_export_file_name_is_safe_for_any_user_id(db, rules):
    client = make_app(db, rules).test_client()
    response = client.get("/memo/api/export", headers={"X-User-Id": 'x"; evil=1/../'})
    assert response.headers["Content-Disposition"] == 'attachment; filename="memo-export-x_evil_1_.json"'


# -- with Redis: waiting jobs lose what is deleted ----------------------------------------

@pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)
def test_delete_reaches_the_waiting_jobs_in_redis(redis_url, db, rules):
    app = make_app(db, rules, redis_url=redis_url)
    client = app.test_client()
    say(client, "alice", "I love zanzibarian oolong", "I play tennis every sunday")
    drain(redis_url)
    # Said again: a remember job waits in Redis (and the statement in alice's pending list) ...
    say(client, "alice", "I love zanzibarian oolong", ts=1_700_000_500)
    assert b"zanzibarian" in all_redis_text(redis_url)
    export = client.get("/memo/api/export", headers={"X-User-Id": "alice"}).json
    assert [c["content"] for p in export["pending"] for c in p["candidates"]] == ["likes zanzibarian oolong"]
    # ... when the memory is deleted from the page: the job must not bring it back.
    memory_id = alice_id(db, "likes zanzibarian oolong")
    response = client.delete(f"/memo/api/memories/{memory_id}", headers=as_user("alice"))
    assert response.json == {"deleted": 1, "id": memory_id, "queue_reached": True}
    assert b"zanzibarian" not in all_redis_text(redis_url)
    drain(redis_url)
    assert contents(db, "alice") == ["plays tennis every sunday"]
    assert b"zanzibarian" not in database_bytes(db)


def test_forget_me_reaches_the_waiting_jobs_in_redis(redis_url, db, rules):
    app = make_app(db, rules, redis_url=redis_url)
    client = app.test_client()
    say(client, "alice", "I play tennis every sunday")
    say(client, "bob", "I play tennis every sunday")
    drain(redis_url)
    say(client, "alice", "I love zanzibarian oolong", ts=1_700_000_500)  # waiting, never stored
    response = client.delete("/memo/api/memories", headers=as_user("alice"))
    assert response.json == {"deleted": 1, "queue_reached": True}
    assert b"zanzibarian" not in all_redis_text(redis_url)
    drain(redis_url)
    assert contents(db, "alice") == [] and contents(db, "bob") == ["plays tennis every sunday"]


@pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)
@pytest.mark.parametrize("redis", [True, False], ids=["redis", "embedded"])
def test_an_edit_is_not_undone_by_a_statement_waiting_for_its_job(request, db, rules, redis):
    redis_url = request.getfixturevalue("redis_url") if redis else None
    app = make_app(db, rules, redis_url=redis_url)
    client = app.test_client()
    say(client, "alice", "I live in Springfield")
    settle(app, redis_url)
    memory_id = alice_id(db, "lives in Springfield")
    if redis:  # said again, differently, before the edit: the job waits in Redis (and shows as pending)
        say(client, "alice", "I live in Shelbyville", ts=1_700_000_500)
        assert b"Shelbyville" in all_redis_text(redis_url)
        export = client.get("/memo/api/export", headers={"X-User-Id": "alice"}).json
        assert [c["content"] for p in export["pending"] for c in p["candidates"]] == ["lives in Shelbyville"]
    else:  # the embedded thread runs it at once: a waiting job is one replayed late, the same payload
        late = remember_payload(app.wsgi_app.funnel.process("I live in Shelbyville"), user_id="alice",
                                turn=Turn("plain", "I live in Shelbyville", None, "s", None, 1_700_000_500),
                                ts=1_700_000_500, received=time.time())
    response = client.patch(f"/memo/api/memories/{memory_id}", headers=as_user("alice"),
                            json={"content": "lives in Capital City"})
    assert response.json["outcome"] == "edited"
    if redis:
        export = client.get("/memo/api/export", headers={"X-User-Id": "alice"}).json
        assert export["pending"] == []  # recall no longer shows the older statement either
    else:
        with Store(db) as store:
            assert store.remember(late) == ["discarded"]
    settle(app, redis_url)
    assert contents(db, "alice") == ["lives in Capital City"]
    # What the user says after the edit is stored as ever, even with a client clock behind the
    # server's (statements are ordered against edits by when the server read them).
    say(client, "alice", "I live in Ogdenville", ts=1_700_000_600)
    settle(app, redis_url)
    assert active(db, "alice") == ["lives in Ogdenville"]


@pytest.mark.parametrize("forget_me", [False, True], ids=["delete", "forget-me"])
@pytest.mark.parametrize("redis", [True, False], ids=["redis", "embedded"])
def test_a_deletion_is_not_undone_by_a_statement_from_a_client_clock_ahead(request, db, rules, redis, forget_me):
    """The page deletes by the server's clock; the chat's statements carry the client's ts,
    here a year ahead. The memory goes, and a statement the server read before the deletion,
    still waiting for its job, does not bring it back: they are ordered by when the server
    read them."""
    redis_url = request.getfixturevalue("redis_url") if redis else None
    app = make_app(db, rules, redis_url=redis_url)
    client = app.test_client()
    ahead = int(time.time()) + 365 * 86400
    say(client, "alice", "I love zanzibarian oolong", ts=ahead)
    settle(app, redis_url)
    memory_id = alice_id(db, "likes zanzibarian oolong")
    # Said again before the deletion: the job waits in Redis, or on the embedded job thread.
    say(client, "alice", "I love zanzibarian oolong", ts=ahead + 10)
    if redis:
        assert b"zanzibarian" in all_redis_text(redis_url)
    time.sleep(0.01)
    path = "/memo/api/memories" if forget_me else f"/memo/api/memories/{memory_id}"
    assert client.delete(path, headers=as_user("alice")).json["deleted"] == 1
    if redis:
        assert b"zanzibarian" not in all_redis_text(redis_url)
    settle(app, redis_url)
    assert contents(db, "alice") == []
    # Said after the deletion from a client a day behind the server, it is stored again, and
    # recalled: neither the job nor recall compares its client time with the deletion's.
    say(client, "alice", "I love zanzibarian oolong", ts=int(time.time()) - 86400)
    settle(app, redis_url)
    assert contents(db, "alice") == ["likes zanzibarian oolong"]
    reply = client.post("/chat", json={"message": "any zanzibarian oolong tips?", "session_id": "s"},
                        headers={"X-User-Id": "alice"}).json
    assert [m["content"] for m in reply["memories"]] == ["likes zanzibarian oolong"]


def test_delete_in_embedded_mode_runs_what_the_job_thread_holds_first(db, rules):
    app = make_app(db, rules)
    client = app.test_client()
    say(client, "alice", "I love zanzibarian oolong")
    settle(app)
    memory_id = alice_id(db, "likes zanzibarian oolong")
    say(client, "alice", "I love zanzibarian oolong", ts=1_700_000_500)  # queued on the thread: a merge
    assert client.delete(f"/memo/api/memories/{memory_id}", headers=as_user("alice")).json["deleted"] == 1
    settle(app)
    assert contents(db, "alice") == []


# -- the page -------------------------------------------------------------------------

def test_page_shows_the_users_memories_grouped_by_type(two_users, db):
    app, client = two_users
    response = client.get("/memo/", headers={"X-User-Id": "alice"})
    assert response.status_code == 200 and response.mimetype == "text/html"
    html = response.data.decode()
    headings = [h for h in ("How to answer", "Likes and dislikes", "Facts about you") if h in html]
    assert headings == ["How to answer", "Likes and dislikes", "Facts about you"]
    assert html.index("How to answer") < html.index("answer in Chinese") < html.index("Likes and dislikes") \
        < html.index("喜欢喝乌龙茶") < html.index("Facts about you") < html.index("plays tennis every sunday")
    assert "Tasks and reminders" not in html  # no empty groups
    assert '<time datetime="2023-11-14T22:13:22Z">2023-11-14</time>' in html
    assert "我喜欢喝乌龙茶" in html  # the excerpt
    assert 'aria-label="Delete: plays tennis every sunday"' in html and 'for="edit-' in html
    assert '<dialog id="confirm-all"' in html and 'data-api="/memo/api/memories"' in html
    assert "replaced by a newer one" in html  # the superseded "likes running"
    assert 'data-api="/memo/api/history"' in html and 'id="history"' in html
    assert 'aria-label="Delete message: I play tennis every sunday"' in html
    assert '<input type="checkbox" id="history-enabled" checked> Keep my chat history' in html
    for word in ("zanzibarian", "Reykjavik"):
        assert word not in html
    policy = response.headers["Content-Security-Policy"]
    nonce = policy.split("'nonce-")[1].split("'")[0]
    assert f'<script nonce="{nonce}">' in html and "frame-ancestors 'none'" in policy
    assert "<script src" not in html and "://" not in html  # nothing from elsewhere, no CDN


def test_page_filters(two_users):
    app, client = two_users
    memories, history = client.get("/memo/?type=fact", headers={"X-User-Id": "alice"}).data.decode().split(
        'id="history"')
    assert "plays tennis every sunday" in memories and "喜欢喝乌龙茶" not in memories
    assert "喜欢喝乌龙茶" in history  # the type and status are the memories'; the search is for both
    memories, history = client.get("/memo/?q=tennis", headers={"X-User-Id": "alice"}).data.decode().split(
        'id="history"')
    assert "Delete message: I play tennis every sunday" in history and "Delete message: I like" not in history
    html = client.get("/memo/?q=oolong", headers={"X-User-Id": "alice"}).data.decode()
    assert "Nothing matches." in html and "No messages kept that match." in html


def test_page_escapes_memory_text(db, rules):
    with Store(db) as store:
        store.remember({"user_id": "alice", "ts": 1, "candidates": [{
            "type": "fact", "key": "x", "polarity": 1, "content": '<img src=x onerror="alert(1)">',
            "excerpt": "</q><script>alert(2)</script>", "confidence": 0.7}],
            "history": {"text": "</span><script>alert(3)</script>", "days": None}})
    html = make_app(db, rules).test_client().get("/memo/", headers={"X-User-Id": "alice"}).data.decode()
    assert "<img src=x" not in html and "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in html
    assert "<script>alert(2)" not in html
    assert "<script>alert(3)" not in html and "&lt;/span&gt;&lt;script&gt;alert(3)" in html


def test_page_without_identity_is_a_401_page(db, rules):
    client = make_app(db, rules).test_client()
    response = client.get("/memo/")
    assert response.status_code == 401 and response.mimetype == "text/html"
    assert b"Sign in" in response.data
    assert client.get("/memo/?user=alice", headers={"X-User-Id": "bob"}).status_code == 403


def test_page_of_a_user_with_no_memories(db, rules):
    html = make_app(db, rules).test_client().get("/memo/", headers={"X-User-Id": "nobody"}).data.decode()
    assert "Nothing is remembered about you." in html and 'id="delete-all"' not in html
    assert "No messages kept." in html and 'id="delete-history" class="danger" hidden' in html


# -- mounting -------------------------------------------------------------------------

def dora_likes_jazz(db):
    with Store(db) as store:
        store.remember({"user_id": "dora", "ts": 1, "candidates": [{
            "type": "preference", "key": "jazz", "polarity": 1, "content": "likes jazz", "excerpt": "I like jazz",
            "confidence": 0.7}]})


@pytest.mark.parametrize("trust", [pytest.param(False, id="default"), pytest.param(True, id="trusted")])
def test_the_page_and_api_take_the_user_header_only_when_trusted(tmp_path, rules, trust):
    """Anyone can send X-User-Id: unless the middleware trusts it (an auth proxy sets it), it names no one
    on the page and API, mounted from the middleware or on their own."""
    db = str(tmp_path / "memo.db")
    dora_likes_jazz(db)
    app = Flask(__name__)
    app.register_blueprint(blueprint_for(MemoryMiddleware(app.wsgi_app, db=db, rules=rules, trust_user_header=trust)))
    app.register_blueprint(create_blueprint(db, url_prefix="/mine", rules=rules, trust_user_header=trust, name="mine"))
    client = app.test_client()
    for url in ("/memo/", "/memo/api/memories", "/mine/", "/mine/api/export", "/memo/api/memories/1"):
        assert client.get(url, headers={"X-User-Id": "dora"}).status_code == (200 if trust else 401)
    deleted = client.delete("/mine/api/memories", headers={"X-User-Id": "dora", "X-Requested-With": "t"})
    assert deleted.status_code == (200 if trust else 401)
    assert contents(db, "dora") == ([] if trust else ["likes jazz"])


def test_create_blueprint_without_a_middleware(tmp_path, redis_url, rules):
    """Standalone: its own database path, header and Redis, as another process would mount it."""
    db = str(tmp_path / "memo.db")
    dora_likes_jazz(db)
    app = Flask(__name__)
    app.register_blueprint(create_blueprint(db, url_prefix="/mine", user_header="X-Account", redis_url=redis_url,
                                            rules=rules, trust_user_header=True))
    client = app.test_client()
    assert client.get("/mine/api/memories", headers={"X-User-Id": "dora"}).status_code == 401
    listed = client.get("/mine/api/memories", headers={"X-Account": "dora"}).json
    assert [m["content"] for m in listed["memories"]] == ["likes jazz"]
    response = client.delete(f"/mine/api/memories/{listed['memories'][0]['id']}",
                             headers={"X-Account": "dora", "X-Requested-With": "t"})
    assert response.json["queue_reached"] is True and contents(db, "dora") == []
