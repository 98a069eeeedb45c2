"""PII end to end: through the real middleware, a real Redis + rq worker, into the SQLite files.

A user states a mobile number, an e-mail, a resident ID, a bank card, an API key and a
password, each in a sentence a shipped rule captures. Before the worker runs, Redis (job
payloads decompressed, the pending state) holds the placeholders and none of the raw
values; after it, neither Redis nor the database, its WAL and its shared-memory file hold
them, while the rest of each sentence is stored. While Redis is down, the spool file holds the
same masked jobs; a sentence in a sensitive category is neither queued nor stored.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from rq import Queue
from rq.serializers import JSONSerializer

from memo_mw import MemoryMiddleware, defaults
from memo_mw.privacy import PLACEHOLDERS, luhn_ok
from memo_mw.queue import RedisQueue
from memo_mw.store import Store

from .conftest import all_redis_text, drain, free_port
from .test_middleware import contents, echo_app


def valid_cn_id(first17: str) -> str:
    """The resident ID number with the right check character for its first 17 digits."""
    total = sum(int(d) * w for d, w in zip(first17, (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)))
    return first17 + "10X98765432"[total % 11]  # (ISO 7064 MOD 11-2)


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
    app = echo_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, trust_user_header=True, db=db, redis_url=redis_url)
    client = app.test_client()
    for n, (message, _, _) in enumerate(cases):
        reply = client.post("/chat", json={"message": message, "session_id": "s1", "message_id": f"m{n}"},
                            headers={"X-User-Id": "alice"})
        assert reply.status_code == 200
        assert reply.json["received"]["message"].endswith(message)  # the app itself sees the message

    raws = [raw for _, _, pieces in cases for raw in pieces]
    queue = Queue(defaults.QUEUE_NAME, connection=redis.Redis.from_url(redis_url), serializer=JSONSerializer)
    assert queue.count >= len(cases)  # every sentence was captured: a job per message (and recall counts)
    waiting = all_redis_text(redis_url)
    assert_absent(waiting, raws, "Redis before the worker ran")
    for placeholder in PLACEHOLDERS:
        assert placeholder.encode() in waiting  # the masked statements are there: the check looked at them

    drain(redis_url)

    with Store(db) as store:
        stored = store.list("alice", include_inactive=True)
    assert sorted(m["excerpt"] for m in stored) == sorted(excerpt for _, excerpt, _ in cases)
    for memory in stored:
        assert any(p in memory["content"] for p in PLACEHOLDERS)
    on_disk = sqlite_bytes(db)
    assert_absent(on_disk, raws, "the SQLite files")
    for _, excerpt, _ in cases:  # the rest of each sentence is there, as written
        assert excerpt.encode() in on_disk
    assert_absent(all_redis_text(redis_url), raws, "Redis after the worker ran")


@pytest.mark.parametrize("cases", [ZH, EN], ids=["zh", "en"])
def test_pii_never_reaches_the_spool_while_redis_is_down(db, tmp_path, cases):
    spool = str(tmp_path / "spool")
    queue = RedisQueue(f"redis://127.0.0.1:{free_port()}/0", spool=spool, timeout=0.5)
    app = echo_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, trust_user_header=True, db=db, queue=queue)
    client = app.test_client()
    try:
        for n, (message, _, _) in enumerate(cases):
            client.post("/chat", json={"message": message, "message_id": f"m{n}"}, headers={"X-User-Id": "alice"})
        assert queue.stats["spooled"] == len(cases)
    finally:
        queue.close()
    spooled = Path(spool).read_bytes()
    assert_absent(spooled, [raw for _, _, pieces in cases for raw in pieces], "the spool file")
    assert all(placeholder.encode() in spooled for placeholder in PLACEHOLDERS)


SENSITIVE = [
    pytest.param("I have diabetes and I like green tea", id="en-health"),
    pytest.param("我有抑郁症，我喜欢喝乌龙茶", id="zh-health"),
]


@pytest.mark.parametrize("message", SENSITIVE)
def test_sensitive_categories_are_never_stored_nor_queued(redis_url, db, message):
    app = echo_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, trust_user_header=True, db=db, redis_url=redis_url)
    reply = app.test_client().post("/chat", json={"message": message}, headers={"X-User-Id": "alice"}).json
    assert reply["capture"] == "sensitive"
    assert message.split()[-1].encode() not in all_redis_text(redis_url)
    drain(redis_url)
    assert contents(db, "alice") == []
