"""The shipped rules and a real store together: what happens to a memory over time.

Each test runs messages, in order and with increasing times, through
``Funnel(load_rules())`` and writes the result to a real SQLite ``Store`` exactly as the
worker does (``store.remember(remember_payload(...))``). Two things are checked, in Chinese
and in English:

- **duplicates**: the same thing said again in another form (full-width letters and
  punctuation, extra punctuation, fillers such as 其实 / 那个 / um / actually, another case,
  a synonym the rules summarise the same way) adds no row; the memory's ``hits`` and
  ``confidence`` go up, and there is one active memory per (user, key, polarity);
- **drift**: an explicit change ("我现在不喝咖啡了", "I gave up coffee") is a polarity -1
  memory in the *same slot* (key) as the older positive statement, so the older one is
  ``superseded`` (inactive, ``superseded_by`` the new id) and the newer is active. This
  relies on ``key_prefixes`` (喝咖啡 / 咖啡, playing tennis / tennis) and on ``trailing``
  ("anymore" and 了 never reach a key or a summary);
- **answer style**: style memories have one fixed key per dimension (``style:language``,
  ``style:length``, ``style:format``, ``style:emoji``, ``style:tone``, ``style:name``), the
  same in both languages, so a newer instruction on a dimension supersedes the older one
  ("以后用中文回答" then "以后用英文回答") and instructions on different dimensions coexist.

The sentences are written for these tests; none comes from a dataset.
"""

from __future__ import annotations

from collections import Counter

import pytest
import regex

from memo_mw.funnel import Funnel
from memo_mw.adapters import Turn
from memo_mw.middleware import remember_payload
from memo_mw.rules import load_rules
from memo_mw.store import Store
from memo_mw.text import memory_key

T0 = 1_700_000_000
USER = "u"


@pytest.fixture(scope="module")
def funnel():
    return Funnel(load_rules())


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "m.db") as s:
        yield s


def say(funnel, store, text, ts):
    """One user message through the funnel into the store; returns (candidates, outcomes)."""
    result = funnel.process(text)
    assert result.stage == "captured", (text, result.trace)
    turn = Turn(shape="plain", message=text, body_user=None, session_id="s", message_id=None, ts=ts)
    payload = remember_payload(result, user_id=USER, turn=turn, ts=ts, received=ts)
    return result.candidates, store.remember(payload)


def rows(store):
    return store.list(USER, include_inactive=True)


def active(store):
    return [m for m in rows(store) if m["active"]]


def assert_one_active_per_slot(store):
    slots = Counter((m["user_id"], m["key"], m["polarity"]) for m in active(store))
    assert all(n == 1 for n in slots.values()), slots


# -- duplicates --------------------------------------------------------------------------------

DUPLICATES = [
    # Chinese
    pytest.param("我喜欢喝咖啡", ["其实，我喜欢喝咖啡！！", "那个，我喜欢喝咖啡。", "嗯，我喜欢喝咖啡～"], id="zh-fillers-punctuation"),
    pytest.param("我喜欢听jazz", ["我喜欢听ＪＡＺＺ！", "我喜欢听Jazz"], id="zh-fullwidth-letters-case"),
    pytest.param("我不吃香菜", ["我不吃香菜！", "说实话，我不吃香菜。"], id="zh-food-constraint"),
    pytest.param("我住在杭州", ["嗯，我住在杭州。", "我住在杭州！！！"], id="zh-fact"),
    pytest.param("我现在不喝咖啡了", ["其实我现在不喝咖啡了！", "我现在不喝咖啡了。。。"], id="zh-drift-restated"),
    pytest.param("我不吃辣", ["我不吃辣了"], id="zh-final-le-is-not-a-new-memory"),
    pytest.param("我戒烟了", ["其实，我已经戒烟了！"], id="zh-quit-smoking-restated"),
    # synonyms: one summary verb per polarity, as in English
    pytest.param("我喜欢喝咖啡", ["我爱喝咖啡", "我超爱喝咖啡！", "我热爱喝咖啡"], id="zh-synonym-love"),
    pytest.param("我讨厌排队", ["我受不了排队", "我真的很反感排队", "我不喜欢排队"], id="zh-synonym-hate"),
    pytest.param("我对摄影很感兴趣", ["我对摄影有兴趣"], id="zh-synonym-interest"),
    pytest.param("我最喜欢的歌手是周杰伦", ["我最爱的歌手是周杰伦"], id="zh-synonym-favourite"),
    pytest.param("以后回答简短一点", ["回答简短一点", "从现在起，回答简短一点！"], id="zh-style-restated"),
    # English
    pytest.param("I love coffee", ["Um, actually I LOVE COFFEE!!!", "I like coffee.", "i love coffee"], id="en-fillers-case-synonym"),
    pytest.param("I like playing tennis", ["Ｉ ｌｉｋｅ ｐｌａｙｉｎｇ ｔｅｎｎｉｓ．", "Well, I like playing tennis!"], id="en-fullwidth"),
    pytest.param("I live in Lisbon", ["Actually, I live in Lisbon!", "I LIVE IN LISBON."], id="en-fact"),
    pytest.param("I don't drink coffee anymore", ["I don't drink coffee any more.", "Um, I don't drink coffee anymore!!"], id="en-anymore-forms"),
    pytest.param("I'm not into running anymore", ["Honestly, I'm not into running any longer."], id="en-not-into-restated"),
    pytest.param("I no longer play tennis", ["I don't play tennis anymore", "Actually, I no longer play tennis."], id="en-no-longer-forms"),
    pytest.param("From now on, keep your answers short", ["keep your answers short", "Going forward, keep your answers short."],
                 id="en-style-restated"),
]


