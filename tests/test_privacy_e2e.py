"""PII end to end: through the real middleware, a real Redis + rq worker, into the SQLite files.

A user states a mobile number, an e-mail, a resident ID, a bank card, an API key and a
password, each in a sentence a shipped rule captures. Before the worker runs, Redis (job
payloads decompressed, the pending state) holds the placeholders and none of the raw
values; after it, neither Redis nor the database, its WAL and its shared-memory file hold
them, while the rest of each sentence is stored.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest
import redis
from flask import Flask, jsonify, request
from rq import Queue

from memo_mw.outbox import send_waiting
from memo_mw import MemoryMiddleware, defaults
from memo_mw.privacy import PLACEHOLDERS, is_cn_id, luhn_ok
from memo_mw.store import Store

from .conftest import drain


def valid_cn_id(first17: str) -> str:
    """The resident ID number with the right check character for its first 17 digits."""
    (number,) = [first17 + c for c in "0123456789X" if is_cn_id(first17 + c)]
    return number


def luhn_card(first_digits: str) -> str:
    """``first_digits`` plus the one check digit that makes it pass Luhn."""
    (number,) = [first_digits + d for d in "0123456789" if luhn_ok(first_digits + d)]
    return number


def grouped(digits: str) -> str:
    return " ".join(digits[i:i + 4] for i in range(0, len(digits), 4))


ZH_ID = valid_cn_id("44030519880715123")
EN_ID = valid_cn_id("31011519920229456")
ZH_CARD = luhn_card("622202123456789012")  # 19 digits, UnionPay
EN_CARD = luhn_card("453914880343646")  # 16 digits, Visa, written in groups of four

# (message, what the stored excerpt must be, raw pieces that must be nowhere)
ZH = [
    ("记住我的手机号是13812345678", "记住我的手机号是[phone]", ["13812345678", "1234567"]),
    ("记住我的邮箱是xiaoming.li@example.cn", "记住我的邮箱是[email]", ["xiaoming.li", "@example.cn"]),
    (f"记住我的身份证号是{ZH_ID}", "记住我的身份证号是[id]", [ZH_ID, ZH_ID[:17], ZH_ID[6:14]]),
    (f"记住我的银行卡号是{ZH_CARD}", "记住我的银行卡号是[card]", [ZH_CARD, ZH_CARD[-8:]]),
    ("记住我的API密钥是abcd1234efgh5678", "记住我的API密钥是[secret]", ["abcd1234efgh5678", "efgh5678"]),
    ("记住我的密码是 P@ss w0rd，别告诉别人", "记住我的密码是 [secret],别告诉别人", ["P@ss", "w0rd"]),
]
EN = [
    ("remember that my phone number is +86 139 8765 4321", "remember that my phone number is [phone]",
     ["139 8765 4321", "13987654321", "8765 4321"]),
    ("remember that my email is alice.w@example.org", "remember that my email is [email]",
     ["alice.w", "@example.org"]),
    (f"remember that my ID number is {EN_ID}", "remember that my ID number is [id]", [EN_ID, EN_ID[:17]]),
    (f"remember that my card number is {grouped(EN_CARD)}", "remember that my card number is [card]",
     [grouped(EN_CARD), EN_CARD, EN_CARD[-4:] + " ", grouped(EN_CARD)[-9:]]),
    ("remember that my api key is zyx987wvu654tsr3", "remember that my api key is [secret]",
     ["zyx987wvu654tsr3", "wvu654"]),
    ("remember that my password is correct horse battery staple.", "remember that my password is [secret].",
     ["correct horse", "horse", "battery", "staple"]),
]


def chat_app() -> Flask:
    app = Flask(__name__)

    @app.post("/chat")
    def chat():
        return jsonify(received=request.get_json())

    return app


def redis_bytes(url: str) -> bytes:
    """Every key and value of every type in the private Redis, rq's compressed payloads decompressed."""
    client = redis.Redis.from_url(url)
    out: list[bytes] = []
    for key in client.scan_iter("*"):
        out.append(key)
        kind = client.type(key)
        if kind == b"string":
            values = [client.get(key)]
        elif kind == b"hash":
            values = [part for pair in client.hgetall(key).items() for part in pair]
        elif kind == b"list":
            values = client.lrange(key, 0, -1)
        elif kind == b"set":
            values = list(client.smembers(key))
        elif kind == b"zset":
            values = client.zrange(key, 0, -1)
        elif kind == b"stream":
            values = [part for _, fields in client.xrange(key) for pair in fields.items() for part in pair]
        else:
            values = []
        for value in values:
            value = value or b""
            out.append(value)
            try:
                out.append(zlib.decompress(value))
            except zlib.error:
                pass
    return b"\n".join(out)


def sqlite_bytes(db: str) -> bytes:
    """The database file with its WAL and shared-memory files, as they are on disk."""
    return b"\n".join(Path(db + suffix).read_bytes() for suffix in ("", "-wal", "-shm")
                      if Path(db + suffix).exists())


def forms(raw: str) -> list[bytes]:
    """The bytes a raw value could be stored as: UTF-8, and JSON's \\u escapes for non-ASCII."""
    escaped = raw.encode("ascii", "backslashreplace").replace(b"\\x", b"\\u00")
    return [raw.encode(), raw.lower().encode(), raw.upper().encode(), escaped]


def assert_absent(blob: bytes, raws: list[str], where: str) -> None:
    for raw in raws:
        for form in forms(raw):
            assert form not in blob, f"{raw!r} is in {where}"


@pytest.mark.parametrize("cases", [ZH, EN], ids=["zh", "en"])
def test_pii_never_reaches_redis_or_sqlite(redis_url, db, cases):
    app = chat_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url)
    client = app.test_client()
    for n, (message, _, _) in enumerate(cases):
        reply = client.post("/chat", json={"message": message, "session_id": "s1", "message_id": f"m{n}"},
                            headers={"X-User-Id": "alice"})
        assert reply.status_code == 200
        assert reply.json["received"]["message"].endswith(message)  # the app itself sees the message

    raws = [raw for _, _, pieces in cases for raw in pieces]
    assert_absent(b"".join(p.read_bytes() for p in Path(db).parent.glob(Path(db).name + ".outbox*")), raws,
                  "the outbox file")  # written behind: masked before it is written
    send_waiting()
    queue = Queue(defaults.QUEUE_NAME, connection=redis.Redis.from_url(redis_url), serializer=defaults.SERIALIZER)
    assert queue.count == len(cases)  # every sentence was captured: one job per message
    waiting = redis_bytes(redis_url)
    assert_absent(waiting, raws, "Redis before the worker ran")
    for placeholder in PLACEHOLDERS:
        assert placeholder.encode() in waiting

    assert drain(redis_url) == len(cases)

    stored = Store(db).memories("alice", include_inactive=True)
    assert sorted(m["excerpt"] for m in stored) == sorted(excerpt for _, excerpt, _ in cases)
    for memory in stored:
        assert any(p in memory["content"] for p in PLACEHOLDERS)
    on_disk = sqlite_bytes(db)
    assert_absent(on_disk, raws, "the SQLite files")
    for _, excerpt, _ in cases:  # the rest of each sentence is there, as written
        assert excerpt.encode() in on_disk
    assert_absent(redis_bytes(redis_url), raws, "Redis after the worker ran")
