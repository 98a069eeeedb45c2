"""The many-host layout (docs/deployment.md) as deploy/ ships it: deploy/docker-compose.yml runs two web
processes and two workers on one PostgreSQL and one Redis, with one cron process and no secret key
written down; every command of deploy/Procfile.many-hosts and of the compose file names a program
that exists."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import importlib.util
import inspect
import re
import shlex
from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
PROCFILE = DEPLOY / "Procfile.many-hosts"
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
#: A gunicorn app: ``module:factory(keyword=literal, ...)``.
GUNICORN_APP = re.compile(r"^(?P<module>[\w.]+):(?P<call>(?P<name>\w+)(\(.*\))?)$", re.S)


def services() -> dict[str, dict]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):  # the list form, KEY=value
        env = dict(item.split("=", 1) for item in env)
    return {key: str(value) for key, value in env.items()}


def words(command: str | list[str]) -> list[str]:
    """The command's words, ``sh -c`` unwrapped and ``exec`` and leading VAR=value assignments dropped."""
    argv = list(command) if isinstance(command, list) else shlex.split(command)
    if argv[:2] == ["sh", "-c"]:
        argv = shlex.split(argv[2].replace("$$", "$"))  # compose's escape of a $ meant for the shell
    while argv and (argv[0] == "exec" or ASSIGNMENT.match(argv[0])):
        argv = argv[1:]
    return argv


def replicas(service: dict) -> int:
    return int((service.get("deploy") or {}).get("replicas", 1))


def memo_services() -> dict[str, dict]:
    """The services that run memo-mw (built from deploy/Dockerfile)."""
    return {name: service for name, service in services().items() if "build" in service}


def count(kind: str) -> int:
    """How many processes of ``kind`` (web, worker, cron) the compose file starts."""
    return sum(replicas(service) for service in memo_services().values() if program(words(service["command"])) == kind)


def program(argv: list[str]) -> str:
    if argv[0] == "gunicorn":
        return "web"
    if argv[:2] == ["memo-mw", "worker"]:
        return "worker"
    if argv[:3] == ["python", "-m", "memo_mw.cron"]:
        return "cron"
    return argv[0]


def procfile() -> dict[str, str]:
    lines = [line for line in PROCFILE.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    return dict(line.split(": ", 1) for line in lines)


def check_program_exists(argv: list[str]) -> None:
    """The program the command starts is there: memo-mw's console script, a module, or gunicorn's app factory."""
    if argv[0] == "memo-mw":
        scripts = importlib.metadata.entry_points(group="console_scripts")
        (script,) = [entry for entry in scripts if entry.name == "memo-mw"]
        command = script.load()
        assert argv[1] in command.commands, f"memo-mw has no command {argv[1]!r}"
    elif argv[0] == "python":
        assert argv[1] == "-m" and importlib.util.find_spec(argv[2]) is not None, argv
    elif argv[0] == "gunicorn":
        assert importlib.util.find_spec("gunicorn") is not None
        app = GUNICORN_APP.match(argv[-1])
        assert app, f"not a gunicorn app: {argv[-1]!r}"
        factory = getattr(importlib.import_module(app["module"]), app["name"])
        call = ast.parse(app["call"], mode="eval").body
        if isinstance(call, ast.Call):  # gunicorn takes literal arguments only
            parameters = inspect.signature(factory).parameters
            assert {k.arg for k in call.keywords} <= set(parameters), "a keyword the factory does not name"
            inspect.signature(factory).bind(*[ast.literal_eval(a) for a in call.args],
                                            **{k.arg: ast.literal_eval(k.value) for k in call.keywords})
    else:
        pytest.fail(f"an unknown program: {argv[0]!r}")


def test_two_web_processes_two_workers_and_exactly_one_cron():
    assert count("web") >= 2
    assert count("worker") >= 2
    assert count("cron") == 1


def test_every_memo_service_shares_one_postgresql_and_one_redis():
    envs = {name: environment(service) for name, service in memo_services().items()}
    assert len(envs) >= 4
    assert all(env["MEMO_DB"].startswith("postgresql://") for env in envs.values()), envs
    assert len({env["MEMO_DB"] for env in envs.values()}) == 1  # jobs carry the URL: every host must reach it
    assert len({env["MEMO_REDIS_URL"] for env in envs.values()}) == 1
    for service in memo_services().values():
        assert service["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_the_stores_services_keep_their_data():
    postgres, redis = services()["postgres"], services()["redis"]
    assert postgres["image"].startswith("postgres:16") and "healthcheck" in postgres
    assert any(volume.endswith(":/var/lib/postgresql/data") for volume in postgres["volumes"])
    assert redis["image"].startswith("redis:7")
    assert "--appendonly yes" in " ".join(redis["command"])  # docs/reliability.md: jobs survive a restart


def test_no_secret_key_is_committed():
    webs = [service for service in memo_services().values() if program(words(service["command"])) == "web"]
    for service in webs:
        key = environment(service)["MEMO_SECRET_KEY"]
        assert re.fullmatch(r"\$\{MEMO_SECRET_KEY:\?[^}]*\}", key), f"a value is written down: {key!r}"
        assert environment(service)["HOST"] == "0.0.0.0"
    # The Procfile asks for the key: no value, and no random one per host (logins would not carry over).
    assert re.match(r'MEMO_SECRET_KEY="\$\{MEMO_SECRET_KEY:\?[^}]*\}" ', procfile()["web"])
    assert "secrets" not in procfile()["web"]


def test_every_procfile_command_names_a_program_that_exists():
    commands = procfile()
    assert set(commands) == {"web", "worker", "cron"}
    for name, command in commands.items():
        argv = words(command)
        assert program(argv) == name
        check_program_exists(argv)
        assert "MEMO_DB" in command and "MEMO_REDIS_URL" in command  # from the environment, no default


def test_every_compose_command_names_a_program_that_exists():
    for service in memo_services().values():
        check_program_exists(words(service["command"]))
