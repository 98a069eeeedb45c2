"""Masking of personal data before anything leaves the web process: Redis and SQLite only ever
see placeholders, and the rest of the sentence is kept ("my password is [secret]").

Stated passwords, PINs, codes, keys and tokens, known key shapes and long random strings become
``[secret]``; e-mail addresses ``[email]``; Chinese ID numbers (by their shape: a wrong check
character is still someone's number, or a typo of it) ``[id]``; bank cards that pass their check
``[card]``; phone numbers ``[phone]``. The patterns run in the order of ``_MASKS``, so
a value is masked once, by the most specific rule; digit runs that are none of these (order numbers,
years, prices) stay. Masking is idempotent: the placeholders match no pattern."""

from collections.abc import Callable

import regex

PLACEHOLDERS = ("[phone]", "[email]", "[id]", "[card]", "[secret]")
_PLACEHOLDER = "(?:" + "|".join(regex.escape(p) for p in PLACEHOLDERS) + ")"

# Words that follow "password is" without being the password ("my password is too weak").
_FUNCTION_WORDS = (
    r"(?:the|a|an|my|your|his|her|our|their|its|this|that|it|too|very|not|no|so|same|different"
    r"|still|also|just|now|in|on|at|for|of|to|and|or|but|being|something|somewhere|what|which"
    r"|where|how|why|again|enough|every|each|already|always|never|because|since|when|if|by|with"
    r"|from|after|before|until|than|as|only|really|quite|pretty|about|like|here|there|getting"
    r"|going|usually|probably|definitely|actually|kind|sort)(?![\w-])"
)
# Words that describe the password ("... is weak"): they stop the rule only when the clause ends
# after them or goes on with a function word or an adverb, for "correct horse battery staple".
_STATE_WORDS = (
    r"(?:weak|strong|long|short|easy|hard|simple|secure|safe|wrong|correct|right|changed|expired"
    r"|required|needed|set|reset|incorrect|invalid|saved|stored|written|forgotten|lost|hidden"
    r"|private|secret|protected|empty|blank|new|old|complicated|complex|updated|compromised"
    r"|leaked|fine|ok|okay|good|bad|encrypted|hashed|unknown|known|case[- ]sensitive)(?![\w-])"
)
_NOT_A_PASSWORD = (
    rf"(?:{_FUNCTION_WORDS}|{_STATE_WORDS}"
    r"(?=[.,;:!?)\"'”’]*(?:\s*$|\s*[\p{Han}，。！？；、]|[.,;:!?)]+\s)"
    rf"|\s+(?:{_FUNCTION_WORDS}|{_STATE_WORDS}|\w+ly(?![\w-]))))"
)
# One space-free piece of a value: no Chinese, no quote, no sentence punctuation at its end.
_VALUE_END = r"(?=[.,;:!?)\"'“”‘’`]*(?:\s|$|[\p{Han}，。！？；、]))"
_PIECE_CHARS = r"[^\s\"'“”‘’`，。！？；、\p{Han}]"
# Where a stated password ends when the clause goes on: "hunter2 and my PIN is ...", "hunter2 so
# please keep it safe", "P@ss w0rd user: bob" (another key).
_PASSWORD_STOP = (
    r"(?:(?:and|but|or|so|because|since|while|when|if|then)\s+(?:i|i'm|i’m|i've|i’ve|my|me|it|it's"
    r"|it’s|its|the|this|that|you|your|we|our|he|she|his|her|they|their|don't|don’t|do|please)"
    r"(?![\w'’-])|please(?![\w-])|thanks(?![\w-])|thank\s+you(?![\w-])"
    r"|[\w.-]+\s*[:=：]|" + _PLACEHOLDER + ")"
)
# A stated password: the pieces up to the end of the clause; the first has 3+ characters.
_VALUE_WORDS = (
    rf"(?P<q>[\"'“‘`]?)(?![:：=]|{_PLACEHOLDER})"
    rf"(?P<value>{_PIECE_CHARS}{{3,}}?{_VALUE_END}"
    rf"(?:[ \t]+(?!{_PASSWORD_STOP}){_PIECE_CHARS}+?{_VALUE_END})*)"
)
# After no separator ("my password hunter2", "pwd hunter22", "密码abc123"): one piece, which in
# English must hold a digit or a symbol ("the password manager", "run pwd to see the folder" stay).
_VALUE_ONE = rf"(?P<q>)(?![:：=]|{_PLACEHOLDER})(?P<value>{_PIECE_CHARS}{{3,}}?{_VALUE_END})"
_PASSWORD_EN = regex.compile(
    r"(?P<head>(?<![A-Za-z])(?:pass(?:word|wd|code|phrase)|(?P<abbr>pwd|pw))(?![A-Za-z])"
    # "the password for my bank account is ..."
    r"(?:\s+(?:for|to|of|on|at)(?:\s+[\w'’.-]+){1,4}?)?"
    r"(?:(?P<sep>\s*[:=：]\s*|\s+(?:is|was)(?:\s+(?:now|still))?(?:\s+(?:set|changed|updated|reset)\s+to)?\s+"
    r"|\s*(?:是|为)\s*)|\s+)"
    r")"
    rf"(?(sep)(?!{_NOT_A_PASSWORD}){_VALUE_WORDS}|(?=\S*?[0-9@#$%^&*_+=~]){_VALUE_ONE})",
    regex.IGNORECASE,
)
_PASSWORD_ZH = regex.compile(
    r"(?P<head>(?:密码|密碼|口令)(?:也|都|还|就|仍然|依然)?"
    r"(?:(?P<sep>是|为|:|：|=|改成了?|改为|换成了?|设为|设成|设置为|设置成)\s*|\s*))"
    rf"(?(sep){_VALUE_WORDS}|{_VALUE_ONE})",
)
# PINs and one-time codes: the value must hold a digit ("the pin is broken" keeps "broken"); symbols may be in it.
_CODE = regex.compile(
    r"(?P<head>(?:(?<![A-Za-z])(?:pin(?:\s*(?:code|number|no\.?))?|otp|(?:verification|security|confirmation"
    r"|auth(?:entication)?|login|sms|2fa|one[- ]time)\s+code)(?![A-Za-z])|(?<![A-Za-z])pin\s*[码号]"
    r"|验证码|校验码|动态码|短信码|动态密码)"
    r"(?:\s*[:=：]\s*|\s+(?:is|was)\s+|\s*(?:是|为)\s*|\s*))"
    r"(?P<value>(?=[A-Za-z!@#$%^&*_+=~]*[0-9])[A-Za-z0-9!@#$%^&*_+=~]{4,16})(?![A-Za-z0-9!@#$%^&*_+=~])",
    regex.IGNORECASE,
)

