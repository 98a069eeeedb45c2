"""User insights: a short, rule-made profile of what a user keeps coming back to, made weekly from
their topic counts (:mod:`memo_mw.counters`) and the topics and dates of their active memories, never
from chat text. Recall shows the first lines, in the user's language, in the block's ``[PROFILE]``::

    asks often about rust (async, types): 12 messages over 4 weeks, 2026-W40 to 2026-W47; confidence: high
    经常问到 rust（异步、类型系统）：4 周内 12 条消息，2026-W40 至 2026-W47；置信度：高
"""

import collections
from typing import Any

from . import counters, defaults
from .store import Store

#: The broad topic a listed subject makes redundant.
SUBJECT_PARENT = "tech"
CONFIDENCE_RANK = {"high": 2, "medium": 1, "low": 0}

_ZH_LABELS = {
    "food": "饮食", "drink": "饮品", "music": "音乐", "reading": "阅读", "film": "影视", "sport": "运动",
    "travel": "旅行", "work": "工作", "study": "学习", "tech": "技术", "family": "家庭", "pets": "宠物",
    "shopping": "购物", "games": "游戏", "art": "艺术", "style": "回答方式", "home": "居家", "transport": "出行",
    "code.async": "异步", "code.types": "类型系统", "code.serialization": "序列化", "code.memory": "内存管理",
    "code.testing": "测试", "code.errors": "错误处理", "code.performance": "性能",
}
_EN_LABELS = {"style": "answer style"}

_TEMPLATES = {
    "en": {
        "verb": {"high": "asks often about ", "medium": "asks about ", "low": "has asked about "},
        "told": "has talked about ", "facets": " ({})", "join": ", ",
        "span": "{count} messages over {weeks} weeks, {first} to {last}", "span1": "{count} messages in {first}",
        "memories": "{count} remembered statement{s}", "also": ", {count} remembered statement{s}",
        "range": ", {first} to {last}", "range1": ", {first}",
        "line": "{head}: {span}{also}; confidence: {confidence}",
        "confidence": {"high": "high", "medium": "medium", "low": "low"},
    },
    "zh": {
        "verb": {"high": "经常问到", "medium": "问到", "low": "问过"},
        "told": "提到过", "facets": "（{}）", "join": "、",
        "span": "{weeks} 周内 {count} 条消息，{first} 至 {last}", "span1": "{first} 一周内 {count} 条消息",
        "memories": "记住了 {count} 条相关信息", "also": "，记住了 {count} 条相关信息",
        "range": "，{first} 至 {last}", "range1": "，{first}",
        "line": "{head}：{span}{also}；置信度：{confidence}",
        "confidence": {"high": "高", "medium": "中", "low": "低"},
    },
}
_SHOWN = ("topic", "count", "weeks", "first_seen", "last_seen", "confidence")
_COLUMNS = ("rank", *_SHOWN, "text", "language", "created_at")


def label(topic: str, language: str) -> str:
    """How a topic is named in a line: its own name without the ``lang.``/``tool.``/``code.`` prefix."""
    return (_ZH_LABELS if language == "zh" else _EN_LABELS).get(topic) or topic.split(".", 1)[-1]


def confidence(count: int, weeks: int) -> str:
    return next((name for name, least_count, least_weeks in defaults.INSIGHTS_CONFIDENCE
                 if count >= least_count and weeks >= least_weeks), "low")


def _week(memory: dict[str, Any]) -> str:
    return counters.week_of(memory.get("source_ts") or memory.get("created_at") or 0)


