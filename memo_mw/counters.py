"""Topic counters: how many of a user's messages touched each topic (:func:`count_keys`), per ISO
week. The weekly insights (:mod:`memo_mw.insights`) are made from these counts, never from chat text.
The web process adds them up in memory and sends them as one ``count_topics`` job every
:data:`~memo_mw.defaults.COUNTS_SEND_INTERVAL` seconds, so counting costs a request no I/O."""

import datetime
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import regex

if TYPE_CHECKING:
    from .store import Store

#: Topic name prefixes: programming subjects (an insight line each) and facets (said in its brackets).
SUBJECTS = ("lang.", "tool.")
FACETS = ("code.",)

_HAN = regex.compile(r"\p{Han}")


def week_of(ts: float) -> str:
    """The ISO week of an epoch time (UTC), as ``YYYY-Www``: 2026-01-01 is ``2026-W01``."""
    year, week, _ = datetime.datetime.fromtimestamp(float(ts), datetime.timezone.utc).isocalendar()
    return f"{year}-W{week:02d}"


def script_of(text: str) -> str:
    return "en" if text.isascii() or not _HAN.search(text, concurrent=False) else "zh"


def count_keys(topics: Iterable[str], text: str) -> list[str]:
    """The names one message adds 1 to: its topics, a ``<subject>/<facet>`` pair for each subject
    (``lang.*``, ``tool.*``) and facet (``code.*``) named together, and ``@zh`` or ``@en``, its script."""
    topics = sorted(topics)
    pairs = [f"{s}/{f}" for s in topics if s.startswith(SUBJECTS) for f in topics if f.startswith(FACETS)]
    return [*topics, *pairs, f"@{script_of(text)}"]


def add(store: "Store", user_id: str, counts: dict[tuple[str, str], int]) -> int:
    """Add ``(week, name): n`` counts to the user's rows of ``topic_counts``, in one transaction."""
    if not counts:
        return 0
    with store.write():
        store.db.executemany(
            "insert into topic_counts (user_id, week, topic, count) values (?, ?, ?, ?)"
            " on conflict (user_id, week, topic) do update set count = topic_counts.count + excluded.count",
            [(user_id, week, name, int(n)) for (week, name), n in counts.items()])
    return len(counts)


def rows(store: "Store", user_id: str) -> list[dict[str, Any]]:
    return [{"week": w, "topic": t, "count": n} for w, t, n in store.db.execute(
        "select week, topic, count from topic_counts where user_id = ? order by week, topic", [user_id])]
