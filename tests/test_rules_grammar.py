"""The statement grammar (memo_mw/rules_grammar.py): word lists in YAML become triggers that read a
first-person statement by its parts, through the public loader and funnel."""

from __future__ import annotations

import textwrap

import pytest

from memo_mw.funnel import Funnel
from memo_mw.rules import check_rules, load_rules
from memo_mw.rules_grammar import spelled_out, words

GRAMMAR = """\
    language: en
    triggers:
      - id: t.remind
        pattern: 'remind me to (?P<what>.+)'
        type: task
        summary: 'reminder: {what}'
    grammar:
      before: t.remind
      contractions: {"i'm": "i am", "don't": "do not"}
      lead: '[^,]{1,20},\\s*'
      openers: [well, actually]
      subjects: [i]
      adverbs: [really, strongly, always, only]
      negations: [not, "do not", never]
      not_objects: [it, this]
      object: '[^,.!?]{1,40}'
      statements:
        - id: g.like
          verbs: [like, love]
          type: preference
          summary: 'likes {what}'
          negated: {summary: 'dislikes {what}'}
        - id: g.into
          subjects: ["i am"]
          verbs: [into, "a fan of"]
          type: preference
          summary: 'likes {what}'
          negated: {summary: 'dislikes {what}'}
        - id: g.eat
          verbs: [eat]
          type: preference
          summary: '{how} {verb:3sg} {what}'
          negated: {summary: "doesn't {verb} {what}"}
"""


