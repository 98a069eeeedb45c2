"""Figure 1's ratio as the middleware's steps are added one at a time, and a bound for a faster analysis.

    .venv/bin/python bench/steps.py [--n 10000] [--rounds 2]

The request of figure 1 of bench/perf.py (a new "what's the weather like in ... today?" for a user
with 100 memories), timed as bench/perf.py times it (p50 against the bare app, alternated in the same
run). First with every step after reading the body (JSON, the turn, the user id) replaced by one that
returns at once with nothing found, then with the real steps put back one by one, in the order the
request runs them: each line's increase is what that step costs in the request, where the CPU's caches
are as the request leaves them (bench/breakdown.py times the same steps with timers inside).

The last line is a bound: every step real, but the message's needles (the funnel's screen) and its
tokens and topics (the tagger) looked up in a table made before the run, as if a compiled analysis
found them in no time at all. What it leaves is the cost of everything else: no faster analysis
brings figure 1 below it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.perf import alternate, call, pct, wrapped_pair  # noqa: E402
from memo_mw.funnel import FunnelResult  # noqa: E402
from memo_mw.userstate import EMPTY  # noqa: E402
from tests.loadgen import word  # noqa: E402

TEXT = "what's the weather like in {} today?"


def steps(middleware):
    """(label, owner, attribute, stand-in) in the order the request runs them."""
    no_trigger = FunnelResult("no_trigger")
    return [
        ("funnel", middleware.funnel, "process", lambda message: no_trigger),
        ("topic count (the message's tokens and topics)", middleware, "_note_topics", lambda *args: None),
        ("user state", middleware, "_user_state", lambda user_id: EMPTY),
        ("recall", middleware.recaller, "recall_and_copy", lambda *args, **kwargs: ([], None)),
        ("insights", middleware.profiles, "profile", lambda *args, **kwargs: []),
        # Until this line no view is kept: each request reads the three steps above.
        ("the user's view (the three above kept per user)", middleware, "_view", lambda user_id: None),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=10000, help="requests of each app per line")
    parser.add_argument("--rounds", type=int, default=2, help="times the whole table is measured")
    args = parser.parse_args()
    with wrapped_pair("steps") as (bare, middleware):
        table = steps(middleware)
        lines = ["body, JSON, turn, user id"] + [label for label, *_ in table] + ["bound: needles, tokens, topics free"]
        funnel = getattr(middleware.funnel, "funnel", middleware.funnel)
        tagger, screen = funnel.topics, funnel._screen
        real_analyse, real_once = tagger.analyse, tagger.analyse_once
        ratios: dict[str, list[float]] = {line: [] for line in lines}
        start = 0
        for _ in range(args.rounds):
            for _, owner, name, stand_in in table:
                setattr(owner, name, stand_in)  # an instance attribute: hides the method
            for i, line in enumerate(lines):
                if 0 < i <= len(table):
                    _, owner, name, _ = table[i - 1]
                    delattr(owner, name)  # the real step again
                texts = [TEXT.format(word(j)) for j in range(start, start + 2 * (args.n + 200))]  # new ones each line
                start += len(texts)
                if i == len(lines) - 1:  # the bound: the analysis made before the run
                    analysed = {text: real_analyse(text) for text in texts}
                    present = {text: screen.present(text) for text in texts}
                    tagger.analyse, screen.present = analysed.__getitem__, present.__getitem__
                    tagger.analyse_once = analysed.__getitem__
                bodies = iter([json.dumps({"message": text}).encode() for text in texts])
                times = alternate({"bare": lambda: call(bare, next(bodies)),
                                   "memo": lambda: call(middleware, next(bodies))}, args.n)
                ratios[line].append(pct(times["memo"], .5) / pct(times["bare"], .5))
                print(f"  {line:48} {ratios[line][-1]:.2f}x (bare p50 {pct(times['bare'], .5) * 1e6:.0f} us)",
                      flush=True)
            tagger.analyse, tagger.analyse_once = real_analyse, real_once
            del screen.present
        print("\nmedian of the rounds, p50 against the bare app, and each step's increase:")
        previous = 1.0
        for line in lines:
            ratio = statistics.median(ratios[line])
            increase = "" if line.startswith("bound") else f"  {ratio - previous:+.2f}x"
            print(f"  {line:48} {ratio:.2f}x{increase}")
            if not line.startswith("bound"):
                previous = ratio
    return 0


if __name__ == "__main__":
    sys.exit(main())
