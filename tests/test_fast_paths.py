"""The request path's shortcuts give what the general code gives: each is checked against it on
generated texts (the shortcut is taken for most chat messages, so a difference would be common)."""

from __future__ import annotations

import json
import string

import pytest
import regex
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memo_mw import funnel as funnel_module
from memo_mw import privacy, text
from memo_mw.funnel import Funnel
from memo_mw.needles import fold
from memo_mw.rules import load_rules
from memo_mw.topics import TopicTagger

SETTINGS = settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ASCII = st.text(st.sampled_from(string.printable), max_size=60)
# Pieces that meet each shortcut's edge cases: apostrophes, digits, split characters, hints of PII.
PIECES = st.sampled_from(["I", "like", "LIKE", "don't", "dogs'", "'n'", "rock'n'roll", "’", " ", "  ", "\n", "\t",
                          ".", ". ", ",", "，", "!", "?", "。", "；", "but", "and I", "而我", "我", "喜欢", "爵士乐",
                          "Ａ", "ﬁ", "ß", "é", "1", "42", "@", "＠", "_", "k-", "pass", "PW", "密码", "bearer",
                          "AKIA", "eyJ", "xox", "ice cream", "ice", "cream", "in", "java", "k-pop", "eat out",
                          "what's", "me@x.io", "sk-", "password is", "13800138000", "forget that", "Um,", "\x0b",
                          "key", "Token", "secret", "密钥", "令牌", "code", "PIN", "otp", "验证码", " is ", "：",
                          "=", "abcd1234efgh5678", "1234567", "0", "-", "(", ")", "+86", "Bearer", "PİN", "pın", "İ", "ı"])
MIXED = st.lists(PIECES, max_size=10).map("".join)
TEXTS = st.one_of(ASCII, MIXED)


@SETTINGS
@given(TEXTS)
def test_ascii_tokens_are_the_general_tokens(sample):
    folded = text.nfkc(sample).casefold()
    assert text.tokens.__wrapped__(sample) == text._any_tokens(folded)


@SETTINGS
@given(TEXTS)
def test_pii_first_look_skips_only_texts_no_mask_changes(sample):
    assert privacy.mask_pii(sample) == privacy._mask(sample)


FUNNEL = Funnel(load_rules(None))


@SETTINGS
@given(TEXTS)
@example("PİN1234567")  # "İ" folds to "i" for the screen and the masks, not to "i" and a dot as casefold() has it
def test_masks_told_the_screens_hints_mask_as_the_first_look_does(sample):
    cleaned = FUNNEL.clean(sample)
    assert FUNNEL._masked(cleaned, FUNNEL._screen.present(cleaned)) == privacy.mask_pii(cleaned)
    # and told exactly the hints the text holds, by anyone, folded as mask_found() asks (needles.fold)
    folded = fold(cleaned)
    found = frozenset(fold(h) for h in privacy.MASK_HINTS if fold(h) in folded)
    assert privacy.mask_found(cleaned, found) == privacy.mask_pii(cleaned)


@SETTINGS
@given(TEXTS)
def test_one_sentence_shortcut_splits_as_the_pattern_does(sample):
    assert Funnel.sentences(None, sample) == funnel_module._split(sample)


def _tag_everywhere(tagger: TopicTagger, sample: str) -> frozenset[str]:
    """The tagger's phrase lookup at every place, with no pair screen (how it worked before)."""
    found = set(tagger._analyse(sample)[1])
    folded = text.nfkc(sample).casefold()
    words = regex.findall(r"[\p{L}\p{N}]+", folded)
    for i, word in enumerate(words):
        for phrase, topics in tagger._word_phrases.get(word, ()):
            if tuple(words[i:i + len(phrase)]) == phrase:
                found |= topics
                break
    return frozenset(found)


TAGGER = Funnel(load_rules()).topics


@SETTINGS
@given(TEXTS)
def test_phrase_pairs_screen_out_only_texts_without_a_phrase(sample):
    assert TAGGER._analyse(sample)[1] == _tag_everywhere(TAGGER, sample)


@SETTINGS
@given(TEXTS)
def test_the_taggers_tokens_are_recalls_tokens(sample):
    assert TAGGER._analyse(sample)[0] == text.tokens.__wrapped__(sample)


def test_one_word_phrases_are_looked_for_everywhere():
    tagger = TopicTagger({"food": ("ice cream",), "odd": ("x !",)})
    assert tagger._single  # "x !" is one word: no pair to screen by
    assert tagger.tag("I love ice cream, x") == {"food", "odd"}


SCREENED, PLAIN = Funnel(load_rules()), Funnel(load_rules(), screen=False)


@SETTINGS
@given(TEXTS)
def test_the_screened_funnel_gives_what_running_every_pattern_gives(sample):
    """The screen's shortcuts (no PII hint: no mask looked at; no forget needle; no trigger) change
    no result of the funnel, which without the screen runs every pattern and every mask."""
    a, b = SCREENED.process(sample), PLAIN.process(sample)
    assert (a.stage, a.candidates, a.forget_match, a.trace) == (b.stage, b.candidates, b.forget_match, b.trace)


