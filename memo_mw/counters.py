"""Topic counters: how many of a user's messages touched each topic, per ISO week.

The weekly insights (:mod:`memo_mw.insights`) are made from these counts, never from chat text:
a message leaves nothing but ``+1`` on a few names from the rules' topic lexicons, in the week
it was sent. The names counted for one message (:func:`count_keys`):

* each topic the message is tagged with (``tech``, ``lang.rust``, ``code.async``, ...);
* ``<subject>/<facet>`` for each programming subject (``lang.*``, ``tool.*``) and each facet
  (``code.*``) the message names together, so an insight can say what was asked about Rust;
* ``@zh`` or ``@en``, the message's script (Han characters or not): the language of the insight
  lines, and a count of messages per week.

Where the counts live:

* **web path, with Redis**: one hash per user, ``memo:topics:<queue>:<user>``, field
  ``<week>|<name>``. The increments ride on the request's one read of the user's state
  (:meth:`memo_mw.userstate.RedisUserState.read`): no round trip of their own. While the
  circuit breaker has Redis down they are skipped.
* **SQLite**: ``topic_counts (user_id, week, topic, count)``. The weekly job (or
  ``memo-mw insights --url``) moves the Redis hashes here (:func:`flush_redis`); ``memo-mw
  replay`` writes here directly; embedded mode (no Redis) writes here from its job thread.
"""

from __future__ import annotations

import datetime
import functools
import logging
from collections.abc import Iterable
from typing import Any

import regex

from . import defaults

log = logging.getLogger(__name__)

#: Topic name prefixes: programming subjects (an insight line each) and facets (said in its brackets).
SUBJECTS = ("lang.", "tool.")
FACETS = ("code.",)
#: Per-message tallies by script, counted with the topics.
LANGUAGES = ("@zh", "@en")

_HAN = regex.compile(r"\p{Han}")


def week_of(ts: float) -> str:
    """The ISO week of an epoch time (UTC), as ``YYYY-Www``: 2026-01-01 is ``2026-W01``."""
    return _week_of_day(int(float(ts) // 86400))


@functools.lru_cache(maxsize=64)
def _week_of_day(day: int) -> str:  # every request asks: one computation per UTC day
    year, week, _ = datetime.datetime.fromtimestamp(day * 86400, datetime.timezone.utc).isocalendar()
    return f"{year}-W{week:02d}"


def week_start(week: str) -> float:
    """Epoch seconds of the Monday 00:00 UTC that starts an ISO week ``YYYY-Www``."""
    year, number = week.split("-W")
    day = datetime.date.fromisocalendar(int(year), int(number), 1)
    return datetime.datetime(day.year, day.month, day.day, tzinfo=datetime.timezone.utc).timestamp()


def language_of(text: str) -> str:
    return "@en" if text.isascii() or not _HAN.search(text, concurrent=False) else "@zh"


def count_keys(topics: Iterable[str], text: str) -> list[str]:
    """The names one message adds 1 to: its topics, subject/facet pairs, and its script."""
    if not topics:  # most messages: no topic, so no pairs either
        return [language_of(text)]
    topics = sorted(topics)
    subjects = [t for t in topics if t.startswith(SUBJECTS)]
    facets = [t for t in topics if t.startswith(FACETS)]
    return [*topics, *(f"{s}/{f}" for s in subjects for f in facets), language_of(text)]


# -- SQLite ----------------------------------------------------------------------------------


def add(store: Any, user_id: str, counts: dict[tuple[str, str], int]) -> int:
    """Add ``(week, name): n`` counts to the user's rows of ``topic_counts``, in one transaction."""
    if not counts:
        return 0
    with store.write():
        store.db.conn.executemany(
            "insert into topic_counts (user_id, week, topic, count) values (?, ?, ?, ?)"
            " on conflict (user_id, week, topic) do update set count = count + excluded.count",
            [(user_id, week, name, int(n)) for (week, name), n in counts.items()])
    return len(counts)


def rows(store: Any, user_id: str) -> list[dict[str, Any]]:
    """The user's counts, by week then topic."""
    return [{"week": w, "topic": t, "count": n} for w, t, n in store.db.execute(
        "select week, topic, count from topic_counts where user_id = ? order by week, topic", [user_id])]


def users(store: Any) -> list[str]:
    """Users with counts in SQLite."""
    return [r[0] for r in store.db.execute("select distinct user_id from topic_counts order by user_id")]
