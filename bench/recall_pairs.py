"""Recall on held-out preference-then-request pairs (``tests/data/recall_pairs_heldout.jsonl``).

    .venv/bin/python bench/recall_pairs.py [--json] [path]

The file (written by hand, no rule tuned on it; its labelling rule is on its first line) holds users,
each with 5-8 statements said in earlier sessions and 2-3 later requests that do not repeat the
words of the statement that answers them; a request's gold is the statement(s) a good assistant
would need, and is empty when no statement helps.

Method, per language and user: a fresh SQLite store; the statements, one day apart, go through
``Funnel(load_rules()).process``. A captured statement is stored as the funnel's candidates, an
uncaptured one as one raw memory (type ``fact``, key = the normalised text, content = excerpt = the
statement, topics as the tagger gives them); either way the payload's ``message_id`` is the
statement id, so a recalled memory's ``source_ids`` name its statement. Each request then goes
through ``Recaller(db, funnel).recall`` (the default config: k and character budget as served)
the day after the last statement. Figures, for memo-mw and for BM25 over the statement texts
(``bench.eval.BM25``; a statement is returned when it shares a term with the request):
top-1 / top-3 hit (any gold id among the first 1 / 3) over the requests with gold, the share of
those that return nothing, and the share of requests without gold that return something.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.eval import BM25, hit_at_k  # noqa: E402

PAIRS = REPO / "tests" / "data" / "recall_pairs_heldout.jsonl"
DAY = 86400
START = 1_700_000_000  # the first statement's time; the others follow a day apart


def load_pairs(path: Path = PAIRS) -> list[dict]:
    """The users of the file (its first line, the ``about`` header, left out)."""
    lines = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    return [row for row in lines if "user" in row]


def statement_payload(user: dict, n: int, statement: dict, funnel) -> tuple[dict, bool]:
    """The store payload for one statement, and whether the funnel captured it."""
    from memo_mw.text import normalize
    text, result = statement["text"], funnel.process(statement["text"])
    if result.captured:
        candidates = [c.as_dict() for c in result.candidates]
    else:
        candidates = [{"type": "fact", "key": normalize(text), "polarity": 1, "content": text, "excerpt": text,
                       "rule_id": "raw", "confidence": 0.5, "ttl_days": None, "language": user["lang"],
                       "topics": sorted(funnel.topics.tag(text))}]
    return ({"job_key": None, "user_id": user["user"], "session_id": f"{user['user']}-{n}",
             "ts": START + n * DAY, "message_id": statement["id"], "candidates": candidates}, result.captured)


def figures(ranked: list[list], requests: list[dict]) -> dict:
    gold = [(r, q) for r, q in zip(ranked, requests) if q["gold"]]
    none = [r for r, q in zip(ranked, requests) if not q["gold"]]
    share = lambda xs, n: round(sum(xs) / n, 3) if n else None  # noqa: E731
    return {"top1": share([hit_at_k(r, q["gold"], 1) for r, q in gold], len(gold)),
            "top3": share([hit_at_k(r, q["gold"], 3) for r, q in gold], len(gold)),
            "gold_empty": share([not r for r, _ in gold], len(gold)),
            "nogold_returned": share([bool(r) for r in none], len(none))}


def pairs_eval(path: Path | str, funnel, folder: Path | str) -> dict:
    """Per language: counts, and the figures of memo-mw and of BM25 (see the module's docstring)."""
    from memo_mw.recall import Recaller
    from memo_mw.store import Store

    out = {}
    for lang in ("zh", "en"):
        users = [u for u in load_pairs(path) if u["lang"] == lang]
        requests, ranked, bm25_ranked, captured = [], [], [], 0
        for user in users:
            db = Path(folder) / f"{user['user']}.db"
            with Store(db) as store:
                for n, statement in enumerate(user["statements"]):
                    payload, was_captured = statement_payload(user, n, statement, funnel)
                    captured += was_captured
                    store.remember(payload)
            now = START + len(user["statements"]) * DAY
            recaller, ids = Recaller(str(db), funnel), [s["id"] for s in user["statements"]]
            bm25 = BM25([s["text"] for s in user["statements"]])
            for request in user["requests"]:
                got = recaller.recall(user["user"], request["text"], now=now)
                ranked.append([list(m["source_ids"]) for m in got])
                bm25_ranked.append([ids[i] for i in bm25.rank(request["text"])])
                requests.append(request)
        out[lang] = {"users": len(users), "statements": sum(len(u["statements"]) for u in users),
                     "captured": captured, "requests": len(requests),
                     "with_gold": sum(1 for q in requests if q["gold"]),
                     "memo-mw": figures(ranked, requests), "BM25": figures(bm25_ranked, requests)}
    return out


def print_report(report: dict) -> None:
    for lang, row in report.items():
        print(f"{lang}: {row['users']} users, {row['statements']} statements ({row['captured']} captured by the "
              f"funnel, the rest stored raw), {row['requests']} requests ({row['with_gold']} with gold)")
        print(f"  {'system':<8} {'top-1':>6} {'top-3':>6} {'gold, empty':>12} {'no gold, returned':>18}")
        for name in ("memo-mw", "BM25"):
            f = row[name]
            print(f"  {name:<8} {f['top1']:>6.3f} {f['top3']:>6.3f} {f['gold_empty']:>12.3f}"
                  f" {f['nogold_returned']:>18.3f}")


def main(argv: list[str] | None = None) -> int:
    from memo_mw.funnel import Funnel
    from memo_mw.rules import load_rules

    args = sys.argv[1:] if argv is None else argv
    as_json = "--json" in args
    paths = [a for a in args if a != "--json"]
    with tempfile.TemporaryDirectory() as folder:
        report = pairs_eval(paths[0] if paths else PAIRS, Funnel(load_rules()), folder)
    print(json.dumps(report, indent=2)) if as_json else print_report(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
