"""Rules that reload when their files change, without a restart (docs/rules.md, "Reloading without a
restart"): rules that do not pass ``memo-mw rules check`` are not used, and the last good rules stay."""

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence

from . import defaults
from .exceptions import RulesError
from .funnel import Funnel, FunnelResult
from .rules import RuleSet, example_problems, expand_paths, load_rules
from .topics import TopicTagger

log = logging.getLogger(__name__)


def files_signature(paths: str | Sequence[str] | None) -> tuple:
    """The rule files as ``stat`` sees them: any change to a file, or to a folder's list, changes it."""
    try:
        files = expand_paths(paths)
    except RulesError:
        return ("no rule files",)
    out = []
    for path in files:
        try:
            st = os.stat(path)
            out.append((path, st.st_mtime_ns, st.st_size, st.st_ino))
        except OSError:
            out.append((path, None))
    return tuple(out)


def make_funnel(rules: str | Sequence[str] | RuleSet | None, *,
                reload_interval: float | None = defaults.RULES_RELOAD_INTERVAL,
                clock: Callable[[], float] = time.monotonic) -> "Funnel | ReloadingFunnel":
    """The funnel for the middleware: watching its files unless given a RuleSet or no interval.
    Raises :class:`RulesError` when the rules cannot be loaded at start-up (no last good rules)."""
    if isinstance(rules, RuleSet):
        return Funnel(rules)
    if not reload_interval:
        return Funnel(load_rules(rules))
    return ReloadingFunnel(rules, interval=reload_interval, clock=clock)


class ReloadingFunnel:
    """A :class:`~memo_mw.funnel.Funnel` whose rules follow their files (or folders): each
    ``process`` call may notice a change, and each runs on one consistent set of rules."""

    def __init__(self, paths: str | Sequence[str] | None, *, interval: float = defaults.RULES_RELOAD_INTERVAL,
                 clock: Callable[[], float] = time.monotonic, timeout: float = defaults.REGEX_TIMEOUT):
        self.paths, self.interval, self.clock, self.timeout = paths, interval, clock, timeout
        self.reloads = 0  # how many times new rules replaced the old ones
        # Taken before loading: a change made while loading is seen at the next look.
        self._signature = files_signature(paths)
        self._rejected: tuple | None = None  # the files as they were when last refused
        self.funnel = Funnel(load_rules(paths), timeout=timeout)
        self._looked_at = clock()
        # Held by the request that looks at the files; the others do not wait for it.
        self._looking = threading.Lock()

    @property
    def rules(self) -> RuleSet:
        return self.funnel.rules

    @property
    def topics(self) -> TopicTagger:
        return self.funnel.topics

    def process(self, message: str) -> FunnelResult:
        self.check()
        return self.funnel.process(message)

    def is_recall_all(self, message: str) -> bool:
        return self.funnel.is_recall_all(message)

    def history_text(self, result: FunnelResult) -> str | None:
        return self.funnel.history_text(result)

    def check(self) -> None:
        """Look at the files if ``interval`` has passed (or the clock went back); reload on a change."""
        if 0 <= self.clock() - self._looked_at < self.interval or not self._looking.acquire(blocking=False):
            return
        try:
            self._looked_at = self.clock()
            if (signature := files_signature(self.paths)) not in (self._signature, self._rejected):
                self._reload(signature)
        finally:
            self._looking.release()

    def _reload(self, signature: tuple) -> None:
        try:
            rules = load_rules(self.paths)
            problems = example_problems(rules)
        except RulesError as exc:
            problems = exc.problems
        except Exception:  # never let a reload take the app down; the old rules stay
            self._rejected = signature
            log.exception("memo-mw: reloading the rules failed; the last good rules stay in use")
            return
        if problems:
            self._rejected = signature
            log.warning("memo-mw: the rule files changed but have %d problem%s; the last good rules stay "
                        "in use until they are fixed:\n  %s", len(problems), "s" if len(problems) != 1 else "",
                        "\n  ".join(problems))
            return
        self.funnel = Funnel(rules, timeout=self.timeout)
        self._signature, self._rejected = signature, None
        self.reloads += 1
        log.info("memo-mw: rules reloaded: %d files, %d triggers", len(rules.files), len(rules.triggers))
