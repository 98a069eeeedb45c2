"""``memo-mw``: the command line, a thin layer over the library. Library, database and Redis
errors become a one-sentence ``click`` error and exit status 1, never a traceback."""

import collections
import contextlib
import functools
import itertools
import json
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import click
import redis

from . import counters, defaults, history, maintenance, postgres
from . import insights as profile
from .adapters import Turn, clean_id, timestamp, user_id
from .cron import json_queue
from .exceptions import DATABASE_ERRORS, MemoError
from .forgetting import forget_marker
from .funnel import STAGES, Funnel
from .jobs import forget_waiting
from .middleware import remember_payload
from .migrate import migrate
from .recall import RecallConfig, Recaller
from .rules import check_rules, load_rules
from .state import UserState
from .store import Store, check_writable
from .text import stable_id
from .worker import new_worker, run as run_worker

#: The counts ``replay`` prints: input lines, each funnel stage, then what the store did with the captures.
REPLAY_COUNTS = ("lines", "invalid", "not_user", *STAGES, "stored", "merged", "superseded", "duplicate_job",
                 "discarded", "forgotten")

#: Files of lines: UTF-8, a line that is not kept readable (its bytes as surrogates) so that it can be
#: named (``_utf8``): replay and ``rules test --file`` skip it and go on, ``recall --batch`` stops there.
TEXT_LINES = click.File("r", encoding="utf-8", errors="surrogateescape")

#: Lines per transaction in ``replay``: one commit per line would cap it at a few hundred a second.
REPLAY_BATCH = 500


def _echo(as_json: bool, value: Any, lines: Iterable[str]) -> None:
    for line in [json.dumps(value, ensure_ascii=False)] if as_json else lines:
        click.echo(line)


@contextlib.contextmanager
def _one_line(errors: type[Exception] | tuple[type[Exception], ...], prefix: str = "") -> Iterator[None]:
    try:
        yield
    except errors as exc:
        raise click.ClickException(f"{prefix}{exc}") from exc


def _funnel(paths: tuple[str, ...]) -> Funnel:
    with _one_line(MemoError):
        return Funnel(load_rules(list(paths) or None))


@contextlib.contextmanager
def _store(db: str, *, write: bool = False, create: bool = False) -> Iterator[Store]:
    """The store, open for the block. A database that is not there is an error, not an empty result;
    one not memo-mw's is given no schema unless ``create``; one failing midway is a one-line error."""
    if not create and not postgres.is_url(db) and not Path(db).is_file():
        raise click.ClickException(f"no memory database at {db!r}; check --db")
    with _one_line(MemoError):
        if write and not create:
            Store(db, readonly=True).close()  # refuses a foreign file or another schema version
        store = Store(db, readonly=not write)
    with _one_line(DATABASE_ERRORS, f"cannot use {store.db.name!r} as the memory database: "), store:
        yield store


db_option = click.option("--db", default="memo.db", show_default=True, envvar="MEMO_DB",
                         help="The SQLite memory database's path, or a postgresql:// URL (env MEMO_DB).")
rules_option = click.option("--rules", "rules_paths", multiple=True,
                            help="Rule file or folder (repeatable). Default: the shipped zh and en rules.")
url_option = click.option("--url", envvar="MEMO_REDIS_URL", default="redis://127.0.0.1:6379/0", show_default=True,
                          help="Redis URL (env MEMO_REDIS_URL).")
queue_option = click.option("--queue", "queue_name", default=defaults.QUEUE_NAME, show_default=True,
                            help="The jobs' rq queue.")
