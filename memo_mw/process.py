"""This process's id, kept current across forks without a system call each time it is asked.

The request path asks several times per request (is the listener thread ours? the outbox
thread? this connection?); ``os.getpid()`` is a system call on every Linux C library of the
last years, and under a hypervisor each one costs a fraction of a microsecond.
"""

from __future__ import annotations

import os

_pid = os.getpid()


def _forked() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_forked)


def pid() -> int:
    """``os.getpid()``, as of the last fork."""
    return _pid
