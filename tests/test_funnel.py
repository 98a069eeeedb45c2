"""The funnel's mechanics on small rule files written for each test."""

from __future__ import annotations

import textwrap

from memo_mw.funnel import Funnel
from memo_mw.rules import default_rule_paths, load_rules


def funnel_of(tmp_path, **files: str) -> Funnel:
    paths = []
    for name, text in files.items():
        path = tmp_path / f"{name}.yaml"
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        paths.append(str(path))
    return Funnel(load_rules(paths))


EN = """
    language: en
    fillers: ['\\bum\\b,?\\s*']
    trailing: ['a lot']
    pronouns: {my: their}
    negative:
      - {id: en.q, pattern: '\\?$'}
    forget:
      - {id: en.forget, pattern: '^forget that (?P<what>[^.]+)', scope: match}
    triggers:
      - {id: en.like, pattern: '\\bI like (?P<what>[^,.!?]+)', type: preference, summary: 'likes {what}'}
      - {id: en.habit, pattern: '\\bI (?P<how>usually)\\s*(?P<what>[^,.!?]*)', type: fact,
         summary: '{how} {what:3sg}', key: 'habit'}
"""
ZH = """
    language: zh
    negative:
      - {id: zh.cats, pattern: 'cats'}
      - {id: zh.translate, pattern: '翻译', scope: message}
    triggers:
      - {id: zh.like, pattern: '我喜欢(?P<what>[^，。！？]+)', type: preference, summary: '喜欢{what}'}
"""


def test_fillers_trailing_pronouns_and_template(tmp_path):
    funnel = funnel_of(tmp_path, en=EN)
    (c,) = funnel.process("um, I like my dog's squeaky toy a lot.").candidates
    assert (c.content, c.key, c.type, c.polarity, c.rule_id) == (
        "likes their dog's squeaky toy", "their dog s squeaky toy", "preference", 1, "en.like")
    assert c.excerpt == "I like my dog's squeaky toy a lot."
    (c,) = funnel.process("I usually run at dawn").candidates
    assert c.content == "usually runs at dawn" and c.key == "habit"


def test_a_group_the_summary_needs_must_capture_something(tmp_path):
    result = funnel_of(tmp_path, en=EN).process("I usually")
    assert result.stage == "unusable" and result.candidates == ()


def test_several_statements_in_one_message(tmp_path):
    result = funnel_of(tmp_path, en=EN).process("I like tea. I like jazz, but I like rain")
    assert [c.content for c in result.candidates] == ["likes tea", "likes jazz", "likes rain"]


def test_forget_match_keeps_the_other_statements(tmp_path):
    result = funnel_of(tmp_path, en=EN).process("forget that I play tennis. I like golf now")
    assert result.stage == "forget" and result.forget_match == "I play tennis"
    assert [c.content for c in result.candidates] == ["likes golf now"]
    # and what follows the request in its own sentence
    result = Funnel(load_rules()).process("Forget what I told you about living in Berlin, I moved to Hamburg.")
    assert result.forget_match == "living in Berlin" and [c.content for c in result.candidates] == ["moved to Hamburg"]


def test_sentence_negatives_come_from_the_matching_rules_file(tmp_path):
    funnel = funnel_of(tmp_path, zh=ZH, en=EN)
    assert funnel.process("I like cats").stage == "captured"  # zh.cats belongs to the Chinese file
    assert funnel.process("我喜欢cats").stage == "negative"
    assert funnel.process("帮我翻译: I like cats").stage == "negative"  # message-wide gates apply everywhere
    assert funnel.process("I like cats?").stage == "negative"


def test_a_gate_of_statements_about_others_reads_the_pieces_and_lets_their_triggers_through(tmp_path):
    funnel = funnel_of(tmp_path, en="""
        language: en
        negative:
          - {id: en.others, pattern: '^my (?:brother|wife)\\b', others: true}
        triggers:
          - {id: en.like, pattern: '\\bI like (?P<what>[^,.!?]+)', type: preference, summary: 'likes {what}'}
          - {id: en.kin, pattern: '^my (?P<who>brother|wife) is an? (?P<what>[^,.!?]+)', type: fact,
             summary: '{who} is {what}', others: true}
    """)
    said = lambda text: [c.content for c in funnel.process(text).candidates]  # noqa: E731
    assert said("My brother is a nurse") == ["brother is nurse"]  # about someone else by design
    assert said("My brother lives in Leeds, I like jazz") == ["likes jazz"]  # the gate reads the pieces of the hit
    assert funnel.process("My brother says I like jazz").stage == "negative"


