"""The Dockerfile as the image tests read it: its instructions, and the instructions of each build
stage."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO_ROOT

DOCKERFILE = REPO_ROOT / "Dockerfile"


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", path.read_text())
    pairs = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, arguments = line.partition(" ")
            pairs.append((keyword.upper(), arguments.strip()))
    return pairs


def stages() -> list[list[tuple[str, str]]]:
    """The instructions of each build stage, in order (each starting with its FROM)."""
    result: list[list[tuple[str, str]]] = []
    for keyword, arguments in instructions():
        if keyword == "FROM":
            result.append([])
        if result:
            result[-1].append((keyword, arguments))
    return result
