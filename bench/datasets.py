"""Turn the shared conversation datasets into `memo-mw replay` JSON lines.

    python bench/datasets.py memorybank-en > /tmp/mb-en.jsonl
    memo-mw replay /tmp/mb-en.jsonl --db /tmp/mb-en.db

Sources (see ../shared/datasets/README.md): memorybank-zh, memorybank-en (user queries with
dates), dulemon (user turns, word-segmented: spaces between CJK characters removed).
"""

from __future__ import annotations

import calendar
import json
import sys
import time
from pathlib import Path

import regex

DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"
_CJK_SPACE = regex.compile(r"(?<=[\p{Han}\p{P}])\s+|\s+(?=[\p{Han}\p{P}])")


def memorybank(lang: str):
    path = DATASETS / "memorybank_siliconfriend" / ("cn" if lang == "zh" else "en") / f"memory_bank_{'cn' if lang == 'zh' else 'en'}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    for user, record in data.items():
        for day, turns in sorted(record.get("history", {}).items()):
            base = calendar.timegm(time.strptime(day, "%Y-%m-%d"))
            for i, turn in enumerate(turns):
                yield {"user": user, "session": day, "ts": base + i * 60, "text": turn["query"],
                       "id": f"{user}/{day}/{i}"}


def dulemon():
    path = DATASETS / "dulemon" / "samples.json"
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        record = json.loads(line)
        for i, utterance in enumerate(record["conversation"]):
            speaker, _, rest = utterance.partition(": ")
            text = _CJK_SPACE.sub("", rest.split("\t")[0]).strip()
            yield {"user": f"dulemon-{n}", "session": f"dulemon-{n}", "ts": 1_700_000_000 + n * 3600 + i * 30,
                   "text": text, "role": "user" if speaker == "Usr" else "assistant", "id": f"{n}/{i}"}


SOURCES = {"memorybank-zh": lambda: memorybank("zh"), "memorybank-en": lambda: memorybank("en"), "dulemon": dulemon}

if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in SOURCES:
        sys.exit(f"usage: python bench/datasets.py {{{','.join(SOURCES)}}}")
    for row in SOURCES[sys.argv[1]]():
        print(json.dumps(row, ensure_ascii=False))