def test_trace_names_each_gate(tmp_path):
    trace = funnel_of(tmp_path, en=EN).process("I like jazz").trace
    assert [gate for gate, _ in trace] == ["trigger", "length", "compress"]
    assert trace[-1] == ("compress", "en.like -> likes jazz")


def test_length_limit(tmp_path):
    funnel = funnel_of(tmp_path, en=EN.replace("language: en", "language: en\n    max_length: 20"))
    assert funnel.process("I like jazz").stage == "captured"
    assert funnel.process("I like jazz and a great many other things").stage == "too_long"


def test_pii_is_masked_in_content_and_excerpt(tmp_path):
    (c,) = funnel_of(tmp_path, en=EN).process("I like mail at bob@example.com or +44 20 7946 0958").candidates
    assert "bob" not in c.content + c.key + c.excerpt and "7946" not in c.content + c.key + c.excerpt
    assert c.content == "likes mail at [email] or [phone]"
    assert c.excerpt == "I like mail at [email] or [phone]"


def test_catastrophic_pattern_is_bounded_and_logged(tmp_path, caplog):
    funnel = funnel_of(tmp_path, en="""
        language: en
        triggers:
          - {id: en.slow, pattern: '(?P<what>a|aa)+$', type: fact, summary: '{what}'}
    """)
    assert funnel.process("a" * 40 + "!").stage == "no_trigger"
    assert "timed out" in caplog.text and "en.yaml" in caplog.text


def test_line_breaks_end_sentences(tmp_path):
    result = funnel_of(tmp_path, en=EN).process("I like jazz\nI like   rain")
    assert [c.content for c in result.candidates] == ["likes jazz", "likes rain"]


def test_sensitive_gate_scope(tmp_path):
    rules = EN.replace("    forget:", """    sensitive:
      - {id: en.s.sentence, pattern: 'diagnosed'}
      - {id: en.s.message, pattern: 'my therapist', scope: message}
    forget:""")
    funnel = funnel_of(tmp_path, en=rules)
    assert [c.content for c in funnel.process("I was diagnosed last year. I like rain").candidates] == ["likes rain"]
    assert funnel.process("My therapist says so. I like rain").stage == "sensitive"


def test_key_prefixes_put_a_thing_in_one_slot(tmp_path):
    funnel = funnel_of(tmp_path, zh="""
        language: zh
        key_prefixes: ['喝', '吃']
        triggers:
          - {id: zh.no, pattern: '我不(?P<verb>喝|吃)(?P<what>\\p{Han}+)', type: preference, polarity: -1,
             summary: '不{verb}{what}'}
          - {id: zh.like, pattern: '我喜欢(?P<what>\\p{Han}+)', type: preference, summary: '喜欢{what}'}
    """, en="""
        language: en
        key_prefixes: ['drinking', 'listening to']
        triggers:
          - {id: en.like, pattern: '\\bI like (?P<what>[\\w ]+)', type: preference, summary: 'likes {what}'}
    """)
    keys = [funnel.process(m).candidates[0] for m in ("我喜欢喝咖啡", "我不喝咖啡", "I like drinking coffee",
                                                       "I like listening to jazz", "I like drinkingwater")]
    assert [(c.key, c.content) for c in keys] == [
        ("咖啡", "喜欢喝咖啡"), ("咖啡", "不喝咖啡"), ("coffee", "likes drinking coffee"),
        ("jazz", "likes listening to jazz"), ("drinkingwater", "likes drinkingwater")]


