"""The usual request read in one call (memo_mw._speedups.read_request) reads what the middleware's
Python code reads: the same body, JSON object, message and user id, the funnel's result and the
message's analysis; for anything else it says so (False before reading, the body after), and the
Python code reads the request as it always did."""

from __future__ import annotations

import collections
import io
import json
import math
import os
import sys
import time
import types
import weakref

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memo_mw import MemoryMiddleware, middleware as middleware_module
from memo_mw.middleware import _PLAIN_JSON, _SCAN, _decode, _turn_of

from .test_speedups import FUNNEL_TEXTS, speedups  # noqa: F401  (skips the module without the extension)

read_request = middleware_module._read_request
Reader = middleware_module._Reader

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


def c_read(middleware, environ, kept=False):
    """read_request() with the middleware's arguments; kept: by a Reader of them."""
    args = (_PLAIN_JSON, middleware.max_body, None if middleware.get_user is not None else middleware.user_header_key,
            _SCAN, middleware.funnel.usual_args())
    return Reader(*args)(environ) if kept else read_request(environ, *args)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(environs(), st.booleans())
def test_the_usual_request_is_read_as_python_reads_it(middleware, environ, kept):
    body = environ["wsgi.input"].getvalue()
    got = c_read(middleware, environ, kept)
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
    assert_same_parts(got, expected)


def assert_same_parts(got, expected):
    """read_request's parts of the usual request are what the Python code reads (the body's object
    None when it was read in place: json.loads gives it)."""
    assert isinstance(expected, tuple), (got, expected)
    raw, value, message, user, result, analysis = got
    assert (raw, message, user, analysis) == (expected[0], expected[2], expected[3], expected[5])
    assert value is None or value == expected[1]
    if result is not None:  # the funnel's answer for the usual message; None: it looks closer
        assert result == expected[4]
    assert message.isascii() and message and json.loads(raw) == expected[1]


# JSON of every shape, written with every spacing, key order, repeated key and escape, and then
# broken in places: read in place, by the scanner or left to Python, the answer must be Python's.
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 25, 10 ** 25), st.floats(allow_nan=False),
                    st.text(st.characters(max_codepoint=0x7f), max_size=6), MESSAGES)
KEYS = st.sampled_from(["message", "messages", "mess\\u0061ge", "user_id", "", "x", "message "])
SPACE = st.sampled_from(["", " ", "\n", "\t ", "\r\n"])


@st.composite
def json_texts(draw, depth=0) -> str:
    """One JSON value as text (keys may repeat, and may be written with an escape)."""
    kind = draw(st.integers(0, 3)) if depth < 3 else 0
    if kind == 0:
        return json.dumps(draw(SCALARS), ensure_ascii=draw(st.booleans()))
    items = draw(st.lists(st.tuples(KEYS, json_texts(depth + 1)), max_size=4))
    gap = draw(SPACE)
    if kind == 1:
        return "[" + gap + ("," + gap).join(text for _, text in items) + gap + "]"
    return "{" + gap + ("," + gap).join(f'"{key}"{draw(SPACE)}:{gap}{text}' for key, text in items) + gap + "}"


@st.composite
def json_bodies(draw) -> bytes:
    fields = draw(st.lists(st.tuples(KEYS, json_texts()), max_size=4))
    message = json.dumps(draw(MESSAGES), ensure_ascii=draw(st.booleans()))
    at = draw(st.integers(0, len(fields)))
    fields.insert(at, ("message", message))
    gap = draw(SPACE)
    text = "{" + gap + ("," + gap).join(f'"{key}"{gap}:{gap}{value}' for key, value in fields) + gap + "}"
    raw = (text + draw(SPACE)).encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 3)) == 0 and len(raw) > 1:  # broken: a byte changed or cut
        i = draw(st.integers(1, len(raw) - 1))
        raw = raw[:i] + draw(st.sampled_from([b"", b",", b"}", b"]", b'"', b"\\", b"\x01", b"0", b"e", b"-"])) + \
            raw[i + draw(st.integers(0, 1)):]
    return raw


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(json_bodies())
def test_any_json_body_is_read_as_python_reads_it(middleware, body):
    got = c_read(middleware, environ_of(body))
    expected = python_read(middleware, environ_of(body))
    if isinstance(got, bytes):  # left to Python: whatever Python makes of it
        assert got == body
        return
    assert_same_parts(got, expected)


