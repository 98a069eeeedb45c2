"""The usual request read in one call (memo_mw._speedups.read_request) reads what the middleware's
Python code reads: the same body, JSON object, message and user id, the funnel's result and the
message's analysis; for anything else it says so (False before reading, the body after), and the
Python code reads the request as it always did."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memo_mw import MemoryMiddleware, middleware as middleware_module
from memo_mw.middleware import _PLAIN_JSON, _SCAN, _decode, _turn_of

from .test_speedups import FUNNEL_TEXTS, speedups  # noqa: F401  (skips the module without the extension)

read_request = middleware_module._read_request

MESSAGES = st.one_of(FUNNEL_TEXTS, st.sampled_from(["", " ", "我喜欢喝绿茶", "café", "\ud800 lone", "a\u0000b",
                                                    "what is the weather like in town 12 today?"]))
IDS = st.one_of(st.none(), st.sampled_from(["alice", " alice ", "bob\t", "", "x" * 256, "x" * 257, "ü", "\x1c",
                                            "caf\xc3\xa9", "9"]), st.integers(0, 99), st.booleans())
FIELDS = st.fixed_dictionaries({}, optional={"user_id": IDS, "session_id": IDS, "message_id": IDS,
                                             "ts": st.one_of(st.floats(allow_nan=False), st.integers(), IDS),
                                             "metadata": st.just({"session_id": "s"})})


def usually(draw) -> bool:
    """True three times in four (and what a failing example shrinks to)."""
    return draw(st.integers(0, 3)) < 3


@st.composite
def bodies(draw) -> bytes:
    shape = "plain" if usually(draw) else draw(st.sampled_from(["openai", "other"]))
    fields = draw(FIELDS)
    if shape == "plain":
        value = {**fields, "message": draw(MESSAGES) if usually(draw) else draw(st.one_of(st.integers(),
                                                                                                  st.none()))}
    elif shape == "openai":
        value = {**fields, "messages": [{"role": "user", "content": draw(MESSAGES)}]}
    else:
        value = draw(st.one_of(st.lists(st.integers(), max_size=2), st.text(max_size=5), st.just({"x": 1})))
    ensure_ascii = draw(st.booleans())
    raw = json.dumps(value, ensure_ascii=ensure_ascii).encode("utf-8", "surrogatepass")
    if usually(draw):  # most bodies as clients send them
        return raw
    return draw(st.sampled_from([b" " + raw, raw + b"\n ", raw + b" x", raw[:-1], b"\xef\xbb\xbf" + raw,
                                 raw.replace(b"1", b"NaN", 1), b"", b"{\"message\": \"\xff\"}"]))


@st.composite
def environs(draw) -> dict:
    body = draw(bodies())
    length = "exact" if usually(draw) else draw(st.sampled_from(["short", "none", "odd", "zero", "big"]))
    content_length = {"exact": str(len(body)), "short": str(len(body) + 5), "none": None, "odd": f" {len(body)}",
                      "zero": "0", "big": "99999999"}[length]
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/chat", "wsgi.input": io.BytesIO(body),
               "CONTENT_TYPE": draw(st.sampled_from(sorted(_PLAIN_JSON))) if usually(draw) else
               draw(st.sampled_from(["application/json; charset=latin-1", "application/vnd.x+json", "text/plain"]))}
    if content_length is not None:
        environ["CONTENT_LENGTH"] = content_length
    user = "alice" if usually(draw) else draw(IDS)
    if isinstance(user, str):
        environ["HTTP_X_USER_ID"] = user
    if draw(st.integers(0, 19)) == 19:
        environ[draw(st.sampled_from(["HTTP_TRANSFER_ENCODING", "HTTP_CONTENT_ENCODING"]))] = "chunked"
    return environ


@pytest.fixture(scope="module")
def middleware(tmp_path_factory):
    middleware = MemoryMiddleware(lambda environ, start_response: [], db=str(tmp_path_factory.mktemp("read") / "m.db"),
                                  body_user=True, rules_reload_interval=0)
    yield middleware
    middleware.queue.close()


def python_read(middleware, environ):
    """What the middleware's Python code reads of a request: None when it is not its to read, the
    body when it goes no further, else the body, JSON object, message, user id, the funnel's
    result and the message's analysis."""
    length = middleware._body_length(environ)
    if length is None:
        return None
    raw = bytes(environ["wsgi.input"].read(length))
    if len(raw) != length:
        return raw
    try:
        body = _decode(raw.decode("utf-8"))
    except ValueError:
        return raw
    turn = _turn_of(body, raw)
    user = middleware._user(environ, body, turn) if turn is not None else None
    if user is None:
        return raw
    return (raw, body, turn.message, user, middleware.funnel.process(turn.message),
            middleware.funnel.topics.analyse_once(turn.message))


def c_read(middleware, environ):
    return read_request(environ, _PLAIN_JSON, middleware.max_body,
                        None if middleware.get_user is not None else middleware.user_header_key, _SCAN,
                        middleware.funnel.usual_args())


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(environs())
def test_the_usual_request_is_read_as_python_reads_it(middleware, environ):
    body = environ["wsgi.input"].getvalue()
    got = c_read(middleware, environ)
    position = environ["wsgi.input"].tell()
    environ["wsgi.input"] = io.BytesIO(body)
    expected = python_read(middleware, environ)
    if got is False:
        assert position == 0  # nothing read: Python reads it
        return
    if got is None or isinstance(got, bytes):
        # Not its to read, or the body read and left to Python: whatever Python makes of it.
        assert got == (expected if not isinstance(expected, tuple) else expected[0])
        return
    assert isinstance(expected, tuple), (got, expected)
    raw, value, message, user, result, analysis = got
    assert (raw, value, message, user, analysis) == (expected[0], expected[1], expected[2], expected[3], expected[5])
    if result is not None:  # the funnel's answer for the usual message; None: it looks closer
        assert result == expected[4]
    assert message.isascii() and message and json.loads(raw) == value


