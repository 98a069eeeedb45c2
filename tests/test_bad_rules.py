"""Bad rules at the middleware: start-up errors name the file and the rule (or line); a
pattern with catastrophic backtracking is bounded by the regex timeout, logged, and the
chat request passes through untouched."""

from __future__ import annotations

import logging
import textwrap

import pytest
from flask import Flask, jsonify, request

from memo_mw import MemoryMiddleware
from memo_mw.exceptions import RulesError


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(path)


GOOD_TRIGGER = """\
      - id: good.like
        pattern: '\\bI like (?P<what>[a-z ]{1,30})'
        type: preference
        summary: 'likes {what}'
"""


@pytest.mark.parametrize("text, named", [
    pytest.param("triggers:\n  - id: x\n    pattern: [unclosed\n", ["custom.yaml:", "invalid YAML", "line 3"], id="invalid-yaml"),
    pytest.param("triggers:\n  - id: broken.paren\n    pattern: '(?P<what>a'\n    type: fact\n"
                 "    summary: '{what}'\n", ["broken.paren", ":3", "does not compile"], id="bad-regex"),
    pytest.param("triggers:\n  - id: no.type\n    pattern: 'a(?P<what>b)'\n    summary: '{what}'\n",
                 ["no.type"], id="missing-key"),
    pytest.param("triggers:\n" + GOOD_TRIGGER + GOOD_TRIGGER, ["good.like"], id="duplicate-id"),
    pytest.param("triggers:\n  - id: bad.group\n    pattern: 'I like (?P<thing>.+)'\n    type: fact\n"
                 "    summary: '{what}'\n", ["bad.group", "what"], id="summary-names-a-missing-group"),
])
def test_start_up_errors_name_the_file_and_the_rule(tmp_path, text, named):
    path = write(tmp_path, "custom.yaml", text)
    with pytest.raises(RulesError) as error:
        MemoryMiddleware(lambda environ, start_response: [], db=str(tmp_path / "memo.db"), rules=[path])
    message = str(error.value)
    assert path in message
    for part in named:
        assert part in message


def test_a_catastrophic_pattern_is_bounded_and_the_request_passes_through(tmp_path, caplog):
    path = write(tmp_path, "slow.yaml", """\
        triggers:
          - id: slow.rule
            pattern: '(?P<what>(?:a|aa)+)$'
            type: fact
            summary: '{what}'
          - id: good.like
            pattern: '\\bI like (?P<what>[a-z ]{1,30})'
            type: preference
            summary: 'likes {what}'
        """)
    app = Flask(__name__)

    @app.post("/chat")
    def chat():
        return jsonify(received=request.get_data(as_text=True), capture=request.environ.get("memo.capture"))

    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=str(tmp_path / "memo.db"), rules=[path], trust_user_header=True)
    caplog.set_level(logging.WARNING, logger="memo_mw")
    body = '{"message": "' + "a" * 40 + 'b"}'
    response = app.test_client().post("/chat", data=body, content_type="application/json",
                                      headers={"X-User-Id": "alice"})
    assert response.status_code == 200
    assert response.json["received"] == body  # untouched
    assert response.json["capture"] == "no_trigger"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("timed out" in w and ("slow.rule" in w or path in w) for w in warnings)
    # The other rules of the file still work.
    again = app.test_client().post("/chat", json={"message": "I like kites"}, headers={"X-User-Id": "alice"})
    assert again.json["capture"] == "captured"
    app.wsgi_app.queue.close()
