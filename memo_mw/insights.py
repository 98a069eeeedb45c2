"""User insights: a short, rule-made profile of what a user keeps coming back to.

Made weekly from two things only: the topic counts of the user's messages per ISO week
(:mod:`memo_mw.counters`: names from the rules' topic lexicons and numbers, never chat text)
and the user's active memories (their topic tags and dates, never their text). A run replaces
the user's lines in the ``insights`` table; recall puts the first few in the memory block's
``[PROFILE]`` section.

For each topic (not the facets ``code.*``, nor the per-message tallies ``@zh``/``@en``):

* ``count``: the messages counted on it in the window (the last
  :data:`~memo_mw.defaults.INSIGHTS_WINDOW_WEEKS` weeks); for a topic with none counted, its
  active memories (statements older than the counters);
* ``first_seen``, ``last_seen``: the first and last ISO week with a counted message or a memory;
* ``confidence``: by count and distinct weeks, :data:`~memo_mw.defaults.INSIGHTS_CONFIDENCE`
  (``high``: 10 messages over 3 weeks; ``medium``: 5 over 2; else ``low``);
* a topic needs :data:`~memo_mw.defaults.INSIGHTS_MIN_COUNT` (3) to be a line at all.

Lines are ranked by confidence, count, then the latest week, and at most
:data:`~memo_mw.defaults.INSIGHTS_MAX` are kept. A programming subject (``lang.*``, ``tool.*``)
names the facets asked about with it ("asks often about rust (async, types)"), and when one is
listed the broad ``tech`` line is left out: it says the same less precisely. The text is in the
user's dominant language (their messages' script, else their memories' language)::

    asks often about rust (async, types): 12 messages over 4 weeks, 2026-W40 to 2026-W47; confidence: high
    经常问到 rust（异步、类型系统）：4 周内 12 条消息，2026-W40 至 2026-W47；置信度：高
"""

from __future__ import annotations

import collections
import time
from typing import Any

from . import counters, defaults
from .store import Store

#: Shown in a subject's brackets, never a line of their own.
FACETS = counters.FACETS
SUBJECTS = counters.SUBJECTS
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
        "verb": {"high": "asks often about", "medium": "asks about", "low": "has asked about"},
        "told": "has talked about",
        "facets": " ({})", "join": ", ",
        "span": "{count} messages over {weeks} weeks, {first} to {last}",
        "span1": "{count} messages in {first}",
        "memories": "{count} remembered statement{s}",
        "also": ", {n} remembered statement{s}",
        "line": "{head}: {span}{also}; confidence: {confidence}",
        "confidence": {"high": "high", "medium": "medium", "low": "low"},
        "range": ", {first} to {last}", "range1": ", {first}",
    },
    "zh": {
        "verb": {"high": "经常问到", "medium": "问到", "low": "问过"},
        "told": "提到过",
        "facets": "（{}）", "join": "、",
        "span": "{weeks} 周内 {count} 条消息，{first} 至 {last}",
        "span1": "{first} 一周内 {count} 条消息",
        "memories": "记住了 {count} 条相关信息{s}",
        "also": "，记住了 {n} 条相关信息{s}",
        "line": "{head}：{span}{also}；置信度：{confidence}",
        "confidence": {"high": "高", "medium": "中", "low": "低"},
        "range": "，{first} 至 {last}", "range1": "，{first}",
    },
}


def label(topic: str, language: str) -> str:
    """How a topic is named in a line: its own name without the ``lang.``/``tool.``/``code.`` prefix."""
    labels = _ZH_LABELS if language == "zh" else _EN_LABELS
    return labels.get(topic) or topic.split(".", 1)[-1]


def confidence(count: int, weeks: int) -> str:
    for name, least_count, least_weeks in defaults.INSIGHTS_CONFIDENCE:
        if count >= least_count and weeks >= least_weeks:
            return name
    return "low"


def window_start(now: float) -> str:
    """The first ISO week a run at ``now`` reads."""
    return counters.week_of(now - defaults.INSIGHTS_WINDOW_WEEKS * 7 * 86400)


