"""``memo-mw``: the command line, a thin layer over the library.

Commands: ``worker``, ``replay``, ``memories``, ``recall``, ``forget``, ``maintain``,
``insights``, ``rules check``, ``rules test``. Library and database errors become a one-sentence ``click`` error and
exit status 1, never a traceback.
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import sqlite3
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from . import counters, defaults, maintenance
from . import insights as profile
from .adapters import clean_id
from .exceptions import MemoError
from .funnel import STAGES, Funnel
from .pipeline import Recaller, remember_payload
from .recall import RecallConfig
from .rules import check_rules, load_rules
from .store import Store, check_writable
from .text import stable_id
from .userstate import UserState, forget_marker

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"

#: The counts ``replay`` prints, in this order: input lines, then each funnel stage, then
#: what the store did with the captured ones.
REPLAY_COUNTS = ("lines", "invalid", "not_user", *STAGES, "stored", "merged", "superseded", "duplicate_job",
                 "discarded", "forgotten")

#: Lines per transaction in ``replay``: one commit per line would cap it at a few hundred a second.
REPLAY_BATCH = 500


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _load_rules(paths: tuple[str, ...]):
    try:
        return load_rules(list(paths) or None)
    except MemoError as exc:
        raise click.ClickException(str(exc)) from exc


@contextlib.contextmanager
def _db_errors(db: str) -> Iterator[None]:
    """A database that turns out to be unusable midway is a one-line error, not a traceback."""
    try:
        yield
    except sqlite3.Error as exc:
        raise click.ClickException(f"cannot use {db!r} as the memory database: {exc}") from exc


def _open_store(db: str, *, readonly: bool, must_exist: bool = False) -> Store:
    """Open the store; reading (or deleting from) a database that is not there is an error, not an empty result."""
    if (readonly or must_exist) and not Path(db).is_file():
        raise click.ClickException(f"no memory database at {db!r}; check --db")
    try:
        store = Store(db, readonly=readonly)
    except MemoError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        with _db_errors(db):
            if not store.db["memories"].exists():
                raise click.ClickException(f"{db!r} is not a memo-mw database (it has no memories table); check --db")
    except click.ClickException:
        store.close()
        raise
    return store


db_option = click.option("--db", default="memo.db", show_default=True, help="Path of the SQLite memory database.")
rules_option = click.option("--rules", "rules_paths", multiple=True,
                            help="Rule file or folder (repeatable). Default: the shipped zh and en rules.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="memo-mw")
def main() -> None:
    """memo-mw: rule-based long-term memory for chat apps."""


@main.command()
@click.option("--url", envvar="MEMO_REDIS_URL", default=DEFAULT_REDIS_URL, show_default=True,
              help="Redis URL (env MEMO_REDIS_URL).")
@click.option("--queue", "queue_name", default=defaults.QUEUE_NAME, show_default=True, help="Queue to listen on.")
@click.option("--burst", is_flag=True, help="Quit when the queue is empty.")
@click.option("--name", default=None, help="Worker name (default: random).")
@click.option("--db", "dbs", multiple=True, envvar="MEMO_DB",
              help="Check that this memory database opens and is writable before starting (repeatable; env MEMO_DB).")
@click.option("--simple", is_flag=True,
              help="Run jobs in this process (rq's SimpleWorker) instead of a forked child per job: faster, "
                   "but a job's crash, or Redis failing mid-job, stops the worker.")
def worker(url: str, queue_name: str, burst: bool, name: str | None, dbs: tuple[str, ...], simple: bool) -> None:
    """Run an rq worker for memo-mw's jobs (JSON serializer, the memo queue, with rq's
    scheduler so failed jobs are retried).

    Same as: rq worker --url URL --with-scheduler --serializer memo_mw.queue.JobSerializer memo
    (plus a shorter maintenance interval, so the jobs of a worker that died are retried sooner).
    Each remember job stores the remember jobs waiting behind it too, in one transaction
    (WORKER_BATCH). --simple runs jobs in this process, keeping the database open between them.
    """
    import redis
    from rq import SimpleWorker, Worker

    for path in dbs:  # the jobs name their database; a bad one given here fails now, not per job
        try:
            check_writable(path)
        except MemoError as exc:
            raise click.ClickException(str(exc)) from exc
    try:
        connection = redis.Redis.from_url(url)
        connection.ping()
    except (redis.RedisError, ValueError) as exc:
        raise click.ClickException(f"cannot reach Redis at {url}: {exc}") from exc
    worker_class = SimpleWorker if simple else Worker
    worker_class([queue_name], connection=connection, serializer=defaults.SERIALIZER, name=name,
                 maintenance_interval=defaults.WORKER_MAINTENANCE_INTERVAL).work(burst=burst, with_scheduler=True)


@main.command()
@click.argument("file", type=click.File("r", encoding="utf-8"))
@db_option
@rules_option
@click.option("--json", "as_json", is_flag=True, help="Print the counts as one JSON object.")
def replay(file, db: str, rules_paths: tuple[str, ...], as_json: bool) -> None:
    """Run a chat log through the funnel and into the store, synchronously.

    FILE is JSON lines (- for stdin): {"user", "session", "ts", "text"}, optionally "id"
    (message id, kept in source_ids) and "role" (default "user"; other roles are never
    stored). ts is epoch seconds and is the clock. Lines go through the same funnel and
    store code as the middleware's jobs, in order. Prints how many lines stopped at each
    funnel stage and what the store did with the captured ones; a progress bar on a terminal.
    """
    funnel = Funnel(_load_rules(rules_paths))
    store = _open_store(db, readonly=False)
    counts: collections.Counter[str] = collections.Counter()
    started = time.perf_counter()
    conn = store.db.conn
    number = 0
    try:
        with _db_errors(db), _replay_lines(file) as lines:
            conn.execute("BEGIN")
            for number, raw in lines:
                _replay_line(raw, number, funnel, store, counts)
                if number % REPLAY_BATCH == 0:
                    conn.execute("COMMIT")
                    conn.execute("BEGIN")
            conn.execute("COMMIT")
            if counts["forgotten"]:
                # Forgetting is physical: the deleted rows leave the WAL file too.
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except click.ClickException as exc:
        if number:
            exc.message = f"line {number}: {exc.message} (the lines before it were stored)"
        raise
    finally:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("COMMIT")  # keep what was replayed before an error or Ctrl-C
        store.close()
    seconds = time.perf_counter() - started
    result: dict[str, Any] = {k: counts.get(k, 0) for k in REPLAY_COUNTS}
    result["seconds"] = round(seconds, 3)
    if as_json:
        click.echo(_dump(result))
    else:
        for name, value in result.items():
            click.echo(f"{name:<14}{value:>10}")


@contextlib.contextmanager
def _replay_lines(file) -> Iterator[Iterator[tuple[int, str]]]:
    """Numbered lines of the log; with a progress bar when stderr is a terminal."""
    if not sys.stderr.isatty():
        yield enumerate(file, 1)  # streamed: a log larger than memory is fine
        return
    lines = file.readlines()
    with click.progressbar(enumerate(lines, 1), length=len(lines), label="replay", file=sys.stderr,
                           show_pos=True, update_min_steps=max(1, len(lines) // 200)) as bar:
        yield bar


class _InvalidLine(ValueError):
    pass


def _json_object(raw: str) -> dict[str, Any]:
    """One JSON-lines line as a JSON object, or _InvalidLine saying why not."""
    try:
        record = json.loads(raw)
    except ValueError as exc:
        raise _InvalidLine(f"not JSON ({exc})") from None
    if not isinstance(record, dict):
        raise _InvalidLine("not a JSON object")
    return record


def _parse_line(raw: str) -> dict[str, Any]:
    """One log line as the values the middleware would read from a request, or _InvalidLine."""
    record = _json_object(raw)
    user = clean_id(record.get("user"))
    if user is None:
        raise _InvalidLine("no user (a non-empty string or number)")
    text = record.get("text")
    if not isinstance(text, str):
        raise _InvalidLine("no text (a string)")
    ts = record.get("ts")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or not 0 < ts < 1e11:
        raise _InvalidLine(f"ts must be epoch seconds, not {ts!r}")
    role = record.get("role")
    if role is None:
        role = "user"
    if not isinstance(role, str):
        raise _InvalidLine(f"role must be a string, not {role!r}")
    return {"user": user, "text": text, "ts": float(ts), "role": role,
            "session": clean_id(record.get("session")), "id": clean_id(record.get("id"))}


def _replay_line(raw: str, number: int, funnel: Funnel, store: Store, counts: collections.Counter) -> None:
    if not raw.strip():
        return
    counts["lines"] += 1
    try:
        line = _parse_line(raw)
    except _InvalidLine as exc:
        counts["invalid"] += 1
        click.echo(f"line {number}: skipped, not a {{user, session, ts, text}} record: {exc}", err=True)
        return
    if line["role"] != "user":
        counts["not_user"] += 1  # context only: the assistant's words are never the user's memories
        return
    result = funnel.process(line["text"])
    counts[result.stage] += 1
    if result.stage != "forget":
        _count_topics(store, funnel, line)
    # The jobs the middleware would enqueue for this message, in the same order (its ts is
    # the job's time key there too), applied as the worker would apply them.
    if result.stage == "forget":
        counts["forgotten"] += store.forget(line["user"], match=result.forget_match, ts=int(line["ts"]),
                                            reason="replay")
    if result.candidates:
        payload = remember_payload(result, user_id=line["user"], session_id=line["session"], ts=line["ts"],
                                   message_id=line["id"], time_key=line["ts"])
        for outcome in store.remember(payload):
            counts[outcome] += 1


def _count_topics(store: Store, funnel: Funnel, line: dict[str, Any]) -> None:
    """The message's topic counts (memo_mw.counters), as the middleware counts them, in the week of
    its ts; once per message (user, ts, id, length), so replaying a log twice counts nothing twice."""
    key = "memo-topics-" + stable_id(line["user"], line["ts"], line["id"] or "", len(line["text"]))
    if store.db.execute("select 1 from processed_jobs where job_key = ?", [key]).fetchone():
        return
    names = counters.count_keys(funnel.topics.tag(line["text"]), line["text"])
    counters.add(store, line["user"], {(counters.week_of(line["ts"]), name): 1 for name in names})
    store.db.execute("insert into processed_jobs (job_key, processed_at) values (?, ?)", [key, int(line["ts"])])


@main.command()
@db_option
@click.option("--user", default=None, help="Only this user's memories (default: every user's).")
@click.option("--all", "include_all", is_flag=True, help="Include inactive (superseded) ones.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array.")
def memories(db: str, user: str | None, include_all: bool, as_json: bool) -> None:
    """List stored memories (active ones unless --all), oldest first."""
    with _open_store(db, readonly=True) as store, _db_errors(db):
        rows = store.memories(user, include_inactive=include_all)
    if as_json:
        click.echo(_dump(rows))
        return
    for m in rows:
        state = "" if m["active"] else f" [{m['status']}]"
        click.echo(f"{m['id']:>6}  {m['user_id']:<16} {m['type']:<11} {m['content']}{state}")


def _batch_item(raw: str, default_k: int, default_now: float | None) -> tuple[str, str, int, float | None]:
    item = json.loads(raw)
    if not isinstance(item, dict):
        raise TypeError("not a JSON object")
    user, query = clean_id(item.get("user")), item.get("query")
    if user is None or not isinstance(query, str):
        raise KeyError("user and query are required")
    k = item.get("k")
    k = default_k if k is None else k
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise TypeError(f"k must be a non-negative integer, not {k!r}")
    now = item.get("now")
    now = default_now if now is None else now
    if now is not None and (isinstance(now, bool) or not isinstance(now, (int, float))):
        raise TypeError(f"now must be epoch seconds, not {now!r}")
    return user, query, k, None if now is None else float(now)


@main.command()
@db_option
@rules_option
@click.option("--user", default=None, help="Whose memories to search.")
@click.option("--k", default=defaults.RECALL_K, show_default=True, type=click.IntRange(min=0),
              help="How many memories at most.")
@click.option("--now", type=float, default=None, help="The clock, epoch seconds (default: now).")
@click.option("--budget", default=defaults.RECALL_BUDGET_CHARS, show_default=True, type=click.IntRange(min=1),
              help="Character budget of the memory lines.")
@click.option("--batch", type=click.File("r", encoding="utf-8"), default=None,
              help='JSON lines {"user", "query", "k", "now"} (k and now optional); prints one JSON array '
                   "per line, in order.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.argument("query", required=False)
def recall(db: str, rules_paths: tuple[str, ...], user: str | None, k: int, now: float | None, budget: int,
           batch, as_json: bool, query: str | None) -> None:
    """Rank a user's memories for QUERY, as the middleware would (read-only: hits are not counted)."""
    if batch is None and (user is None or query is None):
        raise click.UsageError("give --user and QUERY, or --batch FILE")
    if batch is not None and (user is not None or query is not None):
        raise click.UsageError("--batch FILE replaces --user and QUERY; give one or the other")
    funnel = Funnel(_load_rules(rules_paths))
    with _open_store(db, readonly=True), _db_errors(db):  # a clear error for a bad --db first
        recaller = Recaller(db, funnel, RecallConfig(k=k, budget=budget))

        def ranked(u: str, q: str, kk: int, clock: float | None) -> list[dict]:
            # Exactly the middleware's recall, forget requests in the query included.
            result, clock = funnel.process(q), time.time() if clock is None else clock
            forgets = [forget_marker(result.forget_match, clock)] if result.stage == "forget" else []
            return recaller.recall(u, q, now=clock, state=UserState([], forgets, set()),
                                   config=RecallConfig(k=kk, budget=budget))

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
                item = _batch_item(raw, k, now)
            except (ValueError, KeyError, TypeError) as exc:
                raise click.ClickException(f"--batch line {number}: not a {{user, query}} record ({exc})") from exc
            click.echo(_dump(ranked(*item)))