@pytest.fixture()
def rules_path(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text(textwrap.dedent(GRAMMAR), encoding="utf-8")
    return path


@pytest.fixture()
def funnel(rules_path):
    return Funnel(load_rules(str(rules_path)))


def said(funnel, text):
    result = funnel.process(text)
    return [(c.rule_id, c.polarity, c.content) for c in result.candidates]


@pytest.mark.parametrize("text, expected", [
    ("I like jazz", ("g.like", 1, "likes jazz")),
    ("Well, I really strongly love old films", ("g.like", 1, "likes old films")),
    ("At the weekend, I like long walks", ("g.like", 1, "likes long walks")),
    ("I don't like horror films", ("g.like.not", -1, "dislikes horror films")),
    ("I really do not love crowds", ("g.like.not", -1, "dislikes crowds")),
    ("I'm really into chess", ("g.into", 1, "likes chess")),
    ("I’m not a fan of opera", ("g.into.not", -1, "dislikes opera")),
    ("I only eat fish", ("g.eat", 1, "only eats fish")),
    ("I never eat pork", ("g.eat.not", -1, "doesn't eat pork")),
])
def test_a_statement_is_read_by_its_parts(funnel, text, expected):
    assert said(funnel, text) == [expected]


@pytest.mark.parametrize("text", [
    "I like it", "I really like this", "Do I like jazz?" , "They like jazz", "I liked the film",
    "My brother is into chess", "I like",
])
def test_what_is_not_a_statement_of_the_user_is_left(funnel, text):
    assert said(funnel, text) == []


def test_the_statements_are_tried_where_before_puts_them(rules_path):
    ids = [t.id for t in load_rules(str(rules_path)).files[0].triggers]
    assert ids == ["g.like.not", "g.like", "g.into.not", "g.into", "g.eat.not", "g.eat", "t.remind"]


def test_examples_are_checked_with_contractions_spelled_out(rules_path):
    text = rules_path.read_text(encoding="utf-8").replace(
        "verbs: [into, \"a fan of\"]",
        "verbs: [into, \"a fan of\"]\n      examples: {match: [\"I'm into chess\"], no_match: [\"I'm into it\"]}")
    rules_path.write_text(text, encoding="utf-8")
    assert check_rules(str(rules_path)) == []
    rules_path.write_text(text.replace("no_match: [\"I'm into it\"]", "no_match: [\"I'm into go\"]"), encoding="utf-8")
    assert [p.split(": ", 1)[1] for p in check_rules(str(rules_path))] == [
        "g.into: no_match example matches: \"I'm into go\""]


@pytest.mark.parametrize("change, problem", [
    ("subjects: [i]", "grammar needs subjects"),
    ("before: t.remind", "grammar.before names no trigger of this file: 'nothing'"),
    ("openers: [well, actually]", "unknown grammar key 'openerz'"),
    ("verbs: [eat]", "g.eat: a statement needs verbs and subjects"),
    ("negated: {summary: \"doesn't {verb} {what}\"}", "g.eat: unknown key 'colour' in negated"),
])
def test_mistakes_are_reported_with_their_line(rules_path, change, problem):
    broken = {"subjects: [i]": "subjects: []", "before: t.remind": "before: nothing",
              "openers: [well, actually]": "openerz: [well]", "verbs: [eat]": "verbs: []",
              "negated: {summary: \"doesn't {verb} {what}\"}": "negated: {colour: red}"}[change]
    text = rules_path.read_text(encoding="utf-8").replace(change, broken)
    rules_path.write_text(text, encoding="utf-8")
    problems = check_rules(str(rules_path))
    assert any(problem in p and p.startswith(f"{rules_path}:") for p in problems), problems


UNSAID = """\
    language: zh
    grammar:
      unstated_subject: true
      openers: [其实]
      subjects: [我]
      adverbs: [很, 特别]
      negations: [不]
      object: '[^，。！？]{1,20}'
      statements:
        - id: z.like
          verbs: [喜欢]
          type: preference
          summary: '喜欢{what}'
          negated: {summary: '不喜欢{what}'}
        - id: z.kin
          subjects: [老公]
          verbs: [是]
          type: fact
          summary: '老公是{what}'
"""


@pytest.mark.parametrize("text, expected", [
    ("特别喜欢吃火锅", [("z.like", 1, "喜欢吃火锅")]),
    ("其实不喜欢香菜", [("z.like.not", -1, "不喜欢香菜")]),
    ("我很喜欢猫", [("z.like", 1, "喜欢猫")]),
    ("老公很喜欢吃辣", []),  # someone else is named before the verb: not the user's
    ("他特别喜欢猫", []),
    ("是老师", []),  # a statement of another subject never reads an unsaid one
])
def test_an_unstated_subject_is_the_users_where_a_sentence_starts(tmp_path, text, expected):
    path = tmp_path / "z.yaml"
    path.write_text(textwrap.dedent(UNSAID), encoding="utf-8")
    assert said(Funnel(load_rules(str(path))), text) == expected
    path.write_text(textwrap.dedent(UNSAID).replace("unstated_subject: true", "unstated_subject: maybe"),
                    encoding="utf-8")
    assert any("unstated_subject must be true, false or a list of statement ids" in p for p in check_rules(str(path)))


def test_an_unstated_subject_after_someone_else_is_theirs_unless_the_grammar_says_it_is_the_users(tmp_path):
    path = tmp_path / "z.yaml"
    text = textwrap.dedent(UNSAID).replace("summary: '老公是{what}'", "summary: '老公是{what}'\n      others: true")
    path.write_text(text, encoding="utf-8")
    assert said(Funnel(load_rules(str(path))), "老公是老师。特别喜欢猫") == [("z.kin", 1, "老公是老师")]
    path.write_text(text.replace("unstated_subject: true", "unstated_subject: true\n  unstated_is_user: true"),
                    encoding="utf-8")
    assert said(Funnel(load_rules(str(path))), "老公是老师。特别喜欢猫") == [("z.kin", 1, "老公是老师"),
                                                                   ("z.like", 1, "喜欢猫")]
    path.write_text(text.replace("unstated_subject: true", "unstated_subject: true\n  unstated_is_user: yes please"),
                    encoding="utf-8")
    assert any("unstated_is_user must be true, false or a list of statement ids" in p for p in check_rules(str(path)))


def test_a_statements_own_object_may_name_the_grammars(tmp_path):
    path = tmp_path / "z.yaml"
    path.write_text(textwrap.dedent(UNSAID).replace("verbs: [喜欢]", "verbs: [喜欢]\n      object: '(?=猫){object}'"),
                    encoding="utf-8")
    funnel = Funnel(load_rules(str(path)))
    assert said(funnel, "我很喜欢猫咪") == [("z.like", 1, "喜欢猫咪")]
    assert said(funnel, "我很喜欢狗") == []


def test_someone_named_with_the_subject_leaves_the_statement_the_users(tmp_path):
    path = tmp_path / "z.yaml"
    text = textwrap.dedent(UNSAID).replace("  openers: [其实]", "  with: '和[^，。都]{1,4}?都'\n  openers: [其实]")
    path.write_text(text, encoding="utf-8")
    funnel = Funnel(load_rules(str(path)))
    assert said(funnel, "我和老公都很喜欢猫") == [("z.like", 1, "喜欢猫")]
    assert said(funnel, "我和老公很喜欢猫") == []  # no 都: not the pattern's
    assert said(funnel, "老公和我都是老师") == []  # only a statement of the user's own subjects reads it
    path.write_text(text.replace("?都'", "?(都'"), encoding="utf-8")
    assert any("grammar.with" in p for p in check_rules(str(path)))


def test_an_unstated_subject_may_be_for_the_statements_listed(rules_path):
    text = rules_path.read_text(encoding="utf-8").replace("before: t.remind", "before: t.remind\n  unstated_subject: [g.like]")
    rules_path.write_text(text, encoding="utf-8")
    funnel = Funnel(load_rules(str(rules_path)))
    assert said(funnel, "Really love old films") == [("g.like", 1, "likes old films")]
    assert said(funnel, "Eat fish") == []  # g.eat is not listed: "eat fish" is a request as often
    assert said(funnel, "Into chess these days") == []  # g.into ("i am") is not listed either
    rules_path.write_text(text.replace("[g.like]", "[g.like, g.likes]"), encoding="utf-8")
    assert any("unstated_subject names no statement: g.likes" in p for p in check_rules(str(rules_path)))


def test_words_is_a_named_list_with_latin_words_ending_on_a_word_boundary():
    lists = {}
    assert words(["Like", "like  to", "喜欢"], "verbs", lists) == r"(?:\L<verbs_w>(?![\w-])|\L<verbs_o>)"
    assert lists == {"verbs_w": {"like", "like to"}, "verbs_o": {"喜欢"}}


def test_spelled_out_expands_whole_words_only(rules_path):
    pairs = load_rules(str(rules_path)).files[0].contractions
    assert spelled_out(pairs, "I’m sure I don't") == "i am sure I do not"
    assert spelled_out(pairs, "Jim's don'ts") == "Jim's don'ts"
