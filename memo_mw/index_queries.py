"""The SQL the term index (memo_mw.index) reads with: a user's candidates for recall.

Every query is limited to one user's recallable memories (``POOL``: active, or expired and
awaiting a confirmation not yet asked).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the store imports the index, which imports this module
    from .store import Store


POOL = "(active = 1 or (status = 'pending_confirm' and confirm_shown_at is null))"


def active_count(store: Store, user_id: str) -> int:
    return store.db.execute("select count(*) from memories where user_id = ? and active = 1",
                            [user_id]).fetchone()[0]


def has_index(store: Store) -> bool:
    """Whether the database has the term index (a read-only open of an older file may not)."""
    return store.db.execute("select 1 from sqlite_master where type = 'table' and name = 'memory_terms'"
                            ).fetchone() is not None


def matches(store: Store, user_id: str, words: Iterable[str], topical: Iterable[str]) -> list[dict[str, Any]]:
    """The user's recallable memories sharing a term with the query: ``common`` (the weight of
    the shared words), ``topical`` (shares a topic term), and what recency and hotness use."""
    words, topical = sorted(set(words)), sorted(set(topical))
    every = sorted(set(words) | set(topical))
    if not every:
        return []
    sql = (
        "select m.id, t.common, t.topical, m.terms_norm, m.hits, m.last_accessed, m.source_ts, m.created_at"
        " from (select memory_id, sum(case when term in ({w}) then (case when length(term) = 1 then 0.3"
        " else 1.0 end) else 0 end) as common, max(term in ({tp})) as topical"
        " from memory_terms where user_id = ? and term in ({all}) group by memory_id) t"
        " join memories m on m.id = t.memory_id where m.user_id = ? and {pool}"
    ).format(w=",".join("?" * len(words)) or "null", tp=",".join("?" * len(topical)) or "null",
             all=",".join("?" * len(every)), pool=POOL)
    names = ("id", "common", "topical", "terms_norm", "hits", "last_accessed", "source_ts", "created_at")
    return [dict(zip(names, r)) for r in store.db.execute(sql, [*words, *topical, user_id, *every, user_id])]


def hottest(store: Store, user_id: str, n: int) -> list[dict[str, Any]]:
    return [{"id": i, "hits": h} for i, h in store.db.execute(
        f"select id, hits from memories where user_id = ? and {POOL} order by hits desc, id limit ?",
        [user_id, n])]


def latest(store: Store, user_id: str, n: int) -> list[dict[str, Any]]:
    """The n last used or said (recall's recency order: last_accessed, else source_ts, else created_at)."""
    names = ("id", "last_accessed", "source_ts", "created_at")
    return [dict(zip(names, r)) for r in store.db.execute(
        f"select {', '.join(names)} from memories where user_id = ? and {POOL} order by"
        " coalesce(nullif(last_accessed, 0), nullif(source_ts, 0), nullif(created_at, 0), 9e18) desc, id"
        " limit ?", [user_id, n])]


def always_ids(store: Store, user_id: str) -> set[int]:
    return {r[0] for r in store.db.execute(
        "select id from memories where user_id = ? and (type = 'style' or status = 'pending_confirm')"
        f" and {POOL}", [user_id])}


def unindexed_ids(store: Store, user_id: str) -> set[int]:
    return {r[0] for r in store.db.execute(
        f"select id from memories where user_id = ? and terms_norm is null and {POOL}", [user_id])}


def same_key_ids(store: Store, user_id: str, keys: Iterable[str]) -> set[int]:
    keys = sorted(keys)
    return {r[0] for r in store.db.execute(
        f"select id from memories where user_id = ? and key in ({','.join('?' * len(keys))}) and {POOL}",
        [user_id, *keys])}


def rows(store: Store, user_id: str, ids: list[int]) -> list[dict[str, Any]]:
    """These recallable memories of the user, oldest first."""
    from .store import _SELECT, row_to_memory

    out = []
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        out += store.db.execute(_SELECT + f" where user_id = ? and id in ({','.join('?' * len(chunk))})"
                                f" and {POOL}", [user_id, *chunk]).fetchall()
    return [row_to_memory(r) for r in sorted(out)]


def raw_rows(store: Store, user_id: str) -> Iterable[tuple]:
    """All the user's recallable memories as raw rows (``MEMORY_COLUMNS`` order, JSON not
    decoded), oldest first, one at a time: what the in-process cache of a large user keeps."""
    from .store import _SELECT

    return store.db.execute(_SELECT + f" where user_id = ? and {POOL} order by id", [user_id])
