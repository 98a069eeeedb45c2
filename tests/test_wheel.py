"""The built wheel, installed in a fresh virtual environment, works outside the source tree.

The default rules live in the top-level ``rules/`` folder of the source tree and are
packaged as ``memo_mw.default_rules`` (a folder without ``__init__.py``, mapped by
``package_dir`` in setup.cfg). Only an installed wheel shows whether they really ship
and are found: an editable install or the source tree would hide a packaging mistake.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# What pip prints when it cannot reach the package index (the only reason to skip).
OFFLINE = ("Failed to establish a new connection", "Temporary failure in name resolution",
           "Network is unreachable", "Could not find a version that satisfies", "No matching distribution found",
           "ConnectionError", "ProxyError", "Read timed out")


def run(args, *, cwd, timeout=120, check=True, env=None) -> subprocess.CompletedProcess:
    env = {**os.environ, **(env or {})}
    env.pop("PYTHONPATH", None)  # nothing from the source tree leaks in
    proc = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        output = proc.stdout + proc.stderr
        if any(marker in output for marker in OFFLINE):
            pytest.skip(f"pip cannot reach the package index: {output.strip().splitlines()[-1]}")
        pytest.fail(f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{output}")
    return proc


def copy_source(dest: Path) -> Path:
    """The files a build needs, without .venv, .git, build/ or egg-info from the working tree."""
    dest.mkdir()
    for name in ("memo_mw", "rules"):
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("setup.cfg", "pyproject.toml", "setup.py", "README.md", "LICENSE", "MANIFEST.in"):
        if (ROOT / name).is_file():
            shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel path, venv python, venv bin folder, a working folder outside the source tree)."""
    base = tmp_path_factory.mktemp("wheel")
    source = copy_source(base / "src")
    dist = base / "dist"
    if importlib.util.find_spec("build") is not None:
        run([sys.executable, "-m", "build", "--wheel", "--outdir", dist, source], cwd=base)
    else:
        run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", dist, source], cwd=base)
    (wheel,) = dist.glob("memo_mw-*.whl")

    venv = base / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=base)
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "--disable-pip-version-check", "--quiet", wheel], cwd=base, timeout=300)
    work = base / "elsewhere"
    work.mkdir()
    return wheel, python, venv / "bin", work


def test_wheel_carries_the_default_rules_as_a_package_folder(installed):
    wheel, *_ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"memo_mw/default_rules/zh.yaml", "memo_mw/default_rules/en.yaml"} <= names
    assert "memo_mw/templates/demo.html" in names and "memo_mw/cli.py" in names
    assert not any(n.startswith(("rules/", "tests/", "bench/")) for n in names)  # no stray top-level folders
    with zipfile.ZipFile(wheel) as zf:
        for name in ("zh.yaml", "en.yaml"):  # the very files of the top-level rules/ folder
            assert zf.read(f"memo_mw/default_rules/{name}") == (ROOT / "rules" / name).read_bytes()
        entry_points = zf.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "memo-mw = memo_mw.cli:main" in entry_points


def test_installed_package_imports_and_finds_its_rules_outside_the_source_tree(installed):
    _, python, _, work = installed
    script = (
        "import json, sysconfig, memo_mw, memo_mw.rules\n"
        "from memo_mw import MemoryMiddleware\n"
        "m = MemoryMiddleware(lambda environ, start_response: [], db='memo.db')\n"
        "print(json.dumps({'package': memo_mw.__file__, 'site': sysconfig.get_paths()['purelib'],\n"
        "                  'rules': memo_mw.rules.default_rule_paths(),\n"
        "                  'stage': m.funnel.process('I like jazz').stage}))\n"
    )
    proc = run([python, "-c", script], cwd=work)
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    site = Path(info["site"]).resolve()
    assert Path(info["package"]).resolve().is_relative_to(site)  # not the source tree
    assert [Path(p).name for p in info["rules"]] == ["zh.yaml", "en.yaml"]
    for path in map(Path, info["rules"]):
        assert path.resolve().parent == site / "memo_mw" / "default_rules" and path.is_file()
    assert info["stage"] == "captured"  # the middleware loaded the shipped rules


def test_installed_console_script(installed):
    _, python, bin_dir, work = installed
    check = run([bin_dir / "memo-mw", "rules", "check"], cwd=work)
    assert check.stdout.startswith("ok: 2 files, ")
    assert "site-packages" in check.stdout and str(ROOT) not in check.stdout
    tried = run([bin_dir / "memo-mw", "rules", "test", "I like jazz"], cwd=work)
    assert "result     captured" in tried.stdout
    help_text = run([python, "-m", "memo_mw", "--help"], cwd=work)
    assert "Usage:" in help_text.stdout and "replay" in help_text.stdout
