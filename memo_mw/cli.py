"""``memo-mw``: the command line, a thin layer over the library.

Commands: ``worker``, ``replay``, ``memories``, ``recall``, ``forget``, ``rules check``,
``rules test``. Library errors become a one-sentence ``click`` error and exit status 1.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from . import defaults
from .exceptions import MemoError
from .funnel import STAGES, Funnel
from .pipeline import remember_payload
from .recall import RecallConfig, score
from .rules import check_rules, load_rules
from .store import Store

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _load_rules(paths: tuple[str, ...]):
    try:
        return load_rules(list(paths) or None)
    except MemoError as exc:
        raise click.ClickException(str(exc)) from exc


def _open_store(db: str, *, readonly: bool) -> Store:
    if readonly and not Path(db).is_file():
        raise click.ClickException(f"no memory database at {db!r}; check --db")
    try:
        return Store(db, readonly=readonly)
    except MemoError as exc:
        raise click.ClickException(str(exc)) from exc


db_option = click.option("--db", default="memo.db", show_default=True, help="Path of the SQLite memory database.")
rules_option = click.option("--rules", "rules_paths", multiple=True,
                            help="Rule file or folder (repeatable). Default: the shipped zh and en rules.")


@click.group()
@click.version_option(package_name="memo-mw")
def main() -> None:
    """memo-mw: rule-based long-term memory for chat apps."""


@main.command()
@click.option("--url", envvar="MEMO_REDIS_URL", default=DEFAULT_REDIS_URL, show_default=True,
              help="Redis URL (env MEMO_REDIS_URL).")
@click.option("--queue", "queue_name", default=defaults.QUEUE_NAME, show_default=True, help="Queue to listen on.")
@click.option("--burst", is_flag=True, help="Quit when the queue is empty.")
@click.option("--name", default=None, help="Worker name (default: random).")
def worker(url: str, queue_name: str, burst: bool, name: str | None) -> None:
    """Run an rq worker for memo-mw's jobs (JSON serializer, the memo queue).

    Same as: rq worker --url URL --serializer rq.serializers.JSONSerializer memo
    """
    import redis
    from rq import Worker

    connection = redis.Redis.from_url(url)
    try:
        connection.ping()
    except redis.RedisError as exc:
        raise click.ClickException(f"cannot reach Redis at {url}: {exc}") from exc
    Worker([queue_name], connection=connection, serializer=defaults.SERIALIZER, name=name).work(burst=burst)


@main.command()
@click.argument("file", type=click.File("r", encoding="utf-8"))
@db_option
@rules_option
@click.option("--json", "as_json", is_flag=True, help="Print the counts as one JSON object.")
def replay(file, db: str, rules_paths: tuple[str, ...], as_json: bool) -> None:
    """Run a chat log through the funnel and into the store, synchronously.

    FILE is JSON lines: {"user", "session", "ts", "text"}, optionally "id" (message id,
    kept in source_ids) and "role" (default "user"; other roles are never stored).
    The message's ts is the clock. Prints how many lines stopped at each funnel stage.
    """
    funnel = Funnel(_load_rules(rules_paths))
    store = _open_store(db, readonly=False)
    counts: collections.Counter[str] = collections.Counter()
    lines = file.readlines()
    show_bar = sys.stderr.isatty()
    started = time.perf_counter()
    with click.progressbar(lines, label="replay", file=sys.stderr if show_bar else open(os.devnull, "w")) as bar:
        batch = 0
        store.db.conn.execute("BEGIN")
        for number, raw in enumerate(bar, 1):
            _replay_line(raw, number, funnel, store, counts)
            batch += 1
            if batch >= 500:  # one transaction per batch: thousands of lines a second
                store.db.conn.execute("COMMIT")
                store.db.conn.execute("BEGIN")
                batch = 0
        store.db.conn.execute("COMMIT")
    store.close()
    counts["seconds"] = round(time.perf_counter() - started, 3)
    order = ["lines", "invalid", "not_user", *STAGES, "stored", "merged", "superseded", "duplicate_job",
             "forgotten", "seconds"]
    if as_json:
        click.echo(_dump({k: counts.get(k, 0) for k in order}))
    else:
        for name in order:
            click.echo(f"{name:<14}{counts.get(name, 0):>10}")


def _replay_line(raw: str, number: int, funnel: Funnel, store: Store, counts: collections.Counter) -> None:
    if not raw.strip():
        return
    counts["lines"] += 1
    try:
        record = json.loads(raw)
        user, text, ts = str(record["user"]), record["text"], float(record["ts"])
        if not isinstance(text, str):
            raise TypeError("text is not a string")
    except (ValueError, KeyError, TypeError) as exc:
        counts["invalid"] += 1
        click.echo(f"line {number}: skipped, not a {{user, session, ts, text}} record ({exc})", err=True)
        return
    if record.get("role", "user") != "user":
        counts["not_user"] += 1
        return
    result = funnel.process(text)
    counts[result.stage] += 1
    message_id = record.get("id")
    if result.captured:
        payload = remember_payload(result, user_id=user, session_id=record.get("session"), ts=ts,
                                   message_id=str(message_id) if message_id is not None else None)
        for outcome in store.remember(payload):
            counts[outcome] += 1
    elif result.stage == "forget":
        counts["forgotten"] += store.forget(user, match=result.forget_match, ts=int(ts), reason="replay")


@main.command()
@db_option
@click.option("--user", default=None, help="Only this user's memories (default: every user's).")
@click.option("--all", "include_all", is_flag=True, help="Include superseded, expired and pending ones.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
def memories(db: str, user: str | None, include_all: bool, as_json: bool) -> None:
    """List stored memories (active ones unless --all)."""
    with _open_store(db, readonly=True) as store:
        rows = store.memories(user, include_inactive=include_all)
    if as_json:
        click.echo(_dump(rows))
        return
    for m in rows:
        state = "" if m["active"] else f" [{m['status']}]"
        click.echo(f"{m['id']:>6}  {m['user_id']:<16} {m['type']:<11} {m['content']}{state}")


@main.command()
@db_option
@rules_option
@click.option("--user", default=None, help="Whose memories to search.")
@click.option("--k", default=defaults.RECALL_K, show_default=True, help="How many memories at most.")
@click.option("--now", type=float, default=None, help="The clock, epoch seconds (default: now).")
@click.option("--budget", default=defaults.RECALL_BUDGET_CHARS, show_default=True, help="Character budget.")
@click.option("--batch", type=click.File("r", encoding="utf-8"), default=None,
              help='JSON lines {"user", "query", "k", "now"}; prints one JSON array per line.')
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.argument("query", required=False)
def recall(db: str, rules_paths: tuple[str, ...], user: str | None, k: int, now: float | None, budget: int,
           batch, as_json: bool, query: str | None) -> None:
    """Rank a user's memories for QUERY, as the middleware would (read-only: hits are not counted)."""
    funnel = Funnel(_load_rules(rules_paths))
    if batch is None and (user is None or query is None):
        raise click.UsageError("give --user and QUERY, or --batch FILE")
    with _open_store(db, readonly=True) as store:
        def ranked(u: str, q: str, kk: int, clock: float | None) -> list[dict]:
            return score(store.memories(u), q, now=clock, config=RecallConfig(k=kk, budget=budget),
                         recall_all=funnel.is_recall_all(q))

        if batch is None:
            rows = ranked(user, query, k, now)
            if as_json:
                click.echo(_dump(rows))
            else:
                for m in rows:
                    click.echo(f"{m['score']:.3f}  {m['content']}  ({m['type']})")
            return
        for number, raw in enumerate(batch, 1):
            if not raw.strip():
                continue
            try:
                item = json.loads(raw)
                click.echo(_dump(ranked(str(item["user"]), str(item["query"]), int(item.get("k", k)),
                                        item.get("now", now))))
            except (ValueError, KeyError, TypeError) as exc:
                raise click.ClickException(f"--batch line {number}: not a {{user, query}} record ({exc})") from exc


