"""Text normalisation and tokens, as the store, recall and the funnel read them."""

from __future__ import annotations

import json

import pytest

from memo_mw.text import fitting, json_utf8, memory_key, nfkc, normalize, stable_id, stem, tokens


def test_chinese_gives_characters_and_bigrams_without_the_stop_ones():
    assert tokens("我喜欢喝乌龙茶") == {"喝", "乌", "龙", "茶", "欢喝", "喝乌", "乌龙", "龙茶", "我喜"}
    assert tokens("乌龙茶和jazz") >= {"乌龙", "龙茶", "jazz"}


@pytest.mark.parametrize("text, expected", [
    pytest.param("Cats", {"cat"}, id="plural-and-case"),
    pytest.param("studies", {"study"}, id="ies"),
    pytest.param("Running watches boxes", {"runn", "watch", "box"}, id="ing-ches-xes"),
    pytest.param("walked", {"walk"}, id="ed"),
    pytest.param("glass bus", {"glass", "bus"}, id="ss-us-stay"),
    pytest.param("I like it, please", set(), id="stopwords"),
    pytest.param("John's parents' dog", {"john", "parent", "dog"}, id="clitics"),
    pytest.param("O'Brien", {"o'brien"}, id="a-name-stays-whole"),
    pytest.param("I don’t eat pork", {"eat", "pork"}, id="negation"),
    pytest.param("ＪＡＺＺ", {"jazz"}, id="full-width"),
])
def test_english_words_are_folded_and_lightly_stemmed(text, expected):
    assert tokens(text) == expected


def test_stem_leaves_short_words():
    assert [stem(w) for w in ("is", "bus", "news", "this", "bed")] == ["is", "bus", "new", "this", "bed"]


def test_normal_forms():
    assert nfkc("ＡＢＣ１２３！") == "ABC123!"
    assert normalize("  The  Jazz-Club!! ") == "the jazz club"
    assert memory_key("The my dog's toy") == "dog s toy"


def test_json_utf8_is_compact_and_keeps_text_readable():
    assert json_utf8({"a": ["茶", 1]}) == '{"a":["茶",1]}'.encode()
    lone = json_utf8("x\ud800")  # a lone surrogate has no UTF-8 form: escaped, the same value
    assert lone == b'"x\\ud800"' and json.loads(lone) == "x\ud800"


def test_stable_id_depends_only_on_its_parts():
    assert stable_id("u1", "likes tea") == stable_id("u1", "likes tea")
    assert len(stable_id("u1", "likes tea")) == 24
    assert stable_id("u1", "likes tea") != stable_id("u1", "likes jazz")
    assert stable_id("a", "b") != stable_id("ab")  # the parts are kept apart
    assert stable_id("a\x1fb", "c") != stable_id("a", "b\x1fc")  # whatever a part holds
    assert stable_id('a", "b') != stable_id("a", "b")


def test_fitting_fills_a_budget_in_order_skipping_what_does_not_fit():
    assert list(fitting(["aaaa", "bbbbbb", "cc", "d"], len, 7)) == ["aaaa", "cc", "d"]
    assert list(fitting(["toolong"], len, 3)) == [] and list(fitting([], len, 10)) == []