@pytest.mark.parametrize(("first", "again"), DUPLICATES)
def test_restating_merges(funnel, store, first, again):
    say(funnel, store, first, T0)
    [original] = rows(store)
    assert original["hits"] == 0
    previous = original
    for n, text in enumerate(again, start=1):
        _, outcomes = say(funnel, store, text, T0 + 60 * n)
        assert outcomes == ["merged"], (text, outcomes)
        [memory] = rows(store)  # no new row, nothing superseded
        assert memory["id"] == original["id"]
        assert memory["active"] and memory["status"] == "active"
        assert memory["hits"] == previous["hits"] + 1
        assert memory["confidence"] > previous["confidence"] or memory["confidence"] == 1.0
        assert memory["source_ts"] == T0 + 60 * n  # the latest statement is the source
        previous = memory
    assert previous["confidence"] > original["confidence"]
    assert_one_active_per_slot(store)


def test_duplicates_of_several_things_keep_one_active_memory_per_slot(funnel, store):
    messages = ["我喜欢喝咖啡", "I love jazz", "其实我喜欢喝咖啡！", "I don't eat pork", "Um, I LOVE JAZZ.",
                "那个，我喜欢喝咖啡", "I don't eat pork!!", "I like jazz"]
    for n, text in enumerate(messages):
        say(funnel, store, text, T0 + 60 * n)
    memories = rows(store)
    assert len(memories) == 3
    assert all(m["active"] for m in memories)
    assert sorted(m["hits"] for m in memories) == [1, 2, 2]
    assert_one_active_per_slot(store)


# -- drift: a newer statement on the same slot supersedes --------------------------------------

DRIFT = [
    # Chinese
    pytest.param("我喜欢喝咖啡", "我现在不喝咖啡了", "咖啡", id="zh-no-longer-drinks"),
    pytest.param("我喜欢吃辣", "我不再吃辣了", "辣", id="zh-buzai"),
    pytest.param("我喜欢玩游戏", "我已经不玩游戏了", "游戏", id="zh-yijing-bu"),
    pytest.param("我喜欢爵士乐", "我改主意了，我不喜欢爵士乐了", "爵士乐", id="zh-changed-mind"),
    pytest.param("我喜欢看恐怖片", "我再也不看恐怖片了", "恐怖片", id="zh-zaiye-bu"),
    pytest.param("我喜欢喝酒", "我已经戒酒了", "酒", id="zh-quit-drinking"),
    pytest.param("我喜欢抽烟", "我戒烟了", "抽烟", id="zh-quit-smoking"),
    pytest.param("我爱喝奶茶", "我把奶茶戒掉了", "奶茶", id="zh-ba-jie"),
    pytest.param("我喜欢打篮球", "我不打篮球了", "篮球", id="zh-da"),
    pytest.param("我喜欢喝咖啡", "我喝不了咖啡", "咖啡", id="zh-cannot-drink"),
    pytest.param("我喜欢喝咖啡", "我最近把咖啡换成了茶", "咖啡", id="zh-switched"),
    pytest.param("我一直用安卓手机", "我从安卓手机换成了苹果", "安卓手机", id="zh-switched-from"),
    # English
    pytest.param("I like running", "I'm not into running anymore", "running", id="en-not-into-anymore"),
    pytest.param("I love coffee", "I don't drink coffee anymore", "coffee", id="en-dont-drink-anymore"),
    pytest.param("I like eating meat", "I stopped eating meat", "meat", id="en-stopped-eating"),
    pytest.param("I like meat", "I stopped eating meat", "meat", id="en-stopped-eating-the-thing"),
    pytest.param("I like smoking", "I quit smoking", "smoking", id="en-quit-smoking"),
    pytest.param("I like playing tennis", "I no longer play tennis", "tennis", id="en-no-longer-play"),
    pytest.param("I love playing tennis", "I don't play tennis anymore", "tennis", id="en-dont-play-anymore"),
    pytest.param("I love coffee", "I gave up coffee", "coffee", id="en-gave-up"),
    pytest.param("I like drinking coffee", "I gave up coffee", "coffee", id="en-gave-up-drinking"),
    pytest.param("I enjoy going to the gym", "I don't go to the gym anymore", "gym", id="en-go-to-the-gym"),
    pytest.param("I like to watch horror films", "I no longer watch horror films", "horror films", id="en-like-to"),
    pytest.param("I'm really into jazz", "I'm no longer into jazz", "jazz", id="en-no-longer-into"),
    pytest.param("I love Android", "I'm switching from Android to iPhone", "android", id="en-switching-from"),
    pytest.param("I use Linux", "I recently switched from Linux to macOS", "linux", id="en-switched-from"),
]

