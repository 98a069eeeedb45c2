"""What a matched trigger says: its summary and memory key, from the rule's templates."""

from __future__ import annotations

import textwrap

import pytest

from memo_mw.funnel import Funnel
from memo_mw.rules import load_rules
from memo_mw.summary import (
    render,
    strip_edge_punct,
    strip_key_prefixes,
    summarize,
    third_person,
)


def rule_file_of(tmp_path, text: str):
    path = tmp_path / "r.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    (rule_file,) = load_rules([str(path)]).files
    return rule_file


RULES = r"""
    language: en
    trailing: [a lot, too]
    key_prefixes: [drinking]
    max_capture: 25
    pronouns: {my: their, me: them, i: they}
    triggers:
      - {id: en.like, pattern: 'I like (?P<what>.+)', type: preference, summary: 'likes {what}'}
      - {id: en.style, pattern: 'please (?P<what>.+)', type: style, summary: 'style: {what}', key: style,
         pronouns: false}
      - {id: en.habit, pattern: 'I (?P<how>usually) (?P<what>.*)', type: fact, summary: '{how} {what:3sg}',
         key: 'habit {what}'}
      - {id: en.work, pattern: 'I (?P<verb>work in) (?P<what>.*)', type: fact, summary: '{verb} {what}', key: work}
"""


@pytest.mark.parametrize("rule, groups, said", [
    pytest.param(0, {"what": "my dog a lot!"}, ("likes their dog", "their dog"), id="particles-pronouns"),
    pytest.param(0, {"what": "tattoo"}, ("likes tattoo", "tattoo"), id="a-particle-is-a-whole-word"),
    pytest.param(0, {"what": "Baha'i art I made"}, ("likes Baha'i art they made", "baha i art they made"),
                 id="a-pronoun-is-a-whole-word"),
    pytest.param(0, {"what": "drinking tea too."}, ("likes drinking tea", "tea"), id="key-prefix"),
    pytest.param(0, {"what": "[email]."}, ("likes [email]", "email"), id="placeholder-brackets-stay"),
    pytest.param(1, {"what": "give me short answers"}, ("style: give me short answers", "style"), id="no-pronouns"),
    pytest.param(2, {"how": "usually", "what": "run at 6am"}, ("usually runs at 6am", "habit run at 6am"), id="3sg"),
    pytest.param(2, {"how": "usually", "what": ""}, None, id="a-needed-group-is-empty"),
    pytest.param(0, {"what": "a phrase far too long to be one memory"}, None, id="longer-than-max-capture"),
    pytest.param(0, {"what": "!!"}, None, id="nothing-left"),
    pytest.param(3, {"verb": "Work In", "what": "a bank"}, ("work in a bank", "work"), id="verb-in-lower-case"),
    pytest.param(3, {"verb": "work in IT", "what": "now"}, ("work in IT now", "work"), id="verb-keeps-an-acronym"),
])
def test_summarize(tmp_path, rule, groups, said):
    rule_file = rule_file_of(tmp_path, RULES)
    assert summarize(rule_file.triggers[rule], rule_file, groups) == said


@pytest.mark.parametrize("phrase, expected", [
    ("run at 6am", "runs at 6am"), ("go hiking", "goes hiking"), ("study late", "studies late"),
    ("watch films", "watches films"), ("focus on work", "focuses on work"), ("have tea", "has tea"),
    ("play chess", "plays chess"), ("wanted to go", "wanted to go"), ("need coffee", "needs coffee"),
    ("does yoga", "does yoga"), ("6am runs", "6am runs"), ("wearing a hat", "wearing a hat"),
    ("sing in a choir", "sings in a choir"), ("bring lunch", "brings lunch"), ("in bed by ten", "in bed by ten"),
])
def test_third_person(phrase, expected):
    assert third_person(phrase) == expected


def test_render_formats_a_template_with_the_3sg_spec():
    assert render("{how} {what:3sg}", {"how": "often", "what": "study late"}) == "often studies late"
    assert render("likes {what}", {"what": "jazz"}) == "likes jazz"


@pytest.mark.parametrize("key, prefixes, expected", [
    ("喝乌龙茶", ("喝",), "乌龙茶"),
    ("drinking coffee", ("drinking",), "coffee"),
    ("drinkingwater", ("drinking",), "drinkingwater"),  # a Latin prefix is a whole word
    ("喝", ("喝",), "喝"),  # something must remain
    ("listening to listening to jazz", ("listening to",), "jazz"),
])
def test_strip_key_prefixes(key, prefixes, expected):
    assert strip_key_prefixes(key, prefixes) == expected


def test_strip_edge_punct_keeps_placeholder_brackets():
    assert strip_edge_punct(" «jazz», ") == "jazz"
    assert strip_edge_punct("mail [email]!") == "mail [email]"


def test_chinese_pronouns_are_replaced_without_word_boundaries(tmp_path):
    path = tmp_path / "zh.yaml"
    path.write_text(
        "language: zh\n"
        "pronouns: {我的: 自己的}\n"
        "triggers:\n"
        "  - {id: zh.like, pattern: '我喜欢(?P<what>.+)', type: preference, summary: '喜欢{what}'}\n",
        encoding="utf-8",
    )
    (candidate,) = Funnel(load_rules([str(path)])).process("我喜欢我的猫").candidates
    assert candidate.content == "喜欢自己的猫"
