"""Literal needles of patterns (memo_mw.needles): a text without them cannot match, and screening
with them changes no funnel result."""

from __future__ import annotations

import pytest
import regex
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memo_mw.funnel import Funnel
from memo_mw.needles import MARK, Screen, fold, marked, needles
from memo_mw.rules import load_rules

FLAGS = regex.V0 | regex.IGNORECASE


def sets(pattern):
    """The needle sets, with "|" standing for MARK (a word edge)."""
    return [{n.replace(MARK, "|") for n in s} for s in needles(pattern)]


# -- what is derived ---------------------------------------------------------------------

def test_literal_words_and_alternations():
    assert sets(r"\bI\s+(?:really\s+)?(?:like|love)\s+(?P<what>\w+)") == [{"like|", "love|"}, {"|i|"}]
    assert sets("from now on") == [{"from| |now| |on"}]
    assert sets("(?:you|please) call me") == [{"you| |call| |me", "please| |call| |me"}]


def test_word_edges_are_kept_where_the_pattern_has_them():
    assert sets(r"\bown\b") == [{"|own|"}]
    assert sets(r"^(?:so|well)\b[,!]?") == [{"|so|", "|well|"}]
    assert sets(r"[,.;]own\s") == [{"|own|"}]  # a class of punctuation is an edge too
    assert sets(r"[a,]own") == [{"own"}]  # ... but not one that holds a letter
    assert sets(r"[^a]own") == [{"own"}]
    assert sets(r"\bcafé\b") == [{"|caf|é"}]  # no edge is looked for next to a non-ASCII letter
    assert sets(r"(?w:\bown\b)") == [{"own"}]  # another meaning of \b
    assert sets(r"\b\?") == [{"?"}]
    # Where ASCII word characters are other ones, or may be: no edge.
    assert sets(r"(?a:\bown\W)") == [{"own"}]  # under (?a:) "ı" is no word character, yet folds to "i"
    assert sets(r"own[\_]") == [{"own"}]  # "_" is one
    assert sets(r"own[\U0001df95]") == [{"own"}]  # a letter to the regex module, unknown to Python's Unicode
    assert sets(r"own[，。]") == [{"own|"}]  # CJK punctuation is not


def test_marked_texts_mark_every_edge_of_an_ascii_word():
    assert marked("what's the town?") == "|what|'|s| |the| |town|?".replace("|", MARK)
    assert marked("我喜欢jazz") == "我喜欢|jazz|".replace("|", MARK)
    screen = Screen()
    screen.add("own", needles(r"\bown\b"))
    assert not screen.may_match("own", screen.present("what's on in town today"))
    assert screen.may_match("own", screen.present("I OWN a bike"))


def test_repeats_and_optional_parts():
    # A group's branches start (and end) as their matches do: the edge before it is kept.
    assert sets(r"\b(?:um+|uh+|erm|hmm+)\b") == [{"|um", "|uh", "|erm", "|hmm"}]
    assert sets(r"(?:um+|ah)\b,") == [{"m|,", "ah|,"}, {"um", "ah"}]
    assert sets("colou?r") == [{"color", "colour"}]
    assert sets("(?:ab)+c") == [{"abc"}]  # ("ab" is in "abc": a second set would say nothing more)
    assert sets("x{2}y") == [{"xxy"}]


def test_two_independent_sets_are_kept():
    found = sets("我(?:也|还)?(?:[^，]{0,4})(?:喜欢|爱)")
    assert {"我", "我也", "我还"} & found[0] or {"我", "我也", "我还"} & found[1]
    assert {"喜欢", "爱"} in found


def test_needles_holding_another_needle_are_dropped():
    assert sets("(?:tbh|tbh,)") == [{"tbh"}]


def test_nothing_known_means_no_needles():
    for pattern in (r"[a-z]+", r"\w+\s\d", "a?b?", r"(?i)like", r"(?x) like", r"(\w)\1", r"\L<words>",
                    "x|[ab]", r"like{e<=1}", "(?|a|b)", "ab(", "a)b", r"\N{DIGIT ONE}like",
                    "(?:ab){2, 3}", "(?:ab){ 2}", "colou(?#uk)?r"):
        assert needles(pattern) == (), pattern


