"""The C analysis of ASCII texts (memo_mw/_speedups.c) gives what the Python code it mirrors gives.

The extension is optional at install time; ``make test`` builds it (the machine has a compiler), and
under CI it must be there: a build that failed quietly would leave the package on its slower path.
"""

from __future__ import annotations

import contextlib
import os
import random
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memo_mw import text
from memo_mw.funnel import Funnel
from memo_mw.needles import MARK, Screen, fold, marked, needle_table
from memo_mw.rules import load_rules
from memo_mw.topics import _NO_TOPICS, TopicTagger

speedups = text._speedups

if speedups is None:
    if os.environ.get("CI") and not os.environ.get("MEMO_MW_PURE_PYTHON"):
        pytest.fail("memo_mw._speedups was not built: the install found no compiler or the build failed",
                    pytrace=False)
    pytest.skip("memo_mw._speedups is not built here (or MEMO_MW_PURE_PYTHON is set)", allow_module_level=True)

SETTINGS = settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TAGGER = Funnel(load_rules()).topics
# Words that meet each rule the C code copies: stopwords, the stemmer's endings and lengths, clitics
# and other apostrophes, digits, underscores (a word edge for the needles, not for the tokens), and
# the English phrases of the shipped lexicons.
WORDS = sorted(text.STOPWORDS) + [
    "john's", "parents'", "o'brien", "don't", "shouldn't", "rock'n'roll", "it's'", "x'", "'s", "''", "y'all",
    "cities", "ties", "cooking", "sing", "dishes", "boxes", "classes", "bus", "this", "cats", "gas", "played",
    "bed", "ies", "ing", "xes", "ed", "s", "a1", "9am", "2024", "_x_", "a_b", "sci-fi", "e-mail", "Machine",
    "LEARNING", "New", "York", "we're", "you'll", "i'd", "i'm", "I", "A", "weather", "tennis", "jazz",
] + sorted({w for entries in TAGGER._word_phrases.values() for phrase, _ in entries for w in phrase})
PHRASES = st.lists(st.sampled_from(WORDS), max_size=14).map(" ".join)
SEPARATED = st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from([" ", "  ", ", ", "'", "-", "_", "?", "\n",
                                                                      ".", "\x00", "'s "])),
                     max_size=10).map(lambda pairs: "".join(w + s for w, s in pairs))
CHARACTERS = st.text(st.sampled_from(string.printable + "\x00"), max_size=60)
ASCII = st.one_of(PHRASES, SEPARATED, CHARACTERS)


@contextlib.contextmanager
def python_only():
    """The package's own Python code, with the extension still loaded beside it."""
    text._speedups = None
    try:
        yield
    finally:
        text._speedups = speedups


def python_analysis(tagger: TopicTagger, sample: str):
    with python_only():
        return tagger._analyse(sample)


@SETTINGS
@given(ASCII)
def test_tokens_are_the_pythons(sample):
    folded = sample.casefold()
    assert speedups.ascii_analysis(folded, text._stopwords_lexicon()) == (text.ascii_tokens(folded)[0], None)
    with python_only():
        expected = text.tokens.__wrapped__(sample)
    assert text.tokens.__wrapped__(sample) == expected


@SETTINGS
@given(ASCII)
def test_tokens_and_topics_are_the_taggers(sample):
    assert TAGGER._analyse(sample) == python_analysis(TAGGER, sample)


@SETTINGS
@given(ASCII)
def test_marked_text_is_the_needles(sample):
    assert speedups.marked_lower(sample) == marked(fold(sample))


# The funnel's two screens of the shipped rules (triggers, fillers, forget, PII hints; the gates).
FUNNEL = Funnel(load_rules())
SCREENS = [FUNNEL._screen, FUNNEL._gate_screen]


def automaton_present(screen: Screen, sample: str) -> frozenset[str]:
    """What the screen finds with the Python automaton (pyahocorasick) alone."""
    with python_only():
        return screen._present(sample)


@SETTINGS
@given(ASCII)
def test_the_needle_table_finds_what_the_automaton_finds(sample):
    for screen in SCREENS:
        assert screen._present(sample) == automaton_present(screen, sample)


