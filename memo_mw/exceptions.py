"""Errors memo-mw raises to its callers."""


class MemoError(Exception):
    """Base class of memo-mw's errors."""


class RulesError(MemoError):
    """Rule files that cannot be used; ``problems`` lists each as ``file:line: rule id: problem``."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("invalid rules:\n  " + "\n  ".join(self.problems))


class StoreError(MemoError):
    """The SQLite database cannot be opened or used (bad path, not a database, no permission)."""
