"""Errors memo-mw raises to its callers, and which faults pass by themselves."""

import errno
import sqlite3

try:
    import psycopg
except ImportError:  # (the postgresql extra is not installed)
    psycopg = None


class MemoError(Exception):
    """Base class of memo-mw's errors."""


class RulesError(MemoError):
    """Rule files that cannot be used; ``problems`` lists each as ``file:line: rule id: problem``."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("invalid rules:\n  " + "\n  ".join(self.problems))


class StoreError(MemoError):
    """The store cannot be opened or used (bad path, not a database, no permission, unreachable)."""


#: The errors of the store's engines, SQLite's and (when installed) psycopg's.
DATABASE_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error,) if psycopg is None else (sqlite3.Error, psycopg.Error)


#: SQLite's result codes (and, before Python 3.11, words of its messages) for faults that pass by
#: themselves: a full disk, a read-only or unopenable file or folder, an I/O error, a held lock.
PASSING_CODES = ("SQLITE_FULL", "SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_IOERR", "SQLITE_BUSY", "SQLITE_LOCKED",
                 "SQLITE_PERM")
PASSING_WORDS = ("full", "readonly", "unable to open", "I/O error", "locked", "busy")
PASSING_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EIO})
#: PostgreSQL's SQLSTATE classes of faults that pass: connection lost, too many connections or a full
#: disk, the server shutting down or starting, a deadlock or serialization failure, a lock held too long.
PASSING_SQLSTATES = ("08", "53", "57", "40", "58", "55P03")
#: Words of libpq's message when a connection is refused for a mistake (it gives no SQLSTATE then):
#: no such database or role, a wrong password, a client the server does not allow, a bad certificate.
MISTAKE_WORDS = ("does not exist", "authentication failed", "pg_hba.conf", "no password supplied", "certificate")


def passing_fault(exc: BaseException) -> bool:
    """True for a fault that passes by itself: of the disk or its permissions (full, read-only, locked, an
    I/O error), or on PostgreSQL an unreachable or restarting server. False for a configuration mistake that
    needs a person: a directory, a file that is not a memo-mw database or of another schema version, a file
    where a folder should be, a wrong password or database name."""
    while isinstance(exc, StoreError) and exc.__cause__ is not None:
        exc = exc.__cause__
    if isinstance(exc, sqlite3.Error):
        name = getattr(exc, "sqlite_errorname", None)  # (Python 3.11+)
        return name.startswith(PASSING_CODES) if name else any(w in str(exc) for w in PASSING_WORDS)
    if psycopg is not None and isinstance(exc, psycopg.Error):
        if exc.sqlstate is None:  # libpq could not connect: the server is away, or refuses us for a mistake
            return not any(w in str(exc) for w in MISTAKE_WORDS)
        return exc.sqlstate.startswith(PASSING_SQLSTATES)
    return isinstance(exc, OSError) and exc.errno in PASSING_ERRNOS
