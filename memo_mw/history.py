"""Chat history: every user message (PII masked; never a sensitive one, never one of a user who
turned history off), kept ``history_days`` with the same hashed full-text index as the memories, so
that recall can bring back the few past messages a request is about ("[HISTORY]" in the block).

Functions on the store's engine (``store.db``: its tables are in :mod:`memo_mw.sqlite` and
:mod:`memo_mw.postgres`); :class:`memo_mw.store.Store` calls them when it stores a message, forgets and
prunes, and recall reads with :func:`search` and :func:`rank`."""

import itertools
import math
from collections.abc import Iterable
from typing import Any

import regex

from . import defaults
from .forgetting import names
from .text import fitting, index_terms, normalize, tokens, weight

#: BM25's usual constants: term-frequency saturation and length normalisation.
BM25_K1, BM25_B = 1.2, 0.75
COLUMNS = ("id", "user_id", "session_id", "message_id", "ts", "expires_at", "text")
_SENTENCE = regex.compile(r"(?<=[。！？!?；;])|\n|(?<=[.])\s+")
# Roughly what a model's tokenizer counts: a CJK character, a word or number, a punctuation mark.
_TOKEN = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]|[\p{L}\p{N}]+|[^\s\p{L}\p{N}]")


def approx_tokens(text: str) -> int:
    """About how many model tokens ``text`` takes (the [HISTORY] section's budget is in these)."""
    return len(_TOKEN.findall(text))


def enabled(db: Any, user_id: str) -> bool:
    """False when the user turned their history off."""
    return db.execute("select 1 from history_off where user_id = ?", [user_id]).fetchone() is None


def set_enabled(db: Any, user_id: str, on: bool, *, ts: int) -> int:
    """Turn the user's history on or off; off deletes what is kept. Returns how many messages went."""
    if on:
        db.execute("delete from history_off where user_id = ?", [user_id])
        return 0
    db.execute("insert into history_off values (?, ?) on conflict (user_id) do update set at = excluded.at",
               [user_id, int(ts)])
    return delete(db, user_id, None)


def add(db: Any, payload: dict[str, Any]) -> bool:
    """Keep the payload's message (``payload["history"]``: its masked text and days to keep; a later
    forget request has taken it out already: :func:`memo_mw.forgetting.without_forgotten`) unless the
    user turned history off. True when it was kept."""
    said, message_id = payload.get("history"), payload.get("message_id")
    user_id, ts = payload["user_id"], int(payload["ts"])
    if not said or not said.get("text") or not enabled(db, user_id):
        return False
    words = tokens(said["text"])
    days = said.get("days")
    db.execute("insert into history (user_id, session_id, message_id, ts, expires_at, text, terms, words)"
               " values (?, ?, ?, ?, ?, ?, ?, ?)",
               [user_id, payload.get("session_id"), None if message_id is None else str(message_id), ts,
                None if days is None else int(ts + float(days) * 86400), said["text"],
                " ".join(index_terms(user_id, words)), " ".join(sorted(words))])
    return True


def rows(db: Any, user_id: str) -> list[dict[str, Any]]:
    """The user's kept messages, oldest first."""
    found = db.execute(f"select {', '.join(COLUMNS)} from history where user_id = ? order by ts, id", [user_id])
    return [dict(zip(COLUMNS, row)) for row in found]


def delete(db: Any, user_id: str, ids: Iterable[int] | None) -> int:
    """Delete the user's messages with these ids (None: all of them); another user's are ignored."""
    if ids is None:
        return db.execute("delete from history where user_id = ?", [user_id]).rowcount
    return db.executemany("delete from history where user_id = ? and id = ?",
                          [(user_id, int(i)) for i in set(ids)]).rowcount


def forget(db: Any, user_id: str, marker: dict[str, Any], *, ts: int, now: bool) -> int:
    """Delete the messages a forget request names (its ``marker``: all, or those with its words),
    said by ``ts`` unless ``now`` (the web page and the CLI delete whatever is there)."""
    named = [m["id"] for m in rows(db, user_id)
             if (now or m["ts"] <= ts) and names(marker, {"content": m["text"]})]
    return delete(db, user_id, named)


def prune(db: Any, now: int) -> int:
    """Delete the messages past their retention (``history_days`` when they were written)."""
    return db.execute("delete from history where expires_at <= ?", [int(now)]).rowcount


