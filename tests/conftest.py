"""Fixtures for the whole suite: real control planes, one namespace per test.

The control plane is real (etcd + kube-apiserver + kube-scheduler + kube-controller-manager +
KWOK on loopback, see ray_operator.localcluster); the suite never mocks the API server.

Two planes, each started once per run when first asked for:
- `control_plane`: complete, with kube-controller-manager (garbage collector, Job and
  Deployment controllers, ...), as a user's cluster has.
- `control_plane_without_gc`: no kube-controller-manager. The operator promises to delete what
  it owns explicitly, as KubeRay does (DESIGN.md); a test of that promise would pass on a plane
  with a garbage collector even if the operator deleted nothing. A package or module proves it
  by making `control_plane` this plane (see `tests/controllers/conftest.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from ray_operator.cli import install_crds
from ray_operator.localcluster.binaries import KUBERNETES_VERSION, ensure_binaries
from ray_operator.localcluster.controlplane import LocalControlPlane

REPO_ROOT = Path(__file__).resolve().parent.parent
KUBERAY_FIXTURES = REPO_ROOT.parent / "shared" / "fixtures" / "kuberay-samples"
SAMPLES = REPO_ROOT / "samples"

_namespace_numbers = itertools.count()


def pytest_report_header() -> str:
    return (
        f"control plane: kube-apiserver {KUBERNETES_VERSION} (real, on 127.0.0.1), "
        "kube-controller-manager (not for tests/controllers: they prove cleanup without GC), KWOK"
    )


@pytest.fixture(autouse=True)
async def the_session_loop_is_the_current_loop() -> None:
    """Makes the session's loop current again before each test.

    asyncio.run() (or uvloop.run()) in the main thread, as a few tests and the benchmark CLI
    do, leaves no current loop behind. looptime finds the test's loop as the current one; on
    Python 3.12 it then finds none, and every later test sleeps in real time: a 60 s requeue
    became 60 real seconds. (tests/runtime/test_queue.py holds the canary.)
    """
    asyncio.set_event_loop(asyncio.get_running_loop())


@contextlib.contextmanager
def running_control_plane(
    *, controller_manager: bool = True, apiserver_feature_gates: Sequence[str] = ()
) -> Iterator[LocalControlPlane]:
    """A started control plane with the ray.io CRDs installed, stopped and removed afterwards.

    Its directory is outside pytest's basetemp: pytest prunes old basetemps, and a second pytest
    run on the same machine would otherwise delete a running control plane's etcd data.
    """
    directory = Path(tempfile.mkdtemp(prefix="ray-operator-control-plane-"))
    plane = LocalControlPlane(
        directory,
        ensure_binaries(),
        controller_manager=controller_manager,
        apiserver_feature_gates=apiserver_feature_gates,
    )
    try:
        plane.start()
        install_crds(plane.kubeconfig)
        yield plane
    finally:
        plane.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[LocalControlPlane]:
    """The complete control plane (with kube-controller-manager) shared by the run."""
    with running_control_plane() as plane:
        yield plane


@pytest.fixture(scope="session")
def control_plane_without_gc() -> Iterator[LocalControlPlane]:
    """A control plane without kube-controller-manager: nothing deletes what the operator
    leaves behind, and no Job controller writes the Jobs a test stages."""
    with running_control_plane(controller_manager=False) as plane:
        yield plane


@pytest.fixture
def kubectl(control_plane: LocalControlPlane) -> Kubectl:
    """kubectl bound to the test control plane's admin kubeconfig."""
    return Kubectl(control_plane.kubeconfig)


@pytest.fixture
def namespace(kubectl: Kubectl, request: pytest.FixtureRequest) -> str:
    """A fresh namespace named after the test.

    Not deleted afterwards: its objects are evidence when a test fails, and on the plane without
    a namespace controller a deleted namespace would only sit in Terminating.
    """
    stem = request.node.name.lower().replace("_", "-")
    name = "".join(c for c in stem if c.isalnum() or c == "-")[:50].strip("-")
    name = f"{name}-{next(_namespace_numbers)}"
    kubectl("create", "namespace", name)
    return name


class Kubectl:
    """Runs kubectl against one kubeconfig; raises with kubectl's stderr when it fails."""

    def __init__(self, kubeconfig: Path) -> None:
        self.kubeconfig = kubeconfig

    def __call__(self, *args: str, input_text: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            input=input_text,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and result.returncode != 0:
            raise KubectlError(args, result.returncode, result.stderr)
        return result.stdout

    def run(self, *args: str, input_text: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run without raising, for tests that expect kubectl to fail."""
        return subprocess.run(
            ["kubectl", "--kubeconfig", str(self.kubeconfig), *args],
            input=input_text,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


class KubectlError(AssertionError):
    def __init__(self, args: tuple[str, ...], code: int, stderr: str) -> None:
        super().__init__(f"kubectl {' '.join(args)} exited {code}: {stderr.strip()}")
        self.stderr = stderr
