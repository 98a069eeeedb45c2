"""This process's id, kept rather than asked for.

``os.getpid()`` is a system call (about 0.3 us here, more on a loaded server), and the request path
asks several times a request whether it runs in a child forked since its threads started
(memo_mw.statecache and memo_mw.outbox start theirs again after a fork). The id is read once at
import and again in every child, by a hook ``os.fork`` runs (as do gunicorn, rq's forking worker
and multiprocessing's fork start method, which all fork through it, and C code that calls
``PyOS_AfterFork_Child`` as it must to go on running Python).
"""

from __future__ import annotations

import os

_pid = os.getpid()


def _after_fork_in_child() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)


def pid() -> int:
    """``os.getpid()`` without the system call."""
    return _pid