@pytest.mark.parametrize("body, in_place", [
    (b'{"message": "what is the weather like today?"}', True),
    (b'{ "session_id" : "s1", "message" : "hi there", "meta": {"a": [1, -2, true, false, null, "x\\"y"]}}\r\n',
     True),
    (b'{"message": "one", "message": "two"}', True),  # the last one, as json.loads keeps it
    (b'{"message": "a \\"quoted\\" line\\nand\\ta tab\\\\ \\/"}', True),  # escapes decoded in place
    (b'{"message": "caf\\u0065"}', False),  # a \\u escape: the scanner decodes it
    (b'{"mess\\u0061ge": "hi"}', False),  # a key with an escape: the scanner reads it
    (b'{"message": "hi", "temperature": 0.5}', False),  # a float: the scanner reads it
    (b'{"message": "hi", "n": 12345678901234567890}', False),  # a long integer
    (b'{"message": "hi", "deep": ' + b"[" * 40 + b"]" * 40 + b"}", False),
])
def test_which_bodies_are_read_in_place(middleware, body, in_place):
    """Read in place (no object made for the body) where that is sure, by the scanner otherwise;
    the answer is the same."""
    got = c_read(middleware, environ_of(body))
    assert_same_parts(got, python_read(middleware, environ_of(body)))
    assert (got[1] is None) is in_place


@pytest.mark.parametrize("body", [
    b'{"message": "hi",}', b'{"message": "hi" "x": 1}', b'{"message": "hi", "x": 01}', b'{"message": "h\x01i"}',
    b'{"message": "hi", "x": [1,]}', b'{"message": "hi\\q"}', b'{"message": "hi", "x": tru}', b'{"message": "hi"',
    b'{"message": "hi", "x": -}', b'{"message": "hi", "x": "\\u12"}', b'{"message": "hi"}}',
    b'{"message": "hi", "messages": null}', b'{"message": 5}', b'{"message": "one", "message": 2}',
    b'{"message": "hi", "x": Infinity}',
])
def test_what_is_no_usual_body_goes_to_python(middleware, body):
    assert c_read(middleware, environ_of(body)) == body


def environ_of(body: bytes, **extra) -> dict:
    return {"REQUEST_METHOD": "POST", "PATH_INFO": "/chat", "wsgi.input": io.BytesIO(body),
            "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(body)), "HTTP_X_USER_ID": "alice",
            **extra}


def test_the_usual_request_in_one_call(middleware):
    body = b'{"message": "what is the weather like in town 12 today?", "session_id": "s1"}'
    raw, value, message, user, result, (tokens, topics) = c_read(middleware, environ_of(body))
    assert raw == body and value is None and user == "alice"  # read in place: no object made for the body
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


# -- a user's view's keys: the message checked against them, its tokens not made ----------------

KeySet = getattr(middleware_module._speedups, "KeySet", None)
KEEP = KeySet() if KeySet is not None else None
#: Words for the key sets and messages below: stopwords, stems with topics, plain words, digits.
KEY_WORDS = ["tea", "teas", "green", "jazz", "hiking", "hike", "the", "is", "i", "weather", "town", "12", "coffee",
             "cook", "cooking", "song", "music", "France", "alps", "don't", "it's", "we'll", "sushi", "dog", "dogs"]


def keys_of(middleware, texts):
    """by_token and by_topic of memories of these texts, as memo_mw.memcache.UserMemories makes them."""
    from memo_mw.memcache import UserMemories

    copy = UserMemories.build(1, [{"id": i, "content": text, "key": f"k{i}", "type": "preference"}
                                  for i, text in enumerate(texts)], middleware.funnel.topics.tag)
    return copy.by_token, copy.by_topic