def search(db: Any, user_id: str, words: Iterable[str], *, now: float, session_id: str | None,
           limit: int = defaults.RECALL_CANDIDATES) -> list[dict[str, Any]]:
    """The user's kept messages that share a word with the request, each with its ``bm25`` and
    ``match`` (:func:`_score`), not the current session's last turns (the app has them): the newest
    ``limit`` with a word that is not in most of the user's messages (a common word alone picks
    nothing out, and ranking every message that has one would cost milliseconds on a long history)."""
    counts = _counts(db, user_id, words)
    if not counts:
        return []
    n_docs = db.execute("select count(*) from history where user_id = ?", [user_id]).fetchone()[0]
    rare = [term for term, n in counts.values() if n <= max(limit, n_docs / 10)] or [t for t, _ in counts.values()]
    join, join_args, _ = db.match("history", "h", rare)
    session = "session_id is null" if session_id is None else "session_id = ?"
    found = [dict(zip((*COLUMNS, "words"), row)) for row in db.execute(
        f"select {', '.join('h.' + c for c in COLUMNS)}, h.words from history h {join} where h.user_id = ?"
        " and (h.expires_at is null or h.expires_at > ?) and h.id not in (select id from history"
        f" where user_id = ? and {session} order by ts desc, id desc limit ?) order by h.id desc limit ?",
        [*join_args, user_id, int(now), user_id, *([] if session_id is None else [session_id]),
         defaults.HISTORY_SKIP_TURNS, limit])]
    return _score(found, {word: n for word, (_, n) in counts.items()}, n_docs)


def _counts(db: Any, user_id: str, words: Iterable[str]) -> dict[str, tuple[str, int]]:
    """Each word the user's messages have: its index term and how many of them have it. (The index
    is every user's, so its own statistics are not this user's: BM25 is computed from these.)"""
    words = sorted(set(words))
    counts = {}
    for word, term in zip(words, index_terms(user_id, words)):
        if n := db.count_matching("history", term):
            counts[word] = (term, n)
    return counts


def _score(found: list[dict[str, Any]], df: dict[str, int], n_docs: int) -> list[dict[str, Any]]:
    """BM25 of each message against the request's words (``df``: in how many of the user's ``n_docs``
    messages each is), and ``match``: the share of the request's IDF the message's words hold."""
    idf = {word: math.log(1 + (n_docs - n + 0.5) / (n + 0.5)) for word, n in df.items()}
    length = sum(len(m["words"].split()) for m in found) / len(found) if found else 1.0
    for m in found:
        words = m["words"].split()
        have = idf.keys() & set(words)
        scale = 1 + BM25_K1 * (1 - BM25_B + BM25_B * len(words) / length)
        m["bm25"] = sum(idf[w] * (BM25_K1 + 1) / scale for w in have)
        m["match"] = sum(idf[w] for w in have) / sum(idf.values())
    return found


def rank(found: list[dict[str, Any]], query: frozenset[str], *, now: float, said: Iterable[str] = (),
         k: int = defaults.HISTORY_K, budget: int = defaults.HISTORY_BUDGET_TOKENS) -> list[dict[str, Any]]:
    """The messages for the block: enough of the request (``match`` at least ``HISTORY_MIN_MATCH``),
    ranked by BM25 (scaled to the best) with recency, none a recalled memory already says (``said``:
    their excerpts), each cut to its best sentences, the top ``k`` within ``budget`` tokens."""
    said = [normalize(s) for s in said if s]
    found = [m for m in found if m["match"] >= defaults.HISTORY_MIN_MATCH]
    if not found:
        return []
    best = max(m["bm25"] for m in found) or 1.0

    def score(m: dict[str, Any]) -> float:
        return 0.8 * m["bm25"] / best + 0.2 * math.exp(-defaults.RECENCY_DECAY * max(0.0, now - m["ts"]) / 86400)

    def repeats(m: dict[str, Any]) -> bool:
        text = normalize(m["text"])
        return any(s in text for s in said)

    best_first = (m for m in sorted(found, key=lambda m: (score(m), m["ts"]), reverse=True) if not repeats(m))
    cut = ({**m, "text": excerpt(m["text"], query)} for m in itertools.islice(best_first, k))
    return [{**m, "score": round(score(m), 6)} for m in fitting(cut, lambda m: approx_tokens(m["text"]), budget)]


def excerpt(text: str, query: frozenset[str], limit: int = defaults.HISTORY_LINE_CHARS) -> str:
    """The message as one line; a long one cut to its sentence that shares most with the request."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    sentences = [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]
    best = max(sentences, key=lambda s: sum(map(weight, query & tokens(s))))
    return best if len(best) <= limit else best[: limit - 1] + "…"
