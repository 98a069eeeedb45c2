"""A circuit breaker: after failures, skip a sick dependency for a while instead of waiting on it.

Closed (calls go through) until ``threshold`` consecutive failures; then open: every caller skips
for ``cooldown`` seconds, then one at a time may try (half-open), and a success closes it again."""

import threading
import time
from collections.abc import Callable


class CircuitBreaker:
    def __init__(self, *, threshold: int = 1, cooldown: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        if threshold < 1 or cooldown < 0:
            raise ValueError("threshold must be at least 1 and cooldown not negative")
        self.threshold, self.cooldown, self.clock = threshold, cooldown, clock
        self._failures = 0
        self._retry_at = 0.0  # while open: when the next trial may go
        self._lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._failures < self.threshold

    def allow(self) -> bool:
        """True when the caller should try the dependency now."""
        if self.closed:  # the common case takes no lock
            return True
        with self._lock:
            now = self.clock()
            if now < self._retry_at:
                return False
            # Half-open: this caller tries; the others skip until it reports back (or for another
            # cooldown, if it never does).
            self._retry_at = now + self.cooldown
            return True

    def success(self) -> None:
        if self._failures:
            with self._lock:
                self._failures = 0

    def failure(self) -> None:
        with self._lock:
            self._failures += 1
            if self._failures >= self.threshold:
                self._retry_at = self.clock() + self.cooldown
