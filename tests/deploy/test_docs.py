"""Specification: the docs a newcomer walks are short at the door, generated where they can be,
and hold no broken link.

- The README stays a door (≤ 200 lines): what it is, `make run` and `make test`, install, links.
- docs/reference/flags.md is what `tests/flags_reference.py` makes of the operator's parsers: a
  flag added or changed without `make flags-reference` fails here.
- docs/architecture.md draws pyproject's import-linter `layers` contract, line for line.
- `mkdocs build --strict` passes (a broken link or anchor, a page left out of the nav), and the
  README's relative links, which mkdocs does not build, name files that exist.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests import flags_reference

REPO_ROOT = Path(__file__).resolve().parents[2]
README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_flags_reference_is_what_the_operator_parsers_generate() -> None:
    committed = flags_reference.PAGE.read_text()
    assert committed == flags_reference.generate(), (
        "docs/reference/flags.md is stale: run `make flags-reference`"
    )


def test_a_flag_added_to_the_parser_changes_the_generated_reference() -> None:
    parsers, twins = flags_reference.subcommand_parsers()
    before = flags_reference.render(parsers, twins)
    parsers["run"].add_argument(
        "--brand-new-flag", default=3, help="a flag nobody documented (default: %(default)s)"
    )
    after = flags_reference.render(parsers, twins | {"brand-new-flag"})
    assert after != before
    assert (
        "| `--brand-new-flag` | `RAY_OPERATOR_BRAND_NEW_FLAG` | `3` | a flag nobody documented "
        "(default: 3) |" in after
    )


def test_the_flags_reference_shows_the_code_defaults_whatever_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAY_OPERATOR_LEASE_NAME", "from-the-environment")
    monkeypatch.setenv("RAY_OPERATOR_MAX_CONCURRENT_RECONCILES", "99")
    page = flags_reference.generate()
    assert "from-the-environment" not in page
    assert "| `--lease-name` | `RAY_OPERATOR_LEASE_NAME` | `ray-operator-leader` |" in page
    assert "`RAY_OPERATOR_MAX_CONCURRENT_RECONCILES` | `4` |" in page


def test_every_run_flag_has_an_environment_twin_in_the_reference() -> None:
    # settings.py: every flag of `ray-operator run` can also come from RAY_OPERATOR_<FLAG>.
    parsers, twins = flags_reference.subcommand_parsers()
    rows = flags_reference.flags(parsers["run"], twins)
    assert rows
    without = [row.spellings[0] for row in rows if row.environment is None]
    assert without == [], without


def test_the_feature_gates_flag_is_documented_as_existing() -> None:
    page = flags_reference.PAGE.read_text()
    assert "| `--feature-gates` | `RAY_OPERATOR_FEATURE_GATES` |" in page
    differences = (DOCS / "differences-from-kuberay.md").read_text()
    assert "`--feature-gates` does" in differences


def test_the_readme_is_a_door_of_at_most_200_lines_with_the_two_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    commands = re.findall(r"^make (\w+)\s", text, re.M)
    assert commands == ["run", "test"]


def test_the_architecture_page_draws_the_layers_contract_line_for_line() -> None:
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    (contract,) = [
        contract
        for contract in pyproject["tool"]["importlinter"]["contracts"]
        if contract.get("type") == "layers"
    ]
    page = (DOCS / "architecture.md").read_text()
    drawn = re.search(r"```text\n(.*?)```", page, re.S)
    assert drawn is not None
    assert drawn.group(1).splitlines() == contract["layers"]


def test_the_readme_links_only_to_files_that_exist() -> None:
    broken = [
        target
        for target in MARKDOWN_LINK.findall(README.read_text())
        if not re.match(r"[a-z]+:", target)
        and not target.startswith("#")
        and not (REPO_ROOT / target.partition("#")[0]).exists()
    ]
    assert broken == []


def mkdocs_build_strict(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of `project`'s mkdocs.yml into `site`, as `make docs` runs it."""
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    return subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=120)


def test_the_docs_site_builds_strictly(tmp_path: Path) -> None:
    result = mkdocs_build_strict(REPO_ROOT, tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "architecture" / "index.html").is_file()
    assert (tmp_path / "reference" / "flags" / "index.html").is_file()


def test_a_broken_link_fails_the_strict_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# A page\n\n[gone](missing.md)\n")
    (tmp_path / "mkdocs.yml").write_text(
        (REPO_ROOT / "mkdocs.yml").read_text().split("\nnav:")[0] + "\nnav:\n  - index.md\n"
    )
    result = mkdocs_build_strict(tmp_path, tmp_path / "site")
    assert result.returncode != 0
    assert "missing.md" in result.stderr