def views_for(keys, user="alice"):
    return {user: weakref.ref(keys)}


def read_with_views(middleware, body, views):
    return read_request(environ_of(body), _PLAIN_JSON, middleware.max_body, middleware.user_header_key, _SCAN,
                        middleware.funnel.usual_args(), views)


def test_a_key_set_holds_its_ascii_keys():
    keys = KeySet({"tea": (0,), "green": (0,)}, ["music", "caf\xe9"], ())
    assert keys.may_hold("tea") and keys.may_hold("green") and keys.may_hold("music")
    assert not keys.may_hold("te") and not keys.may_hold("teas") and not keys.may_hold("") and not keys.may_hold("caf")
    many = [f"word{i}" for i in range(2000)]
    keys = KeySet(many)
    assert all(keys.may_hold(w) for w in many)
    assert sum(keys.may_hold(f"other{i}") for i in range(2000)) == 0  # 32-bit prints: a false "held" is rare
    assert sys.getsizeof(KeySet(many)) < 2000 * 8 * 2 + 200  # at most half full, 4 bytes a slot
    assert weakref.ref(keys)() is keys
    once = KeySet(iter(["tea", "jazz"]), (w for w in ["hike"]))  # iterators: read once
    assert once.may_hold("tea") and once.may_hold("jazz") and once.may_hold("hike")
    with pytest.raises(TypeError):
        KeySet([1])
    with pytest.raises(TypeError):
        KeySet(["tea"], also=["x"])
    with pytest.raises(ValueError):
        keys.may_hold("caf\xe9")


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.sampled_from(KEY_WORDS), min_size=1, max_size=5).map(" ".join), max_size=6),
       st.lists(st.sampled_from(KEY_WORDS + ["?", "!", ",", "tips", "Tea", "TEA's", "hiking?"]), min_size=1,
                max_size=8).map(" ".join))
def test_the_view_s_keys_answer_as_the_copy_s_dicts(middleware, memories, message):
    """A message read against a view's keys comes back without tokens exactly when it shares no
    token or topic with the copy's memories (what the middleware's quick answer checks), with the
    same topics; else with its whole analysis."""
    by_token, by_topic = keys_of(middleware, memories)
    keys = KeySet(by_token, by_topic)
    body = json.dumps({"message": message}).encode()
    got = read_with_views(middleware, body, views_for(keys))
    tokens, topics = c_read(middleware, environ_of(body))[5]
    shares = not (by_token.keys().isdisjoint(tokens) and by_topic.keys().isdisjoint(topics))
    if shares:
        assert got[5] == (tokens, topics)
    else:
        assert got[5][0] is None and got[5][1] == topics and got[5][2] is keys
    assert got[:5] == c_read(middleware, environ_of(body))[:5]


@pytest.mark.parametrize("ref", [
    None,  # no keys for the user
    lambda: KeySet(),  # no weak reference
    weakref.ref(FUNNEL_TEXTS),  # not a KeySet
    weakref.ref(KeySet()),  # gone
])
def test_without_a_view_s_keys_the_whole_analysis(middleware, ref):
    body = b'{"message": "what is the weather like in town 12 today?"}'
    views = {"alice": ref} if ref is not None else {"bob": weakref.ref(KEEP)}
    assert read_with_views(middleware, body, views) == c_read(middleware, environ_of(body))
    with pytest.raises(TypeError):
        read_with_views(middleware, body, [])


def changes(trusted=(3, None), generations=None, spool=None):
    """read_request()'s quick argument: what it reads of memo_mw.statecache.CachedUserState to tell
    that a user's stamp is the one a view was read under (as its stamp(): the cell of what it trusts,
    (epoch, the listener's process id) while listening, and the user's generation), and the cell of
    the outbox backend's spooled (None: no outbox)."""
    trusted = (trusted[0], os.getpid() if trusted[1] is None else trusted[1]) if trusted is not None else None
    return [trusted], collections.defaultdict(int, {"alice": 7}) if generations is None else generations, spool