@main.command()
@db_option
@click.option("--user", required=True, help="Whose memories to delete.")
@click.option("--match", default=None, help="Only memories matching this text (default: all of them).")
@click.option("--url", envvar="MEMO_REDIS_URL", default=None,
              help="Redis of the middleware (env MEMO_REDIS_URL): also forget the user's pending memories "
                   "and waiting jobs there.")
@click.option("--queue", "queue_name", default=defaults.QUEUE_NAME, show_default=True, help="The jobs' queue.")
def forget(db: str, user: str, match: str | None, url: str | None, queue_name: str) -> None:
    """Physically delete a user's memories (all, or those matching --match); never another user's."""
    at = time.time()  # the server's: waiting statements are ordered against it (userstate.said_by)
    now = int(at)
    with _open_store(db, readonly=False, must_exist=True) as store, _db_errors(db):
        count = store.forget(user, match=match, ts=now, reason="cli", at=at, now=True)
    message = f"deleted {count} memories of {user}"
    if url:
        import redis
        from rq import Queue

        from .jobs import forget_waiting

        try:
            queue = Queue(queue_name, connection=redis.Redis.from_url(url), serializer=defaults.SERIALIZER)
            changed = forget_waiting(queue, user, forget_marker(match, now, at, pending_only=True))
        except (redis.RedisError, ValueError) as exc:
            raise click.ClickException(f"{message}, but could not reach Redis at {url}: {exc}") from exc
        message += f"; {changed} waiting jobs changed in Redis"
    click.echo(message)