@main.command()
@db_option
@click.option("--user", required=True, help="Whose memories to delete.")
@click.option("--match", default=None, help="Only memories matching this text (default: all of them).")
def forget(db: str, user: str, match: str | None) -> None:
    """Physically delete a user's memories (all, or those matching --match)."""
    with _open_store(db, readonly=False) as store:
        count = store.forget(user, match=match, ts=int(time.time()), reason="cli")
    click.echo(f"deleted {count} memories of {user}")


@main.group()
def rules() -> None:
    """Check and try the YAML rules."""


@rules.command("check")
@click.argument("paths", nargs=-1)
def rules_check(paths: tuple[str, ...]) -> None:
    """Validate rule files (default: the shipped ones); list every problem and exit 1 if any."""
    problems = check_rules(list(paths) or None)
    if problems:
        for problem in problems:
            click.echo(problem, err=True)
        raise SystemExit(1)
    rule_set = load_rules(list(paths) or None)
    click.echo(f"ok: {len(rule_set.files)} files, {len(rule_set.triggers)} triggers")


@rules.command("test")
@rules_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.argument("text")
def rules_test(rules_paths: tuple[str, ...], as_json: bool, text: str) -> None:
    """Show which gate passed or stopped TEXT, and the memory it would store."""
    result = Funnel(_load_rules(rules_paths)).process(text)
    if as_json:
        click.echo(_dump({"stage": result.stage, "trace": result.trace,
                          "candidates": [c.as_dict() for c in result.candidates],
                          "forget": {"scope": result.forget_scope, "match": result.forget_match}
                          if result.stage == "forget" else None}))
        return
    for gate, outcome in result.trace:
        click.echo(f"{gate:<10} {outcome}")
    click.echo(f"result     {result.stage}")
    for c in result.candidates:
        click.echo(f"memory     type={c.type} key={c.key} polarity={c.polarity:+d} summary={c.content}")
