"""No module of the suite imports from a test module: shared helpers live in helper modules.

A helper reached through `from tests.controllers.test_raycluster import scalable_cluster` hides
where it lives, ties unrelated tests together (changing one test module breaks others) and runs
the other module's import-time work. Helpers shared by tests go in a module named for what it
holds (`tests/controllers/clusters.py`), fixtures shared by a package in its `conftest.py` or a
`*_fixtures.py` module. The imports are read from the source (`ast`), so nothing is executed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS_ROOT = Path(__file__).resolve().parent


def is_test_module(dotted: str) -> bool:
    return dotted.rpartition(".")[2].startswith("test_")


def imported_test_modules(path: Path, root: Path = TESTS_ROOT) -> Iterator[tuple[int, str]]:
    """(line, module) of each test module that `path` imports, at any depth of the file
    (`import a.test_b`, `from a.test_b import c`, `from a import test_b`, relative forms too)."""
    package = ".".join((root.name, *path.parent.relative_to(root).parts))
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if is_test_module(alias.name):
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            if is_test_module(base):
                yield node.lineno, base
            else:
                for alias in node.names:
                    if is_test_module(alias.name):
                        yield node.lineno, f"{base}.{alias.name}"


def imports_of_test_modules(root: Path = TESTS_ROOT) -> list[str]:
    """`path:line: module` for every import of a test module under `root`."""
    return [
        f"{path.relative_to(root.parent)}:{line}: {module}"
        for path in sorted(root.rglob("*.py"))
        for line, module in sorted(imported_test_modules(path, root))
    ]


def test_no_module_of_the_suite_imports_from_a_test_module() -> None:
    assert imports_of_test_modules() == [], (
        "move the shared helpers into a helper module (see docstring)"
    )


def test_every_form_of_importing_a_test_module_is_found(tmp_path: Path) -> None:
    root = tmp_path / "tests"
    (root / "controllers").mkdir(parents=True)
    (root / "controllers" / "clusters.py").write_text("from tests.api.crds import table\n")
    (root / "controllers" / "test_a.py").write_text(
        "import tests.api.test_crds\n"
        "from tests.controllers.test_raycluster import scalable_cluster\n"
        "from tests.deploy import test_helm_chart, manifests\n"
        "from .test_rayjob import rayjob\n"
        "from . import test_rayservice\n"
        "def later():\n"
        "    from ..webhooks.test_rules import case\n"
    )

    assert imports_of_test_modules(root) == [
        "tests/controllers/test_a.py:1: tests.api.test_crds",
        "tests/controllers/test_a.py:2: tests.controllers.test_raycluster",
        "tests/controllers/test_a.py:3: tests.deploy.test_helm_chart",
        "tests/controllers/test_a.py:4: tests.controllers.test_rayjob",
        "tests/controllers/test_a.py:5: tests.controllers.test_rayservice",
        "tests/controllers/test_a.py:7: tests.webhooks.test_rules",
    ]
