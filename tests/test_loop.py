"""The full loop: a message is captured, a real rq worker stores it, the next request carries it."""

from __future__ import annotations

import json

import pytest
import redis
from flask import Flask, jsonify, request
from rq import Queue
from rq.serializers import JSONSerializer

from memo_mw import Memo, MemoryMiddleware, defaults
from memo_mw.queue import REMEMBER, TOUCH
from memo_mw.recall import BLOCK_BEGIN, BLOCK_END
from memo_mw.store import Store

from .conftest import all_redis_text
from .loadgen import BurstWorker, drain


def memories(db, user="alice"):
    with Store(db) as store:
        return store.list(user)


def memo_queue(redis_url):
    return Queue(defaults.QUEUE_NAME, connection=redis.Redis.from_url(redis_url), serializer=JSONSerializer)


def chat_app() -> Flask:
    """A stand-in for the user's chat app: it echoes what it received."""
    app = Flask(__name__)

    @app.post("/chat")
    @app.post("/v1/chat/completions")
    def chat():
        return jsonify(received=request.get_json(), memories=request.environ.get("memo.memories"))

    return app


def plain(message, user="alice", **extra):
    return {"json": {"message": message, "session_id": "s1", **extra}, "headers": {"X-User-Id": user}}


def openai(message, user="alice"):
    return {"json": {"model": "m", "user": user,
                     "messages": [{"role": "system", "content": "You are helpful."},
                                  {"role": "user", "content": message}]},
            "headers": {"X-User-Id": user}}


CASES = [
    pytest.param("/chat", plain, "我觉得吧，那个，其实我挺喜欢喝乌龙茶的", "推荐一款乌龙茶吧", "喜欢喝乌龙茶", id="zh-plain"),
    pytest.param("/chat", plain, "um, actually I like bossa nova a lot", "Any bossa nova albums for tonight?",
                 "likes bossa nova", id="en-plain"),
    pytest.param("/v1/chat/completions", openai, "我从不吃香菜", "这道菜要放香菜吗", "从不吃香菜", id="zh-openai"),
    pytest.param("/v1/chat/completions", openai, "I don't eat pork.", "Give me a pork-free dinner idea",
                 "doesn't eat pork", id="en-openai"),
]


def prompt_of(path, received):
    if path == "/chat":
        return received["message"]
    system = [m["content"] for m in received["messages"] if m["role"] == "system"]
    return "\n".join(system)


@pytest.mark.parametrize("path, shape, statement, question, summary", CASES)
def test_captured_then_recalled_through_rq(redis_url, db, path, shape, statement, question, summary):
    app = chat_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, trust_user_header=True, db=db, redis_url=redis_url)
    client = app.test_client()

    first = client.post(path, **shape(statement))
    assert first.status_code == 200
    assert first.json["memories"] == []
    assert drain(redis_url) == 1
    stored = memories(db)
    assert [m["content"] for m in stored] == [summary]

    second = client.post(path, **shape(question)).json
    prompt = prompt_of(path, second["received"])
    assert BLOCK_BEGIN in prompt and BLOCK_END in prompt and summary in prompt
    assert [m["content"] for m in second["memories"]] == [summary]
    if path == "/v1/chat/completions":
        roles = [m["role"] for m in second["received"]["messages"]]
        assert roles == ["system", "system", "user"]  # the block follows the app's own system prompt
        assert second["received"]["messages"][-1]["content"] == question
    else:
        assert prompt.endswith("\n\n" + question)

    # The recall was counted by a job, not by a write in the request.
    assert memories(db)[0]["hits"] == 0
    # (and the question went to the chat history by a job of its own)
    assert [job.func_name for job in memo_queue(redis_url).jobs] == [TOUCH, REMEMBER]
    assert drain(redis_url) == 2
    assert memories(db)[0]["hits"] == 1


def test_other_users_never_see_the_memory(redis_url, db):
    app = chat_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, trust_user_header=True, db=db, redis_url=redis_url)
    client = app.test_client()
    client.post("/chat", **plain("I love jazz", user="alice"))
    drain(redis_url)
    bob = client.post("/chat", **plain("any jazz tips?", user="bob")).json
    assert bob["memories"] == [] and BLOCK_BEGIN not in bob["received"]["message"]


def test_retried_request_makes_one_job(redis_url, db):
    app = chat_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url,
                                    clock=lambda: 1_700_000_000.0, trust_user_header=True)
    client = app.test_client()
    for _ in range(3):
        client.post("/chat", **plain("I like green tea", message_id="msg-7"))
    assert len(set(memo_queue(redis_url).job_ids)) == 1  # one job id, however often it was sent
    drain(redis_url)
    assert [(m["content"], m["source_ids"]) for m in memories(db)] == [("likes green tea", ["msg-7"])]


def test_job_payload_is_json_and_already_masked(redis_url, db):
    app = chat_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, trust_user_header=True, db=db, redis_url=redis_url)
    app.test_client().post("/chat", **plain("remember that my email is alice@example.com"))
    (job,) = memo_queue(redis_url).jobs  # decodes with the JSON serializer: the payload is plain JSON values
    payload = json.dumps(job.args, ensure_ascii=False)
    assert "alice@example.com" not in payload and "[email]" in payload
    assert job.func_name == "memo_mw.jobs.remember"


