"""Python modules of our protobuf schemas, compiled by protoc from `proto/` beside this file.

protoc comes from grpcio-tools (pinned exactly in the dev extra: the generated code names the
protobuf version it was made by, so another grpcio-tools release changes the bytes) and the
typed stubs from mypy-protobuf (its `.pyi` passes mypy --strict; protoc's own `--pyi_out` does
not). Both run in a temporary directory and their output is returned as text, like the models.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

PROTO_ROOT = Path(__file__).parent / "proto"
"""The include root: a file's path under it is its import path, and its Python module path."""

PROTO_FILES = (Path("ray_operator_io") / "v1alpha1" / "serve_graph.proto",)

GENERATED_ROOT = Path("generated")


def protoc_gen_mypy() -> Path:
    """The mypy-protobuf plugin installed beside this interpreter.

    protoc looks plugins up on PATH, which a `.venv/bin/python` run need not have; an absolute
    path works however the generator is started.
    """
    return Path(sys.executable).parent / "protoc-gen-mypy"


def render_protos() -> dict[Path, str]:
    """`<module>_pb2.py` and `<module>_pb2.pyi` of every proto file, by repository path."""
    with tempfile.TemporaryDirectory(prefix="ray-apigen-proto-") as workdir:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "grpc_tools.protoc",
                f"--proto_path={PROTO_ROOT}",
                f"--python_out={workdir}",
                f"--plugin=protoc-gen-mypy={protoc_gen_mypy()}",
                f"--mypy_out={workdir}",
                *(str(path) for path in PROTO_FILES),
            ],
            check=True,
            capture_output=True,
            cwd=PROTO_ROOT,
        )
        files: dict[Path, str] = {}
        for proto in PROTO_FILES:
            for suffix in (".py", ".pyi"):
                module = proto.with_name(proto.stem + "_pb2" + suffix)
                files[GENERATED_ROOT / module] = (Path(workdir) / module).read_text()
    return files
