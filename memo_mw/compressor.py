"""The optional small-model compressor: a rule summary polished into a one-line memory.

Off by default and never on the request path: the ``remember`` job (memo_mw.jobs) asks it,
in the worker, when ``MEMO_COMPRESSOR_URL`` names an OpenAI-compatible chat-completions
server (Ollama, the llama.cpp server, vLLM...). It sends the rule's summary and the source
sentence (both already PII-masked by the funnel, and masked again here) with a fixed prompt,
in Chinese or English after the summary's script, at temperature 0.

The model's line is only a proposal. It is used when it is one line, no longer than
:func:`length_cap`, free of PII, and says nothing the user did not: every content word
(Latin words, lightly stemmed, and numbers) and every Chinese character of it appears in the
source sentence or the rule summary, besides a few function words; a negation in the summary
stays, and a negation in the line must come with the word it negates in the source. Anything
else (a refusal, an error, a timeout, a line that fails a check) leaves the rule summary as
the memory, and the reason is logged on the ``memo_mw.compressor`` logger, without the text.

Configuration, read from the environment of the worker (``Compressor.from_env``):

- ``MEMO_COMPRESSOR_URL``: the server, as its base URL (Ollama ``http://127.0.0.1:11434/v1``,
  llama.cpp ``http://127.0.0.1:8080``, vLLM ``http://127.0.0.1:8000/v1``) or the full
  ``.../chat/completions`` URL. Unset: no compressor. The connection is direct (proxy
  variables are not read): the server is meant to be local or on the same network.
- ``MEMO_COMPRESSOR_MODEL``: the model name sent; default :data:`DEFAULT_MODEL`.
- ``MEMO_COMPRESSOR_TIMEOUT``: seconds for the whole call; default :data:`DEFAULT_TIMEOUT`.
- ``MEMO_COMPRESSOR_API_KEY``: sent as ``Authorization: Bearer ...``; default none.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

import regex

from .privacy import mask_pii
from .text import nfkc, normalize, stem

log = logging.getLogger(__name__)

#: Seconds one call may take in all (connect, send, wait, read). A worker job waits this long
#: at most per candidate before it stores the rule summary instead.
DEFAULT_TIMEOUT = 2.0

#: A small multilingual instruct model as Ollama names it; any model the server knows will do.
DEFAULT_MODEL = "qwen2.5:0.5b"

#: Tokens the model may write: a one-line memory is a few words; a long answer is cut, then refused.
MAX_TOKENS = 64

#: The polished line may be twice the rule summary's length, or this many characters if that
#: is more: room to keep a detail of the sentence ("likes green tea, without sugar"), not a paragraph.
MIN_LENGTH_CAP = 80

#: Bytes of response read at most: a chat completion of MAX_TOKENS tokens is far smaller.
MAX_RESPONSE_BYTES = 64 * 1024

PROMPTS = {
    "en": (
        "You rewrite a memory note about a user as one short line. Use only words from the user's "
        "sentence or the note. Keep the meaning, and keep it negative if the note is negative. Write "
        "like the note, without a subject (\"likes jazz\", \"lives in Paris\", \"doesn't eat pork\"). "
        "Add no facts, names or explanations. Reply with the line only."
    ),
    "zh": (
        "你把一条关于用户的记忆改写成一行简短的中文。只用用户原句或记忆里的词，保持原意，"
        "记忆是否定的就保持否定。像记忆那样不写主语（如“喜欢喝咖啡”“住在上海”“不吃猪肉”）。"
        "不要添加事实、人名或解释。只回复这一行。"
    ),
}
_USER_TEMPLATES = {"en": "Sentence: {source}\nNote: {summary}", "zh": "原句：{source}\n记忆：{summary}"}

_HAN = regex.compile(r"\p{Han}")
# Words of every script but the ones read character by character (_CJK): Cyrillic, Greek,
# Arabic, Thai ... words are checked against the sentence like Latin ones.
_WORD = regex.compile(r"(?:(?![\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}])[\p{L}\p{M}\p{N}])+"
                      r"(?:['’](?:(?![\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}])\p{L})+)?")
_SYMBOL = regex.compile(r"\p{S}")
_CJK = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}]")
_THINK = regex.compile(r"^\s*<think>.*?</think>", regex.DOTALL)
_QUOTES = "\"'`“”‘’「」『』"
#: Function words a polished line may use though the sentence does not.
LATIN_FUNCTION_WORDS = frozenset(
    """a an the and or of to in on at for with by from as is are be their they them it its this that
    these those some any also too who which when while than then but""".split()
)
CJK_FUNCTION_CHARS = frozenset("的了是在和与及也很都就地得着过会要把被对于而且或等")
_NEGATION_LATIN = regex.compile(r"^(?:not|no|never|none|nothing|neither|nor|without|cannot|\w+n['’]t)$")
_NEGATION_CJK = regex.compile(r"不|没|別|别|勿|无|非(?!常)|未(?!来)")


class CompressorError(Exception):
    """The server could not be asked, or its answer was not a usable line; the message says why."""


def length_cap(summary: str) -> int:
    """The longest polished line accepted for ``summary``, in characters."""
    return max(2 * len(summary), MIN_LENGTH_CAP)


def language_of(summary: str) -> str:
    """``zh`` when the summary holds a Chinese character, else ``en``: which prompt to use."""
    return "zh" if _HAN.search(summary) else "en"


def _words(text: str) -> list[str]:
    return [w.replace("’", "'") for w in _WORD.findall(nfkc(text).casefold())]


def _negated_pairs(text: str) -> set[tuple[str, str]]:
    """Each negation with what follows it: ("not", "pork"), ("不", "吃")."""
    words = _words(text)
    pairs = {(w, words[i + 1] if i + 1 < len(words) else "") for i, w in enumerate(words)
             if _NEGATION_LATIN.match(w)}
    folded = nfkc(text)
    pairs.update((m.group(), folded[m.end():m.end() + 1]) for m in _NEGATION_CJK.finditer(folded))
    return pairs


def validate(line: str, summary: str, source: str) -> str:
    """The polished ``line`` tidied (quotes, a final period), or :class:`CompressorError` saying why not."""
    line = _THINK.sub("", line).strip()
    if "\n" in line or "\r" in line:
        raise CompressorError("more than one line")
    line = line.strip(_QUOTES).strip()
    if line.startswith(("- ", "* ")):
        line = line[2:].strip()
    line = line.rstrip("。.").strip()
    if not line:
        raise CompressorError("empty")
    if len(line) > length_cap(summary):
        raise CompressorError(f"{len(line)} characters, more than {length_cap(summary)}")
    if mask_pii(line) != line:
        raise CompressorError("holds something that looks like personal data")
    said = f"{source}\n{summary}"
    said_words = set(_words(said))
    said_stems = {stem(w) for w in said_words}
    for word in _words(line):
        if word not in said_words and stem(word) not in said_stems and word not in LATIN_FUNCTION_WORDS:
            raise CompressorError("a word that is not in the sentence")
    said_symbols = set(_SYMBOL.findall(nfkc(said)))
    if any(c not in said_symbols for c in _SYMBOL.findall(nfkc(line))):
        raise CompressorError("a symbol that is not in the sentence")
    said_chars = set(_CJK.findall(nfkc(said)))
    if any(c not in said_chars and c not in CJK_FUNCTION_CHARS for c in _CJK.findall(nfkc(line))):
        raise CompressorError("a character that is not in the sentence")
    negations = _negated_pairs(line)
    if _negated_pairs(summary) and not negations:
        raise CompressorError("the negation of the summary is gone")
    if not negations <= _negated_pairs(said):
        raise CompressorError("a negation the sentence does not make")
    return line


class Compressor:
    """Asks an OpenAI-compatible chat-completions server to polish rule summaries.

    :param url: the server's base URL (``http://127.0.0.1:11434/v1``, ``http://127.0.0.1:8080``)
        or its full ``.../chat/completions`` URL.
    :param model: the model name sent in each request.
    :param timeout: seconds for a whole call; a slower answer is not waited for.
    :param api_key: sent as a bearer token, for servers that want one.
    """

    def __init__(self, url: str, model: str = DEFAULT_MODEL, timeout: float = DEFAULT_TIMEOUT,
                 api_key: str | None = None):
        url = url.strip().rstrip("/")
        if urllib.parse.urlsplit(url).scheme not in ("http", "https") or not urllib.parse.urlsplit(url).hostname:
            raise ValueError(f"the compressor URL must be http(s)://host[:port][/path], not {url!r}")
        if not url.endswith("/chat/completions"):
            url += "/chat/completions" if url.endswith("/v1") else "/v1/chat/completions"
        self.endpoint = url
        self.model = model
        self.timeout = timeout
        self.api_key = api_key

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> Compressor | None:
        """The compressor ``MEMO_COMPRESSOR_*`` describe, or None when ``MEMO_COMPRESSOR_URL`` is unset."""
        url = (environ.get("MEMO_COMPRESSOR_URL") or "").strip()
        if not url:
            return None
        try:
            timeout = float(environ.get("MEMO_COMPRESSOR_TIMEOUT") or DEFAULT_TIMEOUT)
        except ValueError:
            log.warning("memo-mw: MEMO_COMPRESSOR_TIMEOUT is not a number; using %s s", DEFAULT_TIMEOUT)
            timeout = DEFAULT_TIMEOUT
        if not timeout > 0:
            timeout = DEFAULT_TIMEOUT
        try:
            return cls(url, model=environ.get("MEMO_COMPRESSOR_MODEL") or DEFAULT_MODEL, timeout=timeout,
                       api_key=environ.get("MEMO_COMPRESSOR_API_KEY") or None)
        except ValueError as exc:
            log.warning("memo-mw: MEMO_COMPRESSOR_URL ignored: %s", exc)
            return None

    def polish(self, summary: str, source: str, *, rule_id: str | None = None) -> str:
        """The model's line for this memory if it passes :func:`validate`, else ``summary`` unchanged."""
        try:
            return validate(self.ask(summary, source), summary, source)
        except CompressorError as exc:
            log.info("memo-mw: compressor line for rule %s not used (%s); the rule summary is stored",
                     rule_id or "-", exc)
            return summary

    def ask(self, summary: str, source: str) -> str:
        """The model's raw answer for one memory; :class:`CompressorError` on any failure."""
        language = language_of(summary)
        # Already masked by the funnel; masked again, as this text leaves the machine.
        user = _USER_TEMPLATES[language].format(source=mask_pii(source), summary=mask_pii(summary))
        body = json.dumps({
            "model": self.model,
            "messages": [{"role": "system", "content": PROMPTS[language]}, {"role": "user", "content": user}],
            "temperature": 0,
            "max_tokens": MAX_TOKENS,
            "stream": False,
        }).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            raw = self._post(body, headers)
        except (http.client.HTTPException, OSError) as exc:  # refused, unreachable, timed out, cut
            raise CompressorError(f"no answer: {exc or type(exc).__name__}") from None
        return _content(raw)

    def _post(self, body: bytes, headers: dict[str, str]) -> bytes:
        """POST and read the answer within ``timeout`` in all: a server that trickles is cut off too."""
        deadline = time.monotonic() + self.timeout
        parts = urllib.parse.urlsplit(self.endpoint)
        connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        connection = connection_class(parts.hostname, parts.port, timeout=self.timeout)
        response = None
        try:
            connection.request("POST", parts.path + (f"?{parts.query}" if parts.query else ""), body, headers)
            sock = connection.sock  # the connection lets go of it once the answer says it will close
            chunks, size = [], 0
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise CompressorError("no answer: timed out")
                sock.settimeout(remaining)
                if response is None:
                    response = connection.getresponse()
                    if response.status != 200:
                        raise CompressorError(f"HTTP {response.status} from the server")
                    continue
                chunk = response.read1(4096)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_RESPONSE_BYTES:
                    raise CompressorError("answer too large")
        finally:
            if response is not None:
                response.close()
            connection.close()