def answer_of(middleware, message, entry, quick, usual=None):
    body = json.dumps({"message": message}).encode()
    return read_request(environ_of(body), _PLAIN_JSON, middleware.max_body, middleware.user_header_key, _SCAN,
                        usual or middleware.funnel.usual_args(), {"alice": entry}, quick)


def test_a_view_that_still_answers_answers_the_request(middleware):
    """Where the user's view still answers (its stamp the user's, nothing waiting in the outbox,
    before its end, no insights) and the message shares nothing with its keys, triggers nothing and
    asks for nothing: the request comes back answered, (body, user, message, topics, result);
    wherever one of these does not hold, as read without the answer."""
    by_token, by_topic = keys_of(middleware, ["I like green tea", "I love hiking in the alps"])
    keys = KeySet(by_token, by_topic)
    later = time.monotonic() + 60

    def entry(answers=True, epoch=3, generation=7, until=later, ref=weakref.ref(keys)):
        return (ref, answers, epoch, generation, until)

    usual = middleware.funnel.usual_args()
    message = "what is the weather like in town 12 today?"
    got = answer_of(middleware, message, entry(), changes(spool=[False]))
    assert got == (json.dumps({"message": message}).encode(), "alice", message,
                   middleware.funnel.topics.analyse_once(message)[1], usual[5][0])
    assert got[4].stage == "no_trigger" and got[4].recall_all is False
    assert answer_of(middleware, message, entry(), changes()) == got  # no outbox
    topical = "what should I cook tonight?"  # a topic, none of the memories'
    assert answer_of(middleware, topical, entry(), changes())[3] == \
        middleware.funnel.topics.analyse_once(topical)[1] != frozenset()

    unanswered = {
        "insights shown with it": (message, entry(answers=False), changes(), None),
        "past its end": (message, entry(until=time.monotonic() - 1), changes(), None),
        "not listening": (message, entry(), changes(trusted=None), None),
        "threads of another process": (message, entry(), changes(trusted=(3, os.getpid() + 1)), None),
        "another epoch": (message, entry(epoch=4), changes(), None),
        "another generation": (message, entry(generation=8), changes(), None),
        "the user dropped": (message, entry(), changes(generations={}), None),
        "jobs in the outbox": (message, entry(), changes(spool=[True]), None),
        "no quick context": (message, entry(), None, None),
        "a shared word": ("any green tea tips?", entry(), changes(), None),
        "a shared topic": ("which mountains are good for a walk?", entry(), changes(), None),
        "a trigger": ("I like jazz", entry(), changes(), None),
        "a recall-everything question": ("what do you remember about me?", entry(), changes(), None),
        "rules without recall-everything": (message, entry(), changes(), (*usual[:6], False)),
        "an old 6-tuple": (message, entry(), changes(), usual[:6]),
    }
    for case, (text, view, quick, rules) in unanswered.items():
        got = answer_of(middleware, text, view, quick, rules)
        assert type(got) is tuple and len(got) == 6, case
        assert got == answer_of(middleware, text, weakref.ref(keys), None, rules), case  # the keys' read
    with pytest.raises(TypeError):
        answer_of(middleware, message, entry(), list(changes()))
    # Cells of another shape: nothing to trust, the request read without the answer.
    for quick in [(object(), {"alice": 7}, None), ((3, os.getpid()), {"alice": 7}, None), ([], {"alice": 7}, None),
                  (changes()[0], {"alice": 7}, [False, False]), (changes()[0], {"alice": 7}, [0])]:
        assert answer_of(middleware, message, entry(), quick) == answer_of(middleware, message, weakref.ref(keys),
                                                                           None), quick
    assert answer_of(middleware, message, entry(), (changes()[0], {"alice": 7}, [False]))[1] == "alice"