def build(count_rows: list[dict[str, Any]], memories: list[dict[str, Any]], *,
          limit: int = defaults.INSIGHTS_MAX) -> list[dict[str, Any]]:
    """The insight lines for one user from their counts (``{"week", "topic", "count"}``) and
    active memories, best first. Pure: no I/O."""
    counted, remembered, scripts = collections.Counter(), collections.Counter(), collections.Counter()
    weeks, memory_weeks = collections.defaultdict(set), collections.defaultdict(set)
    pairs: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for row in count_rows:
        topic, n = row["topic"], int(row["count"])
        if topic.startswith("@"):
            scripts[topic] += n
        elif "/" in topic:
            subject, _, facet = topic.partition("/")
            pairs[subject][facet] += n
        elif n > 0:
            counted[topic] += n
            weeks[topic].add(row["week"])
    for memory in memories:
        for topic in memory.get("topics") or ():
            remembered[topic] += 1
            memory_weeks[topic].add(_week(memory))
    found = []
    for topic in set(counted) | set(remembered):
        count = counted[topic] or remembered[topic]
        if topic.startswith((*counters.FACETS, "@")) or count < defaults.INSIGHTS_MIN_COUNT:
            continue
        seen = weeks[topic] | memory_weeks[topic]
        spread = len(weeks[topic] if counted[topic] else memory_weeks[topic])
        found.append({"topic": topic, "count": count, "weeks": spread, "first_seen": min(seen),
                      "last_seen": max(seen), "confidence": confidence(count, spread),
                      "facets": sorted(pairs[topic], key=lambda f: (-pairs[topic][f], f))[:defaults.INSIGHTS_FACETS],
                      "messages": counted[topic], "memories": remembered[topic]})
    if any(i["topic"].startswith(counters.SUBJECTS) for i in found):
        found = [i for i in found if i["topic"] != SUBJECT_PARENT]
    found.sort(key=lambda i: i["topic"])  # ties in the (stable) sort below stay in this order
    found.sort(key=lambda i: (CONFIDENCE_RANK[i["confidence"]], i["count"], i["last_seen"]), reverse=True)
    language = _language(scripts, memories)
    return [{"rank": rank, **{k: item[k] for k in _SHOWN}, "text": text(item, language), "language": language}
            for rank, item in enumerate(found[:limit], 1)]


def _language(scripts: collections.Counter[str], memories: list[dict[str, Any]]) -> str:
    if scripts["@zh"] != scripts["@en"]:
        return "zh" if scripts["@zh"] > scripts["@en"] else "en"
    languages = collections.Counter(m.get("language") for m in memories)
    return "zh" if languages["zh"] > languages["en"] else "en"


def text(item: dict[str, Any], language: str) -> str:
    """One insight line, from a template of the user's language (rule-made, no chat text)."""
    t = _TEMPLATES[language]
    name = label(item["topic"], language)
    if language == "zh" and name.isascii():
        name = f" {name}"  # a Latin name after Chinese words reads better spaced
    facets = t["facets"].format(t["join"].join(label(f, language) for f in item["facets"])) if item["facets"] else ""
    first, last = item["first_seen"], item["last_seen"]
    one_week = first == last
    if item["messages"]:
        verb, span = t["verb"][item["confidence"]], t["span1" if one_week else "span"]
        also = t["also"].format(count=item["memories"], s=_plural(item["memories"])) if item["memories"] else ""
    else:  # memories only
        verb, span, also = t["told"], t["memories"] + t["range1" if one_week else "range"], ""
    span = span.format(count=item["count"], weeks=item["weeks"], first=first, last=last, s=_plural(item["count"]))
    return t["line"].format(head=f"{verb}{name}{facets}".strip(), span=span, also=also,
                            confidence=t["confidence"][item["confidence"]])


def _plural(n: int) -> str:
    return "" if n == 1 else "s"  # the English templates' {s}; the Chinese have none


def run(store: Store, user_id: str, *, now: float) -> list[dict[str, Any]]:
    """Replace the user's stored insights with those at ``now``, and delete counts older than the
    window (:data:`~memo_mw.defaults.INSIGHTS_WINDOW_WEEKS`). Returns the new lines."""
    start = counters.week_of(now - defaults.INSIGHTS_WINDOW_WEEKS * 7 * 86400)
    with store.write():
        rows = [r for r in counters.rows(store, user_id) if r["week"] >= start]
        memories = [m for m in store.list(user_id) if _week(m) >= start]
        lines = [{**line, "created_at": int(now)} for line in build(rows, memories)]
        store.db.execute("delete from topic_counts where user_id = ? and week < ?", [user_id, start])
        store.db.execute("delete from insights where user_id = ?", [user_id])
        store.db.executemany(
            f"insert into insights (user_id, {', '.join(_COLUMNS)}) values (?, {', '.join('?' * len(_COLUMNS))})",
            [[user_id, *(line[c] for c in _COLUMNS)] for line in lines])
    return lines


def users(store: Store) -> list[str]:
    """Users with counts, memories or insights (a user with insights and nothing else left loses them)."""
    return [r[0] for r in store.db.execute(
        "select user_id from topic_counts union select user_id from memories where active = 1"
        " union select user_id from insights order by 1")]


def run_all(store: Store, *, now: float) -> dict[str, int]:
    """:func:`run` for every user with counts or memories; how many users and lines."""
    made = [len(run(store, user_id, now=now)) for user_id in users(store)]
    return {"users": len(made), "insights": sum(made)}


def read(store: Store, user_id: str) -> list[dict[str, Any]]:
    return [dict(zip(_COLUMNS, row)) for row in store.db.execute(
        f"select {', '.join(_COLUMNS)} from insights where user_id = ? order by rank", [user_id])]