@pytest.mark.parametrize("pattern, text", [
    ("(?:ab){2, 3}", "ab{2, 3}"),  # not a quantifier: literal braces
    ("(?:ab){ 2}", "ab{ 2}"),
    ("colou(?#uk)?r", "my favorite color"),  # the ? applies to the u, not to the comment
])
def test_what_is_not_a_quantifier_is_not_read_as_one(pattern, text):
    assert regex.compile(pattern, FLAGS).search(text)
    screen = Screen()
    screen.add("p", needles(pattern))
    assert screen.may_match("p", screen.present(text))


def test_lone_latin_letters_are_not_needles():
    assert sets(r"I\s+\w+") == []  # "i" is in almost every English text: not worth a check
    assert sets(r"\bI\s+\w+") == [{"|i|"}]  # but the word "I" is worth one
    assert sets(r"\bI\s+love") == [{"|love"}, {"|i|"}]
    assert sets(r"\?$") == [{"?"}]


def test_lookarounds_add_nothing_but_do_not_break_a_run():
    assert sets(r"(?<!not )like(?= it)s") == [{"likes"}]
    assert sets(r"a\bb") == [{"ab"}]


def test_scoped_flags_and_named_groups():
    assert sets(r"(?-i:\p{Lu})call me (?P<name>\w+)") == [{"call| |me| "}]
    assert sets(r"(?P<neg>不再|不)(?(neg)了|吧)") == [{"不"}]


# -- soundness -----------------------------------------------------------------------------

def test_fold_agrees_with_the_regex_modules_case_insensitive_matching():
    """For every character that has case (and every one the regex module matches with it), a
    case-insensitive match of one character by another means equal folds."""
    everything = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF)
    cased = [c for c in everything if c.lower() != c or c.upper() != c or c.casefold() != c or fold(c) != c]
    any_cased = regex.compile("[" + "".join(regex.escape(c) for c in cased) + "]", FLAGS)
    related = "".join(sorted(set(any_cased.findall(everything)) | set(cased)))
    assert len(related) > 2000
    for char in cased:
        for other in regex.findall(regex.escape(char), related, FLAGS):
            assert fold(other) == fold(char), (char, other)


_PIECES = st.sampled_from(["a", "b", "A", "B", "i", "I", "ı", "İ", "ß", "ss", "k", "K", "ſ", "我", "喜欢", " ",
                           "like", "LIKE", r"\.", ".", r"\s", r"\w", r"\b", "[ab]", "[^a]", "^", "$", r"\d",
                           "(?#c)", "{", "}", "{2, 3}", "{ 2}", r"\W", "[,.]", "[ ,]", r"[\s']", "[a,]", "[!-/]",
                           "_", "'", "é", "1", r"\x00", r"\n", r"[\_]", "[\U0001df95]", "[，]", "，"])


def _pattern(children):
    return st.one_of(
        st.lists(children, min_size=1, max_size=4).map("".join),
        st.lists(children, min_size=2, max_size=3).map(lambda xs: "(?:" + "|".join(xs) + ")"),
        st.tuples(children, st.sampled_from(["?", "*", "+", "{2}", "{1,2}", "{0,3}", "+?", "??", "{,2}", "{2,}"]))
        .map(lambda t: "(?:" + t[0] + ")" + t[1]),
        children.map(lambda x: "(?=" + x + ")"),
        children.map(lambda x: "(?<!" + x + ")"),
        children.map(lambda x: "(?P<g>" + x + ")"),
        children.map(lambda x: "(?-i:" + x + ")"),
        children.map(lambda x: "(?w:" + x + ")"),
        children.map(lambda x: "(?a:" + x + ")"),
    )