_CHANGE_WORDS = regex.compile(r"(?i)\b(?:anymore|any\s+more|any\s+longer)\b|了$")


def _check_superseded(store, old_id, new_id, key, new_polarity):
    by_id = {m["id"]: m for m in rows(store)}
    old, new = by_id[old_id], by_id[new_id]
    assert (old["status"], old["active"], old["superseded_by"]) == ("superseded", False, new_id)
    assert (new["status"], new["active"], new["superseded_by"]) == ("active", True, None)
    assert new["key"] == old["key"] == key
    assert new["polarity"] == new_polarity
    assert [m["id"] for m in active(store) if m["key"] == key] == [new_id]
    assert_one_active_per_slot(store)


@pytest.mark.parametrize(("before", "after", "key"), DRIFT)
def test_change_supersedes_the_older_memory(funnel, store, before, after, key):
    [old_candidate], _ = say(funnel, store, before, T0)
    assert (old_candidate.key, old_candidate.polarity) == (key, 1)
    candidates, outcomes = say(funnel, store, after, T0 + 3600)
    [new_candidate] = [c for c in candidates if c.key == key]
    assert new_candidate.polarity == -1
    assert outcomes[candidates.index(new_candidate)] == "superseded"
    for text in (new_candidate.key, new_candidate.content):
        assert not _CHANGE_WORDS.search(text), text  # "anymore" / 了 are not part of the thing
    [old] = [m for m in rows(store) if m["polarity"] == 1]
    [new] = [m for m in rows(store) if m["polarity"] == -1]
    _check_superseded(store, old["id"], new["id"], key, -1)


CHANGE_BACK = [
    pytest.param("我现在不喝咖啡了", "我现在喜欢喝咖啡了", "咖啡", id="zh-likes-it-again"),
    pytest.param("我不吃辣", "我现在爱吃辣", "辣", id="zh-eats-it-now"),
    pytest.param("I don't eat meat", "I like meat now", "meat", id="en-likes-it-now"),
    pytest.param("I no longer play tennis", "I love playing tennis these days", "tennis", id="en-plays-again"),
]


@pytest.mark.parametrize(("before", "after", "key"), CHANGE_BACK)
def test_change_back_supersedes_the_negative(funnel, store, before, after, key):
    [old_candidate], _ = say(funnel, store, before, T0)
    assert (old_candidate.key, old_candidate.polarity) == (key, -1)
    [new_candidate], outcomes = say(funnel, store, after, T0 + 3600)
    assert (new_candidate.key, new_candidate.polarity, outcomes) == (key, 1, ["superseded"])
    assert not regex.search(r"(?i)\b(?:now|these days)\b|了$", new_candidate.content)
    [old] = [m for m in rows(store) if m["polarity"] == -1]
    [new] = [m for m in rows(store) if m["polarity"] == 1]
    _check_superseded(store, old["id"], new["id"], key, 1)


@pytest.mark.parametrize(("messages", "key"), [
    pytest.param(["我喜欢喝咖啡", "我现在不喝咖啡了", "我戒了咖啡"], "咖啡", id="zh"),
    pytest.param(["I love coffee", "I don't drink coffee anymore", "I gave up coffee"], "coffee", id="en"),
])
def test_a_chain_of_changes_leaves_only_the_newest_active(funnel, store, messages, key):
    for n, text in enumerate(messages):
        say(funnel, store, text, T0 + 3600 * n)
    first, second, third = rows(store)
    assert [m["key"] for m in (first, second, third)] == [key] * 3
    assert (first["status"], first["superseded_by"]) == ("superseded", second["id"])
    assert (second["status"], second["superseded_by"]) == ("superseded", third["id"])
    assert (third["status"], third["active"], third["polarity"]) == ("active", True, -1)


