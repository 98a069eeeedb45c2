"""memo-mw: rule-based long-term memory for chat apps.

``MemoryMiddleware`` wraps a WSGI chat app; ``Memo`` is the Flask extension over it.
"""

from .exceptions import MemoError, RulesError, StoreError
from .flask import Memo
from .middleware import MemoryMiddleware
from .rules import load_rules

__all__ = ["Memo", "MemoError", "MemoryMiddleware", "RulesError", "StoreError", "load_rules"]
__version__ = "0.1.0"
