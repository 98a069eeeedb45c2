"""Topic lexicons: tags on memories and messages, and recall across words that differ."""

from __future__ import annotations

import textwrap

import pytest

from memo_mw.adapters import Turn
from memo_mw.funnel import Funnel
from memo_mw.middleware import remember_payload
from memo_mw.recall import RecallConfig, Recaller, score
from memo_mw.rules import check_rules, load_rules
from memo_mw.store import Store
from memo_mw.topics import TopicTagger

ZH = """
    language: zh
    topics:
      food: [吃, 午饭, 做饭, 猪肉, 菜]
      travel: [周末, 徒步, 爬山, 旅行]
    triggers:
      - {id: zh.no, pattern: '我不吃(?P<what>\\p{Han}+)', type: preference, polarity: -1, summary: '不吃{what}'}
      - {id: zh.like, pattern: '我喜欢(?P<what>\\p{Han}+)', type: preference, summary: '喜欢{what}'}
"""
EN = """
    language: en
    topics:
      food: [lunch, cook, pork, recipe, "eat out"]
      travel: [weekend, hike, trip]
    triggers:
      - {id: en.no, pattern: "\\\\bI don't eat (?P<what>[a-z ]+)", type: preference, polarity: -1,
         summary: "doesn't eat {what}"}
      - {id: en.like, pattern: '\\\\bI like (?P<what>[a-z ]+)', type: preference, summary: 'likes {what}'}
"""


@pytest.fixture
def rules(tmp_path):
    paths = []
    for name, text in (("zh", ZH), ("en", EN)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        paths.append(str(path))
    return load_rules(paths)


@pytest.mark.parametrize("text, topics", [
    pytest.param("What should I cook for lunch?", {"food"}, id="en-words"),
    pytest.param("I'm cooking pork chops", {"food"}, id="en-stems"),
    pytest.param("Do you eat out often?", {"food"}, id="en-phrase"),
    pytest.param("Any hikes this weekend?", {"travel"}, id="en-two"),
    pytest.param("周末去哪儿玩", {"travel"}, id="zh"),
    pytest.param("中午吃什么菜", {"food"}, id="zh-food"),
    pytest.param("The weather is nice", set(), id="none"),
])
def test_tags(rules, text, topics):
    assert TopicTagger(rules.topics).tag(text) == topics


def test_lexicons_of_one_name_merge_across_files(rules):
    assert set(rules.topics["food"]) >= {"吃", "lunch", "eat out"}


@pytest.mark.parametrize("statement, question", [
    pytest.param("I don't eat pork", "What should I cook for lunch?", id="en"),
    pytest.param("我喜欢徒步", "周末去哪儿玩", id="zh"),
    pytest.param("我不吃猪肉", "What should I cook for lunch?", id="across-languages"),
])
def test_a_shared_topic_recalls_a_memory_with_no_word_in_common(rules, tmp_path, statement, question):
    funnel = Funnel(rules)
    result = funnel.process(statement)
    (candidate,) = result.candidates
    assert candidate.topics  # tagged when captured, stored with the memory
    db = str(tmp_path / "m.db")
    with Store(db) as store:
        store.remember(remember_payload(result, user_id="u", turn=Turn("plain", "", None, "s", None, 1), ts=1, received=1))
    recalled = Recaller(db, funnel, RecallConfig()).recall("u", question, now=2)
    assert [m["content"] for m in recalled] == [candidate.content]
    assert 0 < recalled[0]["relevance"] < 1  # the topic alone


def test_a_lexical_match_still_beats_a_topic_match(rules):
    tagger = TopicTagger(rules.topics)
    memories = [{"id": 1, "content": "doesn't eat pork", "key": "pork", "type": "preference", "hits": 0,
                 "source_ts": 1, "topics": ["food"]},
                {"id": 2, "content": "likes lunch recipes from Sichuan", "key": "lunch recipes", "type": "preference",
                 "hits": 0, "source_ts": 1, "topics": ["food"]}]
    ranked = score(memories, *tagger.analyse("a recipe for lunch"), now=2, tag=tagger.tag)
    assert [m["id"] for m in ranked] == [2, 1]


def test_bad_topics_are_reported(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("topics:\n  food: lunch\n  travel: [trip, '']\n", encoding="utf-8")
    problems = check_rules([str(path)])
    assert any("topic 'food' must be a list of non-empty strings" in p for p in problems)
    assert any("topic 'travel' must be a list of non-empty strings" in p for p in problems)
