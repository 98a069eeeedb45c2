"""The package as a whole keeps its shape: pure Python, small modules and functions, imports that go
one way, no mutable state at module level, and a test module beside each module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "memo_mw"
MODULES = sorted(PACKAGE.glob("*.py"))
#: Modules whose behaviour is tested elsewhere (what they hold has no behaviour of its own).
UNTESTED = {"__init__", "__main__", "defaults", "exceptions"}


def tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def test_pure_python():
    assert not [p.name for p in PACKAGE.rglob("*") if p.suffix in (".c", ".so", ".pyx", ".pyd")]


#: The core's budget was 5,000 lines (the statement grammar came in at 5,010, idf-weighted recall
#: added 17). The chat history (history.py and its hooks in the store, recall, the middleware, the
#: page and the CLI) is a new capability with a budget of 600 lines of its own; the safety fixes of
#: issue 33 (the worker's backoff, the degraded start, the identity settings) took about 100 more.
#: The PostgreSQL store (issue 34) is a second engine behind the same interface, with a budget of
#: its own: postgres.py (~235), migrate.py (~65), the engine methods SQLite now answers as well
#: (~70), and the breaker and fault rules a server that goes away needs (~50). Issue 31's comma
#: pieces read again (bounded, each hit owning its pieces) and unstated subjects (~70) came in against
#: 35 lines simplified away. A negative gate's `others: true` (~11) replaced the household verbs the
#: other-person gates of both languages mirrored by hand; a statement's verbs as its `requires` (~3)
#: took a third off the funnel's time. Whose a statement is (~25): the pieces after someone else's
#: statement stay theirs whichever is read first, and a sentence that names no one goes on about
#: whoever the sentence before named. One pre-check of a rule's `requires` shared by the funnel
#: and `rules check` (~6); only a statement about someone else names another person (~2). Of a
#: statement about someone else only what the rule read is kept (~7); `unstated_is_user` (~6); a tag
#: question (好不好) asks about its own clause (~2); a verb keeps its case past the first word ("work in IT", ~3);
#: a clause that meets no trigger and opens on the user is read again without its first piece (~5);
#: `unstated_is_user` names the statements it is for (~5); whose a statement is, read per comma piece (~6);
#: grammar `with`, someone named with the subject ("我和老公都…", ~8); a verb in lower case but for an
#: acronym ("I Worked As", ~2); a negative gate of `scope: clause` reads the hit's own clause (~10);
#: the rest of a sentence after a forget request is captured (~4); `scope: preceding` (~4); two named flags for whose a statement is (~2).
MAX_LINES = 6336


def test_the_package_stays_small():
    assert sum(len(p.read_text(encoding="utf-8").splitlines()) for p in MODULES) <= MAX_LINES


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_modules_and_functions_stay_small(path):
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 400
    long = [f"{node.name}: {node.end_lineno - node.lineno + 1} lines" for node in ast.walk(tree(path))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60]
    assert not long


def imports_of(path: Path) -> set[str]:
    """The package's modules a module imports (at any depth of its code)."""
    found = set()
    for node in ast.walk(tree(path)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("memo_mw."):
            found.add(node.module.split(".")[1])
    return {name for name in found if (PACKAGE / f"{name}.py").exists()}


def test_no_import_cycles():
    graph = {path.stem: imports_of(path) for path in MODULES}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in graph.get(start, ()))

    assert not [name for name in graph if reaches(name, name, set())]


MUTABLE_CALLS = {"dict", "list", "set", "deque", "defaultdict", "Counter", "OrderedDict", "local", "WeakValueDictionary"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_mutable_state_at_module_level(path):
    """Constants only: a module-level dict, list or set (or an instance of one) that is not named as
    a constant (UPPER_CASE, never changed) is state every caller shares."""
    found = []
    for node in tree(path).body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if names and all(n == "__all__" or n.lstrip("_").isupper() for n in names):
            continue
        if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
            found.append(node.lineno)
        elif isinstance(value, ast.Call):
            func = value.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in MUTABLE_CALLS:
                found.append(node.lineno)
    assert not found, f"module-level mutable values at lines {found}"


def test_each_module_has_its_tests():
    tests = Path(__file__).resolve().parent
    missing = [p.stem for p in MODULES if p.stem not in UNTESTED and not (tests / f"test_{p.stem}.py").exists()]
    assert not missing
