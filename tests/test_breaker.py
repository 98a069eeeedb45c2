"""The circuit breaker (memo_mw.breaker): closed until ``threshold`` consecutive failures, open for
the cooldown, then one trial at a time (half-open) until a success closes it. Time is an injected
clock, so the cooldown is exact and the tests do not sleep."""

from __future__ import annotations

import threading

import pytest

from memo_mw.breaker import CircuitBreaker


class Clock:
    def __init__(self, now: float = 100.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


def opened(clock, threshold=3, cooldown=5.0):
    """A breaker just opened at ``clock.now`` by ``threshold`` failures in a row."""
    breaker = CircuitBreaker(threshold=threshold, cooldown=cooldown, clock=clock)
    for _ in range(threshold):
        breaker.failure()
    return breaker


def test_closed_until_threshold_consecutive_failures(clock):
    breaker = CircuitBreaker(threshold=3, cooldown=5.0, clock=clock)
    assert breaker.closed and breaker.allow()
    breaker.failure()
    breaker.failure()
    assert breaker.closed and breaker.allow()  # two of three: calls still go through
    breaker.failure()
    assert not breaker.closed and not breaker.allow()


def test_a_success_resets_the_count_of_consecutive_failures(clock):
    breaker = CircuitBreaker(threshold=3, cooldown=5.0, clock=clock)
    breaker.failure()
    breaker.failure()
    breaker.success()
    breaker.failure()
    breaker.failure()
    assert breaker.closed and breaker.allow()  # never three in a row


def test_open_for_the_cooldown_then_one_trial(clock):
    breaker = opened(clock, cooldown=5.0)
    clock.now = 104.999
    assert not breaker.allow()
    clock.now = 105.0
    assert breaker.allow()  # half-open: this caller tries
    assert not breaker.allow() and not breaker.allow()  # the others skip while it does


def test_a_trial_that_never_reports_back_frees_another_after_a_cooldown(clock):
    breaker = opened(clock, cooldown=5.0)
    clock.now = 105.0
    assert breaker.allow()
    clock.now = 109.999
    assert not breaker.allow()
    clock.now = 110.0
    assert breaker.allow() and not breaker.allow()


def test_a_successful_trial_closes_the_circuit(clock):
    breaker = opened(clock, threshold=2, cooldown=5.0)
    clock.now = 105.0
    assert breaker.allow()
    breaker.success()
    assert breaker.closed
    assert all(breaker.allow() for _ in range(5))  # everyone goes through again
    breaker.failure()
    assert breaker.closed  # counting starts again from nothing: one failure of two


def test_a_failed_trial_opens_the_circuit_for_another_cooldown(clock):
    breaker = opened(clock, threshold=3, cooldown=5.0)
    clock.now = 105.0
    assert breaker.allow()
    clock.now = 106.0
    breaker.failure()  # one failure reopens it: the threshold counts consecutive failures
    assert not breaker.closed
    clock.now = 110.999
    assert not breaker.allow()
    clock.now = 111.0
    assert breaker.allow()


def test_a_zero_cooldown_lets_a_trial_through_at_once(clock):
    breaker = opened(clock, threshold=1, cooldown=0.0)
    assert not breaker.closed and breaker.allow()


def test_only_one_of_many_threads_gets_the_trial(clock):
    breaker = opened(clock, cooldown=5.0)
    clock.now = 105.0
    start, allowed = threading.Barrier(16), []

    def caller():
        start.wait()
        allowed.append(breaker.allow())

    threads = [threading.Thread(target=caller) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert sorted(allowed) == [False] * 15 + [True]


def test_the_real_clock_by_default():
    breaker = CircuitBreaker(threshold=1, cooldown=3600)
    breaker.failure()
    assert not breaker.allow()  # an hour is not over yet on time.monotonic


@pytest.mark.parametrize("threshold, cooldown", [
    pytest.param(0, 5.0, id="threshold-0"),
    pytest.param(1, -1.0, id="negative-cooldown"),
])
def test_bad_settings_are_refused(threshold, cooldown):
    with pytest.raises(ValueError, match="threshold must be at least 1 and cooldown not negative"):
        CircuitBreaker(threshold=threshold, cooldown=cooldown)