def test_a_rule_may_keep_first_person(tmp_path):
    funnel = funnel_of(tmp_path, en=r"""
        language: en
        pronouns: {me: them}
        triggers:
          - {id: en.style, pattern: 'from now on (?P<what>give me [\w ]+)', type: style,
             summary: 'answer style: {what}', pronouns: false}
          - {id: en.like, pattern: 'I like (?P<what>[\w ]+)', type: preference, summary: 'likes {what}'}
    """)
    (style,) = funnel.process("from now on give me short answers").candidates
    assert style.content == "answer style: give me short answers"
    (like,) = funnel.process("I like people who call me").candidates
    assert like.content == "likes people who call them"


def test_and_i_starts_the_users_own_statement(tmp_path):
    funnel = funnel_of(tmp_path, en=r"""
        language: en
        negative:
          - {id: en.other, pattern: '^my boss'}
        triggers:
          - {id: en.like, pattern: '\bI like (?P<what>[\w ]+)|\blikes (?P<what>[\w ]+)', type: preference,
             summary: 'likes {what}'}
    """)
    assert [c.content for c in funnel.process("My boss likes golf, and I like tennis").candidates] == \
        ["likes tennis"]


def test_requires_is_a_pre_check_that_changes_nothing_else(tmp_path):
    funnel = funnel_of(tmp_path, en=r"""
        language: en
        triggers:
          - {id: en.short, pattern: 'from now on (?P<what>[\w ]*short[\w ]*)', type: style,
             summary: 'answer style: {what}', requires: [short]}
          - {id: en.like, pattern: 'I like (?P<what>[\w ]+)', type: preference, summary: 'likes {what}'}
    """)
    assert funnel.process("From now on keep it SHORT").candidates[0].rule_id == "en.short"
    assert funnel.process("I like short stories").candidates[0].rule_id == "en.like"
    assert funnel.process("from now on be kind").stage == "no_trigger"


def test_a_sentence_is_read_in_statements_and_clauses():
    from memo_mw.funnel import clauses
    assert clauses("I have two cats and I love jazz. 我很喜欢打羽毛球，你也喜欢运动吗？") == [
        ("I have two cats", "I have two cats and I love jazz.", "I have two cats and I love jazz."),
        ("and I love jazz.", "I have two cats and I love jazz.", "I have two cats and I love jazz."),
        ("我很喜欢打羽毛球", "我很喜欢打羽毛球", "我很喜欢打羽毛球，你也喜欢运动吗？"),
        ("你也喜欢运动吗？", "你也喜欢运动吗？", "我很喜欢打羽毛球，你也喜欢运动吗？"),
    ]
    # a compound subject is one subject, not two clauses; a whole clause before "and I" is its own
    assert [c for c, _, _ in clauses("My wife and I live in Oslo")] == ["My wife and I live in Oslo"]
    assert [c for c, _, _ in clauses("My boss likes golf and I like tennis")] == ["My boss likes golf",
                                                                                "and I like tennis"]


def test_each_clause_is_its_own_memory_and_the_gates_read_the_whole():
    funnel = Funnel(load_rules())
    both = funnel.process("I have two cats and I love jazz")
    assert [c.content for c in both.candidates] == ["has two cats", "likes jazz"]
    assert [c.content for c in funnel.process("我很喜欢打羽毛球，你也喜欢运动吗？").candidates] == ["喜欢打羽毛球"]
    # the statement's other clause still counts for the negative gates, the sentence for the sensitive ones
    assert funnel.process("The weather is so nice today and I want to take a walk").stage == "negative"
    assert funnel.process("I have diabetes and I like green tea").stage == "sensitive"