def environ_of(body: bytes, **extra) -> dict:
    return {"REQUEST_METHOD": "POST", "PATH_INFO": "/chat", "wsgi.input": io.BytesIO(body),
            "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)), "HTTP_X_USER_ID": "alice",
            **extra}


def test_the_usual_request_in_one_call(middleware):
    body = b'{"message": "what is the weather like in town 12 today?", "session_id": "s1"}'
    raw, value, message, user, result, (tokens, topics) = c_read(middleware, environ_of(body))
    assert raw == body and value["session_id"] == "s1" and user == "alice"
    assert message == "what is the weather like in town 12 today?"
    assert result.stage == "no_trigger" and {"weather", "town", "12"} <= tokens
    # A message the funnel must look at closer: read, with no result.
    assert c_read(middleware, environ_of(b'{"message": "I like green tea"}'))[4] is None


@pytest.mark.parametrize("change, answer", [
    ({"CONTENT_TYPE": "application/vnd.x+json"}, False),  # parsed in Python
    ({"CONTENT_LENGTH": "+5"}, False),
    ({"HTTP_CONTENT_ENCODING": "gzip"}, False),
    ({"CONTENT_LENGTH": "0"}, None),  # not the middleware's to read
    ({"CONTENT_LENGTH": str(10 ** 9)}, None),
])
def test_what_it_leaves_to_python_before_reading(middleware, change, answer):
    environ = environ_of(b'{"message": "hi there"}', **change)
    assert c_read(middleware, environ) is answer
    assert environ["wsgi.input"].tell() == 0


@pytest.mark.parametrize("body, change", [
    (b'{"message": "caf\\u00e9 time"}', {}),  # not an ASCII message
    (b'{"messages": [{"role": "user", "content": "hi"}]}', {}),  # an OpenAI body
    (b' {"message": "hi"}', {}),
    (b'{"message": "hi"} x', {}),
    (b'{"message": "hi", "ts": NaN}', {}),
    (b'{"message": ""}', {}),
    (b'{"message": "hi"}', {"HTTP_X_USER_ID": " alice"}),  # an id clean_id() would strip
    (b'{"message": "hi"}', {"HTTP_X_USER_ID": "x" * 257}),
    (b'{"message": "hi", "user_id": "bob"}', {"HTTP_X_USER_ID": None}),  # the body's user: Python's to read
])
def test_what_it_leaves_to_python_after_reading(middleware, body, change):
    environ = environ_of(body, **change)
    if change.get("HTTP_X_USER_ID", "") is None:
        del environ["HTTP_X_USER_ID"]
    assert c_read(middleware, environ) == body


def test_the_servers_read_errors_are_the_callers(middleware):
    class Broken(io.BytesIO):
        def read(self, size=-1):
            raise OSError("client went away")

    with pytest.raises(OSError, match="went away"):
        c_read(middleware, environ_of(b'{"message": "hi"}', **{"wsgi.input": Broken()}))
    with pytest.raises(KeyError):
        c_read(middleware, {k: v for k, v in environ_of(b'{"message": "hi"}').items() if k != "wsgi.input"})


def test_what_it_cannot_read_is_a_clear_error(middleware):
    with pytest.raises(TypeError):
        read_request({}, _PLAIN_JSON, 10, "HTTP_X_USER_ID", _SCAN)
    with pytest.raises(TypeError):
        read_request([], _PLAIN_JSON, 10, "HTTP_X_USER_ID", _SCAN, None)
    with pytest.raises(TypeError):
        read_request({}, _PLAIN_JSON, 10, "HTTP_X_USER_ID", _SCAN, ("not", "usual"))


def test_without_the_extension_the_python_code_reads_every_request(middleware, monkeypatch):
    monkeypatch.setattr(middleware_module, "_read_request", None)
    seen = []
    middleware.app = lambda environ, start_response: seen.append(environ["wsgi.input"].read()) or []
    body = b'{"message": "what is the weather like today?"}'
    middleware(environ_of(body), lambda *a: None)
    assert seen == [body]


CONVERSATION = [
    "I like green tea", "what is the weather like in town 12 today?", "any tea tips?", "我喜欢喝乌龙茶",
    "from now on call me Bo", "what do you remember about me?", "which tea should I buy?", "my pin is 4821",
    "forget that I like green tea", "any tea tips?", "I don't like coffee", "coffee or tea this morning?",
]


def test_a_conversation_goes_as_it_goes_in_python(tmp_path, monkeypatch):
    """The same requests through the middleware with the one-call read and with the Python code
    alone: the app sees the same bodies, memories and capture stages."""

    def run(db):
        seen = []

        def app(environ, start_response):
            seen.append((environ["wsgi.input"].read(), environ.get("memo.capture"),
                         [m["content"] for m in environ["memo.memories"]], environ.get("memo.block")))
            return []

        middleware = MemoryMiddleware(app, db=str(db), rules_reload_interval=0)
        for i, message in enumerate(CONVERSATION):
            for body in (json.dumps({"message": message, "ts": 1_800_000_000 + i}).encode(),
                         json.dumps({"messages": [{"role": "user", "content": message}]}).encode()):
                middleware(environ_of(body), lambda *a: None)
                middleware.queue.flush()  # the jobs done, so that both runs see the same memories
        middleware.queue.close()
        return seen

    with_c = run(tmp_path / "c.db")
    monkeypatch.setattr(middleware_module, "_read_request", None)
    assert run(tmp_path / "python.db") == with_c
    assert any(memories for _, _, memories, _ in with_c)  # something was recalled