# Needles that overlap, hold one another, share prefixes and suffixes, and hold word edges.
SMALL_NEEDLES = ["he", "she", "his", "hers", "e", "ss", "ssss", MARK + "in" + MARK, "in" + MARK, MARK + "i",
                 "a" + MARK + " " + MARK + "b", "1", "12", "_", "k" + MARK + "-", "@", MARK]


@SETTINGS
@given(st.lists(st.sampled_from(SMALL_NEEDLES), min_size=1, unique=True),
       st.text(st.sampled_from("hesirnab 12_k-@A.I\n"), max_size=40))
def test_the_needle_table_is_an_aho_corasick_automaton(words, sample):
    found = speedups.scan_marked(sample, *needle_table(words))
    marked_sample = speedups.marked_lower(sample)
    assert found == frozenset(w for w in words if w in marked_sample)


@given(st.lists(st.sampled_from(SMALL_NEEDLES), min_size=1, unique=True))
def test_the_states_where_needles_end_are_numbered_last(words):
    """quiet() reads a state's flags only from the first state where a needle ends."""
    outputs = needle_table(words)[2]
    first = next(i for i, ends in enumerate(outputs) if ends)
    assert first > 0 and all(outputs[first:]) and not any(outputs[:first])


def test_needles_added_after_a_scan_are_found():
    screen = Screen()
    screen.add("a", [frozenset({"like"})])
    assert screen._present("I like tea") == {"like"}
    screen.add("b", [frozenset({"tea"})])  # the table is made again with the new needles
    assert screen._present("I like tea") == {"like", "tea"}


def test_a_screen_too_big_for_a_table_uses_the_automaton(monkeypatch):
    from memo_mw import needles

    words = ["like", "in" + MARK, "tea", "k" + MARK + "-"]
    monkeypatch.setattr(needles, "MAX_TABLE_STATES", 4)
    assert needle_table(words) == ()
    screen = Screen()
    screen.add("a", [frozenset(words)])
    sample = "I like tea in k-pop"
    assert screen._present(sample) == automaton_present(screen, sample) == frozenset(words)
    assert screen._table == ()


