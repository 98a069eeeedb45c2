"""memo-mw: rule-based long-term memory for chat apps.

``MemoryMiddleware`` wraps a WSGI chat app; ``Memo`` is the Flask extension over it.
"""

from .exceptions import MemoError, RulesError, StoreError
from .rules import load_rules

__all__ = ["Memo", "MemoError", "MemoryMiddleware", "RulesError", "StoreError", "load_rules"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # Imported on first use: the funnel and the rules (memo_mw.funnel, memo_mw.rules) are used
    # alone by tools and tests, without the middleware's web, Redis and SQLite dependencies.
    if name == "MemoryMiddleware":
        from .middleware import MemoryMiddleware
        return MemoryMiddleware
    if name == "Memo":
        from .flask import Memo
        return Memo
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
