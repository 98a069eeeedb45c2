"""This process's id, without a system call each time it is asked for.

Several parts keep threads or connections that a forked child must not share (gunicorn forks its
workers after the app is built): they compare the process id they started under with this one on
every request. ``os.getpid()`` is a system call; :data:`PID` is kept current by an at-fork hook.
Read it as ``process.PID`` (a name imported from here would keep the parent's id).
"""

from __future__ import annotations

import os

#: The id of the process running now (updated in a child right after ``os.fork``).
PID = os.getpid()


def _forked() -> None:
    global PID
    PID = os.getpid()


os.register_at_fork(after_in_child=_forked)