@main.command()
@db_option
@click.option("--now", type=float, default=None, help="The clock, epoch seconds (default: now).")
@click.option("--json", "as_json", is_flag=True, help="Print the counts as one JSON object.")
def maintain(db: str, now: float | None, as_json: bool) -> None:
    """Expire tasks, delete expired ones left unconfirmed, resolve contradictions.

    What the `maintain` job does when `rq cron memo_mw.cron` schedules it.
    """
    with _open_store(db, readonly=False, must_exist=True) as store, _db_errors(db):
        counts = maintenance.maintain(store, now=int(time.time() if now is None else now))
    click.echo(_dump(counts) if as_json else maintenance.summary(counts))


@main.command("insights")
@db_option
@click.option("--user", default=None, help="Only this user (default: every user with counts or memories).")
@click.option("--now", type=float, default=None, help="The clock, epoch seconds (default: now).")
@click.option("--url", envvar="MEMO_REDIS_URL", default=None,
              help="Redis of the middleware (env MEMO_REDIS_URL): first move the topic counts waiting there.")
@click.option("--queue", "queue_name", default=defaults.QUEUE_NAME, show_default=True, help="The jobs' queue.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: the user's insights (an array), or "
                                                      "every user's (an object of arrays).")
def insights_command(db: str, user: str | None, now: float | None, url: str | None, queue_name: str,
                     as_json: bool) -> None:
    """Compute and store user insights from topic counts and memories, replacing the old ones.

    What the weekly `insights` job does when `rq cron memo_mw.cron` schedules it.
    """
    now = profile.now_or(now)
    with _open_store(db, readonly=False, must_exist=True) as store, _db_errors(db):
        if url:
            import redis

            try:
                counters.flush_redis(redis.Redis.from_url(url), queue_name, db, user)
            except (redis.RedisError, ValueError) as exc:
                raise click.ClickException(f"could not move the topic counts from Redis at {url}: {exc}") from exc
        users = [user] if user is not None else profile.users(store)
        result = {u: profile.run(store, u, now=now) for u in users}
    if as_json:
        click.echo(_dump(result[user] if user is not None else result))
        return
    for u, lines in result.items():
        for line in lines:
            click.echo(f"{u:<16} {line['confidence']:<7} {line['text']}")