@SETTINGS
@given(TEXTS)
def test_a_text_without_the_pii_hints_is_one_no_mask_changes(sample):
    cleaned = SCREENED.clean(sample)
    if SCREENED._pii_hints.isdisjoint(SCREENED._screen.present(cleaned)):
        assert privacy._mask(cleaned) == cleaned


@SETTINGS
@given(st.one_of(TEXTS, st.sampled_from(["what do you remember about me?", "你记得我什么", "  what do you know about me"])))
def test_the_funnels_recall_all_answer_is_is_recall_all(sample):
    told = SCREENED.process(sample).recall_all
    assert told is None or told == SCREENED.is_recall_all(sample)


def _decoded(decode, sample: str):
    try:
        return "value", decode(sample)
    except ValueError as exc:  # JSONDecodeError, and the strict hooks' errors
        return "error", type(exc)


JSON_PIECES = st.sampled_from(['{', '}', '[', ']', '"message"', ':', ',', '"x"', '1', '1e400', 'NaN', 'null', ' ',
                               '\n', '\t', 'true', '"\\ud800"', '{"a": 1}', '[1, 2]', 'x', '""'])
JSON_TEXTS = st.one_of(st.lists(JSON_PIECES, max_size=12).map("".join),
                       st.builds(lambda v, pad: pad + json.dumps(v) + pad,
                                 st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                                              lambda inner: st.lists(inner, max_size=3)
                                              | st.dictionaries(st.text(max_size=3), inner, max_size=3)),
                                 st.sampled_from(["", " ", "\n", "\r\n\t"])))


@SETTINGS
@given(JSON_TEXTS)
def test_the_body_decoder_shortcut_is_the_decoder(sample):
    from memo_mw import middleware

    assert _decoded(middleware._decode, sample) == _decoded(middleware._DECODER.decode, sample)


PIECE_TEXTS = st.lists(st.sampled_from(["a" * 31, "b", "1", "2" * 7, "-", "(", ")", ".", "+", " ", "\u00a0", "\u2003",
                                        "\x1c", "\t", "\n", "\u3000", "x" * 33, "é", "９"]), max_size=8).map("".join)


@SETTINGS
@given(PIECE_TEXTS)
def test_the_masks_first_looks_are_the_general_ones(sample):
    """privacy._mask looks for digits, 7-digit runs and a 32-character piece with the standard
    library's engine: what the regex module and str.split find."""
    assert (privacy._DIGIT.search(sample) is not None) == (regex.search(r"[0-9]", sample) is not None)
    assert (privacy._DIGIT_RUN.search(sample) is not None) == \
        (regex.search(r"[0-9](?:[ ().+-]{0,2}[0-9]){6}", sample) is not None)
    assert (privacy._LONG_PIECE.search(sample) is not None) == (max(map(len, sample.split()), default=0) >= 32)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2 ** 80, max_value=2 ** 80)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),  # text() includes lone surrogates
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20)


@SETTINGS
@given(JSON_VALUES)
def test_json_utf8_is_the_standard_librarys_value_in_utf8(value):
    """orjson where it can, the standard library where it refuses (big integers, lone surrogates):
    the same value either way, as valid UTF-8."""
    encoded = text.json_utf8(value)
    assert json.loads(encoded.decode("utf-8")) == json.loads(json.dumps(value))


def test_json_utf8_falls_back_for_what_orjson_refuses(monkeypatch):
    assert text._orjson is not None, "orjson is a dependency: installed with the package"
    value = {"message": "乌龙茶", "n": 1.5}
    assert text.json_utf8(value) == '{"message":"乌龙茶","n":1.5}'.encode()  # compact, UTF-8 as is
    deep: list = []
    for _ in range(300):  # deeper than orjson goes
        deep = [deep]
    for refused in ({"big": 2 ** 70}, {"x": "\ud800"}, deep, {1: "a"}):
        with pytest.raises(TypeError):
            text._orjson.dumps(refused)
        assert json.loads(text.json_utf8(refused)) == json.loads(json.dumps(refused))
    monkeypatch.setattr(text, "_orjson", None)  # without orjson: the same bytes from the standard library
    assert text.json_utf8(value) == '{"message":"乌龙茶","n":1.5}'.encode()
    assert text.json_utf8({"x": "\ud800"}) == b'{"x":"\\ud800"}'


@SETTINGS
@given(st.one_of(st.integers(min_value=-2 ** 40, max_value=2 ** 40),
                 st.floats(min_value=-2.0 ** 40, max_value=2.0 ** 40, allow_nan=False)))
def test_a_kept_day_is_the_day_of_the_time(ts):
    import time as time_module

    from memo_mw import recall

    start = ts // 86400 * 86400
    for probe in (ts, start, start + 86399.5, start - 0.5, ts):  # the day's first and last moments, the day before
        assert recall._day(probe) == time_module.strftime("%Y-%m-%d", time_module.gmtime(probe)), probe
