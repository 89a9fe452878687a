"""Specification: crd/ and generated/ray_io/ are exactly what `make generate` makes of the
sources in operator/ray_operator/apigen/, so editing either by hand, or forgetting to
regenerate after changing a source, fails here."""

from __future__ import annotations

from pathlib import Path

from ray_operator.apigen import render, stale_files, write

from tests.api.manifests import REPO_ROOT


def test_committed_output_is_what_the_generator_makes() -> None:
    stale = stale_files(REPO_ROOT, render())
    assert stale == [], f"run `make generate`; stale: {[str(path) for path in stale]}"


def test_generator_writes_the_same_output_into_an_empty_directory(tmp_path: Path) -> None:
    files = render()
    write(tmp_path, files)
    assert stale_files(tmp_path, files) == []
    assert stale_files(tmp_path, render()) == [], "two runs of the generator differ"
