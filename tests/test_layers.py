"""The operator's modules import each other in one direction only: no circle of imports.

`lint-imports` holds the layers (pyproject's `layers` contract); this test holds what a layers
contract cannot see, inside a layer: two modules that import each other, even only for type
checking (a controller handing itself to a helper that names the controller's class), are one
design in two files. The imports are read from the source (`ast`), so nothing is executed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import ray_operator

PACKAGE_ROOT = Path(ray_operator.__file__).resolve().parent
PACKAGE = "ray_operator"


def module_files(root: Path = PACKAGE_ROOT) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = (PACKAGE, *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imported_modules(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The package's modules that `name` imports (`from a import b` names `a.b` when `b` is a
    module), at any depth of the file, `TYPE_CHECKING` blocks included."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, name, is_package=is_package)
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in known else base)
    return {module for module in found if module in known and module != name}


def _absolute(node: ast.ImportFrom, name: str, *, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    anchor = name.split(".")
    anchor = anchor if is_package else anchor[:-1]
    anchor = anchor[: len(anchor) - (node.level - 1)]
    return ".".join([*anchor, *([node.module] if node.module else [])])


def import_graph() -> dict[str, set[str]]:
    known = module_files()
    return {name: imported_modules(name, path, known) for name, path in known.items()}


def circles(graph: Mapping[str, set[str]]) -> Iterator[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    yield sorted(group)


def test_no_two_modules_of_the_operator_import_each_other() -> None:
    assert list(circles(import_graph())) == []


def test_the_walk_finds_a_circle_of_two_modules_and_a_longer_one() -> None:
    graph = {"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"e"}, "e": {"c", "a"}, "f": set()}
    assert sorted(circles(graph)) == [["a", "b"], ["c", "d", "e"]]


def test_the_walk_reads_type_checking_and_relative_imports(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "one.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import two\n"
    )
    (tmp_path / "two.py").write_text("from ray_operator.one import thing\n")
    known = module_files(tmp_path)
    graph = {name: imported_modules(name, path, known) for name, path in known.items()}
    assert graph["ray_operator.one"] == {"ray_operator.two"}
    assert graph["ray_operator.two"] == {"ray_operator.one"}
    assert list(circles(graph)) == [["ray_operator.one", "ray_operator.two"]]