def test_with_a_tally_the_answered_request_is_done_in_the_call(middleware):
    """With tally (the middleware's week cell, the state's (gate, append), the counts of a message
    with no topic, the capture key, the input type), the request the user's view answers is done
    in the call, as MemoryMiddleware.__call__ and _count_topics do it: True, the funnel's stage in
    environ, the body back in wsgi.input, the counts noted (while the gate is closed). Where that
    cannot be done there, the answer comes back as without a tally, nothing of it done."""
    by_token, by_topic = keys_of(middleware, ["I like green tea", "I love hiking in the alps"])
    keys = KeySet(by_token, by_topic)
    entry = (weakref.ref(keys), True, 3, 7, time.monotonic() + 60)
    usual = middleware.funnel.usual_args()
    assert len(usual) == 8 and usual[7] == usual[5][0].stage == "no_trigger"
    message = "what is the weather like in town 12 today?"
    now = time.time()
    gate = types.SimpleNamespace(closed=True)

    def answer(text=message, week=(now - 60.0, now + 3600.0, "2026-W49"), append=None, rules=usual, tally=None):
        noted = []
        body = json.dumps({"message": text}).encode()
        environ = environ_of(body)
        tally = tally or ([week], gate, append or noted.append, ("@en",), "memo.capture", io.BytesIO)
        got = read_request(environ, _PLAIN_JSON, middleware.max_body, middleware.user_header_key, _SCAN, rules,
                           {"alice": entry}, changes(), tally)
        return got, environ, noted, body

    got, environ, noted, body = answer()
    assert got is True
    assert type(environ["wsgi.input"]) is io.BytesIO and environ["wsgi.input"].read() == body
    assert environ["memo.capture"] == "no_trigger"
    assert noted == [("alice", "2026-W49", ("@en",))]
    gate.closed = False  # Redis down: no counts, as note_topics() does then; the rest done
    got, environ, noted, body = answer()
    assert got is True and environ["wsgi.input"].read() == body and noted == []
    gate.closed = True
    for cell, counted in [([True], 1), ([False], 0)]:  # a breaker's closed_cell: read without a lookup
        noted = []
        got = answer(tally=([(now - 60.0, now + 3600.0, "w")], cell, noted.append, ("@en",), "memo.capture",
                            io.BytesIO))[0]
        assert got is True and len(noted) == counted, cell

    def fails(note):
        raise ValueError("full")

    class Stop(BaseException):
        pass

    def stops(note):
        raise Stop

    class Opening:
        @property
        def closed(self):
            raise RuntimeError("half-open")

    python_does_it = {
        "a message with a topic": answer(text="what should I cook tonight?"),
        "a time after the week's day": answer(week=(now - 7200.0, now - 3600.0, "2026-W49")),
        "a time before it": answer(week=(now + 60.0, now + 3600.0, "2026-W49")),
        "no day read yet": answer(week=(0.0, -1.0, "")),
        "a day of ints": answer(week=(0, 2 ** 40, "2026-W49")),
        "a failing append": answer(append=fails),
        "a failing gate": answer(tally=([(now - 60.0, now + 3600.0, "w")], Opening(), [].append, ("@en",),
                                        "memo.capture", io.BytesIO)),
        "a failing input type": answer(tally=([(now - 60.0, now + 3600.0, "w")], None, [].append, ("@en",),
                                              "memo.capture", lambda raw: 1 / 0)),
        "rules without the stage": answer(rules=usual[:7]),
    }
    plain = read_request(environ_of(json.dumps({"message": message}).encode()), _PLAIN_JSON, middleware.max_body,
                         middleware.user_header_key, _SCAN, usual, {"alice": entry}, changes())
    for case, (got, environ, noted, body) in python_does_it.items():
        assert type(got) is tuple and len(got) == 5 and got[0] == body, case
        assert noted == [] and "wsgi.input" in environ and environ["wsgi.input"].read() == b"", case  # read
        # (the stage is set before the counts are appended: Python sets it again, the same)
        assert environ.get("memo.capture") == ("no_trigger" if case == "a failing append" else None), case
        if case != "a message with a topic":
            assert got == plain, case
    with pytest.raises(Stop):  # what is no Exception goes on up
        answer(append=stops)
    for tally in [[[(now, now + 1, "w")], None, [].append, (), "k", io.BytesIO], ([], None, [].append)]:
        with pytest.raises(TypeError):
            answer(tally=tally)


