"""The shipped topic lexicons (rules/zh.yaml, rules/en.yaml): a statement is recalled by a
question on the same topic with no word in common, in either language and across them; a
question on another topic does not recall it; words that merely contain a topic word are
not tagged with its topic."""

from __future__ import annotations

import pytest

from memo_mw.funnel import Funnel
from memo_mw.adapters import Turn
from memo_mw.middleware import remember_payload
from memo_mw.recall import Recaller
from memo_mw.recall import RecallConfig
from memo_mw.rules import default_rule_paths, load_rules
from memo_mw.store import Store
from memo_mw.text import tokens


@pytest.fixture(scope="module")
def funnel():
    return Funnel(load_rules())


def capture_and_recall(funnel, tmp_path, statement, question):
    result = funnel.process(statement)
    assert result.stage == "captured", result.stage
    db = str(tmp_path / "m.db")
    with Store(db) as store:
        store.remember(remember_payload(result, user_id="u", turn=Turn("plain", "", None, "s", None, 1), ts=1, received=1))
    return result.candidates, Recaller(db, funnel, RecallConfig()).recall("u", question, now=2)


# (statement, question, the topic they share). No word (nor, in Chinese, character) in common.
SAME_TOPIC = [
    # The two from the issue.
    pytest.param("I don't eat pork", "What should I cook for lunch?", "food", id="en-food-issue"),
    pytest.param("我喜欢徒步", "周末去哪儿玩", "travel", id="zh-travel-issue"),
    # English.
    pytest.param("I love jazz", "Recommend an album for tonight", "music", id="en-music"),
    pytest.param("I love mystery novels", "What should I read on the plane?", "reading", id="en-reading"),
    pytest.param("I can't stand horror movies", "Anything good on Netflix?", "film", id="en-film"),
    pytest.param("I play tennis every Saturday", "Where's a good gym near me?", "sport", id="en-sport"),
    pytest.param("I love hiking", "Any plans for the weekend?", "travel", id="en-travel"),
    pytest.param("I work as a nurse", "How should I prepare for tomorrow's interview?", "work", id="en-work"),
    pytest.param("I'm studying chemistry", "How can I pass my exams next month?", "study", id="en-study"),
    pytest.param("I'm a backend developer", "Which laptop should I get?", "tech", id="en-tech"),
    pytest.param("I have two daughters", "Any tips for a long drive with kids?", "family", id="en-family"),
    pytest.param("I have two cats", "Which vet do you recommend?", "pets", id="en-pets"),
    pytest.param("I love thrift stores", "Where can I find cheap jeans?", "shopping", id="en-shopping"),
    pytest.param("I don't drink coffee anymore", "What should I order at Starbucks?", "drink", id="en-drink"),
    pytest.param("I play chess every evening", "Any good board games for four people?", "games", id="en-games"),
    pytest.param("I love painting with watercolors", "Is there a good gallery in town?", "art", id="en-art"),
    pytest.param("I live with two roommates", "Should I rent a bigger apartment?", "home", id="en-home"),
    # Chinese.
    pytest.param("我不吃猪肉", "晚饭做什么好", "food", id="zh-food"),
    pytest.param("我喜欢听爵士乐", "推荐几首歌", "music", id="zh-music"),
    pytest.param("我喜欢看科幻小说", "有什么好书推荐吗", "reading", id="zh-reading"),
    pytest.param("我很喜欢看韩剧", "最近上映了什么电影", "film", id="zh-film"),
    pytest.param("我每天早上跑步", "附近有健身房吗", "sport", id="zh-sport"),
    pytest.param("我在一家银行工作", "明天要面试，紧张", "work", id="zh-work"),
    pytest.param("我是一名程序员", "电脑买哪款好", "tech", id="zh-tech"),
    pytest.param("我有两个女儿", "孩子放假在家做什么", "family", id="zh-family"),
    pytest.param("我养了一只柯基", "遛狗要注意什么", "pets", id="zh-pets"),
    pytest.param("我喜欢逛街", "双十一买什么划算", "shopping", id="zh-shopping"),
    pytest.param("我不喝咖啡", "下午茶点什么", "drink", id="zh-drink"),
    pytest.param("我喜欢下围棋", "有什么好玩的桌游", "games", id="zh-games"),
    pytest.param("我每天开车上班", "驾照考试难吗", "transport", id="zh-transport"),
    # Across languages: the lexicons of one name merge.
    pytest.param("我不吃猪肉", "What should I cook for lunch?", "food", id="zh-en-food"),
    pytest.param("I love hiking", "周末去哪儿玩", "travel", id="en-zh-travel"),
    pytest.param("我养了两只猫", "Which vet do you recommend?", "pets", id="zh-en-pets"),
    pytest.param("I'm a backend developer", "电脑买哪款好", "tech", id="en-zh-tech"),
    pytest.param("我喜欢看科幻小说", "Any book recommendations?", "reading", id="zh-en-reading"),
    pytest.param("I love jazz", "推荐几首歌", "music", id="en-zh-music"),
]


