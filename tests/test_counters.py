"""Topic counters: the ISO week of a time, the names one message counts, their rows in SQLite."""

from __future__ import annotations

import pytest

from memo_mw import counters
from memo_mw.store import Store

pytestmark = pytest.mark.both_engines  # (the db fixture: SQLite, then PostgreSQL)


@pytest.mark.parametrize("ts, week", [
    pytest.param(1_767_225_600, "2026-W01", id="2026-01-01"),
    pytest.param(1_767_225_599, "2026-W01", id="the-last-second-of-2025-is-in-2026-W01"),
    pytest.param(1_766_966_399, "2025-W52", id="sunday-before"),
    pytest.param(1_790_596_800, "2026-W40", id="a-monday-noon"),
    pytest.param(1_790_553_599.9, "2026-W39", id="a-fraction-before-monday"),
    pytest.param(0, "1970-W01", id="the-epoch"),
])
def test_the_iso_week_of_a_time(ts, week):
    assert counters.week_of(ts) == week


@pytest.mark.parametrize("topics, text, names", [
    pytest.param([], "hello there", ["@en"], id="no-topic"),
    pytest.param(["music"], "我喜欢爵士乐", ["music", "@zh"], id="zh"),
    pytest.param(["lang.rust", "code.async", "code.types", "tech"], "async traits in Rust?",
                 ["code.async", "code.types", "lang.rust", "tech", "lang.rust/code.async", "lang.rust/code.types",
                  "@en"], id="subject-and-facets"),
    pytest.param(["lang.python", "tool.docker", "code.async"], "Python 异步 docker",
                 ["code.async", "lang.python", "tool.docker", "lang.python/code.async", "tool.docker/code.async",
                  "@zh"], id="two-subjects"),
    pytest.param(["code.async"], "café async", ["code.async", "@en"], id="a-facet-alone"),
])
def test_the_names_one_message_counts(topics, text, names):
    assert counters.count_keys(topics, text) == names


def test_counts_add_up_per_user_week_and_name(db):
    with Store(db) as store:
        assert counters.add(store, "alice", {("2026-W40", "music"): 2, ("2026-W41", "music"): 1}) == 2
        assert counters.add(store, "alice", {("2026-W40", "music"): 3}) == 1
        assert counters.add(store, "bob", {("2026-W40", "music"): 7}) == 1
        assert counters.add(store, "bob", {}) == 0
        assert counters.rows(store, "alice") == [{"week": "2026-W40", "topic": "music", "count": 5},
                                                 {"week": "2026-W41", "topic": "music", "count": 1}]
        assert counters.rows(store, "carol") == []