def test_rules_due_a_look_leave_the_read_to_python(middleware):
    """With fresh ((the cell of when the rules' files were last looked at, the interval), by
    time.monotonic), a request comes back False, nothing read, when a look is due (or the cell
    holds no time to tell): the middleware's Python looks at the files, then reads it."""
    body = b'{"message": "what is the weather like in town 12 today?"}'
    args = (_PLAIN_JSON, middleware.max_body, middleware.user_header_key, _SCAN, middleware.funnel.usual_args(),
            None, None, None)
    expected = read_request(environ_of(body), *args)
    assert type(expected) is tuple
    now = time.monotonic()
    for fresh in [None, ([now], 60.0), ([now - 59.0], 60.0)]:
        assert read_request(environ_of(body), *args, fresh) == expected, fresh
    for fresh in [([now - 61.0], 60.0), ([now + 5.0], 60.0), ([-math.inf], 60.0), ([math.nan], 60.0),
                  ([now], 0.0), ([int(now)], 60.0), ([now], 60), ([], 60.0), ([now, now], 60.0), ((now,), 60.0)]:
        environ = environ_of(body)
        assert read_request(environ, *args, fresh) is False, fresh
        assert environ["wsgi.input"].read() == body, fresh  # nothing read
    for fresh in [[[now], 60.0], ([now],), ([now], 60.0, True)]:
        with pytest.raises(TypeError):
            read_request(environ_of(body), *args, fresh)


def test_a_reader_checks_its_arguments_once(middleware):
    """A Reader is read_request() with its arguments kept: those of the wrong kind are a TypeError,
    rules whose parts cannot be read a ValueError, when it is made (read_request() gives such a
    request's body back); it is called with the environ alone."""
    usual = middleware.funnel.usual_args()
    args = (_PLAIN_JSON, middleware.max_body, middleware.user_header_key, _SCAN, usual)
    body = b'{"message": "what is the weather like in town 12 today?"}'
    reader = Reader(*args, None, None, None, None)
    assert reader(environ_of(body)) == read_request(environ_of(body), *args) != body
    for wrong in [args[:4], (*args, None, None, None, None, None), ([], *args[1:]), (*args[:4], ("not", "usual")),
                  (*args, []), (*args, None, [], None), (*args, None, None, ()), (*args, None, None, None, [1, 2.0])]:
        with pytest.raises(TypeError):
            Reader(*wrong)
    for unreadable in [(*usual[:4], object(), *usual[5:]), (*usual[:5], (1,), *usual[6:]),
                       (usual[0][:5], *usual[1:]), (*usual[:3], ({}, 1, 2, b"", 0), *usual[4:])]:
        with pytest.raises(ValueError):
            Reader(*args[:4], unreadable)
        assert read_request(environ_of(body), *args[:4], unreadable) == body
    with pytest.raises(TypeError):
        reader()
    with pytest.raises(TypeError):
        reader(environ_of(body), environ_of(body))
    with pytest.raises(TypeError):
        reader(environ=environ_of(body))
    with pytest.raises(TypeError):
        reader([])
    with pytest.raises(TypeError):
        Reader(*args, views=None)
    stale = Reader(*args, None, None, None, ([time.monotonic() - 61.0], 60.0))
    environ = environ_of(body)
    assert stale(environ) is False and environ["wsgi.input"].read() == body  # a look due: nothing read


def test_a_reader_in_a_cycle_is_collected(middleware):
    """What a Reader keeps may lead back to it (the app's own append, say): the collector frees them."""
    import gc

    class Notes(list):
        pass

    notes = Notes()
    week = [(0.0, 1.0, "w")]
    notes.reader = Reader(_PLAIN_JSON, middleware.max_body, middleware.user_header_key, _SCAN,
                          middleware.funnel.usual_args(), None, None, (week, None, notes.append, ("@en",), "k", io.BytesIO))
    gone = weakref.ref(notes)
    del notes
    gc.collect()
    assert gone() is None