def build(count_rows: list[dict[str, Any]], memories: list[dict[str, Any]], *,
          limit: int = defaults.INSIGHTS_MAX) -> list[dict[str, Any]]:
    """The insight lines for one user from their counts (``{"week", "topic", "count"}``) and
    active memories, best first. Pure: no I/O."""
    counted: dict[str, int] = collections.Counter()
    weeks: dict[str, set[str]] = collections.defaultdict(set)
    pairs: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    scripts: collections.Counter[str] = collections.Counter()
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
    remembered: collections.Counter[str] = collections.Counter()
    memory_weeks: dict[str, set[str]] = collections.defaultdict(set)
    for memory in memories:
        for topic in memory.get("topics") or ():
            remembered[topic] += 1
            memory_weeks[topic].add(counters.week_of(memory.get("source_ts") or memory.get("created_at") or 0))
    language = _language(scripts, memories)

    found = []
    for topic in set(counted) | set(remembered):
        if topic.startswith((*FACETS, "@")):
            continue
        count = counted[topic] or remembered[topic]
        if count < defaults.INSIGHTS_MIN_COUNT:
            continue
        seen = weeks[topic] | memory_weeks[topic]
        spread = len(weeks[topic]) if counted[topic] else len(memory_weeks[topic])
        facets = [f for f, _ in sorted(pairs[topic].items(), key=lambda p: (-p[1], p[0]))][:defaults.INSIGHTS_FACETS]
        found.append({"topic": topic, "count": count, "weeks": spread, "first_seen": min(seen),
                      "last_seen": max(seen), "confidence": confidence(count, spread),
                      "facets": facets, "messages": counted[topic], "memories": remembered[topic]})
    if any(i["topic"].startswith(SUBJECTS) for i in found):
        found = [i for i in found if i["topic"] != SUBJECT_PARENT]
    found.sort(key=lambda i: (-CONFIDENCE_RANK[i["confidence"]], -i["count"], _neg_week(i["last_seen"]), i["topic"]))
    out = []
    for rank, item in enumerate(found[:limit], 1):
        out.append({"rank": rank, "topic": item["topic"], "text": text(item, language), "count": item["count"],
                    "weeks": item["weeks"], "first_seen": item["first_seen"], "last_seen": item["last_seen"],
                    "confidence": item["confidence"], "language": language})
    return out


def _neg_week(week: str) -> tuple[int, int]:
    year, number = week.split("-W")
    return -int(year), -int(number)


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
    en = language == "en"
    facets = t["facets"].format(t["join"].join(label(f, language) for f in item["facets"])) if item["facets"] else ""
    first, last = item["first_seen"], item["last_seen"]
    if item["messages"]:
        head = f"{t['verb'][item['confidence']]}{' ' if en else ''}{name}{facets}".strip()
        span = (t["span"] if first != last else t["span1"]).format(
            count=item["count"], weeks=item["weeks"], first=first, last=last)
        also = t["also"].format(n=item["memories"], s=_plural(item["memories"], en)) if item["memories"] else ""
    else:  # memories only
        head = f"{t['told']}{' ' if en else ''}{name}{facets}".strip()
        span = t["memories"].format(count=item["count"], s=_plural(item["count"], en)) + (t["range"] if first != last else t["range1"]).format(
            first=first, last=last)
        also = ""
    return t["line"].format(head=head, span=span, also=also, confidence=t["confidence"][item["confidence"]])


def _plural(n: int, en: bool) -> str:
    return "s" if en and n != 1 else ""


# -- the store ---------------------------------------------------------------------------------

_COLUMNS = ("rank", "topic", "text", "count", "weeks", "first_seen", "last_seen", "confidence", "language",
            "created_at")


def run(store: Store, user_id: str, *, now: float) -> list[dict[str, Any]]:
    """Compute the user's insights at ``now`` and replace the ones stored; counts older than
    the window are deleted. Returns the new lines."""
    start = window_start(now)
    with store.write():
        rows = [r for r in counters.rows(store, user_id) if r["week"] >= start]
        memories = [m for m in store.list(user_id)
                    if counters.week_of(m.get("source_ts") or m.get("created_at") or 0) >= start]
        lines = [{**line, "created_at": int(now)} for line in build(rows, memories)]
        store.db.execute("delete from topic_counts where user_id = ? and week < ?", [user_id, start])
        store.db.execute("delete from insights where user_id = ?", [user_id])
        for line in lines:
            store.db.execute(
                f"insert into insights (user_id, {', '.join(_COLUMNS)}) values (?, {', '.join('?' * len(_COLUMNS))})",
                [user_id, *(line[c] for c in _COLUMNS)])
    return lines


def users(store: Store) -> list[str]:
    """Users with counts, memories or insights (a user with insights and nothing else left loses them)."""
    return [r[0] for r in store.db.execute(
        "select user_id from topic_counts union select user_id from memories where active = 1"
        " union select user_id from insights order by 1")]


def run_all(store: Store, *, now: float) -> dict[str, int]:
    """:func:`run` for every user with counts or memories; how many users and lines."""
    done = {"users": 0, "insights": 0}
    for user_id in users(store):
        done["users"] += 1
        done["insights"] += len(run(store, user_id, now=now))
    return done


def read(store: Store, user_id: str) -> list[dict[str, Any]]:
    """The user's stored insights, best first."""
    cursor = store.db.execute(
        f"select {', '.join(_COLUMNS)} from insights where user_id = ? order by rank", [user_id])
    return [dict(zip(_COLUMNS, row)) for row in cursor.fetchall()]


def now_or(now: float | None) -> float:
    return time.time() if now is None else float(now)
