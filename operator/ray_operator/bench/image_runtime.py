"""Our operator as the image runs it: the Dockerfile's runtime settings and compiled bytecode.

The image runs Python with PYTHONOPTIMIZE=2 and no CA bundle file (Dockerfile, final stage), and
ships the optimized bytecode of every module. A source checkout has neither: this machine's
environment sets PYTHONDONTWRITEBYTECODE, so a Python started from it compiles every module of
the operator from source at each start, time to ready that the image never spends. The
benchmark measures what ships: it compiles the bytecode once and starts our operator with the
image's settings (tests/deploy/test_dockerfile.py holds them equal).
"""

from __future__ import annotations

import compileall
import importlib.metadata
from collections.abc import Mapping
from pathlib import Path

import ray_io

import ray_operator

IMAGE_ENVIRONMENT: Mapping[str, str] = {
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONOPTIMIZE": "2",
    "SSL_CERT_FILE": "/dev/null",
    "SSL_CERT_DIR": "/etc/ssl/certs",
    "FROZENLIST_NO_EXTENSIONS": "1",
}
"""The runtime settings of the image's final stage (Python's, OpenSSL's, frozenlist's)."""

RUNTIME_REQUIREMENTS = Path(ray_operator.__file__).parents[2] / "requirements" / "runtime.txt"
"""The image's dependencies (the benchmark runs from a source checkout)."""


def compile_bytecode(requirements: Path = RUNTIME_REQUIREMENTS) -> None:
    """Compile, at the image's optimization level, what the image ships: the operator's packages
    and the distributions of the runtime lock (the standard library ships its bytecode). Files
    compiled before are skipped, so a second call costs only the walk."""
    for package in (Path(ray_operator.__file__).parent, Path(ray_io.__file__).parent):
        compileall.compile_dir(package, quiet=2, optimize=2, workers=0)
    for name in locked_distributions(requirements):
        try:
            installed = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # locked for another platform or Python (an environment marker)
        for file in installed.files or ():
            if file.suffix == ".py":
                compileall.compile_file(Path(str(installed.locate_file(file))), quiet=2, optimize=2)


def locked_distributions(requirements: Path) -> list[str]:
    """The names pinned in a `uv export` requirements file (`name==version \\` lines)."""
    return [
        line.split("==")[0].strip()
        for line in requirements.read_text().splitlines()
        if "==" in line and not line.lstrip().startswith("#")
    ]