@pytest.mark.parametrize("statement, question, topic", SAME_TOPIC)
def test_a_question_on_the_same_topic_recalls_a_statement_with_no_word_in_common(
        funnel, tmp_path, statement, question, topic):
    (candidate,), recalled = capture_and_recall(funnel, tmp_path, statement, question)
    assert not tokens(f"{candidate.content} {candidate.key}") & tokens(question)  # nothing lexical
    assert topic in candidate.topics
    assert topic in funnel.topics.tag(question)
    assert [m["content"] for m in recalled] == [candidate.content]
    assert 0 < recalled[0]["relevance"] < 1  # the topic alone


OTHER_TOPIC = [
    pytest.param("我喜欢徒步", "推荐一本编程书", id="zh-hiking-vs-programming-book"),
    pytest.param("I don't eat pork", "Which laptop should I buy?", id="en-pork-vs-laptop"),
    pytest.param("I love jazz", "How do I fix this bug in my Python code?", id="en-jazz-vs-bug"),
    pytest.param("I have two cats", "Any tips for my job interview?", id="en-cats-vs-interview"),
    pytest.param("我不喝咖啡", "明天要面试，紧张", id="zh-coffee-vs-interview"),
    pytest.param("我养了一只柯基", "我是单身狗，怎么找对象", id="zh-corgi-vs-single"),
    pytest.param("我喜欢逛街", "这段代码怎么部署", id="zh-shopping-vs-deploy"),
    pytest.param("我是一名程序员", "帮我开发票", id="zh-programmer-vs-invoice"),  # 开发票 is not 开发
    pytest.param("I love hiking", "Why is my script still running?", id="en-hiking-vs-running-script"),
]


@pytest.mark.parametrize("statement, question", OTHER_TOPIC)
def test_a_question_on_another_topic_does_not_recall_it(funnel, tmp_path, statement, question):
    _, recalled = capture_and_recall(funnel, tmp_path, statement, question)
    assert recalled == []


@pytest.mark.parametrize("text, topics", [
    # Chinese: a topic word inside an unrelated word.
    pytest.param("我是编程菜鸟", {"tech"}, id="菜鸟-is-not-food"),
    pytest.param("地球是圆的", set(), id="地球-is-not-sport"),
    pytest.param("剧烈运动后要休息", {"sport"}, id="剧烈-is-not-film"),
    pytest.param("他考了很多证书", {"study"}, id="证书-is-not-reading"),
    pytest.param("用谷歌搜一下", {"tech"}, id="谷歌-is-not-music"),
    pytest.param("面试前要准备什么", {"work"}, id="面试-is-not-food"),
    pytest.param("我喜欢钓鱼", {"sport"}, id="钓鱼-is-not-food"),
    pytest.param("酒店离机场远吗", {"travel"}, id="酒店-is-not-drink"),
    pytest.param("我晚上十一点睡觉", {"lifestyle"}, id="十一点-is-not-a-holiday"),
    pytest.param("我想换个新的菜单栏图标", set(), id="菜单栏-is-not-food"),
    pytest.param("我该去哪里找资料", set(), id="去哪里-is-not-travel"),
    # Chinese: the longest entry wins, so a compound keeps a character from its usual topic.
    pytest.param("双十一在天猫下单", {"shopping"}, id="天猫-is-not-pets"),
    pytest.param("去成都看熊猫", {"travel"}, id="熊猫-is-not-pets"),
    pytest.param("我是单身狗", {"family"}, id="单身狗-is-not-pets"),
    pytest.param("这剧情太狗血了", {"film"}, id="狗血-is-not-pets"),
    pytest.param("我们去吃热狗", {"food"}, id="热狗-is-food"),
    pytest.param("周末一起吃鸡", {"travel", "games"}, id="吃鸡-is-games"),
    pytest.param("帮我开发票", {"shopping"}, id="开发票-is-not-tech"),
    pytest.param("我每天做平板支撑", {"sport"}, id="平板支撑-is-not-tech"),
    pytest.param("我想买房", {"home"}, id="买房-is-home"),
    pytest.param("周末去哪儿玩", {"travel"}, id="zh-travel"),
    # English: words that look like a topic word, or mostly mean something else.
    pytest.param("Why is my script still running?", set(), id="running-code-is-not-sport"),
    pytest.param("How do I fine-tune the model?", set(), id="fine-tune-is-not-music"),
    pytest.param("Train a model on my data", set(), id="train-a-model-is-not-transport"),
    pytest.param("The parking lot is full", set(), id="parking-is-not-a-park"),
    pytest.param("A trip to Turkey", {"travel"}, id="turkey-is-not-food"),
    pytest.param("console.log prints undefined", set(), id="console-is-not-games"),
    pytest.param("My code doesn't work", {"tech"}, id="work-alone-is-not-a-job"),
    pytest.param("I went fishing", {"sport"}, id="fishing-is-not-food"),
    pytest.param("I go running every morning", {"sport"}, id="go-running-is-sport"),
    pytest.param("She works at a bank", {"work"}, id="works-at-is-work"),
    pytest.param("What should I cook for lunch?", {"food"}, id="en-food"),
    # English: a generic word that would put a text in a second, wrong topic.
    pytest.param("Can you book a table for two?", set(), id="book-a-table-is-not-reading"),
    pytest.param("Any book recommendations?", {"reading"}, id="a-book-is-reading"),
    pytest.param("Is there a cheap hotel near the station?", {"travel"}, id="cheap-is-not-shopping"),
    pytest.param("What should I cook at home tonight?", {"food"}, id="home-is-not-a-topic"),
    pytest.param("Any good restaurants nearby?", {"food"}, id="restaurant-is-not-drink"),
    pytest.param("找一家便宜的酒店", {"travel"}, id="便宜-is-not-shopping"),
])
def test_tags(funnel, text, topics):
    assert funnel.topics.tag(text) == topics


