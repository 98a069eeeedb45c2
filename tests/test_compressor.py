"""The optional small-model compressor, against a stand-in chat-completions server.

No model runs in the tests. ``StandInModelServer`` is a stand-in for Ollama, the llama.cpp
server or vLLM: a real HTTP server (http.server, in a thread, on a free port) that speaks
their OpenAI-compatible ``POST /v1/chat/completions``, and answers what each test scripts:
a line, an error status, a broken body, or nothing in time. Everything else is real: the
HTTP client, the validation, the rq worker, the SQLite file.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from rq.serializers import JSONSerializer
import redis
from rq import Queue
from werkzeug.test import Client

from memo_mw import MemoryMiddleware, defaults
from memo_mw.compressor import (PROMPTS, Compressor, CompressorError, length_cap, polish_candidates,
                                validate)
from memo_mw.store import Store

from .conftest import drain


class StandInModelServer:
    """Stand-in for an OpenAI-compatible model server (Ollama / llama.cpp server / vLLM).

    ``reply`` is the assistant's line; ``status`` an HTTP status to answer instead; ``raw`` a
    body sent as is; ``delay`` seconds to wait before answering. ``requests`` records each
    request body received.
    """

    def __init__(self):
        self.reset()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length", 0))
                server.requests.append(json.loads(self.rfile.read(length)))
                server.paths.append(self.path)
                server.headers = dict(self.headers)
                if server.delay:
                    time.sleep(server.delay)
                if self.path != "/v1/chat/completions":
                    body, status = b'{"error": "not found"}', 404
                elif server.raw is not None:
                    body, status = server.raw, server.status
                else:
                    status = server.status
                    body = json.dumps({
                        "id": "chatcmpl-standin", "object": "chat.completion", "model": "stand-in",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": server.reply}}],
                    }).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up (the timeout tests)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def reset(self):
        self.reply: str = "ok"
        self.status = 200
        self.raw: bytes | None = None
        self.delay = 0.0
        self.requests: list[dict] = []
        self.paths: list[str] = []
        self.headers: dict[str, str] = {}

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def model_server():
    server = StandInModelServer()
    yield server
    server.close()


@pytest.fixture
def model(model_server):
    """The stand-in server, with its script and its record reset for each test."""
    model_server.reset()
    return model_server


SOURCE = "I really love green tea without sugar"
SUMMARY = "likes green tea without sugar"


def polish(model, reply, summary=SUMMARY, source=SOURCE, timeout=2.0):
    model.reply = reply
    return Compressor(model.url + "/v1", model="stand-in", timeout=timeout).polish(summary, source, rule_id="t")


# -- what is accepted, what falls back ---------------------------------------------------


def test_a_good_polish_is_accepted_and_the_request_is_a_chat_completion(model):
    assert polish(model, "loves green tea without sugar") == "loves green tea without sugar"
    (request,) = model.requests
    assert model.paths == ["/v1/chat/completions"]
    assert request["model"] == "stand-in" and request["temperature"] == 0 and request["max_tokens"] <= 64
    system, user = request["messages"]
    assert system == {"role": "system", "content": PROMPTS["en"]}
    assert user["role"] == "user" and SOURCE in user["content"] and SUMMARY in user["content"]


def test_a_chinese_summary_gets_the_chinese_prompt(model):
    out = polish(model, "喜欢喝美式咖啡，不加糖", summary="喜欢喝美式咖啡", source="我最喜欢喝美式咖啡，不加糖")
    assert out == "喜欢喝美式咖啡，不加糖"
    assert model.requests[0]["messages"][0]["content"] == PROMPTS["zh"]


@pytest.mark.parametrize("reply, summary, source, expected", [
    pytest.param('"loves green tea without sugar."', SUMMARY, SOURCE, "loves green tea without sugar",
                 id="quotes-and-period-tidied"),
    pytest.param("<think>short</think>loves green tea without sugar", SUMMARY, SOURCE,
                 "loves green tea without sugar", id="think-block-dropped"),
    pytest.param("doesn't eat pork at all", "doesn't eat pork", "I don't eat pork at all", "doesn't eat pork at all",
                 id="negation-kept"),
    pytest.param("不吃香菜", "不吃香菜", "我从来不吃香菜", "不吃香菜", id="zh-negation-kept"),
], )
def test_accepted_lines(model, reply, summary, source, expected):
    assert polish(model, reply, summary=summary, source=source) == expected


@pytest.mark.parametrize("reply, summary, source, reason", [
    pytest.param("loves green tea\nwithout sugar", SUMMARY, SOURCE, "more than one line", id="multi-line"),
    pytest.param("loves green tea " + "without sugar " * 8, SUMMARY, SOURCE, "characters, more than",
                 id="too-long"),
    pytest.param("loves green tea from Japan", SUMMARY, SOURCE, "a word that is not in the sentence",
                 id="invented-word"),
    pytest.param("喜欢喝拿铁", "喜欢喝美式咖啡", "我喜欢喝美式咖啡", "a character that is not in the sentence",
                 id="invented-character"),
    pytest.param("eats pork", "doesn't eat pork", "I don't eat pork", "the negation of the summary is gone",
                 id="negation-dropped"),
    pytest.param("loves green tea", SUMMARY, SOURCE, "the negation of the summary is gone",
                 id="without-dropped"),
    pytest.param("不喜欢咖啡", "喜欢咖啡", "我喜欢咖啡，不加糖", "a negation the sentence does not make",
                 id="negation-added"),
    pytest.param("likes green tea, email [email]", SUMMARY, SOURCE, "a word that is not in the sentence",
                 id="placeholder-word"),
    pytest.param("  ", SUMMARY, SOURCE, "empty", id="empty"),
])
def test_rejected_lines_fall_back_to_the_rule_summary(model, caplog, reply, summary, source, reason):
    caplog.set_level(logging.INFO, logger="memo_mw.compressor")
    assert polish(model, reply, summary=summary, source=source) == summary
    assert reason in caplog.text and "rule t" in caplog.text
    assert reply.strip() == "" or reply.split()[0] not in caplog.text  # the reason is logged, not the text


def test_a_line_with_personal_data_is_rejected():
    source = "I like writing to bob@example.com"
    with pytest.raises(CompressorError, match="personal data"):
        validate("likes writing to bob@example.com", "likes writing to [email]", source)


def test_the_length_cap():
    assert length_cap("likes jazz") == 80
    assert length_cap("x" * 60) == 120


def test_a_timeout_falls_back_within_the_timeout(model, caplog):
    caplog.set_level(logging.INFO, logger="memo_mw.compressor")
    model.delay = 3.0
    started = time.monotonic()
    assert polish(model, "loves green tea", timeout=0.3) == SUMMARY
    assert time.monotonic() - started < 1.5
    assert "no answer" in caplog.text


def test_http_500_falls_back(model, caplog):
    caplog.set_level(logging.INFO, logger="memo_mw.compressor")
    model.status = 500
    assert polish(model, "loves green tea") == SUMMARY
    assert "HTTP 500" in caplog.text


@pytest.mark.parametrize("raw", [
    pytest.param(b"{not json", id="not-json"),
    pytest.param(b'{"choices": []}', id="no-choices"),
    pytest.param(b'{"choices": [{"message": {"content": null}}]}', id="null-content"),
])
def test_malformed_answers_fall_back(model, caplog, raw):
    caplog.set_level(logging.INFO, logger="memo_mw.compressor")
    model.raw = raw
    assert polish(model, "loves green tea") == SUMMARY
    assert "not a chat completion" in caplog.text


def test_an_unreachable_server_falls_back(caplog):
    from .conftest import free_port

    caplog.set_level(logging.INFO, logger="memo_mw.compressor")
    compressor = Compressor(f"http://127.0.0.1:{free_port()}", timeout=0.5)
    assert compressor.polish(SUMMARY, SOURCE) == SUMMARY
    assert "no answer" in caplog.text


@pytest.mark.parametrize("url, endpoint", [
    pytest.param("http://h:11434/v1", "http://h:11434/v1/chat/completions", id="ollama-base"),
    pytest.param("http://h:8080/", "http://h:8080/v1/chat/completions", id="llama-cpp-root"),
    pytest.param("http://h:8000/v1/chat/completions", "http://h:8000/v1/chat/completions", id="full"),
])
def test_endpoint_from_url(url, endpoint):
    assert Compressor(url).endpoint == endpoint


def test_configuration_from_the_environment(model):
    assert Compressor.from_env({}) is None
    compressor = Compressor.from_env({"MEMO_COMPRESSOR_URL": model.url, "MEMO_COMPRESSOR_MODEL": "m1",
                                      "MEMO_COMPRESSOR_TIMEOUT": "0.7", "MEMO_COMPRESSOR_API_KEY": "k"})
    assert (compressor.model, compressor.timeout) == ("m1", 0.7)
    compressor.polish(SUMMARY, SOURCE)
    assert model.headers["Authorization"] == "Bearer k"
    assert Compressor.from_env({"MEMO_COMPRESSOR_URL": "ftp://x"}) is None


# -- in the payload: restatements still merge ---------------------------------------------


def payload(content, excerpt, key="green tea", rule_id="en.like"):
    return {"user_id": "u", "ts": 1, "job_key": "k", "candidates": [
        {"type": "preference", "key": key, "polarity": 1, "content": content, "excerpt": excerpt,
         "rule_id": rule_id, "confidence": 0.7, "ttl_days": None, "language": "en", "topics": []}]}


def test_a_restatement_reuses_the_stored_line_without_asking(model):
    model.reply = "should not be asked"
    compressor = Compressor(model.url, timeout=2.0)
    original = payload("likes green tea", "I really love green tea")
    polished = polish_candidates(original, compressor, lambda key, polarity: ["loves green tea"])
    assert polished["candidates"][0]["content"] == "loves green tea"
    assert model.requests == []
    assert original["candidates"][0]["content"] == "likes green tea"  # the payload given is unchanged


def test_a_new_value_on_the_slot_is_polished_and_a_candidate_without_rule_is_not(model):
    compressor = Compressor(model.url, timeout=2.0)
    model.reply = "lives in Paris"
    moved = polish_candidates(payload("lives in paris", "I live in Paris now", key="lives"), compressor,
                              lambda key, polarity: ["lives in Berlin"])
    assert moved["candidates"][0]["content"] == "lives in Paris"
    assert moved["candidates"][0]["key"] == "lives"  # the slot stays the rule's
    manual = polish_candidates(payload("likes tea", "I like tea", rule_id=None), compressor, lambda k, p: [])
    assert manual["candidates"][0]["content"] == "likes tea"
    assert len(model.requests) == 1


# -- through a real rq worker into the real SQLite file ------------------------------------


def chat_app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


def test_the_worker_stores_the_polished_line(model, redis_url, db, monkeypatch):
    monkeypatch.setenv("MEMO_COMPRESSOR_URL", model.url + "/v1")
    monkeypatch.setenv("MEMO_COMPRESSOR_MODEL", "stand-in")
    middleware = MemoryMiddleware(chat_app, trust_user_header=True, db=db, redis_url=redis_url)
    client = Client(middleware)

    def say(text, ts):
        middleware.clock = lambda: ts
        assert client.post("/chat", json={"message": text}, headers={"X-User-Id": "ann"}).status_code == 200

    try:
        model.reply = "loves green tea without sugar"
        say("I really love green tea without sugar, call me at 13812345678", 1_700_000_000)
        assert model.requests == []  # not on the request path: the job has not run yet
        assert drain(redis_url) >= 1  # the remember job (and the recall-count flush)
        (sent,) = model.requests
        assert "13812345678" not in json.dumps(sent, ensure_ascii=False)  # only masked text leaves
        with Store(db) as store:
            (memory,) = store.list("ann")
        assert memory["content"] == "loves green tea without sugar"
        assert memory["rule_id"] == "en.like" and memory["key"] == "green tea without sugar"

        # The same statement again merges into the polished memory (no second model call).
        say("I love green tea without sugar", 1_700_000_100)
        assert drain(redis_url) >= 1
        with Store(db) as store:
            (memory,) = store.list("ann", include_inactive=True)
        # One row, merged (confidence up a step), not a second memory superseding the first.
        assert memory["content"] == "loves green tea without sugar" and memory["status"] == "active"
        assert memory["confidence"] == pytest.approx(0.8)
        assert len(model.requests) == 1

        # A bad line: the rule summary is stored.
        model.reply = "loves jasmine tea"
        say("I like jasmine", 1_700_000_200)
        assert drain(redis_url) >= 1
        with Store(db) as store:
            contents = {m["content"] for m in store.list("ann")}
        assert contents == {"loves green tea without sugar", "likes jasmine"}
    finally:
        middleware.queue.close()
    queue = Queue(defaults.QUEUE_NAME, connection=redis.Redis.from_url(redis_url), serializer=JSONSerializer)
    assert queue.failed_job_registry.count == 0


@pytest.mark.parametrize("line", ["likes jazz Москва", "likes jazz ดนตรี", "likes jazz ☠", "likes jazz ©",
                                  "likes jazz μουσική"])
def test_words_and_symbols_of_any_script_must_come_from_the_sentence(line):
    from memo_mw.compressor import CompressorError, validate

    with pytest.raises(CompressorError):
        validate(line, "likes jazz", "I like jazz")
    assert validate(line, "likes jazz", f"I like jazz ({line.split()[-1]})") == line
