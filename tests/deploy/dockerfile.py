"""The Dockerfile as the image tests read it: its instructions, and the instructions of each build
stage."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from tests.conftest import REPO_ROOT

DOCKERFILE = REPO_ROOT / "Dockerfile"
DEVELOPMENT_TOOLS = ("bench", "localcluster", "localray", "apigen")
"""The packages of the source checkout that the wheel, and so the image, leaves out."""


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


def runtime_environment() -> dict[str, str]:
    """The variables the final stage's ENV instructions set (`ENV K=V K2=V2`) that change how the
    image's Python runs (PYTHONOPTIMIZE), where it finds CAs (SSL_*) and which compiled
    extensions it loads (FROZENLIST_NO_EXTENSIONS)."""
    found: dict[str, str] = {}
    for keyword, arguments in stages()[-1]:
        if keyword == "ENV":
            for assignment in shlex.split(arguments):
                name, _, value = assignment.partition("=")
                if name.startswith(("PYTHON", "SSL_", "FROZENLIST_")):
                    found[name] = value
    return found


def bytecode_compilation() -> list[str]:
    """The build stage's `compileall` step as words (the one step that writes bytecode)."""
    build = " ".join(arguments for keyword, arguments in stages()[0] if keyword == "RUN")
    (step,) = [step for step in build.split("&&") if "compileall" in step]
    return shlex.split(step)