def test_rules_a_reader_cannot_read_are_read_in_python_with_one_warning(tmp_path, caplog):
    """Rules whose parts the one-call read cannot take (here a quiet spec's limit past a C integer)
    make no Reader: one warning, and their requests are read in Python, captures and all."""
    seen = []
    middleware = MemoryMiddleware(lambda environ, start_response: seen.append(environ.get("memo.capture")) or [],
                                  db=str(tmp_path / "m.db"), rules_reload_interval=0)
    usual = middleware.funnel.usual_args()
    spec = usual[3]
    middleware.funnel._usual = (*usual[:3], (spec[0], 2 ** 70, *spec[2:]), *usual[4:])
    with caplog.at_level("WARNING", logger="memo_mw.middleware"):
        for message in ["I like green tea", "what is the weather like today?", "I like jazz"]:
            middleware(environ_of(json.dumps({"message": message}).encode()), lambda *a: None)
    assert seen == ["captured", "no_trigger", "captured"] and middleware._reader is None
    assert [r.message for r in caplog.records].count(
        "memo-mw: the one-call read cannot read these rules; their requests are read in Python") == 1
    middleware.queue.close()


def test_requests_the_reader_leaves_to_python_do_not_make_it_again(tmp_path, monkeypatch):
    """A request the kept Reader leaves to Python (an unusual content type, say) is read there with
    the kept arguments: the Reader is made once."""
    made = []
    middleware = MemoryMiddleware(lambda environ, start_response: [], db=str(tmp_path / "m.db"),
                                  rules_reload_interval=0)
    monkeypatch.setattr(middleware_module, "_Reader", lambda *args: made.append(1) or Reader(*args))
    body = b'{"message": "what is the weather like today?"}'
    for content_type in ["application/json", "application/vnd.api+json", "application/json; charset=utf-8; x=1",
                         "application/vnd.api+json"]:
        environ = environ_of(body)
        environ["CONTENT_TYPE"] = content_type
        middleware(environ, lambda *a: None)
        assert environ["memo.capture"] == "no_trigger", content_type
    assert made == [1]
    middleware.queue.close()


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
    middleware.app = lambda environ, start_response: seen.append(
        (environ["wsgi.input"].read(), environ.get("memo.capture"))) or []
    body = b'{"message": "what is the weather like today?"}'
    middleware(environ_of(body), lambda *a: None)
    assert seen == [(body, "no_trigger")]  # read and looked at by the Python code


@pytest.mark.parametrize("max_body", [1e6, 10 ** 30, True])
def test_a_cap_that_is_no_plain_int_leaves_the_read_to_python(middleware, max_body, monkeypatch):
    """A max_body from a config file may be a float or any int: the request is read all the same."""
    assert c_read(middleware, environ_of(b'{"message": "hi there"}')) != False  # noqa: E712
    monkeypatch.setattr(middleware, "max_body", max_body)
    assert c_read(middleware, environ_of(b'{"message": "hi there"}')) is False
    seen = []
    middleware.app = lambda environ, start_response: seen.append(environ.get("memo.capture")) or []
    middleware(environ_of(b'{"message": "what is the weather like today?"}'), lambda *a: None)
    assert seen == (["no_trigger"] if max_body is not True else [None])  # True: a cap of one byte


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


