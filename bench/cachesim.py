"""Figure 1's request under callgrind: the middleware's extra instructions and cache misses.

    .venv/bin/python bench/cachesim.py [--n 200] [--evict-mb 8] [--l2-kb 1024]

Times on a shared VM move by a fifth within minutes, and the HTTP figure hangs on a few percent;
instruction and cache-miss counts from valgrind's callgrind do not move with the machine. Each app
(the bare app and the wrapped one, with its own redis-server) runs under callgrind with its cache
simulated (a 32 KiB L1 and, as the last level, a cache of ``--l2-kb``, the size of this machine's
L2), and for each of ``--n`` requests (figure 1's, a new message each) the simulated caches are
first flushed by writing ``--evict-mb`` MiB: under gunicorn each request finds the caches as the
server's other work left them, which is what makes the same Python cost twice its in-process time
there. Only the requests are counted (``--toggle-collect``); time-based expiries are set to an
hour and the garbage collector is off while counting, so that what runs is the request alone; the
hash seed is fixed (PYTHONHASHSEED=0: where dicts and sets put their keys, and so which cache lines
a lookup reads, moves with it by a few dozen misses a request), so that two runs compare code.

Prints, a request, the wrapped app's extra instructions, L1 misses and last-level misses over the
bare app's, and their total. Needs valgrind (Debian's package).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: valgrind's summary lines, each read as a count.
COUNTS = {"instructions": r"I\s+refs:\s+([\d,]+)", "L1 misses, code": r"I1\s+misses:\s+([\d,]+)",
          "L1 misses, data": r"D1\s+misses:\s+([\d,]+)", "last-level misses, code": r"LLi\s+misses:\s+([\d,]+)",
          "last-level misses, data": r"LLd\s+misses:\s+([\d,]+)"}


def requests(which: str, n: int, evict_mb: int) -> None:
    """The measured run (inside valgrind): n requests of figure 1 to the bare or the wrapped app."""
    import functools
    import gc
    import json
    import time

    sys.path.insert(0, str(ROOT))
    from memo_mw import defaults

    for name in ("RECALL_VERSION_MAX_AGE", "STATE_CACHE_MAX_AGE", "RULES_RELOAD_INTERVAL", "COUNTS_SEND_INTERVAL",
                 "OUTBOX_DRAIN_INTERVAL", "OUTBOX_CHECKPOINT_INTERVAL"):
        setattr(defaults, name, 3600.0)  # under valgrind a second is a few requests: no expiry mid-run
    from bench.perf import call, wrapped_pair

    text = "what is the weather like in town {} today?"
    with wrapped_pair("cachesim") as (bare, middleware):
        app = bare if which == "bare" else middleware
        bodies = [json.dumps({"message": text.format(i)}).encode() for i in range(400 + n)]
        for body in bodies[:300]:
            call(app, body)
        time.sleep(1.5)  # the listener subscribed: the user's view is kept from here on
        for body in bodies[300:400]:
            call(app, body)
        gc.collect()
        gc.freeze()
        gc.disable()
        flush = bytearray(evict_mb << 20)
        line = b"\x01" * (len(flush) // 64)
        for body in bodies[400:]:
            if evict_mb:
                flush[::64] = line  # a write to every cache line of the buffer
            functools.reduce(lambda _, body: call(app, body), [body], None)  # collected: this call only


def measure(which: str, args: argparse.Namespace, folder: str) -> dict[str, int]:
    log = Path(folder) / f"{which}.log"
    subprocess.run(["valgrind", "--tool=callgrind", "--cache-sim=yes", f"--LL={args.l2_kb * 1024},8,64",
                    "--toggle-collect=functools_reduce", f"--callgrind-out-file={folder}/{which}.out",
                    f"--log-file={log}", sys.executable, __file__, "--run", which, "--n", str(args.n),
                    "--evict-mb", str(args.evict_mb)], check=True, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "0"}, stdout=subprocess.DEVNULL)
    text = log.read_text()
    return {name: int(re.search(pattern, text).group(1).replace(",", "")) for name, pattern in COUNTS.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="requests counted")
    parser.add_argument("--evict-mb", type=int, default=8, help="MiB written before each request (0: none)")
    parser.add_argument("--l2-kb", type=int, default=1024, help="the simulated last-level cache, KiB")
    parser.add_argument("--keep", metavar="DIR", help="keep callgrind's files (bare.out, memo.out) here, "
                        "for callgrind_annotate")
    parser.add_argument("--run", choices=["bare", "memo"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        requests(args.run, args.n, args.evict_mb)
        return 0
    if not shutil.which("valgrind"):
        print("valgrind is not installed (apt-get install valgrind)")
        return 1
    with tempfile.TemporaryDirectory(prefix="memo-cachesim-") as folder:
        if args.keep:
            folder = args.keep
            os.makedirs(folder, exist_ok=True)
        bare, memo = (measure(which, args, folder) for which in ("bare", "memo"))
    print(f"figure 1's request, {args.n} counted, {args.evict_mb} MiB written before each; a request:")
    for name in COUNTS:
        print(f"  {name:24} bare {bare[name] / args.n:9.0f}   wrapped {memo[name] / args.n:9.0f}   "
              f"extra {(memo[name] - bare[name]) / args.n:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
