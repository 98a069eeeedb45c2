"""Reading rule files: YAML that remembers where each thing was written (every mapping gets
``__line__`` and ``__lines__``, the line of each key), and the checks of single values, each
problem reported as ``file:line: rule id: problem``."""

from typing import Any

import regex
import yaml

META_KEYS = frozenset({"__line__", "__lines__", "__lists__", "__negated__"})  # (the last two: a grammar statement's)


class _LineLoader(yaml.SafeLoader):
    """A safe YAML loader that remembers lines, and the keys given twice in one mapping (which
    YAML would silently resolve to the last value)."""

    def __init__(self, stream):
        super().__init__(stream)
        self.duplicate_keys: list[tuple[int, str, str | None]] = []

    def construct_mapping(self, node, deep=False):
        lines: dict[Any, int] = {}
        if isinstance(node, yaml.MappingNode):
            owner = next((v.value for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == "id"
                          and isinstance(v, yaml.ScalarNode)), None)
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                    key = self.construct_object(key_node)
                    if key in lines:
                        self.duplicate_keys.append((key_node.start_mark.line + 1, str(key), owner))
                    lines.setdefault(key, key_node.start_mark.line + 1)
        mapping = super().construct_mapping(node, deep=deep)
        mapping["__line__"] = node.start_mark.line + 1
        mapping["__lines__"] = lines
        return mapping


_NEAR_ID = regex.compile(r"""^\s*(?:-\s*)?id\s*:\s*['"]?([^'"\s#]+)""")


def _nearest_id(text: str, line: int) -> str | None:
    """The id of the rule written at or above ``line`` (1-based), to name it in a YAML syntax error."""
    matches = (_NEAR_ID.match(raw) for raw in reversed(text.splitlines()[:line]))
    return next((match.group(1) for match in matches if match), None)


def read_yaml(path: str, problems: list[str]) -> dict | None:
    """The mapping of rule sections in the file at ``path``; None, problems appended, when it is none."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        problems.append(f"{path}: cannot read: {exc.strerror or exc}")
        return None
    except UnicodeDecodeError as exc:
        problems.append(f"{path}: cannot read: not UTF-8 text ({exc.reason} at byte {exc.start})")
        return None
    loader = _LineLoader(text)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        mark, context_mark = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
        context = getattr(exc, "context", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        start = context_mark or mark  # where the broken construct began (a "[" never closed)
        near = _nearest_id(text, start.line + 1) if start else None
        detail = f" ({context} that started at line {context_mark.line + 1})" if context and context_mark else ""
        problems.append(f"{where}: {near + ': ' if near else ''}invalid YAML: "
                        f"{getattr(exc, 'problem', None) or exc}{detail}")
        return None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        problems.append(f"{path}:1: the file must be a mapping of rule sections, not {type(data).__name__}")
        return None
    for line, key, owner in loader.duplicate_keys:
        problems.append(f"{path}:{line}: {owner + ': ' if owner else ''}key {key!r} given twice "
                        "(YAML would silently keep the last one)")
    return data


class Reporter:
    """Appends the problems of one rule file to a list, each as ``file:line: rule id: problem``."""

    def __init__(self, path: str, problems: list[str]):
        self.path = path
        self.problems = problems

    def __call__(self, node: Any, rule_id: str | None, problem: str, key: str | None = None) -> None:
        """Report ``problem`` at the line of ``node``'s ``key``, else where the mapping starts."""
        line = None
        if isinstance(node, dict):
            line = key is not None and (node.get("__lines__") or {}).get(key) or node.get("__line__")
        where = f"{self.path}:{line}" if line else self.path
        self.problems.append(f"{where}: {rule_id + ': ' if rule_id else ''}{problem}")


def unknown_keys(node: dict, allowed: frozenset[str], rule_id: str | None, report: Reporter, kind: str = "key",
                 where: str = "") -> None:
    """Report each key of ``node`` that is not ``allowed`` (the line keys aside), naming the known ones."""
    for key in sorted(set(node) - allowed - META_KEYS, key=str):
        report(node, rule_id, f"unknown {kind} {key!r}{where} (known: {', '.join(sorted(allowed))})", key=key)


def list_of(data: dict, key: str, report: Reporter) -> list:
    """The list under ``key`` (empty when it is not there; reported when it is not a list)."""
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        report(data, None, f"{key} must be a list", key=key)
        return []
    return value


def mapping_of(data: dict, key: str, shape: str, report: Reporter) -> dict:
    """The mapping under ``key``, line keys left out (empty when absent; reported when not a mapping)."""
    value = data.get(key) or {}
    if not isinstance(value, dict):
        report(data, None, f"{key} must be a mapping of {shape}", key=key)
        return {}
    return {k: v for k, v in value.items() if k not in META_KEYS}


def strings(data: dict, key: str, report: Reporter) -> tuple[str, ...]:
    """A section that is a list of non-empty strings; other entries are reported and left out."""
    items = list_of(data, key, report)
    for item in items:
        if not isinstance(item, str) or not item.strip():
            report(data, None, f"{key} entries must be non-empty strings, not {item!r} (quote it)", key=key)
    return tuple(item for item in items if isinstance(item, str) and item.strip())


def positive_int(data: dict, key: str, default: int, report: Reporter) -> int:
    """The positive integer under ``key``, or ``default`` (reported when it is something else)."""
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        report(data, None, f"{key} must be a positive integer, not {value!r}", key=key)
        return default
    return value


def compile_pattern(pattern: Any, rule_id: str, node: Any, report: Reporter, key: str = "pattern",
                    lists: dict[str, set[str]] | None = None) -> regex.Pattern | None:
    """A rule's pattern compiled as every pattern is: case-insensitive; None when it cannot be.
    ``lists``: the named lists (``\\L<name>``) of a grammar statement, which reads lower-case text."""
    if not isinstance(pattern, str) or not pattern:
        report(node, rule_id, f"pattern must be a non-empty string, not {pattern!r}", key=key)
        return None
    try:
        if lists is not None:
            return regex.compile(pattern, regex.V0, ignore_unused=True, **lists)
        return regex.compile(pattern, regex.V0 | regex.IGNORECASE)
    except regex.error as exc:
        report(node, rule_id, f"pattern does not compile: {exc}", key=key)
        return None