def test_embedded_mode_runs_jobs_in_process(db, caplog):
    app = chat_app()
    caplog.set_level("WARNING", logger="memo_mw.queue")
    middleware = MemoryMiddleware(app.wsgi_app, db=db, trust_user_header=True)  # redis_url=None: embedded
    app.wsgi_app = middleware
    client = app.test_client()
    client.post("/chat", **plain("以后回答简短一点"))
    middleware.queue.join()
    reply = client.post("/chat", **plain("介绍一下量子计算")).json
    assert [m["type"] for m in reply["memories"]] == ["style"]  # style memories always come along
    assert "回答要求：回答简短一点" in reply["received"]["message"]


def test_flask_extension_reads_memo_settings(redis_url, tmp_path):
    app = chat_app()
    app.config.update(MEMO_DB=str(tmp_path / "x.db"), MEMO_REDIS_URL=redis_url, MEMO_RECALL_K=1,
                      MEMO_INJECT_FIELD="memory", MEMO_TRUST_USER_HEADER=True)
    memo = Memo(app)
    middleware = app.extensions["memo"].middleware
    assert app.wsgi_app is middleware and middleware.db == str(tmp_path / "x.db")
    with pytest.raises(RuntimeError, match="already registered"):
        memo.init_app(app)
    client = app.test_client()
    client.post("/chat", **plain("I like tea. I love green tea with honey."))
    drain(redis_url)
    received = client.post("/chat", **plain("which tea should I buy?")).json["received"]
    assert received["message"] == "which tea should I buy?"  # the block went to the configured field
    assert received["memory"].count("\n- ") == 1  # MEMO_RECALL_K=1


def test_finished_jobs_leave_nothing_in_redis(redis_url, db):
    app = chat_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, trust_user_header=True, db=db, redis_url=redis_url)
    client = app.test_client()
    client.post("/chat", **plain("I live in Springfield"))
    client.post("/chat", **plain("where should I live, Springfield or elsewhere?"))
    assert b"Springfield" in all_redis_text(redis_url)  # the waiting jobs hold the (masked) text
    drain(redis_url)
    assert b"Springfield" not in all_redis_text(redis_url)


def test_forget_removes_the_users_waiting_jobs_from_redis(redis_url, db, tmp_path):
    queue = memo_queue(redis_url)
    broken = tmp_path / "a-file"
    broken.write_text("not a folder")
    # A remember job that fails (its database folder is a file) waits in Redis for a retry.
    stuck = chat_app()
    stuck.wsgi_app = MemoryMiddleware(stuck.wsgi_app, db=str(tmp_path / "ok.db"), redis_url=redis_url,
                                      trust_user_header=True)
    stuck.wsgi_app.db = str(broken / "memo.db")
    stuck.test_client().post("/chat", **plain("I live in Springfield"))
    stuck.test_client().post("/chat", **plain("I live in Shelbyville", user="bob"))
    BurstWorker([queue], connection=queue.connection, serializer=JSONSerializer).work(
        burst=True, logging_level="CRITICAL")
    assert len(queue.scheduled_job_registry.get_job_ids()) == 2  # both wait for a retry
    assert b"Springfield" in all_redis_text(redis_url)

    app = chat_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, trust_user_header=True, db=db, redis_url=redis_url)
    app.test_client().post("/chat", **plain("forget everything you know about me"))
    drain(redis_url)
    text = all_redis_text(redis_url)
    assert b"Springfield" not in text
    assert b"Shelbyville" in text  # another user's job is not touched
    assert len(queue.scheduled_job_registry.get_job_ids()) == 1


def test_relative_database_path_is_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    middleware = MemoryMiddleware(chat_app().wsgi_app, db="var/memo.db")
    assert middleware.db == str(tmp_path / "var" / "memo.db")


def test_keyword_arguments_are_keyword_only(db):
    with pytest.raises(TypeError):
        MemoryMiddleware(chat_app().wsgi_app, None, db)  # noqa: the point is that this is refused


def test_jobs_import_without_flask():
    import subprocess
    import sys

    code = "import sys; sys.modules['flask'] = None; import memo_mw.jobs; print('ok')"
    assert subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True).stdout.strip() == "ok"


def test_each_recall_is_counted_by_a_job(redis_url, db):
    app = chat_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url,
                                    clock=lambda: 1_700_000_000.0, trust_user_header=True)
    client = app.test_client()
    client.post("/chat", **plain("I love jazz"))
    client.post("/chat", **plain("我喜欢喝乌龙茶"))
    drain(redis_url)
    for question in ("any jazz albums?", "jazz tonight?", "推荐一款乌龙茶", "more jazz please"):
        client.post("/chat", **plain(question))
    assert [job.func_name for job in memo_queue(redis_url).jobs] == [TOUCH, REMEMBER] * 4  # (REMEMBER: history)
    assert drain(redis_url) == 8
    hits = {m["content"]: (m["hits"], m["last_accessed"]) for m in memories(db)}
    assert hits == {"likes jazz": (3, 1_700_000_000), "喜欢喝乌龙茶": (1, 1_700_000_000)}