PATTERNS = st.recursive(_PIECES, _pattern, max_leaves=8)
TEXTS = st.lists(st.sampled_from(["a", "b", "A", "B", "i", "I", "ı", "İ", "ß", "ẞ", "SS", "s", "k", "K", "K", "ſ",
                                  "我", "喜欢", "喜", " ", ".", "like", "LiKe", "1", "x", "{", "}", "{2, 3}", "{ 2}",
                                  ",", "_", "'", "é", "e\u0301", "\u0301", "\x00", "\n", "！", "ǅ", "\U0001df95",
                                  "，"]),
                         max_size=12).map("".join)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PATTERNS, st.lists(TEXTS, min_size=1, max_size=8))
def test_a_text_the_pattern_matches_holds_its_needles(pattern, texts):
    try:
        compiled = regex.compile(pattern, FLAGS)
    except regex.error:
        return
    screen = Screen()
    screen.add("p", needles(pattern))
    for text in texts:
        if compiled.search(text):
            assert screen.may_match("p", screen.present(text)), (pattern, text, needles(pattern))


def test_default_rules_examples_pass_their_screen_and_every_trigger_has_needles():
    rules = load_rules()
    funnel = Funnel(rules)
    checked = 0
    for rule_file in rules.files:
        for screen, rules_ in ((funnel._screen, [*rule_file.triggers, *rule_file.forget, *rule_file.recall_all]),
                               (funnel._gate_screen, [*rule_file.negative, *rule_file.sensitive])):
            for rule in rules_:
                for example in (rule.examples or ((), (), None))[0]:
                    if rule.pattern.search(example):
                        assert screen.may_match(id(rule), screen.present(example)), (rule.id, example)
                        checked += 1
        for trigger in rule_file.triggers:
            assert needles(trigger.pattern.pattern), trigger.id  # else every message runs it
    assert checked > 200
    assert funnel._any_trigger  # a message with none of these needles is no_trigger at once


def test_screening_changes_no_funnel_result():
    """Every example sentence of the default rules, alone and in messages, goes through the
    funnel with the screen and without it (every pattern run): the same results."""
    rules = load_rules()
    screened, plain = Funnel(rules), Funnel(rules, screen=False)
    sentences = [e for f in rules.files
                 for r in [*f.triggers, *f.negative, *f.sensitive, *f.forget, *f.recall_all]
                 for part in (r.examples or ((), (), None))[:2] for e in part]
    assert len(sentences) > 500
    messages = sentences + [" ".join(sentences[i:i + 3]) for i in range(0, len(sentences), 3)] + [
        "what's the weather like in Paris today?", "Um, I like jazz. Forget that I play tennis.",
        "我觉得吧，我喜欢爵士乐", "ok so I LIKE hiking", "İ LİKE SUSHİ", "I ᴸike nothing",
        "From now on, answer in plain text", "From now on, keep it to the point",  # `requires` words of two
        "from now on keep answers to at most three lines",
        "to be 其实honest, I like green tea"]  # a filler's removal makes the next filler's needles
    for message in messages:
        a, b = screened.process(message), plain.process(message)
        assert (a.stage, a.candidates, a.forget_match, a.trace) == (b.stage, b.candidates, b.forget_match, b.trace), \
            message


def test_cleaning_looks_again_after_a_filler_changed_the_text():
    rules = load_rules()
    text = "to be 其实honest, I like green tea"
    assert Funnel(rules).clean(text) == Funnel(rules, screen=False).clean(text) == "I like green tea"


def test_the_joined_trigger_screen_says_what_the_triggers_one_by_one_say():
    """_may_trigger (the needles each trigger needs after its first, joined) against every trigger's
    own needle sets, on every example sentence and on ordinary messages."""
    rules = load_rules()
    funnel = Funnel(rules)
    texts = [e for f in rules.files for r in f.triggers for part in (r.examples or ((), (), None))[:2] for e in part]
    texts += ["what's the weather like in town today?", "I like it", "we own a town", "以后叫我小王", "记得我喜欢茶"]
    triggers = [t for f in rules.files for t in f.triggers]
    for text in texts:
        present = funnel._screen.present(text)
        assert funnel._may_trigger(present) == any(funnel._screen.may_match(id(t), present) for t in triggers), text
