"""The optional small-model compressor: a rule summary polished into a one-line memory, in the
worker's ``remember`` job, never on the request path. The model's line is only a proposal, kept when
it passes :func:`validate`; otherwise the rule summary is stored and the reason, never the text, logged.

Environment (``Compressor.from_env``): ``MEMO_COMPRESSOR_URL``, an OpenAI-compatible chat-completions
server (Ollama, the llama.cpp server, vLLM) as a base URL such as ``http://127.0.0.1:11434/v1`` or the
full ``.../chat/completions`` (unset: no compressor; no proxies: it is meant to be local);
``MEMO_COMPRESSOR_MODEL``; ``MEMO_COMPRESSOR_TIMEOUT``, seconds for the whole call; ``MEMO_COMPRESSOR_API_KEY``."""

import http.client
import json
import logging
import os
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

import regex

from .counters import script_of
from .privacy import mask_pii
from .text import nfkc, normalize, stem

log = logging.getLogger(__name__)

#: A worker job waits at most this long per candidate before it stores the rule summary.
DEFAULT_TIMEOUT = 2.0
#: A small multilingual instruct model as Ollama names it; any model the server knows will do.
DEFAULT_MODEL = "qwen2.5:0.5b"
#: A one-line memory is a few words; a longer answer is cut, then refused.
MAX_TOKENS = 64
#: Room to keep a detail of the sentence ("likes green tea, without sugar"), not a paragraph.
MIN_LENGTH_CAP = 80
#: A chat completion of MAX_TOKENS tokens is far smaller.
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

# Words of every script but those read character by character (_CJK): Cyrillic, Greek, Thai...
# words are checked like Latin ones.
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
    """The polished ``line`` tidied (quotes, a final period), or :class:`CompressorError` saying why not:
    it must be one line, no longer than :func:`length_cap`, free of PII, and say nothing the user did
    not: each content word, symbol and Chinese character is in the sentence or the summary (function
    words aside), a negation of the summary stays, and none is added."""
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
    if any(w not in said_words and stem(w) not in said_stems and w not in LATIN_FUNCTION_WORDS
           for w in _words(line)):
        raise CompressorError("a word that is not in the sentence")
    for pattern, free, what in ((_SYMBOL, frozenset(), "symbol"), (_CJK, CJK_FUNCTION_CHARS, "character")):
        allowed = free | set(pattern.findall(nfkc(said)))
        if any(c not in allowed for c in pattern.findall(nfkc(line))):
            raise CompressorError(f"a {what} that is not in the sentence")
    negations = _negated_pairs(line)
    if _negated_pairs(summary) and not negations:
        raise CompressorError("the negation of the summary is gone")
    if not negations <= _negated_pairs(said):
        raise CompressorError("a negation the sentence does not make")
    return line


class Compressor:
    """Asks an OpenAI-compatible chat-completions server (``url``: its base URL or the full
    ``.../chat/completions``) to polish rule summaries, within ``timeout`` seconds a call."""

    def __init__(self, url: str, model: str = DEFAULT_MODEL, timeout: float = DEFAULT_TIMEOUT,
                 api_key: str | None = None):
        url = url.strip().rstrip("/")
        if urllib.parse.urlsplit(url).scheme not in ("http", "https") or not urllib.parse.urlsplit(url).hostname:
            raise ValueError(f"the compressor URL must be http(s)://host[:port][/path], not {url!r}")
        if not url.endswith("/chat/completions"):
            url += "/chat/completions" if url.endswith("/v1") else "/v1/chat/completions"
        self.endpoint, self.model, self.timeout, self.api_key = url, model, timeout, api_key

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "Compressor | None":
        """The compressor ``MEMO_COMPRESSOR_*`` describe, or None when ``MEMO_COMPRESSOR_URL`` is unset."""
        url = (environ.get("MEMO_COMPRESSOR_URL") or "").strip()
        if not url:
            return None
        try:
            timeout = float(environ.get("MEMO_COMPRESSOR_TIMEOUT") or DEFAULT_TIMEOUT)
        except ValueError:
            log.warning("memo-mw: MEMO_COMPRESSOR_TIMEOUT is not a number; using %s s", DEFAULT_TIMEOUT)
            timeout = DEFAULT_TIMEOUT
        try:
            return cls(url, model=environ.get("MEMO_COMPRESSOR_MODEL") or DEFAULT_MODEL,
                       timeout=timeout if timeout > 0 else DEFAULT_TIMEOUT,
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
        language = script_of(summary)
        # Masked again though the funnel did: this text leaves the machine.
        user = _USER_TEMPLATES[language].format(source=mask_pii(source), summary=mask_pii(summary))
        messages = [{"role": "system", "content": PROMPTS[language]}, {"role": "user", "content": user}]
        body = json.dumps({"model": self.model, "messages": messages, "temperature": 0, "max_tokens": MAX_TOKENS,
                           "stream": False}).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        try:
            raw = self._post(body, headers)
        except (http.client.HTTPException, OSError) as exc:  # refused, unreachable, timed out, cut
            raise CompressorError(f"no answer: {exc or type(exc).__name__}") from None
        try:
            content = json.loads(raw.decode("utf-8"))["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            content = None
        if not isinstance(content, str):
            raise CompressorError("not a chat completion")
        return content

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
            chunks: list[bytes] = []
            while (remaining := deadline - time.monotonic()) > 0:
                sock.settimeout(remaining)
                if response is None:
                    response = connection.getresponse()
                    if response.status != 200:
                        raise CompressorError(f"HTTP {response.status} from the server")
                elif chunk := response.read1(4096):
                    chunks.append(chunk)
                    if sum(map(len, chunks)) > MAX_RESPONSE_BYTES:
                        raise CompressorError("answer too large")
                else:
                    return b"".join(chunks)
            raise CompressorError("no answer: timed out")
        finally:
            if response is not None:
                response.close()
            connection.close()


def polish_candidates(payload: dict[str, Any], compressor: Compressor,
                      slot: Callable[[str, int], list[str]]) -> dict[str, Any]:
    """A copy of ``payload`` with each rule-made candidate's summary polished. Key and polarity stay
    the rule's, so a newer statement still supersedes by slot. A restatement still merges: an active
    memory on the slot (``slot(key, polarity)`` lists their contents) that is the summary itself, or a
    line this sentence also supports, is reused and the model is not asked."""
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
