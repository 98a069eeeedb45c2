"""Figure 1's ratio as the middleware's steps are added one at a time.

    .venv/bin/python bench/steps.py [--n 10000] [--rounds 2]

The request of figure 1 of bench/perf.py (a new "what's the weather like in ... today?" for a user
with 100 memories), timed as bench/perf.py times it (p50 against the bare app, alternated in the same
run). First with only the one-call read (memo_mw._speedups.read_request: the body, its JSON, the user
id, the funnel's verdict and the message's tokens and topics) and every step after it replaced by one
that returns at once with nothing found, then with the real steps put back one by one, in the order
the request runs them: each line's increase is what that step costs in the request, where the CPU's
caches are as the request leaves them (bench/breakdown.py times the steps with timers inside). The
first line holds the topic count and the request's glue too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.perf import alternate, call, pct, wrapped_pair  # noqa: E402
from memo_mw.userstate import EMPTY  # noqa: E402
from tests.loadgen import word  # noqa: E402

TEXT = "what's the weather like in {} today?"


def steps(middleware):
    """(label, owner, attribute, stand-in) in the order the request runs them."""
    return [
        ("user state", middleware, "_user_state", lambda user_id: EMPTY),
        ("recall", middleware.recaller, "recall_and_copy", lambda *args, **kwargs: ([], None)),
        ("insights", middleware.profiles, "profile", lambda *args, **kwargs: []),
        # Until this line no view is kept (no listener to vouch for one): each request reads the three above.
        ("the user's view (the three above kept per user)", middleware.recaller, "changes", None),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10000, help="requests of each app per line")
    parser.add_argument("--rounds", type=int, default=2, help="times the whole table is measured")
    args = parser.parse_args()
    with wrapped_pair("steps") as (bare, middleware):
        table = steps(middleware)
        lines = ["the one-call read"] + [label for label, *_ in table]
        ratios: dict[str, list[float]] = {line: [] for line in lines}
        start = 0
        for _ in range(args.rounds):
            real = [owner.__dict__.get(name) for _, owner, name, _ in table]
            for _, owner, name, stand_in in table:
                setattr(owner, name, stand_in)  # an instance attribute: hides the method
            for i, line in enumerate(lines):
                if i:
                    _, owner, name, _ = table[i - 1]
                    if real[i - 1] is None:
                        delattr(owner, name)  # the real step again
                    else:
                        setattr(owner, name, real[i - 1])
                texts = [TEXT.format(word(j)) for j in range(start, start + 2 * (args.n + 200))]  # new ones each line
                start += len(texts)
                bodies = iter([json.dumps({"message": text}).encode() for text in texts])
                times = alternate({"bare": lambda: call(bare, next(bodies)),
                                   "memo": lambda: call(middleware, next(bodies))}, args.n)
                ratios[line].append(pct(times["memo"], .5) / pct(times["bare"], .5))
                print(f"  {line:48} {ratios[line][-1]:.2f}x (bare p50 {pct(times['bare'], .5) * 1e6:.0f} us)",
                      flush=True)
        print("\nmedian of the rounds, p50 against the bare app, and each step's increase:")
        previous = 1.0
        for line in lines:
            ratio = statistics.median(ratios[line])
            print(f"  {line:48} {ratio:.2f}x  {ratio - previous:+.2f}x")
            previous = ratio
    return 0


if __name__ == "__main__":
    sys.exit(main())
