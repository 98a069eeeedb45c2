"""Where a non-trigger request's extra time goes, step by step, inside the middleware.

    .venv/bin/python bench/breakdown.py [--n 20000] [--digits]

The same request as figure 1 of bench/perf.py (a new "what's the weather like in ... today?" for
a user with 100 memories; ``--digits``: with a number in it, as wrk sends, which wakes the PII
masks). Each step the middleware takes is timed where it runs, in the request, with the CPU's
caches as the request leaves them (a step timed alone in a loop looks two to three times cheaper);
so is the wrapped app itself (its response read and closed), against the bare app in the same
run: what the app loses to the middleware having run first. The timers cost about 0.1 us each; the sum is close to, not exactly,
the middleware's extra time.
"""

from __future__ import annotations

import argparse
import collections
import json
import operator
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.perf import call, pct, timing, wrapped_pair  # noqa: E402
from memo_mw import middleware as middleware_module  # noqa: E402
from tests.loadgen import word  # noqa: E402

#: The steps timed: (label, object path from the middleware, method name).
STEPS = [
    # Python's steps where the one-call read (MODULE_STEPS) leaves the request to it.
    ("body checks", "", "_body_length"),
    ("user id", "", "_user"),
    ("funnel", "funnel", "process"),
    ("user's stamp", "recaller.changes", "stamp"),
    ("recall from the view", "recaller", "recall_copy"),
    # Without a view (the first request, or the user changed): the state, recall and insights read.
    ("user read, no view", "", "_read_user"),
]
#: Functions of memo_mw.middleware, read by the request at call time: (label, name).
MODULE_STEPS = [
    ("one-call read", "_read_request"),  # the usual request: body, JSON, user id, funnel, analysis (C)
    ("JSON", "_decode"),
    ("turn", "read_turn"),
]


def timed(owner, name, spent, label, clock=time.perf_counter):
    def add(seconds):
        spent[label] += seconds
    timing(owner, name, add, clock)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--digits", action="store_true", help="a number in each message")
    args = parser.parse_args()
    with wrapped_pair("breakdown") as (bare, middleware):
        spent: collections.Counter = collections.Counter()
        for label, path, name in STEPS:
            if name is not None:
                timed(operator.attrgetter(path)(middleware) if path else middleware, name, spent, label)
        inner = middleware.app

        def consumed(environ, start_response):  # the app's whole work: its response read and closed too
            out = inner(environ, start_response)
            try:
                return list(out)
            finally:
                if hasattr(out, "close"):
                    out.close()

        middleware.app = consumed
        timed(middleware, "app", spent, "the app, inside")
        for label, name in MODULE_STEPS:
            if getattr(middleware_module, name) is not None:
                timed(middleware_module, name, spent, label)
                STEPS.append((label, None, None))
        if middleware_module._Reader is not None:  # the one-call read by the Reader the middleware keeps
            make = middleware_module._Reader

            def timed_reader(*args):
                holder = types.SimpleNamespace(read=make(*args))
                timed(holder, "read", spent, "one-call read")
                return holder.read
            middleware_module._Reader = timed_reader
            middleware._reader = None
        n = args.n
        text = "what's the weather like in {} today? {}" if args.digits else "what's the weather like in {} today?"
        bodies = iter(json.dumps({"message": text.format(word(i), i)}).encode() for i in range(3 * n + 2000))
        for _ in range(1000):
            call(middleware, next(bodies))
            call(bare, next(bodies))
        spent.clear()
        memo, alone = [], []
        for _ in range(5):  # runs of each in turn, so that the machine's noise hits both alike
            for app, times in ((middleware, memo), (bare, alone)):
                for _ in range(n // 5):
                    started = time.perf_counter()
                    call(app, next(bodies))
                    times.append(time.perf_counter() - started)
        n = len(memo)
        bare_mean, memo_mean = sum(alone) / n, sum(memo) / n
        print(f"bare app {bare_mean * 1e6:.1f} us (p50 {pct(alone, .5) * 1e6:.1f}), wrapped {memo_mean * 1e6:.1f} us "
              f"(p50 {pct(memo, .5) * 1e6:.1f}): {memo_mean / bare_mean:.2f}x, {(memo_mean - bare_mean) * 1e6:.1f} us "
              f"extra (means)")
        steps = 0.0
        for label, _, _ in STEPS:
            steps += spent[label] / n
            print(f"  {label:18} {spent[label] / n * 1e6:6.1f} us")
        inside = spent["the app, inside"] / n
        print(f"  {'the app, slower':18} {(inside - bare_mean) * 1e6:6.1f} us  (the wrapped app {inside * 1e6:.1f} us "
              f"against the bare one)")
        print(f"  {'everything else':18} {(memo_mean - inside - steps) * 1e6:6.1f} us  (reading and restoring the body, "
              f"the glue between the steps, the timers themselves, and what lands outside the steps: GC, other "
              f"threads)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