@main.group()
def rules() -> None:
    """Check and try the YAML rules."""


@rules.command("check")
@click.argument("paths", nargs=-1)
def rules_check(paths: tuple[str, ...]) -> None:
    """Validate rule files or folders (default: the shipped ones).

    Lists every problem as file:line: rule id: problem and exits 1 if there is any.
    """
    problems = check_rules(list(paths) or None)
    if problems:
        for problem in problems:
            click.echo(problem, err=True)
        count = len(problems)
        raise click.ClickException(f"{count} problem{'s' if count != 1 else ''} in the rules")
    rule_set = load_rules(list(paths) or None)
    click.echo(f"ok: {len(rule_set.files)} files, {len(rule_set.triggers)} triggers")
    for path in rule_set.paths:
        click.echo(f"  {path}")


@rules.command("test")
@rules_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--file", "file", type=click.File("r", encoding="utf-8"), default=None,
              help='JSON lines ({"text"} or {"message"}, as replay reads; - for stdin) instead of TEXT: '
                   "runs every line and prints a summary table.")
@click.argument("text", required=False)
def rules_test(rules_paths: tuple[str, ...], as_json: bool, file, text: str | None) -> None:
    """Show which gate passed or stopped TEXT, and the memory it would store.

    With --file, run every line of a transcript and count where the lines stopped, what was
    captured by type, and which rules decided. Nothing is stored.
    """
    if (file is None) == (text is None):
        raise click.UsageError("give TEXT or --file FILE (one of them)")
    funnel = Funnel(_load_rules(rules_paths))
    if file is not None:
        _rules_test_file(funnel, file, as_json)
        return
    result = funnel.process(text)
    forget_info = {"scope": result.forget_scope, "match": result.forget_match} if result.stage == "forget" else None
    if as_json:
        click.echo(_dump({"stage": result.stage, "trace": result.trace,
                          "candidates": [c.as_dict() for c in result.candidates], "forget": forget_info}))
        return
    for gate, outcome in result.trace:
        click.echo(f"{gate:<10} {outcome}")
    click.echo(f"result     {result.stage}")
    for c in result.candidates:
        click.echo(f"memory     type={c.type} key={c.key} polarity={c.polarity:+d} summary={c.content}")
    if forget_info is not None:
        click.echo(f"forget     scope={result.forget_scope} match={result.forget_match or '-'}")


