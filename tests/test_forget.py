"""Forgetting for real, through the middleware and a real worker, in both languages."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memo_mw import MemoryMiddleware
from memo_mw.store import Store

from .conftest import drain
from .test_loop import all_redis_text, chat_app, plain


def database_bytes(db: str) -> bytes:
    return b"".join(p.read_bytes() for p in Path(db).parent.iterdir() if p.name.startswith(Path(db).name))


@pytest.mark.parametrize("statements, forget, gone, kept", [
    pytest.param(["我喜欢看恐怖片", "我住在杭州西湖区"], "清除你记住的关于我的一切",
                 ["恐怖片", "杭州西湖区"], [], id="zh-all"),
    pytest.param(["I play tennis every sunday", "I love zanzibarian oolong"], "erase everything you know about me",
                 ["tennis", "zanzibarian"], [], id="en-all"),
    pytest.param(["我喜欢看恐怖片", "我住在杭州西湖区"], "把我喜欢看恐怖片这条删掉",
                 ["恐怖片"], ["住在杭州西湖区"], id="zh-match"),
    pytest.param(["I play tennis every sunday", "I love zanzibarian oolong"], "forget that I play tennis",
                 ["tennis"], ["likes zanzibarian oolong"], id="en-match"),
])
def test_forget_through_the_middleware(redis_url, db, statements, forget, gone, kept):
    app = chat_app()
    app.wsgi_app = MemoryMiddleware(app.wsgi_app, db=db, redis_url=redis_url)
    client = app.test_client()
    for i, text in enumerate(statements):
        client.post("/chat", **plain(text, message_id=f"a{i}"))
        client.post("/chat", **plain(text, user="bob", message_id=f"b{i}"))
    drain(redis_url)

    reply = client.post("/chat", **plain(forget)).json
    recalled = " ".join(m["content"] for m in reply["memories"])
    for word in gone:  # from the request that asks, before any job has run
        assert word not in recalled
    drain(redis_url)

    assert [m["content"] for m in Store(db).memories("alice", include_inactive=True)] == kept
    assert len(Store(db).memories("bob")) == len(statements)  # another user is never touched
    client.post("/chat", **plain("bob's memories are his own", user="bob"))
    for word in gone:
        assert word.encode() in database_bytes(db)  # bob still has them ...
    client.post("/chat", **plain(forget, user="bob"))
    drain(redis_url)
    for word in gone:  # ... and once he forgets too, the text is in no database file, nor in Redis
        assert word.encode() not in database_bytes(db)
        assert word.encode() not in all_redis_text(redis_url)
    audit = sqlite3.connect(db).execute("select user_id, action, count from audit order by id").fetchall()
    action = "forget_all" if not kept else "forget_match"
    assert audit == [("alice", action, len(gone)), ("bob", action, len(gone))]
    columns = [r[1] for r in sqlite3.connect(db).execute("PRAGMA table_info(audit)")]
    assert columns == ["id", "user_id", "action", "count", "at", "reason"]  # no content column