# A key or token stated after its name: one piece of 6+ key characters with a letter and a digit
# ("my token is expired", "max tokens: 128000" and "the api key is in the .env file" stay).
_KEY_VALUE = (
    r"(?P<q>[\"'`]?)(?!" + _PLACEHOLDER + r")"
    r"(?=[A-Za-z0-9_+/=~.-]*[0-9])(?=[0-9_+/=~.-]*[A-Za-z])"
    r"(?=[A-Za-z0-9_+/=~.-]{6})[A-Za-z0-9_+/=~-]+(?:\.[A-Za-z0-9_+/=~-]+)*(?![A-Za-z0-9_+/=~-])"
)
_KEY = regex.compile(
    r"(?P<head>(?:(?<![A-Za-z0-9])(?:(?:api|access|secret|auth|client|app|private|refresh|session"
    r"|personal[ _-]access|bot)[ _-]?(?:key|token|secret)|token|key[ _-]?id)(?![A-Za-z0-9])"
    r"|(?:API|api)?\s*(?:密钥|秘钥|私钥|令牌|访问令牌))"
    r"(?:也|还|就)?(?:\s*[:=：]\s*|\s+(?:is|was)(?:\s+now)?\s+|\s*(?:是|为)\s*))" + _KEY_VALUE,
    regex.IGNORECASE,
)

_TOKEN = regex.compile(
    r"(?<![A-Za-z0-9_-])(?:"
    # OpenAI sk-/sk-proj-, Stripe sk_live_: with a digit or upper case ("sk-learn-..." stays)
    r"(?:sk|pk|rk)[-_](?=[A-Za-z_-]*[0-9]|[a-z0-9_-]*[A-Z])[A-Za-z0-9_-]{16,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub
    r"|xox[abpros]-[A-Za-z0-9-]{10,}"  # Slack
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])"  # AWS access key id
    r"|AIza[0-9A-Za-z_-]{30,}"  # Google API key
    r"|eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}(?:\.[A-Za-z0-9_-]+)?"  # JWT
    r")"
)
# "Bearer <token>": the token must have 10+ characters and a digit ("Bearer authentication" stays).
_BEARER = regex.compile(
    r"(?P<head>(?<![A-Za-z])(?i:bearer)\s+)(?=[A-Za-z._~+/-]*[0-9])[A-Za-z0-9._~+/-]{9,}[A-Za-z0-9_~+/-]=*"
)
# Long random strings (hex, base64): ``_random`` decides. A greedy run's leftmost match starts
# where the run starts, so no lookbehind is needed.
_RUN = regex.compile(r"[A-Za-z0-9+/_-]{32,}=*")
_HEX = frozenset("0123456789abcdefABCDEF")

_EMAIL = regex.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+[@＠](?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}(?![A-Za-z0-9-])")

# Chinese resident ID: region (6), birth date (8), sequence (3), check character.
_CN_ID = regex.compile(
    r"(?<![0-9A-Za-z])[1-9][0-9]{5}(?:18|19|20)[0-9]{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12][0-9]|3[01])"
    r"[0-9]{3}[0-9Xx](?![0-9A-Za-z])"
)

