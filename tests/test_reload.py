"""Rules reload without a restart, from a real rules file on disk.

The clock is a controllable one, so "after the interval" is a step of the clock, not a sleep.
The request that notices a change loads the new rules itself: the next line runs on them.
"""

from __future__ import annotations

import logging
import os
import textwrap
import threading

import pytest

from memo_mw import reload as reload_module
from memo_mw.funnel import Funnel
from memo_mw.reload import ReloadingFunnel, files_signature, make_funnel
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


@pytest.fixture
def rules_file(tmp_path):
    path = tmp_path / "rules" / "r.yaml"
    path.parent.mkdir()
    path.write_text(LIKE, encoding="utf-8")
    return path


@pytest.fixture
def watched(rules_file):
    clock = Clock()
    funnel = make_funnel(str(rules_file), reload_interval=INTERVAL, clock=clock)
    assert isinstance(funnel, ReloadingFunnel)
    return funnel, clock


def say(funnel, text: str) -> str:
    """The funnel stage this message reaches."""
    return funnel.process(text).stage


def edit(path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def test_an_edit_is_used_after_the_interval_without_a_restart(watched, rules_file):
    funnel, clock = watched
    assert say(funnel, "I adore tea") == "no_trigger"
    edit(rules_file, ADORE)

    clock.now += INTERVAL / 2  # too early: the files are not even looked at
    assert say(funnel, "I adore tea") == "no_trigger"
    assert funnel.reloads == 0

    clock.now += INTERVAL  # this call notices the change, loads the new rules and runs on them
    assert say(funnel, "I adore tea") == "captured"
    assert funnel.reloads == 1
    assert [t.id for t in funnel.rules.triggers] == ["r.like", "r.adore"]
    # The rest of the funnel's interface reads the same, current rules.
    assert funnel.rules is funnel.funnel.rules and funnel.topics is funnel.funnel.topics
    assert funnel.is_recall_all("what do you remember about me") is False  # (these rules have no such gate)


def test_a_broken_edit_keeps_the_last_good_rules_and_is_logged_once(watched, rules_file, caplog):
    funnel, clock = watched
    caplog.set_level(logging.INFO, logger="memo_mw.reload")
    edit(rules_file, ADORE)
    clock.now += INTERVAL
    assert say(funnel, "I adore tea") == "captured"

    edit(rules_file, BROKEN)
    for _ in range(3):  # three looks at the same broken file: one log record
        clock.now += INTERVAL
        assert say(funnel, "I adore tea") == "captured"  # the last good rules, not the broken ones
    assert say(funnel, "I like tea") == "captured"
    problems = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(problems) == 1
    assert f"{rules_file}:10: r.broken: type must be one of" in problems[0].getMessage()
    assert "the last good rules stay in use" in problems[0].getMessage()

    edit(rules_file, LIKE)  # fixed (here: back to the first version): used again
    clock.now += INTERVAL
    assert say(funnel, "I adore tea") == "no_trigger"
    assert funnel.reloads == 2


def test_an_edit_whose_examples_fail_is_refused_like_rules_check_would(watched, rules_file, caplog):
    funnel, clock = watched
    edit(rules_file, LIKE.replace("no_match: ['I liked tea']", "no_match: ['I like coffee']"))
    clock.now += INTERVAL
    assert say(funnel, "I like coffee") == "captured"  # on the rules it had
    assert funnel.reloads == 0
    assert f"{rules_file}:3: r.like: no_match example matches: 'I like coffee'" in caplog.text


def test_a_new_file_in_a_watched_folder_is_loaded(rules_file):
    clock = Clock()
    funnel = ReloadingFunnel(str(rules_file.parent), interval=INTERVAL, clock=clock)
    assert funnel.process("I adore tea").stage == "no_trigger"
    (rules_file.parent / "s.yaml").write_text(
        "language: en\ntriggers:\n  - {id: s.adore, pattern: '\\bI adore (?P<what>\\w+)', type: preference,"
        " summary: 'adores {what}'}\n", encoding="utf-8")
    clock.now += INTERVAL
    assert funnel.process("I adore tea").stage == "captured"
    assert len(funnel.rules.files) == 2


def test_a_clock_that_goes_back_makes_a_look(watched, rules_file):
    funnel, clock = watched
    edit(rules_file, ADORE)
    clock.now -= 1  # (a wall clock set back): the interval cannot be trusted, so the files are looked at
    assert say(funnel, "I adore tea") == "captured"


def test_requests_do_not_wait_for_the_one_that_reloads(watched, rules_file, monkeypatch):
    """While one request loads the changed rules, another goes on with the rules in use."""
    funnel, clock = watched
    loading, go_on = threading.Event(), threading.Event()

    def held_load(paths):  # the real loader, held until the other request has run
        loading.set()
        assert go_on.wait(timeout=30)
        return load_rules(paths)

    monkeypatch.setattr(reload_module, "load_rules", held_load)
    edit(rules_file, ADORE)
    clock.now += INTERVAL
    stages = {}
    first = threading.Thread(target=lambda: stages.setdefault("first", say(funnel, "I adore tea")))
    first.start()
    assert loading.wait(timeout=30)
    stages["other"] = say(funnel, "I adore tea")  # not held: on the old rules
    go_on.set()
    first.join(timeout=30)
    assert stages == {"other": "no_trigger", "first": "captured"}
    assert funnel.reloads == 1


def test_signature_changes_with_content_and_folder_listing(rules_file):
    before = files_signature(str(rules_file.parent))
    assert before == files_signature(str(rules_file.parent))
    rules_file.write_text(rules_file.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert files_signature(str(rules_file.parent)) != before
    os.remove(rules_file)
    assert files_signature(str(rules_file.parent)) == ("no rule files",)


@pytest.mark.parametrize("interval", [pytest.param(0, id="zero"), pytest.param(None, id="none")])
def test_reloading_can_be_turned_off(rules_file, interval):
    assert type(make_funnel(str(rules_file), reload_interval=interval)) is Funnel


def test_a_rule_set_passed_in_is_not_watched(rules_file):
    funnel = make_funnel(load_rules(str(rules_file)), reload_interval=INTERVAL, clock=Clock())
    assert type(funnel) is Funnel
    edit(rules_file, ADORE)
    assert say(funnel, "I adore tea") == "no_trigger"


def test_the_middleware_watches_its_rule_files(rules_file, tmp_path):
    from werkzeug.test import Client

    from memo_mw import MemoryMiddleware

    def chat_app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [environ.get("memo.capture", "-").encode()]

    clock = Clock()
    middleware = MemoryMiddleware(chat_app, rules=str(rules_file), db=str(tmp_path / "memo.db"), clock=clock,
                                  rules_reload_interval=INTERVAL, trust_user_header=True)
    client = Client(middleware)
    try:
        assert isinstance(middleware.funnel, ReloadingFunnel)
        edit(rules_file, ADORE)
        clock.now += INTERVAL
        response = client.post("/chat", json={"message": "I adore tea"}, headers={"X-User-Id": "u1"})
        assert response.get_data(as_text=True) == "captured"
        assert middleware.recaller.funnel is middleware.funnel  # recall reads the same, current rules
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