def test_a_needle_table_it_cannot_read_is_a_clear_error():
    classes, table, outputs = needle_table(["like", "in"])
    assert needle_table([]) == ()
    with pytest.raises(ValueError, match="ASCII"):
        needle_table(["喜欢"])
    with pytest.raises(ValueError, match="ASCII"):
        speedups.scan_marked("我喜欢", classes, table, outputs)
    with pytest.raises(ValueError, match="table"):
        speedups.scan_marked("like", classes[:-1], table, outputs)
    with pytest.raises(ValueError, match="table"):
        speedups.scan_marked("like", classes, table[:-2], outputs)
    with pytest.raises(ValueError, match="outside"):  # a column past the row
        speedups.scan_marked("like", bytes([200]) * 128, table, outputs)
    with pytest.raises(ValueError, match="outside"):  # a state past the table
        speedups.scan_marked("like", classes, b"\xff\xff" * (len(table) // 2), outputs)
    with pytest.raises(ValueError, match="tuple or None"):
        speedups.scan_marked("like", classes, table, tuple("x" for _ in outputs))
    with pytest.raises(TypeError):
        speedups.scan_marked("like", classes, table)


FUNNEL = Funnel(load_rules())
# Words of every kind quiet() tells apart: trigger needles with and without what they need beside
# them, forget and recall-everything words, fillers, PII hints (digits alone and with the words a
# code needs), and plain words.
FUNNEL_WORDS = WORDS + ["like", "love", "hate", "prefer", "remember", "forget", "from now on", "next time",
                        "always", "never", "my", "name", "is", "um", "uh", "well,", "what", "do", "you", "know",
                        "about", "me", "1", "42", "2026", "1234567", "12 34 56", "pin", "code", "key", "@", "_",
                        "password", "x" * 31, "y" * 32, "bearer", "sk-", "call", "me", "at", "today", "town"]
FUNNEL_TEXTS = st.one_of(st.lists(st.sampled_from(FUNNEL_WORDS), min_size=1, max_size=12).map(" ".join),
                         SEPARATED, CHARACTERS)


def whole(result):
    return (result.stage, result.candidates, result.trace, result.recall_all, result.forget_scope,
            result.forget_match)


@SETTINGS
@given(FUNNEL_TEXTS)
def test_the_one_call_verdict_is_the_funnels(sample):
    """quiet() answers only for messages the stages would stop at no_trigger, with the same
    result (recall_all included)."""
    assert whole(FUNNEL.process(sample)) == whole(FUNNEL._process(sample))


def test_the_one_call_verdict_answers_for_the_usual_message_only():
    args = FUNNEL._quiet_args()
    assert args, "quiet() is not used by the shipped rules' funnel"

    def verdict(sample):
        return speedups.quiet(sample, *args)

    assert verdict("what is the weather like in town 5 today?") == 0
    assert verdict("what do you remember about me") in (-1, 1)  # recall looks again, or the funnel does
    for closer in ["I like jazz", "from now on call me Bo", "forget my address", "my pin is 4821",
                   "call 13800138000", "um, what is up", "mail me@x.io", "a" * 40 + " 5", " leading space",
                   "two  spaces", "tab\there", "line\nbreak", "x" * 31 + "1"]:
        assert verdict(closer) == -1, closer
    assert verdict("room 101 at 9") == 0  # digits, but not enough for any number mask
    assert verdict("") == -1


def test_a_quiet_spec_it_cannot_read_is_a_clear_error():
    classes, table, outputs, spec = FUNNEL._quiet_args()
    with pytest.raises(ValueError, match="ASCII"):
        speedups.quiet("我喜欢", classes, table, outputs, spec)
    with pytest.raises(ValueError, match="table"):
        speedups.quiet("like", classes[:-1], table, outputs, spec)
    with pytest.raises(ValueError, match="spec"):
        speedups.quiet("like", classes, table, outputs, spec[:3])
    with pytest.raises(ValueError, match="spec"):
        speedups.quiet("like", classes, table, outputs, spec[:4])
    for flagged in (-1, len(outputs) + 1):
        with pytest.raises(ValueError, match="first state flagged"):
            speedups.quiet("like", classes, table, outputs, (*spec[:4], flagged))
    with pytest.raises(ValueError, match="roles"):
        speedups.quiet("i like", classes, table, outputs, ({n: "x" for n in spec[0]}, *spec[1:]))
    with pytest.raises(ValueError, match="after"):
        speedups.quiet("i like", classes, table, outputs, ({n: (8, ()) for n in spec[0]}, *spec[1:]))
    with pytest.raises(ValueError, match="more holds"):
        speedups.quiet("i like", classes, table, outputs,
                       ({n: (8, (False, (), ((frozenset(),),))) for n in spec[0]}, *spec[1:]))
    with pytest.raises(TypeError):
        speedups.quiet("like", classes, table, outputs)


def test_the_quiet_spec_holds_the_tables_own_needles():
    """quiet() compares the needles it finds with a trigger's other needles by identity."""
    classes, table, outputs, spec = FUNNEL._quiet_args()
    own = {id(needle) for ends in outputs if ends for needle in ends}
    afters = [after for _, after in spec[0].values() if after is not None]
    assert afters and any(seconds or more for _, seconds, more in afters)
    for _, seconds, more in afters:
        assert all(id(needle) in own for needle in seconds)
        assert all(id(needle) in own for sets in more for needles in sets for needle in needles)


def test_random_long_texts_agree():
    """Longer texts than the generated ones: many phrases, one after another."""
    rng = random.Random(20261201)
    for _ in range(3000):
        sample = " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 120)))
        assert TAGGER._analyse(sample) == python_analysis(TAGGER, sample)
        assert speedups.marked_lower(sample) == marked(fold(sample))
        for screen in SCREENS:
            assert screen._present(sample) == automaton_present(screen, sample)


@pytest.mark.parametrize("lexicon", [
    {"food": ("ice cream", "ice", "cream soda", "noodles")},
    {"odd": ("x !",), "food": ("eat out",)},  # a phrase of one word with a sign
    {},
])
def test_other_lexicons_agree(lexicon):
    tagger = TopicTagger(lexicon)
    for sample in ("ice cream and cream soda", "i'd eat out, x !", "noodles? ICE-CREAM", "", "'", "what's up"):
        assert tagger._analyse(sample) == python_analysis(tagger, sample)


def test_no_topics_is_the_shared_empty_set():
    tokens, topics = speedups.ascii_analysis("zebra here", TAGGER.c_lexicon())
    assert tokens == {"zebra"} and topics is _NO_TOPICS


def test_a_lexicon_holds_only_what_an_ascii_text_can_meet():
    """Words not in ASCII, and keys that are no str, cannot be an ASCII text's word: left out, the
    rest found as the sets and dicts it was made of say."""
    lexicon = speedups.Lexicon(frozenset({"the", "的", 7}), {"tea": frozenset({"drink"}), "茶": frozenset({"drink"})},
                               {"ice": [(("ice", "cream"), frozenset({"food"}))]}, _NO_TOPICS)
    assert speedups.ascii_analysis("the teas, ice cream 7", lexicon) == (
        frozenset({"tea", "ice", "cream"}), frozenset({"drink", "food"}))
    assert speedups.ascii_analysis("the 7 x", lexicon) == (frozenset(), _NO_TOPICS)


def test_a_lexicons_phrases_are_a_copy_of_what_an_ascii_text_can_meet():
    """The phrases under each first word, in their order (the first that the text's runs spell
    wins); one with a later word no ASCII text holds is left out; what the lexicon was made of can
    change afterwards without changing it."""
    phrases = {"ice": [(("ice", "cream", "cone"), frozenset({"dessert"})), (("ice", "crème"), frozenset({"x"})),
                       (("ice", "cream"), frozenset({"food"})), (("ice",), frozenset({"cold"}))],
               "hot": [(("hot", "dog"), frozenset({"food"}))], "tea": [((), frozenset({"drink"}))],
               "nope": [(("nope", 7), frozenset({"x"}))]}
    lexicon = speedups.Lexicon(frozenset({"an"}), {}, phrases, _NO_TOPICS)

    def topics(sample):
        return speedups.ascii_analysis(sample, lexicon)[1]

    assert topics("an ice cream cone") == {"dessert"}
    assert topics("ice cream!") == {"food"}
    assert topics("ice creme, ice") == {"cold"}
    assert topics("hot dog and ice") == {"food", "cold"}
    assert topics("green tea") == {"drink"}  # an empty phrase is met where its first word is
    assert topics("nope 7 hot") is _NO_TOPICS
    phrases["hot"].clear()
    phrases["ice"].insert(0, (("ice", "water"), frozenset({"wet"})))
    assert topics("hot dog, ice water") == {"food", "cold"}


def test_a_lexicon_takes_its_first_words_as_iterating_its_phrases_gives_them():
    """A dict subclass whose iteration gives no key: its phrases have no first word to be found by."""

    class NoKeys(dict):
        def __iter__(self):
            return iter(())

    phrases = NoKeys({"ice": [(("ice", "cream"), frozenset({"food"}))], "the": [(("the", "end"), frozenset({"x"}))]})
    lexicon = speedups.Lexicon(frozenset({"the"}), {}, phrases, _NO_TOPICS)
    assert speedups.ascii_analysis("ice cream, the end", lexicon) == (frozenset({"ice", "cream", "end"}), _NO_TOPICS)


def test_what_it_cannot_read_is_a_clear_error():
    lexicon = text._stopwords_lexicon()
    with pytest.raises(ValueError, match="ASCII"):
        speedups.ascii_analysis("我喜欢", lexicon)
    with pytest.raises(ValueError, match="ASCII"):
        speedups.marked_lower("café")
    with pytest.raises(TypeError):
        speedups.Lexicon(["not", "a", "set"], None, None, None)
    with pytest.raises(TypeError):  # topics need their empty set, and the other way round
        speedups.Lexicon(text.STOPWORDS, {}, None, None)
    with pytest.raises(TypeError, match="lists"):
        speedups.Lexicon(text.STOPWORDS, {}, {"ice": "not a list"}, _NO_TOPICS)
    with pytest.raises(TypeError, match="tuples"):
        speedups.Lexicon(text.STOPWORDS, {}, {"ice": [("ice", "cream")]}, _NO_TOPICS)
    with pytest.raises(TypeError):
        speedups.ascii_analysis("x")
    with pytest.raises(TypeError, match="Lexicon"):
        speedups.ascii_analysis("x", text.STOPWORDS)
    with pytest.raises(TypeError, match="str"):
        speedups.ascii_analysis(b"bytes", lexicon)
    with pytest.raises(TypeError, match="str"):
        speedups.marked_lower(None)
