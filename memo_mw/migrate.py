"""``memo-mw migrate --from DB --to DB``: copy a whole store from one engine to the other (a SQLite file
into PostgreSQL when one host is no longer enough, and back), every table, ids kept, then check that each
table holds as many rows on both sides. Stop the web processes' writes and the workers first: what is
written to the source meanwhile is not copied (the check then says so)."""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

from .exceptions import DATABASE_ERRORS, MemoError
from .store import Store

#: Every table of the store, parents first (``superseded_by`` points into memories).
TABLES = ("memories", "history", "history_off", "processed_jobs", "audit", "forget_markers", "edit_markers",
          "topic_counts", "insights")
#: Rows per write transaction.
BATCH = 1000


class MigrateError(MemoError):
    """The destination is not empty, or the copy does not hold what the source does."""


def counts(store: Store) -> dict[str, int]:
    return {table: store.db.execute(f"select count(*) from {table}").fetchone()[0] for table in TABLES}


def copy(source: Store, target: Store, progress: Callable[[int], None] = lambda n: None) -> dict[str, int]:
    """Copy every row of ``source`` into the empty ``target``; ``progress(n)`` after each batch of n rows.
    Returns the rows per table, checked on both sides."""
    if any(counts(target).values()):
        raise MigrateError(f"{target.db.name} already holds memo-mw data; migrate copies into an empty store")
    for table in TABLES:
        columns = [c for c in source.db.columns(table) if c != "tsv"]  # (PostgreSQL's is made from terms)
        insert = f"insert into {table} ({', '.join(columns)}) values ({', '.join('?' * len(columns))})"
        for rows in source.db.stream(f"select {', '.join(columns)} from {table}", BATCH):
            with target.write():
                target.db.executemany(insert, rows)
            progress(len(rows))
        if "id" in columns:
            target.db.ids_follow(table)
    copied, kept = counts(source), counts(target)
    if copied != kept:
        differ = ", ".join(f"{t}: {copied[t]} -> {kept[t]}" for t in TABLES if copied[t] != kept[t])
        raise MigrateError(f"the copy does not match the source ({differ}); was something writing to it?")
    return kept


@click.command()
@click.option("--from", "source", required=True, help="The store to copy: a SQLite file or a postgresql:// URL.")
@click.option("--to", "target", required=True, help="The empty store to copy into (made if need be).")
def migrate(source: str, target: str) -> None:
    """Copy a whole memory store into another engine (SQLite to PostgreSQL, or back), with a row count
    check at the end. Stop the writers first: the web processes' pages and the workers."""
    try:
        with Store(source, readonly=True) as src, Store(target) as dst:
            total = sum(counts(src).values())
            with click.progressbar(length=total, label=f"copying {total} rows", file=sys.stderr) as bar:
                done = copy(src, dst, bar.update)
    except (MemoError, *DATABASE_ERRORS) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo("copied and checked: " + ", ".join(f"{table} {n}" for table, n in done.items()))
