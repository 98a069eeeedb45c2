"""bench/eval.py: the hand-labelled capture set is well-formed, the metrics (overall, per dataset, per language, sensitive captures) and the persona-fact matcher compute what they say."""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from types import SimpleNamespace

import pytest

from bench import eval as ev
from bench.datasets import DATASETS

needs_datasets = pytest.mark.skipif(not DATASETS.is_dir(), reason=f"shared datasets not found at {DATASETS}")

FIELDS = {"dataset", "lang", "id", "text", "label", "note"}
SAMPLED = {"memorybank-zh": "zh", "memorybank-en": "en", "dulemon": "zh", "persona-chat": "en"}
WRITTEN = {"written-en": "en", "written-zh": "zh"}
LANGS = {**SAMPLED, **WRITTEN}


@pytest.fixture(scope="module")
def labels():
    return ev.load_labels()


def test_label_file_has_the_rule_in_its_header():
    head = [line for line in ev.LABELS.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    text = "\n".join(head)
    assert "label true" in text and "label false" in text and str(ev.SEED) in text


def test_label_file_is_well_formed(labels):
    for row in labels:
        assert FIELDS <= set(row), row
        assert set(row) <= FIELDS | {"persona", "sensitive"}, row
        assert row["dataset"] in LANGS and row["lang"] == LANGS[row["dataset"]]
        assert isinstance(row["label"], bool)
        assert isinstance(row["text"], str) and row["text"].strip()
        assert isinstance(row["note"], str) and row["note"].strip()
        assert ("persona" in row) == (row["dataset"] == "dulemon")
    keys = Counter((r["dataset"], r["id"]) for r in labels)
    assert not [k for k, n in keys.items() if n > 1], "duplicate ids"
    for dataset in LANGS:
        seen = {r["label"] for r in labels if r["dataset"] == dataset}
        assert seen == {True, False}, f"{dataset}: both labels must occur"


def test_label_file_has_enough_turns_in_each_language(labels):
    sampled = sum(n for _, _, n in ev.SAMPLE) + sum(n for _, _, n in ev.SAMPLE_2)
    assert len([r for r in labels if r["dataset"] in SAMPLED]) == sampled
    assert len(labels) >= 700
    per_lang = Counter(r["lang"] for r in labels)
    assert per_lang["zh"] >= 300 and per_lang["en"] >= 300


def test_written_turns_are_numbered_in_order(labels):
    for dataset in WRITTEN:
        ids = [r["id"] for r in labels if r["dataset"] == dataset]
        assert ids == [f"{dataset}/{n}" for n in range(1, len(ids) + 1)]


def test_sensitive_turns_are_marked_and_labelled_false(labels):
    marked = [r for r in labels if "sensitive" in r]
    assert marked and all(r["sensitive"] is True and r["label"] is False for r in marked)
    # Every row whose note calls it sensitive carries the mark, and only those.
    assert all(("sensitive" in r) == r["note"].startswith("sensitive") for r in labels)
    assert {r["lang"] for r in marked} == {"zh", "en"}


@needs_datasets
def test_labelled_texts_are_the_seeded_samples_of_the_datasets(labels):
    sampled = [r for r in labels if r["dataset"] in SAMPLED]
    texts = {(name, r["id"]): r["text"] for name in SAMPLED for r in ev.user_turns(name)}
    for row in sampled:
        assert texts[(row["dataset"], row["id"])] == row["text"], row["id"]
    sample = ev.labelled_sample()
    assert [(s["dataset"], s["id"]) for s in sample] == [(r["dataset"], r["id"]) for r in sampled]


@needs_datasets
def test_second_sample_takes_no_turn_of_the_first():
    first = ev.sample_turns(ev.SEED, ev.SAMPLE)
    second = ev.labelled_sample()[len(first):]
    assert len(second) == sum(n for _, _, n in ev.SAMPLE_2)
    assert not {(r["dataset"], r["id"]) for r in first} & {(r["dataset"], r["id"]) for r in second}


HELDOUT_WRITTEN = {"heldout-written-en": "en", "heldout-written-zh": "zh"}


def test_heldout_file_loads_with_150_turns_per_language_and_none_of_the_labelled_ones(labels):
    heldout = ev.load_labels(ev.HELDOUT)
    per_lang = Counter(r["lang"] for r in heldout)
    assert per_lang["zh"] >= 150 and per_lang["en"] >= 150
    langs = {**SAMPLED, **HELDOUT_WRITTEN}
    for row in heldout:
        assert FIELDS <= set(row) <= FIELDS | {"persona", "sensitive"}, row
        assert row["dataset"] in langs and row["lang"] == langs[row["dataset"]]
        assert isinstance(row["label"], bool) and row.get("sensitive", True) is True
    assert len({(r["dataset"], r["id"]) for r in heldout}) == len(heldout)
    seen = {(r["dataset"], r["id"]) for r in labels} | {" ".join(r["text"].split()) for r in labels}
    assert not [r for r in heldout if (r["dataset"], r["id"]) in seen or " ".join(r["text"].split()) in seen]


@needs_datasets
def test_heldout_sampled_turns_are_the_seeded_sample():
    sampled = [r for r in ev.load_labels(ev.HELDOUT) if r["dataset"] in SAMPLED]
    assert [(r["dataset"], r["id"], r["text"]) for r in sampled] == \
        [(s["dataset"], s["id"], s["text"]) for s in ev.heldout_sample()]


def test_precision_recall_f1():
    m = ev.prf([True, True, False, False, True], [True, False, True, False, True])
    assert (m["tp"], m["fp"], m["fn"]) == (2, 1, 1)
    assert m["precision"] == pytest.approx(2 / 3) and m["recall"] == pytest.approx(2 / 3)
    assert m["f1"] == pytest.approx(2 / 3)
    every = ev.prf([True] * 4, [True, False, False, False])
    assert every["precision"] == 0.25 and every["recall"] == 1.0 and every["f1"] == pytest.approx(0.4)
    none = ev.prf([False, False], [True, False])
    assert none["precision"] == 0.0 and none["recall"] == 0.0 and none["f1"] == 0.0


class FakeFunnel:
    """Captures exactly the texts it is given; anything else stops at ``no_trigger``."""

    def __init__(self, captures):
        self.captures = set(captures)

    def process(self, text):
        if text in self.captures:
            return SimpleNamespace(captured=True, candidates=[text], stage="captured")
        return SimpleNamespace(captured=False, candidates=[], stage="no_trigger")


def _row(dataset, lang, n, label, sensitive=False):
    row = {"dataset": dataset, "lang": lang, "id": f"{n}", "text": f"{dataset} {n}", "label": label, "note": "x"}
    if sensitive:
        row["sensitive"] = True
    return row


TINY = [_row("a-zh", "zh", 1, True), _row("a-zh", "zh", 2, True), _row("a-zh", "zh", 3, False),
        _row("b-zh", "zh", 1, True), _row("b-zh", "zh", 2, False, sensitive=True),
        _row("c-en", "en", 1, True), _row("c-en", "en", 2, False), _row("c-en", "en", 3, False, sensitive=True)]


def test_capture_eval_reports_each_language_each_dataset_and_sensitive_captures():
    funnel = FakeFunnel(["a-zh 1", "a-zh 3", "b-zh 1", "b-zh 2", "c-en 1"])
    got = ev.capture_eval(TINY, funnel)
    assert list(got["by_language"]) == ["zh", "en"]
    assert list(got["by_dataset"]) == ["a-zh (zh)", "b-zh (zh)", "c-en (en)"]
    zh = got["by_language"]["zh"]["memo-mw"]
    assert (zh["n"], zh["tp"], zh["fp"], zh["fn"]) == (5, 2, 2, 1)
    assert zh["precision"] == pytest.approx(0.5) and zh["recall"] == pytest.approx(2 / 3)
    en = got["by_language"]["en"]["memo-mw"]
    assert (en["n"], en["tp"], en["fp"], en["fn"]) == (3, 1, 0, 0)
    assert en["precision"] == 1.0 and en["recall"] == 1.0
    assert got["by_language"]["zh"]["missed_by_stage"] == {"no_trigger": 1}
    assert got["by_language"]["zh"]["false_positive_ids"] == ["3", "2"]
    assert got["by_dataset"]["b-zh (zh)"]["memo-mw"]["precision"] == 0.5
    assert got["all"]["memo-mw"]["n"] == 8 and got["all"]["store every message"]["precision"] == pytest.approx(4 / 8)
    assert got["sensitive"] == {"turns": 2, "captured": 1, "captured_ids": ["b-zh/2"]}
    assert ev.meets_target(en) and not ev.meets_target(zh)


def test_print_capture_shows_languages_targets_and_sensitive_count(capsys):
    ev.print_capture(ev.capture_eval(TINY, FakeFunnel(["c-en 1", "c-en 3"])))
    out = capsys.readouterr().out
    assert "language zh" in out and "language en" in out
    assert "issue 31 target, en: recall >= 0.75 with precision >= 0.85: recall 1.000, precision 0.500, not met" in out
    assert "issue 31 target, zh: recall >= 0.75 with precision >= 0.85: recall 0.000, precision 0.000, not met" in out
    assert "sensitive turns captured: 1 of 2 (target 0): c-en/3" in out


def test_hit_and_recall_at_k():
    ranked = ["a", "b", "c", "d"]
    assert ev.hit_at_k(ranked, ["c"], 1) == 0.0
    assert ev.hit_at_k(ranked, ["c"], 3) == 1.0
    assert ev.recall_at_k(ranked, ["a", "d"], 1) == 0.5
    assert ev.recall_at_k(ranked, ["a", "d"], 3) == 0.5
    assert ev.recall_at_k(ranked, ["a", "d"], 5) == 1.0
    assert ev.hit_at_k([], ["a"], 5) == 0.0
    # One stored row standing for several memories (same text, merged) counts as all of them.
    assert ev.recall_at_k([["x", "y"], ["z"]], ["y", "z"], 1) == 0.5
    assert ev.hit_at_k([["x", "y"], ["z"]], ["y"], 1) == 1.0


def test_bm25_ranks_the_obviously_relevant_document_first():
    docs = ["Bart went fishing with his father at the lake.", "Bart won a chess game at school.",
            "Bart ate a mango ice cream."]
    assert ev.BM25(docs).rank("I want to play chess again")[0] == 1
    zh = ["Bart和爸爸去湖边钓鱼。", "Bart在学校下象棋赢了。", "Bart吃了芒果冰淇淋。"]
    assert ev.BM25(zh).rank("我还想再吃冰淇淋！")[0] == 2
    assert ev.BM25(zh).rank("xyz") == []
    assert ev.bm25_tokens("I like 下象棋") == ["i", "like", "下", "象", "棋", "下象", "象棋"]


def test_madial_query_is_the_user_turn_before_the_test_turn(tmp_path):
    folder = tmp_path / "madial_bench" / "zh"
    folder.mkdir(parents=True)
    dialogue = {"dialogue": ["<BOD>\n", '<Bart>:"我今天好开心"\n', '<Assistant>:"为什么呀？"\n',
                             '<Bart>:"我想再去放风筝！"\n', '<Assistant>:"你记得在海边放风筝吗？"\n', "<EOD>\n"],
                "test-turn": [4], "relevant-id": [8, 3], "user-id": 1, "id": 0}
    (folder / "MADial-Bench-zh-dialogue.json").write_text(json.dumps(dialogue, ensure_ascii=False) + "\n", "utf-8")
    [last] = ev.madial_queries("zh", "last", root=tmp_path)
    assert last["query"] == "我想再去放风筝！" and last["gold"] == ["8", "3"] and last["user"] == 1
    [history] = ev.madial_queries("zh", "history", root=tmp_path)
    assert history["query"] == "我今天好开心 我想再去放风筝！"


# Two conversations in the Synthetic-Persona-Chat layout. The funnel is the real one with the
# shipped rules; every outcome below is either a plain first-person statement the English rules
# capture ("I love to...", "I am a...", "I like...") or one they must never store (a question, a
# religion: the sensitive gate), so a better funnel does not change the expected numbers.
PERSONA_ROWS = [
    ("I love to bake cookies.\nI am a buddhist.", "I am a nurse.\nI like jazz.",
     ("User 1: Hi! I love to bake cookies.\nUser 2: Hello! What kind of cookies?\n"
     "User 1: I am a buddhist, so I meditate daily.\n* * *\n* User 2: I am a nurse at the city hospital. *\n"
     "User 2: I like jazz music.\nUser 1: I like tea.")),
    ("I used to be a painter but now i am a housekeeper.", "I like hiking.\nI am a christian.",
     ("User 1: I am a housekeeper.\nUser 2: I like hiking.\nUser 1: What about you?\nUser 2: I like hiking.\n"
     "[A few minutes later]")),
]


@pytest.fixture(scope="module")
def persona_chat():
    stream = io.StringIO(newline="")
    writer = csv.writer(stream)
    writer.writerow(["user 1 personas", "user 2 personas", "Best Generated Conversation"])
    writer.writerows(PERSONA_ROWS)
    stream.seek(0)
    return ev.read_persona_chat(stream)


@pytest.fixture(scope="module")
def funnel():
    from memo_mw.funnel import Funnel
    from memo_mw.rules import load_rules
    return Funnel(load_rules())


def test_persona_chat_reader_splits_personas_and_speakers(persona_chat):
    first, second = persona_chat
    assert first["personas"] == {"1": ["I love to bake cookies.", "I am a buddhist."], "2": ["I am a nurse.", "I like jazz."]}
    assert first["turns"]["2"] == ["Hello! What kind of cookies?", "I am a nurse at the city hospital.", "I like jazz music."]
    assert first["turns"]["1"][-1] == "I like tea."
    assert second["turns"] == {"1": ["I am a housekeeper.", "What about you?"], "2": ["I like hiking.", "I like hiking."]}


def test_fact_matcher_needs_half_of_the_content_words():
    assert ev.fact_tokens("My favorite food is pizza.") == {"food", "pizza"}
    assert ev.fact_tokens("Knitting is my passion.") == ev.fact_tokens("I knit.") == {"knit"}
    assert ev.holds(ev.fact_tokens("My favorite food is pizza."), ev.memory_tokens("pizza", "likes pizza"))
    painter = ev.fact_tokens("I used to be a painter but now i am a housekeeper.")
    assert not ev.holds(painter, ev.memory_tokens("housekeeper", "is a housekeeper"))
    assert ev.holds(painter, ev.fact_tokens("I was a painter, now I am a housekeeper"))
    assert not ev.holds(frozenset(), frozenset({"pizza"}))


def test_persona_lines_as_messages(persona_chat, funnel):
    got = ev.persona_lines_eval(persona_chat, funnel)
    # Captured: cookies, nurse, jazz, hiking, and the painter turned housekeeper (two memories: "used to
    # be a painter" keeps the fact); the two religions stop at the sensitive gate.
    assert (got["lines"], got["captured"], got["kept"]) == (7, 5, 5)
    assert got["captured_share"] == pytest.approx(5 / 7) and got["kept_share"] == pytest.approx(5 / 7)
    assert got["missed_by_stage"] == {"sensitive": 2}


def test_facts_said_in_passing(persona_chat, funnel):
    got = ev.passing_eval(persona_chat, funnel)
    assert (got["users"], got["persona_lines"], got["turns"]) == (4, 7, 10)
    # Memories: bake cookies, tea | nurse at the city hospital, jazz music | housekeeper | hiking (said
    # twice, one memory). Held: cookies, nurse, jazz, hiking. Store every message also holds the
    # buddhist line (a sensitive turn memo-mw drops); neither holds the painter or the christian.
    assert (got["memories"], got["held"], got["held_baseline"]) == (6, 4, 5)
    assert got["held_share"] == pytest.approx(4 / 7) and got["baseline_share"] == pytest.approx(5 / 7)
    assert got["ratio"] == pytest.approx(0.8)
    assert got["turns_with_memory"] == 7 and got["turns_with_memory_share"] == pytest.approx(0.7)
    assert got["stray"] == 2 and got["stray_share"] == pytest.approx(2 / 6)
    assert sorted(m["memory"] for m in got["stray_sample"]) == ["is a housekeeper", "likes tea"]
    assert [m["said"] for m in got["stray_sample"] if m["conversation"] == 0] == ["I like tea."]
    assert len(ev.passing_eval(persona_chat, funnel, sample=1)["stray_sample"]) == 1


def test_facts_held_count_each_statement_of_a_message(funnel):
    def row(lang, text, *facts):
        return {"lang": lang, "text": text, "facts": list(facts)}

    rows = [row("en", "I'm a nurse, I live in Leeds and I love hiking.", "nurse", "live in Leeds", "love hiking"),
            row("en", "I like tea, and my sister is a pilot.", "tea", "sister is a pilot"),
            row("en", "I love jazz. My dog is called Rex.", "jazz"),  # the dog's name is a memory no label wants
            row("en", "Cilantro tastes like soap to me.", "cilantro tastes like soap"),  # said, not captured
            row("en", "What time is it?"),
            row("zh", "我是做前端的，平时喜欢打羽毛球", "做前端", "喜欢打羽毛球"), row("zh", "我今天好累")]
    got = ev.facts_eval(rows, funnel)
    assert list(got) == ["zh", "en"]
    en = got["en"]
    assert (en["facts"], en["held"], en["facts_in_several"], en["memories"]) == (7, 6, 5, 7)
    assert en["held_share"] == pytest.approx(6 / 7) and en["baseline_share"] == 1.0
    assert en["several_share"] == 1.0 and en["stray_share"] == pytest.approx(1 / 7)
    assert (got["zh"]["facts"], got["zh"]["held"], got["zh"]["memories"]) == (2, 2, 2)


def test_a_file_labelled_by_facts_gives_its_rows_a_turn_label(tmp_path):
    path = tmp_path / "facts.jsonl"
    path.write_text("# header\n" + "\n".join(json.dumps({"id": n, "lang": "en", "text": t, "facts": f})
                                              for n, (t, f) in enumerate([("I like tea", ["tea"]), ("Hi", [])])))
    assert [(r["label"], r["dataset"]) for r in ev.load_labels(path)] == [(True, "facts"), (False, "facts")]


def test_the_second_held_out_set_loads_and_shares_no_text_with_the_others():
    rows = ev.load_labels(ev.REPO / "tests" / "data" / "capture_heldout2.jsonl")
    for lang in ("zh", "en"):
        turns = [r for r in rows if r["lang"] == lang]
        assert len(turns) == 90 and any(r["label"] for r in turns) and any(not r["label"] for r in turns)
        sensitive = [r for r in turns if r.get("sensitive")]
        assert len(sensitive) == 8 and not any(r["label"] for r in sensitive)
    others = ev.load_labels() + ev.load_labels(ev.REPO / "tests" / "data" / "capture_heldout.jsonl")
    assert not {" ".join(r["text"].split()) for r in rows} & {" ".join(r["text"].split()) for r in others}
    assert len({r["id"] for r in rows}) == len(rows)


def test_the_third_held_out_set_is_labelled_by_facts_and_shares_no_text_with_the_others():
    rows = ev.load_labels(ev.REPO / "tests" / "data" / "capture_heldout3.jsonl")
    for lang in ("zh", "en"):
        turns = [r for r in rows if r["lang"] == lang]
        assert len(turns) == 100 and sum(len(r["facts"]) > 1 for r in turns) >= 30
        assert len([r for r in turns if r["sensitive"]]) == 8
        assert all(r["label"] == bool(r["facts"]) and r["dataset"] == "capture_heldout3" for r in turns)
    others = [*ev.load_labels(), *ev.load_labels(ev.HELDOUT),
              *ev.load_labels(ev.REPO / "tests" / "data" / "capture_heldout2.jsonl")]
    # two authors may both write "what time is it in Tokyo right now": only a message with no fact
    shared = {" ".join(r["text"].split()) for r in others}
    assert not [r["id"] for r in rows if " ".join(r["text"].split()) in shared and r["facts"]]
    assert len({r["id"] for r in rows}) == len(rows)


def test_the_held_out_labels_load_and_cover_both_languages():
    rows = ev.load_labels(ev.REPO / "tests" / "data" / "capture_heldout.jsonl")
    by_language = {lang: [r for r in rows if r["lang"] == lang] for lang in ("zh", "en")}
    assert all(len(turns) >= 60 and any(r["label"] for r in turns) for turns in by_language.values())
    taken = {(r["dataset"], r["id"]) for r in ev.load_labels()}
    assert not [r for r in rows if (r["dataset"], r["id"]) in taken]  # none of the turns the rules were tuned on
