"""Rules that reload when their files change, without a restart.

The middleware's funnel is a :class:`ReloadingFunnel` when its rules come from files: at
most every ``interval`` seconds a request looks at the files' modification times, sizes
and inodes (a ``stat`` each; a folder is listed again, so a new ``*.yaml`` counts). When
they changed, the files are loaded and checked as ``memo-mw rules check`` would (every
problem, examples included) on a background thread, while requests go on with the rules
they had; good rules then replace the old ones in one assignment. Rules that do not pass
are not used: the last good rules stay, and the problems are logged once per change, each
as ``file:line: rule id: problem``, on the ``memo_mw.reload`` logger.

A :class:`~memo_mw.rules.RuleSet` passed in directly has no files to watch, and an
interval of ``0`` or ``None`` turns watching off: both give a plain
:class:`~memo_mw.funnel.Funnel`.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from . import defaults
from .exceptions import RulesError
from .funnel import Funnel, FunnelResult
from .rules import RuleSet, _expand, example_problems, load_rules

log = logging.getLogger(__name__)

#: What the files looked like: (path, mtime in ns, size, inode) per file, in load order.
Signature = tuple


def files_signature(paths: str | Sequence[str] | None) -> Signature:
    """The rule files as ``stat`` sees them; any change to a file (or to a folder's list) changes it."""
    try:
        files = _expand(paths)
    except RulesError:
        return ("no rule files",)
    out = []
    for path in files:
        try:
            st = os.stat(path)
        except OSError:
            out.append((path, None))
        else:
            out.append((path, st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(out)


def make_funnel(rules: str | Sequence[str] | RuleSet | None, *,
                reload_interval: float | None = defaults.RULES_RELOAD_INTERVAL,
                clock: Callable[[], float] = time.monotonic) -> Funnel | ReloadingFunnel:
    """The funnel for the middleware: watching its files unless given a RuleSet or no interval.

    Raises :class:`RulesError` when the rules cannot be loaded at start-up (there are no last
    good rules to fall back on then).
    """
    if isinstance(rules, RuleSet):
        return Funnel(rules)
    if not reload_interval:
        return Funnel(load_rules(rules))
    return ReloadingFunnel(rules, interval=reload_interval, clock=clock)


class ReloadingFunnel:
    """A :class:`~memo_mw.funnel.Funnel` whose rules follow their files.

    It has the funnel's interface (``process``, ``is_recall_all``, ``clean``, ``sentences``, ``topics``, ``rules``);
    each ``process`` call may notice a change (the middleware makes one per request), never
    waits for a reload, and runs on one consistent set of rules.

    :param paths: rule files or folders, as for :func:`~memo_mw.rules.load_rules`.
    :param interval: seconds between two looks at the files (by ``clock``).
    :param clock: the clock the interval is measured with.
    :param background: load changed rules on a thread (the default: loading the shipped
        rules takes about half a second, which no request should wait for); ``False``
        loads them in the calling thread.
    """

    def __init__(self, paths: str | Sequence[str] | None, *, interval: float = defaults.RULES_RELOAD_INTERVAL,
                 clock: Callable[[], float] = time.monotonic, timeout: float = defaults.REGEX_TIMEOUT,
                 background: bool = True):
        self.paths = paths
        self.interval = interval
        self.clock = clock
        self.timeout = timeout
        self.background = background
        #: How many times new rules replaced the old ones.
        self.reloads = 0
        # Looked at before loading: a change made while loading is seen at the next look.
        self._signature = files_signature(paths)
        self._funnel = Funnel(load_rules(paths), timeout=timeout)
        self._rejected: Signature | None = None  # the files as they were when last refused
        #: When (by clock) the files were last looked at, in a one-item list: with time.monotonic as
        #: the clock, memo_mw._speedups.read_request() tells from it that no look is due (MemoryMiddleware).
        self._watch = [clock()]
        self._lock = threading.Lock()
        self._idle = threading.Event()
        self._idle.set()

    # -- the funnel's interface ----------------------------------------------------------

    @property
    def funnel(self) -> Funnel:
        """The funnel of the rules in use."""
        return self._funnel

    @property
    def rules(self) -> RuleSet:
        return self._funnel.rules

    @property
    def topics(self) -> Any:
        return self._funnel.topics

    def process(self, message: str) -> FunnelResult:
        if not 0 <= self.clock() - self._watch[0] < self.interval:  # check()'s common case, inline
            self.check()
        return self._funnel.process(message)

    def is_recall_all(self, message: str) -> bool:
        return self._funnel.is_recall_all(message)

    def clean(self, text: str) -> str:
        return self._funnel.clean(text)

    def sentences(self, text: str) -> list[str]:
        return self._funnel.sentences(text)

    # -- watching ------------------------------------------------------------------------

    def check(self) -> None:
        """Look at the files if ``interval`` has passed; start a reload if they changed."""
        now = self.clock()
        if 0 <= now - self._watch[0] < self.interval:
            return  # the common case: one subtraction per request
        with self._lock:
            if not self._idle.is_set() or 0 <= now - self._watch[0] < self.interval:
                return  # another request looked, or a reload is running
            self._watch[0] = now
            signature = files_signature(self.paths)
            if signature == self._signature or signature == self._rejected:
                return
            self._idle.clear()
        if self.background:
            threading.Thread(target=self._reload, args=(signature,), name="memo-mw-rules-reload",
                             daemon=True).start()
        else:
            self._reload(signature)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until no reload is running (for tests and tools); False if ``timeout`` ran out."""
        return self._idle.wait(timeout)

    def _reload(self, signature: Signature) -> None:
        try:
            try:
                rules = load_rules(self.paths)
            except RulesError as exc:
                problems = exc.problems
            else:
                problems = example_problems(rules)
            if problems:
                self._rejected = signature
                log.warning("memo-mw: the rule files changed but have %d problem%s; the last good rules stay "
                            "in use until they are fixed:\n  %s", len(problems), "s" if len(problems) != 1 else "",
                            "\n  ".join(problems))
                return
            self._funnel = Funnel(rules, timeout=self.timeout)  # one assignment: requests see old or new
            # A look due at once: what read the old funnel's rules without looking (the middleware's
            # one-call read) looks again, and sees the new ones; a change made while loading is seen.
            self._watch[0] = -math.inf
            self._signature, self._rejected = signature, None
            self.reloads += 1
            log.info("memo-mw: rules reloaded: %d files, %d triggers", len(rules.files), len(rules.triggers))
        except Exception:  # never let a reload take the app down; the old rules stay
            self._rejected = signature
            log.exception("memo-mw: reloading the rules failed; the last good rules stay in use")
        finally:
            self._idle.set()
