"""Recall latency as a user's memories grow: the term index vs. loading every memory and scoring it.

    .venv/bin/python bench/recall.py [--rows 1000000] [--queries 200] [--db PATH]

Builds one SQLite store (the real schema, through ``Store``) with ``--rows`` memories in all:
users with 100, 1,000 and 10,000 memories, and as many other users with ~50 each as make up the
rest. Memories are synthetic one-line zh and en statements (likes, dislikes, places, habits,
plans) with varied hits and last use; their terms are computed by ``memo_mw.index.memory_terms``
and written with ``executemany`` in one transaction. Then, for each of the three users, the same
queries (zh and en, a few "what do you remember about me") go through ``Recaller.recall`` with
the middleware's settings (memories kept in the process: as dicts up to
``RECALL_INDEX_MIN_MEMORIES``, in the ranked form up to ``RECALL_CACHE_USER_MEMORIES``; the SQL
term index above) and without either (load the user's memories, score them in Python: the path
before both), alternating, in the same run. Prints p50/p99 for both, their ratio, how many
answers differed (must be 0) and how often the path fell short (``fallback``: the SQL term index
loading everything; for a user kept in the ranked form, how many requests needed more candidates
or every memory that could score).

``--db PATH`` keeps the store there, and a later run with the same ``--db`` and ``--rows`` uses it
again instead of building it. ``--sizes`` also measures what a cached memory costs in each form
of the cache, each in a new process: the RSS growth of caching the user, and what tracemalloc
counts (rows, index, ranking).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from memo_mw import defaults  # noqa: E402
from memo_mw.funnel import Funnel  # noqa: E402
from memo_mw.index import memory_terms  # noqa: E402
from memo_mw.pipeline import Recaller  # noqa: E402
from memo_mw.recall import RecallConfig  # noqa: E402
from memo_mw.rules import load_rules  # noqa: E402
from memo_mw.store import Store  # noqa: E402

NOW = 1_750_000_000
SIZES = (100, 1_000, 10_000)

EN_THINGS = """oolong tea|green tea|black coffee|espresso|jazz|bossa nova|blues|heavy metal|k-pop|opera|
hiking|trail running|tennis|badminton|table tennis|swimming|cycling|yoga|pilates|rock climbing|skiing|
surfing|chess|go|board games|video games|crossword puzzles|sudoku|photography|painting|pottery|knitting|
gardening|baking bread|sourdough|ramen|noodles|dumplings|sushi|tacos|curry|pizza|ice cream|dark chocolate|
red wine|craft beer|whisky|kombucha|sci-fi novels|mystery novels|poetry|history podcasts|horror movies|
documentaries|anime|stand-up comedy|cats|dogs|parrots|aquariums|vintage cars|mechanical keyboards|
fountain pens|vinyl records|camping|birdwatching|stargazing|salsa dancing|karaoke|marathons|meditation|
spicy food|seafood|vegan food|street food|museums|theme parks|road trips|cruises|hot springs|flea markets""".replace("\n", "").split("|")
EN_PLACES = """Paris|Berlin|Lisbon|Denver|Austin|Kyoto|Osaka|Seoul|Hangzhou|Chengdu|Toronto|Vancouver|Madrid|
Prague|Vienna|Dublin|Sydney|Melbourne|Boston|Seattle|Chicago|Oslo|Helsinki|Singapore|Bangkok|Hanoi""".replace("\n", "").split("|")
EN_TEMPLATES = ["likes {t}", "dislikes {t}", "loves {t} in {p}", "goes {t} every weekend", "wants to try {t} in {p}",
                "lives in {p}", "works in {p}, misses {t}", "started {t} last year", "gave up {t}",
                "prefers {t} over {t2}", "plans a trip to {p} for {t}", "has a friend in {p} who likes {t}"]
ZH_THINGS = """乌龙茶|绿茶|黑咖啡|拿铁|爵士乐|民谣|摇滚|古典音乐|京剧|相声|徒步|夜跑|网球|羽毛球|乒乓球|游泳|骑行|瑜伽|
攀岩|滑雪|冲浪|围棋|象棋|桌游|剧本杀|摄影|油画|书法|陶艺|编织|园艺|烘焙|火锅|麻辣烫|饺子|小笼包|寿司|烤肉|冰淇淋|
巧克力|红酒|精酿啤酒|白酒|奶茶|科幻小说|悬疑小说|诗歌|历史播客|恐怖片|纪录片|动漫|脱口秀|猫|狗|鹦鹉|金鱼|
老爷车|机械键盘|钢笔|黑胶唱片|露营|观鸟|看星星|广场舞|唱K|马拉松|冥想|川菜|海鲜|素食|小吃|博物馆|游乐园|
自驾游|温泉|逛集市""".replace("\n", "").split("|")
ZH_PLACES = """杭州|北京|上海|成都|重庆|西安|大理|丽江|青岛|苏州|厦门|广州|深圳|南京|武汉|长沙|昆明|哈尔滨|
三亚|拉萨|桂林|天津|宁波|福州|贵阳|兰州""".replace("\n", "").split("|")
ZH_TEMPLATES = ["喜欢{t}", "不喜欢{t}", "在{p}爱上了{t}", "每个周末都去{t}", "想在{p}试试{t}", "住在{p}",
                "在{p}工作，想念{t}", "去年开始{t}", "戒掉了{t}", "比起{t2}更喜欢{t}", "打算去{p}玩{t}",
                "有个{p}的朋友喜欢{t}"]
EN_QUERIES = ["any {t} recommendations?", "what should I do in {p} this weekend", "I feel like {t} tonight",
              "plan a day around {t}", "gift ideas for someone into {t}", "is {p} nice in spring?",
              "how do I get better at {t}", "something relaxing after work"]
ZH_QUERIES = ["推荐点{t}吧", "周末在{p}干点什么", "今晚想{t}", "围绕{t}安排一天", "送喜欢{t}的人什么礼物",
              "{p}春天好玩吗", "怎么提高{t}水平", "下班后放松一下"]
RECALL_ALL = ["what do you remember about me", "你记得我什么"]


def statement(rng: random.Random, zh: bool) -> tuple[str, str]:
    things, places, templates = (ZH_THINGS, ZH_PLACES, ZH_TEMPLATES) if zh else (EN_THINGS, EN_PLACES, EN_TEMPLATES)
    t, t2, p = rng.choice(things), rng.choice(things), rng.choice(places)
    template = rng.choice(templates)
    parts = [x for name, x in (("{t}", t), ("{t2}", t2), ("{p}", p)) if name in template]
    return template.format(t=t, t2=t2, p=p), (p if template in ("lives in {p}", "住在{p}") else t), parts


_TAGGER = None


def _tags(text: str) -> frozenset[str]:
    return _TAGGER.tag(text)


def generate(job: tuple[str, int, int]) -> tuple[str, list[tuple], list[list[str]]]:
    """One user's synthetic memories (rows without id) and each one's index terms."""
    user, n, seed = job
    rng = random.Random(f"{seed}/{user}")
    rows, terms = [], []
    for i in range(n):
        zh = rng.random() < 0.5
        content, key, parts = statement(rng, zh)
        key = f"{key}#{i}"  # one slot each: no supersession among synthetic memories
        kind = rng.random()
        type_ = "style" if i == 7 else "task" if kind < 0.05 else "fact" if kind < 0.3 else "preference"
        created = NOW - rng.randrange(2 * 365 * 86400)
        hits = int(rng.paretovariate(1.5)) - 1
        last = created + rng.randrange(NOW - created + 1) if hits else None
        # The tags capture would give, from the statement's subjects (tagging whole lines is slow).
        topics = sorted(set().union(*(_tags(x) for x in parts)))
        words, norm = memory_terms(content, key, topics)
        rows.append((user, type_, key, -1 if "不喜欢" in content or "dislikes" in content else 1, content, content,
                     "bench", created, "[]", 0.7, "active", 1, hits, last, created, created, None, "bench.rule",
                     json.dumps(topics), None, "zh" if zh else "en", norm))
        terms.append(sorted(words))
    return user, rows, terms


def _init(rule_paths) -> None:
    global _TAGGER
    _TAGGER = Funnel(load_rules(rule_paths)).topics


def build(path: str, rows: int, seed: int, rule_paths=None) -> dict[str, int]:
    """The store with ``rows`` memories; returns the benchmarked users and their sizes."""
    Store(path).close()  # the schema, through the migrations
    users = {f"big-{n}": n for n in SIZES}
    rest = rows - sum(SIZES)
    users.update({f"u{i:06d}": 50 for i in range(rest // 50)})
    if rest % 50:
        users[f"u{rest // 50:06d}"] = rest % 50
    with Store(path) as store, multiprocessing.Pool(os.cpu_count() or 2, _init, (rule_paths,)) as pool:
        conn = store.db.conn
        conn.execute("PRAGMA synchronous = OFF")
        conn.execute("PRAGMA cache_size = -1000000")
        conn.execute("BEGIN")
        next_id = 1
        jobs = [(u, n, seed) for u, n in users.items()]
        for user, memories, terms in pool.imap(generate, jobs, chunksize=64):
            ids = range(next_id, next_id + len(memories))
            next_id += len(memories)
            conn.executemany(
                "insert into memories (id, user_id, type, key, polarity, content, excerpt, source_session, source_ts,"
                " source_ids, confidence, status, active, hits, last_accessed, created_at, updated_at, expires_at,"
                " rule_id, topics, superseded_by, language, terms_norm) values"
                f" ({', '.join('?' * 23)})", [(i, *m) for i, m in zip(ids, memories)])
            conn.executemany("insert into memory_terms (user_id, term, memory_id) values (?, ?, ?)",
                             [(user, t, i) for i, words in zip(ids, terms) for t in words])
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
    return {u: n for u, n in users.items() if u.startswith("big-")}


def queries(rng: random.Random, n: int) -> list[str]:
    out = []
    for i in range(n):
        if i % 40 == 39:
            out.append(RECALL_ALL[(i // 40) % 2])
            continue
        zh = i % 2 == 1
        things, places, templates = (ZH_THINGS, ZH_PLACES, ZH_QUERIES) if zh else (EN_THINGS, EN_PLACES, EN_QUERIES)
        out.append(rng.choice(templates).format(t=rng.choice(things), p=rng.choice(places)))
    return out


def _rows(path: str) -> int:
    with Store(path, readonly=True) as store:
        return store.db.execute("select count(*) from memories").fetchone()[0]


def _rss() -> int:
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("VmRSS")).split()[1]) * 1024


def sizes(path: str) -> None:
    """Bytes per cached memory in each form, each measured in a new process: the RSS growth of
    caching the user, and what tracemalloc counts (rows, index, ranking and the strings they keep)."""
    import subprocess

    for user, form in (("big-100", "dicts"), ("big-1000", "ranked"), ("big-10000", "ranked")):
        code = f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r}); " \
               f"from bench.recall import size_of; size_of({path!r}, {user!r})"
        rss, traced, n = map(int, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                                 check=True).stdout.split())
        print(f"cached {user} ({form}): {traced / n:.0f} B per memory (tracemalloc), "
              f"RSS +{rss / 2**20:.1f} MB ({rss / n:.0f} B per memory)")


def size_of(path: str, user: str) -> None:
    import gc
    import tracemalloc

    funnel = Funnel(load_rules())
    recaller = Recaller(path, funnel, RecallConfig())
    recaller.recall("u000000", "warm up", now=NOW)  # connections, statements, taggers
    gc.collect()
    rss = _rss()
    recaller.recall(user, "hello", now=NOW)  # builds the entry (and its ranking)
    gc.collect()
    grew = _rss() - rss
    n = recaller.cache._users[user].size
    recaller.cache.clear()
    gc.collect()
    tracemalloc.start()
    recaller.recall(user, "hello", now=NOW)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    print(grew, traced, n)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--db", help="build here (default: a temporary folder, removed afterwards)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sizes", action="store_true", help="measure bytes per cached memory, each form")
    args = parser.parse_args()
    funnel = Funnel(load_rules())
    folder = None if args.db else tempfile.TemporaryDirectory(prefix="memo-bench-")
    path = args.db or os.path.join(folder.name, "memo.db")
    started = time.perf_counter()
    if args.db and Path(path).exists() and _rows(path) == args.rows:
        big = {f"big-{n}": n for n in SIZES}
        print(f"using {path} as built before")
    else:
        big = build(path, args.rows, args.seed)
    built = time.perf_counter() - started
    size = sum(p.stat().st_size for p in Path(path).parent.iterdir() if p.name.startswith(Path(path).name))
    print(f"built {args.rows} memories ({len(big)} measured users, the rest ~50 each) in {built:.0f} s, "
          f"{size / 1e6:.0f} MB; kept in the process as dicts up to {defaults.RECALL_INDEX_MIN_MEMORIES} active"
          f" memories, ranked up to {defaults.RECALL_CACHE_USER_MEMORIES}, the SQL term index above")
    config = RecallConfig()
    asked = queries(random.Random(args.seed), args.queries)
    print(f"{'memories':>9}  {'indexed p50':>11} {'p99':>8}   {'load-all p50':>12} {'p99':>8}   "
          f"{'ratio p50':>9} {'p99':>6}   differ  fallback")
    for user, n in big.items():
        indexed = Recaller(path, funnel, config, indexed=True)  # as the middleware runs it (cache, index)
        plain = Recaller(path, funnel, config, indexed=False, cache_bytes=0)  # load all, every time
        for q in asked[:5]:  # warm: connections, caches, pages
            indexed.recall(user, q, now=NOW)
            plain.recall(user, q, now=NOW)
        indexed.stats.clear()
        times = {"indexed": [], "plain": []}
        differ = 0
        for q in asked:
            results = {}
            for name, recaller in (("indexed", indexed), ("plain", plain)):
                t0 = time.perf_counter()
                results[name] = recaller.recall(user, q, now=NOW)
                times[name].append((time.perf_counter() - t0) * 1000)
            differ += [(m["id"], m["score"]) for m in results["indexed"]] != [(m["id"], m["score"]) for m in results["plain"]]
        i50, i99, p50, p99 = (pct(times["indexed"], 0.5), pct(times["indexed"], 0.99),
                              pct(times["plain"], 0.5), pct(times["plain"], 0.99))
        stats = indexed.stats
        if stats["ranked"]:
            fell = f"{stats['ranked_retry']}+{stats['ranked_full']}/{stats['ranked']} (cached, retry+full)"
        elif stats["indexed"]:
            fell = f"{stats['fallback']}/{stats['indexed']} (SQL index)"
        else:
            fell = "0/0 (cached)"
        print(f"{n:>9}  {i50:>8.2f} ms {i99:>5.2f} ms   {p50:>9.2f} ms {p99:>5.2f} ms   "
              f"{p50 / i50:>8.1f}x {p99 / i99:>5.1f}x   {differ:>6}  {fell}")
    if args.sizes:
        sizes(path)
    if folder is not None:
        folder.cleanup()


if __name__ == "__main__":
    main()