now_option = click.option("--now", type=float, default=None, help="The clock, epoch seconds (default: now).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, commands=[migrate])
@click.version_option(package_name="memo-mw")
def main() -> None:
    """memo-mw: rule-based long-term memory for chat apps."""


@main.command()
@url_option
@queue_option
@click.option("--burst", is_flag=True, help="Quit when the queue is empty (a one-off: Redis down is an error).")
@click.option("--name", default=None, help="Worker name (default: random).")
@click.option("--db", "dbs", multiple=True, envvar="MEMO_DB",
              help="A memory database the jobs use, a file or a postgresql:// URL (repeatable; env MEMO_DB): "
                   "checked before starting, then held open (a job's own connection is never the last one).")
@click.option("--simple/--fork", default=True,
              help="Run jobs in this process (rq's SimpleWorker; the default, several times faster: a fork costs "
                   "more than a job; a job killing Python stops it) or each in a forked child (rq's Worker).")
@click.option("--retry-max", type=click.FloatRange(min=0.1), default=defaults.WORKER_RETRY_MAX, show_default=True,
              envvar="MEMO_WORKER_RETRY_MAX", show_envvar=True, help="Most seconds between tries while Redis is down.")
def worker(url: str, queue_name: str, burst: bool, name: str | None, dbs: tuple[str, ...], simple: bool,
           retry_max: float) -> None:
    """Run an rq worker for memo-mw's jobs, with rq's scheduler (failed jobs are retried) and a shorter maintenance
    interval than rq's (a dead worker's jobs are retried sooner). Unless --burst, it waits out Redis being down."""
    with contextlib.ExitStack() as held:
        for path in dbs:  # a bad database fails now, not per job
            with _one_line(MemoError):
                check_writable(path)
                held.enter_context(Store(path))  # (SQLite: closing the last one checkpoints, milliseconds a job)
        start = functools.partial(new_worker, url, queue_name, name=name, simple=simple)
        with _one_line((redis.RedisError, ValueError), f"cannot reach Redis at {url}: "):
            start().work(burst=True, with_scheduler=True) if burst else run_worker(start, url, retry_max=retry_max)


def _user_lines(lines: Iterable[tuple[int, str]], counts: collections.Counter,
                parse: Callable[[dict[str, Any], str], Any]) -> Iterator[Any]:
    """``parse(record, text)`` of each user line of a JSON-lines log; counts ``lines``, ``invalid``
    (named on stderr with the reason) and ``not_user`` (context only: never the user's memories)."""
    for number, raw in lines:
        if not raw.strip():
            continue
        counts["lines"] += 1
        try:
            raw = _utf8(raw)
            try:
                record = json.loads(raw)
            except ValueError as exc:
                raise ValueError(f"not JSON ({exc})") from None
            if not isinstance(record, dict):
                raise TypeError("not a JSON object")
            role, text = record.get("role"), record.get("text", record.get("message"))
            if role is not None and not isinstance(role, str):
                raise ValueError(f"role must be a string, not {role!r}")
            if role not in (None, "user"):
                counts["not_user"] += 1
            elif not isinstance(text, str):
                raise TypeError('no "text" (or "message") string')
            else:
                yield parse(record, text)
        except (ValueError, TypeError) as exc:
            counts["invalid"] += 1
            click.echo(f"line {number}: skipped: {exc}", err=True)


def _utf8(line: str) -> str:
    """The line, or ValueError when its bytes were not UTF-8 (TEXT_LINES reads them as surrogates)."""
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("not UTF-8") from None
    return line


def _turn(record: dict[str, Any], text: str) -> tuple[str, Turn]:
    """A replayed line as the user and the turn the middleware would read from a request."""
    user, ts = user_id(record.get("user")), timestamp(record.get("ts"))
    if user is None:
        raise ValueError("no user (a non-empty string or number)")
    if ts is None:
        raise ValueError(f"ts must be epoch seconds, not {record.get('ts')!r}")
    return user, Turn("plain", text, None, clean_id(record.get("session")), clean_id(record.get("id")), ts)


@main.command()
@click.argument("file", type=TEXT_LINES)
@db_option
@rules_option
@json_option
def replay(file, db: str, rules_paths: tuple[str, ...], as_json: bool) -> None:
    """Run a chat log through the funnel and into the store, as the middleware and its jobs would.

    FILE is JSON lines (- for stdin): {"user", "session", "ts", "text"}, optionally "id" (message id)
    and "role" (default "user"; other roles are never stored); ts, epoch seconds, is the clock.
    Each user line goes to the chat history too (unless sensitive). Prints where lines stopped, and what
    the store did with the captured ones."""
    funnel, counts, started = _funnel(rules_paths), collections.Counter(), time.perf_counter()
    with _store(db, write=True, create=True) as store:
        turns = _user_lines(enumerate(file, 1), counts, _turn)
        for first in turns:  # REPLAY_BATCH lines a transaction; the store's own nest in it as savepoints
            with store.write():
                for user, turn in itertools.chain([first], itertools.islice(turns, REPLAY_BATCH - 1)):
                    _replay_turn(funnel, store, user, turn, counts)
        if counts["forgotten"]:
            store.vacuum_deleted()  # the deleted rows leave the WAL file too
    result = {k: counts[k] for k in REPLAY_COUNTS} | {"seconds": round(time.perf_counter() - started, 3)}
    _echo(as_json, result, (f"{name:<14}{value:>10}" for name, value in result.items()))


def _replay_turn(funnel: Funnel, store: Store, user: str, turn: Turn, counts: collections.Counter) -> None:
    """What the middleware enqueues for one message, applied as its jobs apply it; the line's ts
    stands for the server's clock too."""
    result = funnel.process(turn.message)
    counts[result.stage] += 1
    if result.stage == "forget":
        counts["forgotten"] += store.forget(user, match=result.forget_match, ts=int(turn.ts), reason="replay",
                                            at=turn.ts)
        return
    # Topic counts once per message (user, ts, id, length): replaying a log twice counts nothing twice.
    key = "memo-topics-" + stable_id(user, turn.ts, turn.message_id or "", len(turn.message))
    if not store.db.execute("select 1 from processed_jobs where job_key = ?", [key]).fetchone():
        names = counters.count_keys(funnel.topics.tag(turn.message), turn.message)
        counters.add(store, user, {(counters.week_of(turn.ts), name): 1 for name in names})
        store.db.execute("insert into processed_jobs values (?, ?, ?)", [key, user, int(turn.ts)])
    said = funnel.history_text(result)
    if result.candidates or said:
        counts.update(store.remember(remember_payload(result, user_id=user, turn=turn, ts=turn.ts, received=turn.ts,
                                                      history={"text": said, "days": defaults.HISTORY_DAYS}
                                                      if said else None)))


@main.command()
@db_option
@click.option("--user", default=None, help="Only this user's memories (default: every user's).")
@click.option("--all", "include_all", is_flag=True, help="Include inactive (superseded) ones.")
@json_option
def memories(db: str, user: str | None, include_all: bool, as_json: bool) -> None:
    """List stored memories (active ones unless --all), oldest first."""
    with _store(db) as store:
        rows = store.list(user, include_inactive=include_all)
    _echo(as_json, rows, (f"{m['id']:>6}  {m['user_id']:<16} {m['type']:<11} {m['content']}"
                          + ("" if m["active"] else f" [{m['status']}]") for m in rows))


@main.command()
@db_option
@rules_option
@click.option("--user", help="Whose memories to search (not with --batch).")
@click.option("--session", default=None, help="The request's session: its last turns are not brought back.")
@click.option("--k", default=defaults.RECALL_K, show_default=True, type=click.IntRange(min=0),
              help="How many memories at most.")
@now_option
@click.option("--budget", default=defaults.RECALL_BUDGET_CHARS, show_default=True, type=click.IntRange(min=1),
              help="Character budget of the memory lines.")
@click.option("--batch", type=TEXT_LINES, default=None,
              help='JSON lines {"user", "query", optional "session", "now"}: a JSON line of results each.')
@json_option
@click.argument("query", required=False)
def recall(db: str, rules_paths: tuple[str, ...], user: str | None, session: str | None, k: int, now: float | None,
           budget: int, batch, as_json: bool, query: str | None) -> None:
    """Rank a user's memories and past messages (``"type": "history"``) for QUERY, as the middleware
    would (read-only: hits are not counted)."""
    if (query is None or user is None) if batch is None else (query is not None or user is not None):
        raise click.UsageError("give --user and QUERY, or --batch FILE")
    recaller = Recaller(db, _funnel(rules_paths), RecallConfig(k=k, budget=budget))
    with _store(db) as store, recaller.store():  # a clear error for a bad --db first; then recall's own
        if batch is None:
            rows = _recall(recaller, user, query, session, time.time() if now is None else now)
            if not rows and not store.list(user, include_inactive=True) and not history.rows(store.db, user):
                click.echo(f"memo-mw: nothing is stored for user {user!r}", err=True)
            _echo(as_json, rows, (f"{m['score']:.3f}  {m['content']}  ({m['type']})" for m in rows))
            return
        for number, line in enumerate(batch, 1):
            if not line.strip():
                continue
            try:
                ask = json.loads(_utf8(line))
                found = _recall(recaller, user_id(ask["user"]), str(ask["query"]), clean_id(ask.get("session")),
                                float(ask.get("now") or now or time.time()))
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise click.ClickException(f"line {number}: not a recall request ({exc!r})") from None
            click.echo(json.dumps({"user": ask["user"], "query": ask["query"], "results": found}, ensure_ascii=False))


def _recall(recaller: Recaller, user: str | None, query: str, session: str | None, now: float) -> list[dict[str, Any]]:
    """The middleware's recall for one request, a forget request in it included: memories, then past messages."""
    if user is None:
        raise ValueError("no user")
    result = recaller.funnel.process(query)
    state = UserState(forgets=(forget_marker(result.forget_match, now),) if result.stage == "forget" else ())
    memories = recaller.recall(user, query, now=now, state=state, recall_all=result.recall_all)
    return memories + recaller.history(user, query, now=now, session_id=session, state=state, memories=memories)


@main.command()
@db_option
@click.option("--user", required=True, help="Whose memories to delete.")
@click.option("--match", default=None, help="Only memories matching this text (default: all of them).")
@click.option("--url", envvar="MEMO_REDIS_URL", default=None,
              help="Redis of the middleware (env MEMO_REDIS_URL): also forget the user's pending memories "
                   "and waiting jobs there.")
@queue_option
def forget(db: str, user: str, match: str | None, url: str | None, queue_name: str) -> None:
    """Physically delete a user's memories (all, or those matching --match); never another user's."""
    at = time.time()  # the server's clock: waiting statements are ordered against it (forgetting.said_by)
    with _store(db, write=True) as store:
        count = store.forget(user, match=match, ts=int(at), reason="cli", at=at, now=True)
    message = f"deleted {count} memories of {user}"
    if url:
        with _one_line((redis.RedisError, ValueError), f"{message}, but cannot reach Redis at {url}: "):
            changed = forget_waiting(json_queue(url, queue_name), user, forget_marker(match, at, at, pending_only=True))
        message += f"; {changed} waiting jobs changed in Redis"
    click.echo(message)


@main.command()
@db_option
@now_option
@json_option
def maintain(db: str, now: float | None, as_json: bool) -> None:
    """Expire tasks, delete expired ones left unconfirmed, resolve contradictions (the maintain job)."""
    with _store(db, write=True) as store:
        counts = maintenance.maintain(store, now=int(time.time() if now is None else now))
    _echo(as_json, counts, [maintenance.summary(counts)])


@main.command("insights")
@db_option
@click.option("--user", default=None, help="Only this user (default: every user with counts or memories).")
@now_option
@json_option
def insights_command(db: str, user: str | None, now: float | None, as_json: bool) -> None:
    """Compute and store user insights from topic counts and memories (the weekly insights job)."""
    with _store(db, write=True) as store:
        result = {u: profile.run(store, u, now=time.time() if now is None else now)
                  for u in ([user] if user is not None else profile.users(store))}
    _echo(as_json, result[user] if user is not None else result,
          (f"{u:<16} {line['confidence']:<7} {line['text']}" for u, lines in result.items() for line in lines))


@main.group()
def rules() -> None:
    """Check and try the YAML rules."""


@rules.command("check")
@click.argument("paths", nargs=-1)
def rules_check(paths: tuple[str, ...]) -> None:
    """Validate rule files or folders (default: the shipped ones): every problem as file:line: rule id:
    problem, and exit status 1 if there is any."""
    if problems := check_rules(list(paths) or None):
        click.echo("\n".join(problems), err=True)
        raise click.ClickException(f"{len(problems)} problem{'s' if len(problems) != 1 else ''} in the rules")
    rule_set = load_rules(list(paths) or None)
    click.echo(f"ok: {len(rule_set.files)} files, {len(rule_set.triggers)} triggers")
    click.echo("".join(f"  {path}\n" for path in rule_set.paths), nl=False)


@rules.command("test")
@rules_option
@json_option
@click.option("--file", "file", type=TEXT_LINES, default=None,
              help='JSON lines ({"text"} or {"message"}, as replay reads; - for stdin) instead of TEXT: '
                   "runs every line and prints a summary table.")
@click.argument("text", required=False)
def rules_test(rules_paths: tuple[str, ...], as_json: bool, file, text: str | None) -> None:
    """Show which gate passed or stopped TEXT, and the memory it would store (nothing is stored).

    With --file, count where the lines stopped, what was captured by type, and which rules decided."""
    if (file is None) == (text is None):
        raise click.UsageError("give TEXT or --file FILE (one of them)")
    funnel = _funnel(rules_paths)
    if file is not None:
        return _rules_test_file(funnel, file, as_json)
    result = funnel.process(text)
    forget = {"scope": result.forget_scope, "match": result.forget_match} if result.stage == "forget" else None
    lines = [f"{gate:<10} {outcome}" for gate, outcome in result.trace] + [f"result     {result.stage}"]
    lines += [f"memory     type={c.type} key={c.key} polarity={c.polarity:+d} summary={c.content}"
              for c in result.candidates]
    lines += [f"forget     scope={result.forget_scope} match={result.forget_match or '-'}"] if forget else []
    _echo(as_json, {"stage": result.stage, "trace": result.trace,
                    "candidates": [c.as_dict() for c in result.candidates], "forget": forget}, lines)


def _rules_test_file(funnel: Funnel, file, as_json: bool) -> None:
    totals, stages, types, decided = (collections.Counter() for _ in range(4))
    for result in _user_lines(enumerate(file, 1), totals, lambda record, text: funnel.process(text)):
        stages[result.stage] += 1
        types.update(c.type for c in result.candidates)
        decided.update(c.rule_id for c in result.candidates)
        # The gates that stopped something: "en.neg.question: a question", "zh.forget.all (all)".
        decided.update(outcome.split(":")[0].split(" (")[0] for stage, outcome in result.trace
                       if stage in ("negative", "sensitive", "forget"))
    tables = {"": {name: totals[name] for name in ("lines", "invalid", "not_user")},
              "\nstopped at / result": {stage: stages[stage] for stage in STAGES},
              "\ncaptured by type": dict(types.most_common()),
              "\nrule hits (memories made, or messages stopped)": dict(decided.most_common())}
    first, *others = tables.values()
    width = max([14, *(len(name) + 2 for name in decided)])
    _echo(as_json, {**first, **dict(zip(("stages", "types", "rules"), others))},
          (line for title, table in tables.items()
           for line in ([title] if title else []) + [f"{name:<{width}}{count:>8}" for name, count in table.items()]))
