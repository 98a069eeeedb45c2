"""MemoryBank (SiliconFriend) user messages and probing questions with gold user messages.

    turns("zh")["张曼婷"][0]  -> {"message_id": "张曼婷-2023-04-27-0", "date": ..., "ts": ..., "session_id": ..., "text": ...}
    probing("en")[0]         -> {"user", "question", "gold": [message_id, ...], "answer_in", "ts"}

`lang` is "zh" (the dataset's cn folder) or "en". Only the user's own messages (`query`) are
returned: the assistant's responses are not memory input. A message's time is noon UTC of its
date plus i minutes (i = its place in that day); a probing question is asked a day after the
user's last message. Some English names carry stray spaces in the source (" Jason "); they are
stripped everywhere (the probing file already has them stripped).

Gold labels: tests/data/memorybank_probing_gold.jsonl (hand-labelled, rule on its first line).
"""

from __future__ import annotations

import calendar
import json
import time
from functools import lru_cache
from pathlib import Path

from bench.datasets import DATASETS

ROOT = DATASETS / "memorybank_siliconfriend"
GOLD = Path(__file__).resolve().parents[1] / "tests" / "data" / "memorybank_probing_gold.jsonl"
LANGS = ("zh", "en")


def _folder(lang: str) -> str:
    if lang not in LANGS:
        raise ValueError(f"lang must be one of {LANGS}, not {lang!r}")
    return "cn" if lang == "zh" else "en"


@lru_cache(maxsize=None)
def _turns(lang: str) -> dict[str, tuple[dict, ...]]:
    folder = _folder(lang)
    data = json.loads((ROOT / folder / f"memory_bank_{folder}.json").read_text(encoding="utf-8"))
    out: dict[str, tuple[dict, ...]] = {}
    for name, record in data.items():
        user = name.strip()
        rows = []
        for day, day_turns in sorted(record.get("history", {}).items()):
            noon = calendar.timegm(time.strptime(day, "%Y-%m-%d")) + 12 * 3600
            for i, turn in enumerate(day_turns):
                rows.append({"message_id": f"{user}-{day}-{i}", "date": day, "ts": noon + i * 60,
                             "session_id": f"{user}-{day}", "text": turn["query"]})
        out[user] = tuple(rows)
    return out


def turns(lang: str) -> dict[str, list[dict]]:
    """Per user, their messages in order (fresh copies: callers may mutate them)."""
    return {user: [dict(row) for row in rows] for user, rows in _turns(lang).items()}


def responses(lang: str) -> dict[str, str]:
    """message_id -> the assistant's response to that message (for reading labels, not memory input)."""
    folder = _folder(lang)
    data = json.loads((ROOT / folder / f"memory_bank_{folder}.json").read_text(encoding="utf-8"))
    return {f"{name.strip()}-{day}-{i}": turn["response"]
            for name, record in data.items()
            for day, day_turns in record.get("history", {}).items()
            for i, turn in enumerate(day_turns)}


def questions(lang: str) -> list[tuple[str, str]]:
    """(user, question) in the order of the dataset's probing_questions file."""
    folder = _folder(lang)
    out = []
    for line in (ROOT / folder / f"probing_questions_{folder}.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            for name, qs in json.loads(line).items():
                out.extend((name.strip(), q) for q in qs)
    return out


def gold_rows(lang: str | None = None, path: Path = GOLD) -> list[dict]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if "about" in row:
            continue
        if lang is None or row["lang"] == lang:
            rows.append(row)
    return rows


def probing(lang: str, path: Path = GOLD) -> list[dict]:
    """Each probing question with its gold user message ids and the time to ask it (epoch seconds)."""
    by_user = _turns(lang)
    gold = {(row["user"], row["question"]): row for row in gold_rows(lang, path)}
    out = []
    for user, question in questions(lang):
        row = gold[(user, question)]
        out.append({"user": user, "question": question, "gold": list(row["gold"]),
                    "answer_in": row["answer_in"], "ts": by_user[user][-1]["ts"] + 86400})
    return out


def probing_eval(lang: str, folder: Path, *, history: bool) -> dict:
    """Each user's days of chat through the middleware (embedded mode, the message's time as the
    clock), then each probing question a day later in a session of its own: is a gold message among
    the source ids of what the block holds (memories, and past messages when ``history``)? Beside it,
    BM25 over every message of the user, top 3. Questions without gold are left out."""
    from flask import Flask, jsonify, request

    from bench.eval import BM25
    from memo_mw import MemoryMiddleware

    asked = [q for q in probing(lang) if q["gold"]]
    found = {"memo-mw": [], "BM25 top 3": []}
    for n, (user, rows) in enumerate(turns(lang).items()):
        now = [0.0]
        app = Flask(f"probe-{lang}-{n}")

        @app.post("/chat")
        def chat():
            shown = [*request.environ.get("memo.memories", []), *request.environ.get("memo.history", [])]
            return jsonify(ids=sorted({i for m in shown for i in m.get("source_ids") or []}))

        app.wsgi_app = middleware = MemoryMiddleware(app.wsgi_app, db=str(folder / f"{lang}-{n}-{history}.db"),
                                                     history=history, rules_reload_interval=None, clock=lambda: now[0],
                                                     trust_user_header=True)
        client = app.test_client()
        for row in rows:
            now[0] = row["ts"]
            client.post("/chat", json={"message": row["text"], "session_id": row["session_id"],
                                       "message_id": row["message_id"], "ts": row["ts"]}, headers={"X-User-Id": user})
        middleware.queue.join()
        bm25 = BM25([row["text"] for row in rows])
        for q in (q for q in asked if q["user"] == user):
            now[0] = q["ts"]
            ids = client.post("/chat", json={"message": q["question"], "session_id": "probe", "ts": q["ts"]},
                              headers={"X-User-Id": user}).json["ids"]
            found["memo-mw"].append((q["answer_in"], bool(set(q["gold"]) & set(ids))))
            top = {rows[i]["message_id"] for i in bm25.rank(q["question"])[:3]}
            found["BM25 top 3"].append((q["answer_in"], bool(set(q["gold"]) & top)))
        middleware.queue.join()
    return {system: {"questions": len(hits), "held": sum(h for _, h in hits) / len(hits),
                     **{f"held, answer in the {kind}": _share([h for a, h in hits if a == kind])
                        for kind in ("query", "response")}}
            for system, hits in found.items()}


def _share(hits: list[bool]) -> float:
    return sum(hits) / len(hits) if hits else 0.0


def _show(lang: str, user: str, width: int = 80) -> None:
    """Print a user's messages with their ids (and the start of each response), then their probing questions.

    A reading aid for labelling: python -m bench.memorybank zh 张曼婷
    """
    said = responses(lang)
    for row in turns(lang)[user]:
        print(row["message_id"], "|", row["text"], "| R:", said[row["message_id"]][:width].replace("\n", " "))
    for n, (who, question) in enumerate(q for q in questions(lang) if q[0] == user):
        print("Q", n, question)


if __name__ == "__main__":
    import sys

    if len(sys.argv) < 3:
        sys.exit("usage: python -m bench.memorybank {zh,en} USER [RESPONSE_WIDTH]")
    _show(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 80)