def _transcript_text(raw: str) -> str | None:
    """The user's text of one transcript line; None for another role; _InvalidLine if unreadable."""
    record = _json_object(raw)
    role = record.get("role")
    if role is not None and role != "user":
        return None
    text = record.get("text", record.get("message"))
    if not isinstance(text, str):
        raise _InvalidLine('no "text" (or "message") string')
    return text


def _rules_test_file(funnel: Funnel, file, as_json: bool) -> None:
    lines = invalid = not_user = 0
    stages: collections.Counter[str] = collections.Counter()
    types: collections.Counter[str] = collections.Counter()
    decided: collections.Counter[str] = collections.Counter()
    for number, raw in enumerate(file, 1):
        if not raw.strip():
            continue
        lines += 1
        try:
            text = _transcript_text(raw)
        except _InvalidLine as exc:
            invalid += 1
            click.echo(f"line {number}: skipped: {exc}", err=True)
            continue
        if text is None:
            not_user += 1
            continue
        result = funnel.process(text)
        stages[result.stage] += 1
        for c in result.candidates:
            types[c.type] += 1
            decided[c.rule_id] += 1
        for stage, outcome in result.trace:
            # The gates that stopped something: "en.neg.question: a question", "zh.forget.all (all)".
            if stage in ("negative", "sensitive", "forget"):
                decided[outcome.split(":")[0].split(" (")[0]] += 1
    summary = {"lines": lines, "invalid": invalid, "not_user": not_user,
               "stages": {stage: stages.get(stage, 0) for stage in STAGES},
               "types": dict(types.most_common()), "rules": dict(decided.most_common())}
    if as_json:
        click.echo(_dump(summary))
        return
    width = max([14, *(len(name) + 2 for name in decided)])
    for name in ("lines", "invalid", "not_user"):
        click.echo(f"{name:<{width}}{summary[name]:>8}")
    click.echo("\nstopped at / result")
    for stage, count in summary["stages"].items():
        click.echo(f"{stage:<{width}}{count:>8}")
    click.echo("\ncaptured by type")
    for name, count in summary["types"].items():
        click.echo(f"{name:<{width}}{count:>8}")
    click.echo("\nrule hits (memories made, or messages stopped)")
    for name, count in summary["rules"].items():
        click.echo(f"{name:<{width}}{count:>8}")