def test_with_redis_the_users_view_answers_as_python_does(tmp_path, redis_url, monkeypatch):
    """With Redis (a user-state listener: the user's view is kept, the topic counts are appended to
    the state's notes), a user with stored memories asks the same questions through the one-call
    read and through the Python code alone: the same memories come back, and the same counts are
    noted; the view's quick answer (nothing to recall) is taken for most of them."""
    from memo_mw.pipeline import remember_payload
    from memo_mw.store import Store

    from .conftest import answered, observe_reads, wait_until

    questions = ["what is the weather like in town 12 today?", "any tea tips?", "which tea goes with cake?",
                 "tell me about jazz", "what should I cook tonight?", "do you know any good hiking trails?",
                 "what is the capital of France?", "coffee or tea this morning?", "recommend a song",
                 "where should I go this weekend?"]  # (the last two share a topic with a memory, no word)

    def run(name):
        db = str(tmp_path / f"{name}.db")
        seen = []
        middleware = MemoryMiddleware(lambda environ, start_response: seen.append(
            [m["content"] for m in environ["memo.memories"]]) or [], db=db, redis_url=redis_url,
            queue_name=f"q-{name}", rules_reload_interval=0)
        with Store(db) as store:
            for i, statement in enumerate(["I like green tea", "I like jazz", "I love hiking in the alps"]):
                result = middleware.funnel.process(statement)
                store.remember(remember_payload(result, user_id="alice", session_id="s", ts=1_700_000_000 + i,
                                                message_id=None, time_key=i))
        state = middleware.queue.backend.state
        assert wait_until(lambda: middleware(environ_of(b'{"message": "hello there"}'), lambda *a: None) == []
                          and state.listening)
        # The counts as the request notes them (the state's deque is drained by its reads and sender).
        gate, append = middleware._topic_notes
        noted = []
        middleware._topic_notes = (gate, lambda note: noted.append(note) or append(note))
        quick, by_keys = [], []
        with monkeypatch.context() as reading:  # whether the view answered the request, or its keys the message
            observe_reads(reading, middleware, lambda got: by_keys.append(
                "answered" if answered(got) else
                "keys" if type(got) is tuple and got[5] is not None and got[5][0] is None else None))
            for question in questions:
                views = dict(middleware._views)
                middleware(environ_of(json.dumps({"message": question}).encode()), lambda *a: None)
                view = views.get("alice")
                quick.append(view is not None and view.quick and view is middleware._views.get("alice"))
        notes = [names for _, _, names in noted]
        middleware.queue.close()
        return seen[-len(questions):], notes, quick, by_keys

    with_c = run("c")
    with monkeypatch.context() as slow:
        slow.setattr(middleware_module, "UserMemories", type("NoQuickAnswer", (), {}))  # no view answers quick
        recalled = run("recall")
    monkeypatch.setattr(middleware_module, "_read_request", None)
    python = run("python")
    assert python[:2] == with_c[:2] == recalled[:2]
    assert any(with_c[0]) and sum(with_c[2]) >= len(questions) // 2  # recalled something; views answered
    assert not any(recalled[2]) and not any(recalled[3]) and not python[3]
    # The view (or its keys) answered exactly where a view was there and nothing was recalled (the
    # last two share only a topic with a memory: recalled); with no insights, the view itself.
    assert [bool(answer) for answer in with_c[3]] == [quick and not memories
                                                      for quick, memories in zip(with_c[2], with_c[0])]
    assert "answered" in with_c[3] and "keys" not in with_c[3]


def test_topic_counts_wait_while_redis_is_down(db, redis_url):
    """The request appends its counts to the state's notes only while the breaker lets Redis calls
    through (as the state's note_topics() does): none are kept for a Redis that does not answer."""
    middleware = MemoryMiddleware(lambda environ, start_response: [], db=db, redis_url=redis_url,
                                  rules_reload_interval=0)
    redis_state = middleware.queue.backend.state.inner
    breaker = middleware.queue.breaker

    def noted():  # appended, and added up by the user-state reads since
        return len(redis_state._notes) + sum(n for counts in redis_state._noted.values() for n in counts.values())

    def ask():
        before = noted()
        middleware(environ_of(b'{"message": "what is the weather like today?"}'), lambda *a: None)
        return noted() - before

    from .conftest import wait_until

    # The user's view kept (the listener subscribed): no state read sends the counts meanwhile.
    assert wait_until(lambda: ask() is not None and middleware.queue.backend.state.listening)
    ask()
    assert ask() == 1
    breaker.failure()  # open: Redis is skipped
    assert not breaker.closed and ask() == 0
    breaker.success()
    assert ask() == 1
    middleware.queue.close()
