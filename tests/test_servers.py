"""The private servers the tests start (tests/servers.py): the PostgreSQL one is ours, not the system's,
and each schema URL sees only its own schema."""

from __future__ import annotations

import socket

import psycopg

from .servers import PostgresServer


def test_postgres_server_answers_on_a_port_of_its_own(postgres_server):
    with psycopg.connect(postgres_server.url, autocommit=True) as conn:
        port, encoding, user, fsync = (conn.execute(f"show {name}").fetchone()[0]
                                       for name in ("port", "server_encoding", "is_superuser", "fsync"))
        database = conn.execute("select current_database()").fetchone()[0]
    assert postgres_server.port != 5432 and int(port) == postgres_server.port
    assert (encoding, user, fsync, database) == ("UTF8", "on", "off", "memo")


def test_schema_urls_are_isolated_from_each_other(postgres_server, postgres_url):
    other = postgres_server.new_schema_url()
    try:
        with psycopg.connect(postgres_url, autocommit=True) as a, psycopg.connect(other, autocommit=True) as b:
            schema = postgres_url.rsplit("%3D", 1)[1]
            assert a.execute("show search_path").fetchone()[0] == schema
            assert a.execute("select current_schema()").fetchone()[0] == schema
            a.execute("create table notes (body text)")
            a.execute("insert into notes values ('mine')")
            assert a.execute("select body from notes").fetchall() == [("mine",)]
            assert b.execute("select to_regclass('notes')").fetchone()[0] is None
            b.execute("create table notes (body text)")
            assert b.execute("select count(*) from notes").fetchone()[0] == 0
    finally:
        postgres_server.drop_schema(other)
    with psycopg.connect(postgres_server.url) as conn:
        gone = conn.execute("select count(*) from pg_namespace where nspname = %s", [other.rsplit("%3D", 1)[1]])
        assert gone.fetchone()[0] == 0


def test_a_stopped_postgres_server_is_gone_with_its_data(postgres_server, tmp_path):
    """stop() ends the server and removes its data (postgres_server only for its skip, or failure under CI)."""
    server = PostgresServer(tmp_path)
    server.start()
    data = server.data
    assert data.is_dir() and server.port != postgres_server.port
    server.stop()
    assert not data.exists()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", server.port)) != 0