def test_the_comma_pieces_a_match_leaves_are_read_again():
    funnel = Funnel(load_rules())

    def said(text):
        return [c.content for c in funnel.process(text).candidates]

    # a piece before the match, after it, and a statement's lead-in are each their own memory
    assert said("我最近报了个瑜伽班，每周去两次") == ["报了个瑜伽班", "每周去两次"]
    assert said("我是做前端的，平时喜欢打羽毛球") == ["是做前端的", "平时喜欢打羽毛球"]
    assert said("我女儿在学钢琴，每周六上课") == ["女儿在学钢琴"]  # the pieces after someone else's statement
    assert said("我特别喜欢吃火锅，我老家是重庆的") == ["喜欢吃火锅", "来自重庆"]
    assert said("I'm a nurse, I live in Leeds and I love hiking.") == ["is a nurse", "lives in Leeds", "likes hiking"]
    assert said("Hi, I'm Tom, a 34-year-old accountant from Leeds.") == ["name is Tom",
                                                                        "is a 34-year-old accountant from Leeds"]
    # a piece of detail stays with its statement, and a piece with no statement adds nothing
    assert said("我喜欢喝美式咖啡，不加糖") == ["喜欢喝美式咖啡,不加糖"]
    assert said("我养了一只猫，叫咪咪") == ["养一只猫"]
    assert said("I love hiking, swimming, and reading") == ["likes hiking"]
    # a verb keeps its case past its first word, read in lower case as it is
    assert said("I work in IT") == ["works in IT"] and said("I climbed Mount Fuji") == ["climbed Mount Fuji"]
    # a last question ending in 吗 is its own statement, so the question gate leaves the rest
    assert said("十月份要去日本自由行，签证现在好办吗") == ["十月份去日本自由行"]
    assert said("我喜欢吃辣，推荐个餐厅好不好") == ["喜欢吃辣"]  # a tag question asks about its own piece
    assert funnel.process("我想学吉他，好不好").stage == "negative"  # a bare tag asks about it all
    assert said("我喜欢吃辣，你推荐个餐厅，好不好。") == ["喜欢吃辣"]  # unless it follows a request of its own
    # each memory's excerpt is its own pieces, as typed; a lead-in of a plain pattern is left too
    assert [c.excerpt for c in funnel.process("I'm Tom, I'm from Leeds").candidates] == ["I'm Tom", "I'm from Leeds"]
    assert said("I live in Leeds, my main hobby is knitting") == ["lives in Leeds", "main hobby is knitting"]
    # a clause with no statement that opens on the user is read again without its first piece; not one
    # that opens on someone or something else
    assert said("我以前很喜欢喝奶茶，现在戒了，改喝无糖的茶了") == ["改喝无糖的茶"]
    assert said("还好，巴爷非常听话，也很喜欢洗澡") == []
    # a run of pieces with no statement is read again without its first piece
    assert said("I'm a nurse, it rained a lot, the bus was late, I live in Leeds") == ["is a nurse", "lives in Leeds"]
    # the pieces after a statement about someone else are theirs, until the user is named again
    assert said("宝宝八个月了，开始学爬了") == ["宝宝八个月"]
    assert said("我老婆是老师，我是程序员") == ["老婆是老师", "是程序员"]
    assert said("有个女儿，今年上初一") == ["有个女儿"]  # a later piece read first is still hers
    assert said("我同事是湖南人，喜欢吃辣") == [] and said("我发现我家猫特别懒，最喜欢睡觉") == []  # theirs, the cat's
    # of a statement about someone else the excerpt is what the rule read, not what they did
    assert [(c.content, c.excerpt) for c in funnel.process("我老公做的红烧肉超级好吃").candidates] == [("有老公", "我老公")]
    assert said("我老婆是老师，我儿子在上小学") == ["老婆是老师", "儿子在上小学"]  # another of the household
    assert said("我老婆是老师，在医院上班，我是程序员") == ["老婆是老师", "是程序员"]
    assert said("My father is a farmer, im a teacher") == ["their father is a farmer", "is a teacher"]  # spelled out
    # the household statement marks the pieces after it as theirs; other subjects' do not
    assert said("周末一般带儿子去游泳，我住在杭州") == ["周末一般带儿子去游泳", "住在杭州"]
    # a comma-rich paste is read once, as a whole, and its length limit is the whole's
    assert funnel.process("I like tea, " * 1200).stage == "too_long"
    # the gates still read the whole sentence
    assert funnel.process("我很喜欢爬山，我有糖尿病").stage == "sensitive"


def test_a_one_off_event_stops_its_own_clause_and_a_day_what_follows_it():
    funnel = Funnel(load_rules())
    assert [c.content for c in funnel.process("我刚下班，我是做设计的").candidates] == ["是做设计的"]
    assert [c.content for c in funnel.process("I just got home, I work as a nurse").candidates] == ["works as a nurse"]
    assert funnel.process("今天我生日，我吃蛋糕了").stage == "negative"  # a day before the statement dates it
    assert [c.content for c in funnel.process("最近我在学做菜，昨天晚上我做了一道宫保鸡丁").candidates] == ["在学做菜"]
    assert [c.content for c in funnel.process("I love running, did 10k today").candidates] == ["likes running"]
    # a plan reads the whole sentence
    assert funnel.process("I just got home and I want to try making some new dishes").stage == "negative"