def test_changes_of_one_user_leave_other_slots_alone(funnel, store):
    for n, text in enumerate(["我喜欢喝咖啡", "我喜欢喝茶", "I like playing tennis", "I like golf",
                              "我现在不喝咖啡了", "I no longer play tennis"]):
        say(funnel, store, text, T0 + 60 * n)
    assert sorted((m["key"], m["polarity"]) for m in active(store)) == [
        ("golf", 1), ("tennis", -1), ("咖啡", -1), ("茶", 1)]
    assert sorted(m["key"] for m in rows(store) if m["status"] == "superseded") == ["tennis", "咖啡"]
    assert_one_active_per_slot(store)


# -- answer style: a newer instruction on the same dimension supersedes ------------------------

STYLE_CHANGES = [
    # language
    pytest.param("以后用中文回答", "以后用英文回答", "style:language", id="zh-language"),
    pytest.param("answer in Chinese", "answer in English", "style:language", id="en-language"),
    pytest.param("From now on, answer in Spanish", "以后请用中文回答我", "style:language", id="en-then-zh-language"),
    # length
    pytest.param("回答简短一点", "回答详细一点", "style:length", id="zh-length"),
    pytest.param("以后的回答不要超过三句话", "以后回答详细一点", "style:length", id="zh-length-limit"),
    pytest.param("keep your answers short", "give me detailed answers", "style:length", id="en-length"),
    pytest.param("I prefer short answers", "From now on, give me longer answers", "style:length", id="en-length-prefer"),
    # format
    pytest.param("以后用列表回答", "以后的回答用表格", "style:format", id="zh-format"),
    pytest.param("Always reply in bullet points", "From now on, answer in plain text paragraphs", "style:format",
                 id="en-format"),
    # emoji
    pytest.param("以后别用表情符号", "以后回答多加点表情", "style:emoji", id="zh-emoji"),
    pytest.param("Going forward, don't use emojis", "From now on, add emojis to your answers", "style:emoji",
                 id="en-emoji"),
    # tone
    pytest.param("以后说话正式一点", "以后说话轻松一点", "style:tone", id="zh-tone"),
    pytest.param("Always reply in a formal tone", "From now on, be more casual", "style:tone", id="en-tone"),
    # name
    pytest.param("以后叫我小王", "以后叫我老王", "style:name", id="zh-name"),
    pytest.param("call me Sam", "You can call me Alex", "style:name", id="en-name"),
    pytest.param("call me Sam", "叫我小周就行", "style:name", id="en-then-zh-name"),
]


@pytest.mark.parametrize(("before", "after", "key"), STYLE_CHANGES)
def test_a_newer_answer_style_supersedes_the_older_one(funnel, store, before, after, key):
    slot = memory_key(key)
    [old_candidate], _ = say(funnel, store, before, T0)
    assert (old_candidate.type, old_candidate.key) == ("style", slot)
    [new_candidate], outcomes = say(funnel, store, after, T0 + 3600)
    assert (new_candidate.type, new_candidate.key, outcomes) == ("style", slot, ["superseded"])
    old, new = rows(store)
    _check_superseded(store, old["id"], new["id"], slot, 1)
    assert [m["content"] for m in active(store)] == [new_candidate.content]


def test_answer_styles_of_different_dimensions_stay_together(funnel, store):
    messages = ["以后用中文回答", "以后回答简短一点", "以后用列表回答", "以后别用表情符号", "以后说话温柔一点",
                "以后叫我小王", "From now on, explain with examples"]
    for n, text in enumerate(messages):
        say(funnel, store, text, T0 + 60 * n)
    memories = active(store)
    assert len(memories) == len(messages) and {m["type"] for m in memories} == {"style"}
    assert sorted(m["key"] for m in memories) == sorted(
        memory_key(k) for k in ("style:language", "style:length", "style:format", "style:emoji", "style:tone",
                                "style:name", "explain with examples"))
    assert_one_active_per_slot(store)


@pytest.mark.parametrize(("before", "after", "older", "newer"), [
    ("I work at a bank", "I just accepted an offer at Google", "works at a bank", "works at Google"),
    ("I live in Leeds", "I just moved to Lisbon", "lives in Leeds", "moved to Lisbon"),
    ("我住在北京", "我现在住在上海", "住在北京", "住在上海"),
])
def test_a_newer_fact_on_the_same_subject_replaces_the_older(funnel, store, before, after, older, newer):
    say(funnel, store, before, T0)
    say(funnel, store, after, T0 + 3600)
    by_content = {m["content"]: m for m in rows(store)}
    assert (by_content[older]["status"], by_content[newer]["status"]) == ("superseded", "active")
    assert by_content[older]["key"] == by_content[newer]["key"]