def test_both_files_have_the_same_topics_and_enough_words():
    zh_path, en_path = sorted(default_rule_paths(), key=lambda p: not str(p).endswith("zh.yaml"))
    zh, en = load_rules([zh_path]).topics, load_rules([en_path]).topics
    assert set(zh) == set(en)
    assert {"food", "drink", "music", "reading", "film", "sport", "travel", "work", "study", "tech", "family",
            "pets", "shopping", "games", "art", "style", "home", "lifestyle"} <= set(zh)
    broad = {name for name in zh if not name.startswith(NARROW)}
    for name in broad:
        assert len(zh[name]) >= 30 and len(en[name]) >= 30, name
    # Programming languages, tools and what is asked about them: narrow lexicons by design.
    assert {"lang.rust", "lang.python", "tool.docker", "code.async", "code.types"} <= set(zh) - broad
    for name in set(zh) - broad:
        assert len(zh[name]) >= 5 and len(en[name]) >= 5, name


NARROW = ("lang.", "tool.", "code.")


@pytest.mark.parametrize("text, topics", [
    pytest.param("How do I use async traits in Rust with tokio?",
                 {"tech", "lang.rust", "code.async", "code.types"}, id="en-rust-async-traits"),
    pytest.param("Rust 的异步和 trait 怎么写？", {"tech", "lang.rust", "code.async", "code.types"}, id="zh-rust-async-traits"),
    pytest.param("serde 怎么反序列化", {"lang.rust", "code.serialization"}, id="zh-serde"),
    pytest.param("my docker container keeps crashing", {"tech", "tool.docker"}, id="en-docker"),
    pytest.param("用 k8s 部署 go语言 服务", {"tech", "lang.go", "tool.kubernetes"}, id="zh-k8s-go"),
    pytest.param("How do I write a unit test for this Python function?", {"tech", "lang.python", "code.testing"},
                 id="en-python-test"),
    pytest.param("Python 的协程和多线程有什么区别", {"tech", "lang.python", "code.async"}, id="zh-python-async"),
    # Everyday words that are also names of tools are not code.
    pytest.param("How did she react to the news?", set(), id="react-is-not-javascript"),
    pytest.param("I bought yarn for knitting", {"shopping", "art"}, id="yarn-is-not-javascript"),
    pytest.param("Wait for me at the terminal", set(), id="terminal-is-not-linux"),
    pytest.param("She is borrowing my car", {"transport"}, id="borrowing-is-not-rust"),
    pytest.param("Is the generic drug cheaper?", set(), id="generic-is-not-types"),
    pytest.param("我想去旅行", {"travel"}, id="zh-travel-is-not-code"),
])
def test_programming_topics(funnel, text, topics):
    assert funnel.topics.tag(text) == topics


def test_single_chinese_characters_are_the_few_safe_ones():
    words = {w for ws in load_rules().topics.values() for w in ws}
    singles = {w for w in words if len(w) == 1 and not w.isascii()}
    assert singles <= set("吃喝茶虾粥猫狗犬买")
