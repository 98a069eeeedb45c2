"""Rules reload without a restart: through a real middleware, with a real rules file on disk.

The middleware's clock is a controllable one, so "after the interval" is a step of the clock,
not a sleep; the only wait is for the reload thread to finish (``funnel.wait()``).
"""

from __future__ import annotations

import logging
import os
import textwrap
import time

import pytest
from werkzeug.test import Client

from memo_mw import MemoryMiddleware
from memo_mw.funnel import Funnel
from memo_mw.reload import ReloadingFunnel, files_signature
from memo_mw.rules import load_rules

T0 = 1_700_000_000.0
INTERVAL = 2.0

LIKE = textwrap.dedent("""\
    language: en
    triggers:
      - id: r.like
        pattern: '\\bI like (?P<what>\\w+)'
        type: preference
        summary: 'likes {what}'
        examples: {match: ['I like tea'], no_match: ['I liked tea']}
    """)
# The edit: "I adore ..." is captured too.
ADORE = LIKE + """\
  - id: r.adore
    pattern: '\\bI adore (?P<what>\\w+)'
    type: preference
    summary: 'adores {what}'
"""
# A broken edit: line 10 has a type the loader refuses.
BROKEN = LIKE + """\
  - id: r.broken
    pattern: '\\bI adore (?P<what>\\w+)'
    type: opinion
    summary: 'adores {what}'
"""