def _content(raw: bytes) -> str:
    """``choices[0].message.content`` of a chat completion."""
    try:
        data = json.loads(raw.decode("utf-8"))
        content = data["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise CompressorError("not a chat completion") from None
    if not isinstance(content, str):
        raise CompressorError("not a chat completion")
    return content


def polish_candidates(payload: dict[str, Any], compressor: Compressor,
                      slot: Callable[[str, int], list[str]]) -> dict[str, Any]:
    """``payload`` with each rule summary polished; the payload given is not changed.

    Only candidates a rule made (with a ``rule_id``) are polished. Their ``key``, polarity and
    the rest stay as the rule made them, so a newer statement still supersedes by slot. A
    restatement still merges: when the user's active memory on the same slot and polarity
    (``slot(key, polarity)`` lists their contents) is the rule summary itself, or a line this
    sentence also supports (it passes :func:`validate` against it), that content is reused
    and the model is not asked.
    """
    candidates = []
    for candidate in payload.get("candidates", []):
        candidate = dict(candidate)
        summary, source = candidate.get("content") or "", candidate.get("excerpt") or ""
        if candidate.get("rule_id") and summary and source:
            candidate["content"] = _restated(summary, source, slot(candidate["key"], candidate["polarity"])) \
                or compressor.polish(summary, source, rule_id=candidate["rule_id"])
        candidates.append(candidate)
    return {**payload, "candidates": candidates}


def _restated(summary: str, source: str, stored: list[str]) -> str | None:
    for content in stored:
        if normalize(content) == normalize(summary):
            return summary
        try:
            validate(content, summary, source)
        except CompressorError:
            continue
        return content
    return None
