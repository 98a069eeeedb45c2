"""Masking of personal data before anything leaves the web process.

What Redis and SQLite see is already masked: e-mail addresses, phone numbers,
long digit runs (card and ID numbers) and secrets such as API keys are replaced by
a placeholder, and the rest of the sentence is kept.
"""

from __future__ import annotations

import regex

_MASKS: tuple[tuple[str, regex.Pattern], ...] = (
    ("[email]", regex.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")),
    ("[secret]", regex.compile(r"\b(?:sk|pk|rk|ghp|gho|xox[abp])[-_][A-Za-z0-9_-]{12,}\b|\bAKIA[0-9A-Z]{16}\b")),
    ("[id]", regex.compile(r"(?<!\d)\d{17}[\dXx](?![\dA-Za-z])")),
    ("[phone]", regex.compile(r"(?<![\d+])(?:\+?86[ -]?)?1[3-9]\d[ -]?\d{4}[ -]?\d{4}(?!\d)")),
    ("[phone]", regex.compile(r"(?<![\w+])\+\d{1,3}[ -]?(?:\(?\d{1,4}\)?[ -]?){2,5}\d{2,4}(?!\d)")),
    ("[number]", regex.compile(r"(?<!\d)(?:\d[ -]?){12,19}(?!\d)")),
)


_DIGIT = regex.compile(r"\d")


def mask_pii(text: str) -> str:
    """``text`` with e-mails, phone numbers, ID/card numbers and API keys replaced by placeholders."""
    # Most messages hold no "@" and no digit: skip the patterns that need them (this runs
    # on every message in the request path).
    has_at, has_digit = "@" in text, _DIGIT.search(text) is not None
    for placeholder, pattern in _MASKS:
        if placeholder == "[email]" and not has_at or placeholder in _NEEDS_DIGIT and not has_digit:
            continue
        text = pattern.sub(placeholder, text)
    return text


_NEEDS_DIGIT = ("[id]", "[phone]", "[number]")