class Clock:
    def __init__(self, now: float = T0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def chat_app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [environ.get("memo.capture", "-").encode()]


@pytest.fixture
def rules_file(tmp_path):
    path = tmp_path / "rules" / "r.yaml"
    path.parent.mkdir()
    path.write_text(LIKE, encoding="utf-8")
    return path


@pytest.fixture
def served(rules_file, tmp_path):
    clock = Clock()
    middleware = MemoryMiddleware(chat_app, rules=str(rules_file), db=str(tmp_path / "memo.db"), clock=clock,
                                  rules_reload_interval=INTERVAL)
    yield middleware, clock, Client(middleware)
    middleware.queue.close()


def say(client: Client, text: str) -> str:
    """The funnel stage the middleware reached for this message (what the app saw in environ)."""
    response = client.post("/chat", json={"message": text}, headers={"X-User-Id": "u1"})
    assert response.status_code == 200
    return response.get_data(as_text=True)


def edit(path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def test_an_edit_is_used_after_the_interval_without_a_restart(served, rules_file):
    middleware, clock, client = served
    assert isinstance(middleware.funnel, ReloadingFunnel)
    assert say(client, "I adore tea") == "no_trigger"
    edit(rules_file, ADORE)

    clock.now += INTERVAL / 2  # too early: the files are not even looked at
    assert say(client, "I adore tea") == "no_trigger"
    assert middleware.funnel.reloads == 0

    clock.now += INTERVAL  # this request notices the change and starts the reload...
    say(client, "hello")
    assert middleware.funnel.wait(timeout=30)
    assert middleware.funnel.reloads == 1
    assert say(client, "I adore tea") == "captured"  # ... the next one runs on the new rules
    assert [t.id for t in middleware.funnel.rules.triggers] == ["r.like", "r.adore"]
    # The recaller reads the same, current rules (recall-all questions, topics).
    assert middleware.recaller.funnel is middleware.funnel


def test_with_the_real_clock_requests_skip_the_look_until_it_is_due(rules_file, tmp_path, monkeypatch):
    """With the real clock, the requests between two looks at the files are read in one call with
    what the last request read them with (memo_mw._speedups.read_request tells that no look is due);
    once it is, Python looks; and a reload has the next request look again, on the new rules."""
    from memo_mw import middleware as middleware_module

    if middleware_module._read_request is None:
        pytest.skip("the compiled extension is not built")
    middleware = MemoryMiddleware(chat_app, rules=str(rules_file), db=str(tmp_path / "memo.db"),
                                  rules_reload_interval=2.0)
    assert middleware.funnel.clock is time.monotonic  # (the middleware's clock is time.time)
    looked = []
    read = MemoryMiddleware._read
    monkeypatch.setattr(MemoryMiddleware, "_read", lambda self, environ: looked.append(1) or read(self, environ))
    client = Client(middleware)
    try:
        assert say(client, "I adore tea") == "no_trigger"
        assert say(client, "I adore tea") == "no_trigger"
        assert looked == [1]  # the first request only: the second read with what it was read with
        edit(rules_file, ADORE)
        time.sleep(2.1)  # the look falls due
        say(client, "hello")  # ... this request looks, and starts the reload
        assert middleware.funnel.wait(timeout=30) and middleware.funnel.reloads == 1
        assert looked == [1, 1]
        assert say(client, "I adore tea") == "captured"  # at once: the reload made a look due
        assert len(looked) == 3
    finally:
        middleware.queue.close()


def test_a_reader_of_the_old_rules_made_during_a_reload_is_not_kept_over_the_new_one(rules_file, tmp_path,
                                                                                      monkeypatch):
    """A request that read the old rules and makes its Reader while the reload swaps the new ones in
    and another request looks and makes one of them: the Reader kept is the new rules' (the two are
    made one after the other), and the next request uses the new rules."""
    import threading

    from werkzeug.test import Client as TestClient

    from memo_mw import middleware as middleware_module
    from memo_mw.reload import files_signature

    if middleware_module._Reader is None:
        pytest.skip("the compiled extension is not built")
    middleware = MemoryMiddleware(chat_app, rules=str(rules_file), db=str(tmp_path / "memo.db"),
                                  rules_reload_interval=60.0)
    client = Client(middleware)
    assert say(client, "I adore tea") == "no_trigger"
    looked, other = threading.Event(), {}
    check = middleware.funnel.check

    def checking():
        check()
        if threading.current_thread() is other.get("thread"):
            looked.set()  # the other request has looked at the files (and now waits to make its Reader)

    real = middleware_module._Reader

    def making(*args):  # the first request's Reader, of the old rules, made while...
        if not other:
            edit(rules_file, ADORE)
            middleware.funnel._reload(files_signature(middleware.funnel.paths))  # ... the reload swaps them
            other["thread"] = threading.Thread(target=lambda: other.setdefault(
                "stage", say(TestClient(middleware), "I adore tea")))
            other["thread"].start()  # ... and another request looks at the files and waits for the lock
            assert looked.wait(timeout=30)
        return real(*args)

    monkeypatch.setattr(middleware.funnel, "check", checking)
    monkeypatch.setattr(middleware_module, "_Reader", making)
    middleware._reader = None
    try:
        assert say(client, "I adore tea") == "no_trigger"  # read on the old rules
        other["thread"].join(timeout=30)
        assert other["stage"] == "captured" and middleware.funnel.reloads == 1
        assert say(client, "I adore tea") == "captured"  # the Reader kept is the new rules'
    finally:
        middleware.queue.close()


def test_a_broken_edit_keeps_the_last_good_rules_and_is_logged_once(served, rules_file, caplog):
    middleware, clock, client = served
    caplog.set_level(logging.INFO, logger="memo_mw.reload")
    edit(rules_file, ADORE)
    clock.now += INTERVAL
    say(client, "hello")
    assert middleware.funnel.wait(timeout=30)
    assert say(client, "I adore tea") == "captured"

    edit(rules_file, BROKEN)
    for _ in range(3):  # three looks at the same broken file: one log record
        clock.now += INTERVAL
        say(client, "hello")
        assert middleware.funnel.wait(timeout=30)
    assert say(client, "I adore tea") == "captured"  # the last good rules, not the broken ones
    assert say(client, "I like tea") == "captured"
    problems = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(problems) == 1
    assert f"{rules_file}:10: r.broken: type must be one of" in problems[0].getMessage()
    assert "the last good rules stay in use" in problems[0].getMessage()

    edit(rules_file, LIKE)  # fixed (here: back to the first version): used again
    clock.now += INTERVAL
    say(client, "hello")
    assert middleware.funnel.wait(timeout=30)
    assert say(client, "I adore tea") == "no_trigger"
    assert middleware.funnel.reloads == 2


def test_an_edit_whose_examples_fail_is_refused_like_rules_check_would(served, rules_file, caplog):
    middleware, clock, client = served
    edit(rules_file, LIKE.replace("no_match: ['I liked tea']", "no_match: ['I like coffee']"))
    clock.now += INTERVAL
    say(client, "hello")
    assert middleware.funnel.wait(timeout=30)
    assert middleware.funnel.reloads == 0
    assert f"{rules_file}:3: r.like: no_match example matches: 'I like coffee'" in caplog.text


def test_a_new_file_in_a_watched_folder_is_loaded(rules_file, tmp_path):
    clock = Clock()
    funnel = ReloadingFunnel(str(rules_file.parent), interval=INTERVAL, clock=clock, background=False)
    assert funnel.process("I adore tea").stage == "no_trigger"
    (rules_file.parent / "s.yaml").write_text(
        "language: en\ntriggers:\n  - {id: s.adore, pattern: '\\bI adore (?P<what>\\w+)', type: preference,"
        " summary: 'adores {what}'}\n", encoding="utf-8")
    clock.now += INTERVAL
    # In the calling thread (background=False): this very call runs on the new rules.
    assert funnel.process("I adore tea").stage == "captured"
    assert len(funnel.rules.files) == 2


def test_signature_changes_with_content_and_folder_listing(rules_file):
    before = files_signature(str(rules_file.parent))
    assert before == files_signature(str(rules_file.parent))
    rules_file.write_text(rules_file.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert files_signature(str(rules_file.parent)) != before
    os.remove(rules_file)
    assert files_signature(str(rules_file.parent)) == ("no rule files",)


@pytest.mark.parametrize("interval", [pytest.param(0, id="zero"), pytest.param(None, id="none")])
def test_reloading_can_be_turned_off(rules_file, tmp_path, interval):
    middleware = MemoryMiddleware(chat_app, rules=str(rules_file), db=str(tmp_path / "memo.db"),
                                  rules_reload_interval=interval)
    try:
        assert type(middleware.funnel) is Funnel
    finally:
        middleware.queue.close()


def test_a_rule_set_passed_in_is_not_watched(rules_file, tmp_path):
    clock = Clock()
    middleware = MemoryMiddleware(chat_app, rules=load_rules(str(rules_file)), db=str(tmp_path / "memo.db"),
                                  clock=clock)
    try:
        assert type(middleware.funnel) is Funnel
        edit(rules_file, ADORE)
        clock.now += 10 * INTERVAL
        assert say(Client(middleware), "I adore tea") == "no_trigger"
    finally:
        middleware.queue.close()


def test_flask_setting_reaches_the_middleware(rules_file, tmp_path):
    flask = pytest.importorskip("flask")
    from memo_mw.flask import Memo

    app = flask.Flask(__name__, instance_path=str(tmp_path / "instance"))
    app.config.update(MEMO_RULES=str(rules_file), MEMO_DB=str(tmp_path / "memo.db"), MEMO_RULES_RELOAD=0.5)
    Memo(app)
    middleware = app.extensions["memo"].middleware
    try:
        assert isinstance(middleware.funnel, ReloadingFunnel) and middleware.funnel.interval == 0.5
    finally:
        middleware.queue.close()