def test_the_length_limit_is_a_clauses():
    funnel = Funnel(load_rules())
    story = "Yesterday was a long day at the office and the train home was late again. " * 4
    result = funnel.process(story + "I'm a nurse in Leeds.")
    assert [c.content for c in result.candidates] == ["is a nurse in Leeds"]
    assert funnel.process("I like " + "very " * 60 + "long walks").stage in ("too_long", "unusable")


def test_the_history_keeps_a_cleaned_masked_message_and_nothing_sensitive():
    funnel = Funnel(load_rules())
    kept = {message: funnel.history_text(funnel.process(message)) for message in (
        "um, my neighbour plays the trumpet, call me at alice@example.com",
        "I like jazz. I was diagnosed with diabetes last year.",  # one sensitive sentence: all of it out
        "我有抑郁症", "forget that I like jazz", "我喜欢爵士乐，你呢？", "")}
    assert list(kept.values()) == ["my neighbour plays the trumpet, call me at [email]", None, None, None,
                                   "我喜欢爵士乐,你呢?", None]


def test_a_sentence_that_names_no_one_goes_on_about_the_one_before():
    funnel = Funnel(load_rules())

    def said(text):
        return [c.content for c in funnel.process(text).candidates]

    assert said("今年35了") == ["35岁"]
    assert said("我爸身体不好。今年65了") == []  # his age
    assert said("我同事是湖南人。喜欢吃辣") == []  # someone else, though named after 我
    assert said("我老婆是老师。我平时喜欢跑步") == ["老婆是老师", "喜欢跑步"]  # 我平时: the user, at a time
    assert said("我爸身体不好。我今年35了") == ["35岁"]  # the user named again
    assert said("我叫小王。今年35了") == ["名字叫小王", "35岁"]
    assert said("My brother is a doctor. I am a nurse.") == ["their brother is a doctor", "is a nurse"]
    # a statement about someone else names them whatever comes before it, in any sentence
    assert said("你知道吗，我老婆是老师。喜欢跑步") == ["老婆是老师"]
    assert said("我有个女儿。今年上初一") == ["有个女儿"]
    # English that leaves the subject out means the speaker (en.yaml: unstated_is_user)
    assert said("My dad loves golf. Love jazz") == ["likes jazz"]
    assert said("My grandpa was a farmer. Grew up in Kansas") == ["their grandpa was a farmer"]  # not a liking
    # in a clause that opens on someone else, the user's own pieces stay the user's
    assert said("My kids are grown, my favourite hobby is gardening") == ["favourite hobby is gardening"]


def test_a_rule_file_without_a_grammar_does_not_make_every_sentence_the_users(tmp_path):
    extra = tmp_path / "extra.yaml"
    extra.write_text("language: custom\ntriggers:\n  - {id: x.tea, pattern: 'matcha', type: preference, "
                     "summary: 'likes matcha', key: tea}\n", encoding="utf-8")
    funnel = Funnel(load_rules([*default_rule_paths(), str(extra)]))
    assert [c.content for c in funnel.process("我爸身体不好。今年65了").candidates] == []


def test_someone_elses_words_are_not_the_users():
    funnel = Funnel(load_rules())
    for text in ("She said, I hate cilantro", "My boss keeps telling me, I have two cats", "我同事觉得，我喜欢加班",
                 "他们都以为，我是程序员"):
        assert funnel.process(text).stage == "negative", text
    assert [c.content for c in funnel.process("Well, I live in Leeds").candidates] == ["lives in Leeds"]
    assert funnel.process("My mom used to say, I love chocolate").stage == "negative"
    for text in ("When anyone asks, I'm vegetarian", "我记得我说过，我不吃香菜", "我个人觉得，我更喜欢安静的地方"):
        assert funnel.process(text).stage == "captured", text  # the user's own words
