"""Request shapes (memo_mw.adapters): where the user, session and message are, and how the block goes in."""

from __future__ import annotations

import pytest

from memo_mw.adapters import MAX_ID_CHARS, BadUserId, Turn, clean_id, header_user, inject, read_turn, user_id


@pytest.mark.parametrize("value, expected", [
    pytest.param("alice", "alice", id="string"),
    pytest.param("  alice ", "alice", id="stripped"),
    pytest.param(42, "42", id="int"),
    pytest.param(True, None, id="bool"),
    pytest.param(1.5, None, id="float"),
    pytest.param(["alice"], None, id="list"),
    pytest.param("   ", None, id="blank"),
    pytest.param("a" * MAX_ID_CHARS, "a" * MAX_ID_CHARS, id="longest"),
    pytest.param("a" * (MAX_ID_CHARS + 1), None, id="too-long"),
    pytest.param(None, None, id="none"),
])
def test_clean_id(value, expected):
    assert clean_id(value) == expected


@pytest.mark.parametrize("header, expected", [
    pytest.param("alice", "alice", id="ascii"),
    pytest.param("ét1".encode().decode("latin-1"), "ét1", id="utf-8-bytes"),
    pytest.param("\xe9t1", BadUserId, id="latin-1-bytes"),
    pytest.param("a\x1fb", BadUserId, id="control"),
    pytest.param("\u4e2d", "\u4e2d", id="decoded-already"),  # (a test client's text, not a server's bytes)
    pytest.param(None, None, id="absent"),
])
def test_a_header_id_is_its_bytes_read_as_utf8_the_one_way(header, expected):
    environ = {} if header is None else {"HTTP_X_USER_ID": header}
    if expected is BadUserId:
        with pytest.raises(BadUserId):
            header_user(environ, "HTTP_X_USER_ID")
    else:
        assert header_user(environ, "HTTP_X_USER_ID") == expected


def test_user_id_refuses_control_characters_only():
    assert user_id(" bob ") == "bob" and user_id(None) is None and user_id("josé 李") == "josé 李"
    for bad in ("a\x00", "a\x7f", "a\x85b", "\tbob\t x"):
        with pytest.raises(BadUserId):
            user_id(bad)


def test_plain_turn():
    turn = read_turn({"user_id": "alice", "session_id": "s1", "message": "hi", "message_id": 7, "ts": 1_700_000_000})
    assert turn == Turn("plain", "hi", "alice", "s1", "7", 1_700_000_000.0)
    turn = read_turn({"message": "hi", "ts": "yesterday", "user_id": True})
    assert turn == Turn("plain", "hi", None, None, None, None)


def test_openai_turn_reads_the_last_user_message_and_its_metadata():
    body = {"user": "bob", "metadata": {"session_id": "s2", "message_id": "m9"}, "ts": 1e12,
            "messages": [{"role": "user", "content": "first"}, {"role": "assistant", "content": "ok"},
                         {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url"},
                                                      {"type": "text", "text": "b"}]}]}
    assert read_turn(body) == Turn("openai", "a\nb", "bob", "s2", "m9", None)  # ts beyond year 5138: none


@pytest.mark.parametrize("body", [None, [], "hi", {"text": "hi"}, {"messages": []}, {"message": 3},
                                  {"messages": [{"role": "user", "content": None}]}])
def test_not_a_turn(body):
    assert read_turn(body) is None


def test_inject_leaves_the_callers_body_alone():
    body = {"user_id": "alice", "message": "hi"}
    turn = read_turn(body)
    assert inject(body, turn, "BLOCK") == {"user_id": "alice", "message": "BLOCK\n\nhi"}
    assert inject(body, turn, "BLOCK", field="memory") == {"user_id": "alice", "message": "hi", "memory": "BLOCK"}
    assert body == {"user_id": "alice", "message": "hi"}


def test_inject_puts_the_system_message_after_the_apps_own():
    body = {"messages": [{"role": "system", "content": "a"}, {"role": "system", "content": "b"},
                         {"role": "user", "content": "hi"}]}
    injected = inject(body, read_turn(body), "BLOCK", field="memory")
    assert [m["content"] for m in injected["messages"]] == ["a", "b", "BLOCK", "hi"]
    assert len(body["messages"]) == 3