# Chinese mobile, optionally after +86 / 0086 / 86; not a piece of a longer run of digit groups.
_CN_MOBILE = regex.compile(
    r"(?<![0-9A-Za-z+])(?<![0-9][ -])(?:(?:\+|00)?86[ -]?)?1[3-9][0-9][ -]?[0-9]{4}[ -]?[0-9]{4}"
    r"(?![0-9]|-[0-9])"
)
# Bank card: 13-19 digits in one run or in groups split by one kind of separator.
_CARD = regex.compile(
    r"(?<![0-9A-Za-z.,+])(?:"
    r"[1-9][0-9]{12,18}(?![0-9]|[.,][0-9])"
    r"|[1-9][0-9]{3,5}(?P<sep>[ -])[0-9]{4,6}(?:(?P=sep)[0-9]{3,6}){1,3}(?![0-9]|[.,][0-9])"
    r")"
)
# International: + or 00, country code, then groups; 8-15 digits in all (E.164).
_INTL_PHONE = regex.compile(
    r"(?<![0-9A-Za-z+])(?:\+|00)[1-9][0-9]{0,2}(?:[ .-]?(?:\([0-9]{1,4}\)|[0-9]{1,4})){2,6}(?![0-9])"
)
# Chinese landline with area code: 010-12345678, 0755-1234567, (021) 12345678.
_CN_LANDLINE = regex.compile(
    r"(?<![0-9A-Za-z+])(?:\(0[1-9][0-9]{1,2}\)[ -]?|0[1-9][0-9]{1,2}[ -])[0-9]{7,8}(?![0-9]|-[0-9])"
)
# Other landlines with a trunk 0: "(020) 7946 0958", "(01632) 960 961", "020 7946 0958".
_LANDLINE = regex.compile(
    r"(?<![0-9A-Za-z+])(?:\(0[1-9][0-9]{1,3}\)[ -]?[0-9]{2,4}(?:[ -]?[0-9]{2,4}){0,2}"
    r"|0[1-9][0-9]{1,3}(?P<sep>[ -])[0-9]{3,4}(?P=sep)[0-9]{4})(?![0-9]|[-.][0-9])"
)
# US style: 415-555-2671, (415) 555-2671, 415.555.2671, 1-415-555-2671.
_US_PHONE = regex.compile(
    r"(?<![0-9A-Za-z+])(?:1[ .-])?(?:\([2-9][0-9]{2}\)\s?|[2-9][0-9]{2}[-.])[2-9][0-9]{2}[-.][0-9]{4}"
    r"(?![0-9]|[-.][0-9])"
)


def _digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


def luhn_ok(digits: str) -> bool:
    """The Luhn check: from the right, every second digit doubled (its digits added up)."""
    doubled = (sum(divmod(2 * int(d), 10)) for d in digits[-2::-2])
    return (sum(map(int, digits[::-2])) + sum(doubled)) % 10 == 0


def _card(match: regex.Match) -> str:
    # A following group may be another number ("4111 1111 1111 1111 123 times"): the longest
    # run of whole groups that is a card wins.
    text, sep = match.group(), match.group("sep")
    groups = text.split(sep) if sep else [text]
    for end in range(len(groups), 0, -1):
        digits = "".join(groups[:end])
        if len(digits) < 13:
            break
        if len(digits) <= 19 and luhn_ok(digits):
            return "[card]" + "".join(sep + g for g in groups[end:])
    return text


def _random(match: regex.Match) -> str:
    run = match.group()
    chars = set(run.rstrip("="))
    digit, lower, upper = (any(map(test, chars)) for test in (str.isdigit, str.islower, str.isupper))
    # Hex may come in dashed groups (a UUID); it needs 32 hex digits.
    hex_run = chars - {"-"} <= _HEX and len(run) - run.count("-") >= 32
    return "[secret]" if digit and (lower or upper) and hex_run or digit and lower and upper else run


def _landline(match: regex.Match) -> str:
    text = match.group()
    if text.startswith("("):  # the digits after the area code
        return "[phone]" if 6 <= len(_digits(text.partition(")")[2])) <= 8 else text
    return "[phone]" if 10 <= len(_digits(text)) <= 12 else text


def _intl_phone(match: regex.Match) -> str:
    text = match.group()
    n = len(_digits(text)) - (2 if text.startswith("00") else 0)
    return "[phone]" if 8 <= n <= 15 else text


_KEEP_HEAD = r"\g<head>\g<q>[secret]"

#: In the order they run: the most specific first, so that a value is masked once.
_MASKS: tuple[tuple[regex.Pattern, str | Callable[[regex.Match], str]], ...] = (
    (_PASSWORD_EN, _KEEP_HEAD),
    (_PASSWORD_ZH, _KEEP_HEAD),
    (_CODE, r"\g<head>[secret]"),
    (_KEY, _KEEP_HEAD),
    (_TOKEN, "[secret]"),
    (_BEARER, r"\g<head>[secret]"),
    (_EMAIL, "[email]"),
    (_RUN, _random),
    (_CN_ID, "[id]"),
    (_CN_MOBILE, "[phone]"),
    (_CARD, _card),
    (_INTL_PHONE, _intl_phone),
    (_CN_LANDLINE, "[phone]"),
    (_LANDLINE, _landline),
    (_US_PHONE, "[phone]"),
)


def mask_pii(text: str) -> str:
    """``text`` with passwords, secrets, e-mails, ID/card and phone numbers replaced by placeholders."""
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text
