"""A port already in use stops `ray-operator run` with one line naming the flag and env var that
move it: exit code 1, no traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from ray_operator.localcluster.controlplane import LocalControlPlane

from tests.runtime.processes import REPO_ROOT, free_port


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def run_operator(control_plane: LocalControlPlane, namespace: str, *flags: str) -> str:
    finished = subprocess.run(
        [
            sys.executable,
            "-m",
            "ray_operator.cli",
            "run",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "--namespace",
            namespace,
            "--no-leader-elect",
            "--no-webhooks",
            *flags,
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert finished.returncode == 1, finished.stderr
    assert "Traceback" not in finished.stderr, finished.stderr
    return finished.stderr


@pytest.mark.parametrize(
    ("flag", "env"),
    [
        ("--health-addr", "RAY_OPERATOR_HEALTH_ADDR"),
        ("--metrics-addr", "RAY_OPERATOR_METRICS_ADDR"),
    ],
)
def test_a_taken_probe_or_metrics_port_is_one_line_naming_the_flag(
    control_plane: LocalControlPlane, namespace: str, taken_port: int, flag: str, env: str
) -> None:
    addresses = {"--health-addr": f"127.0.0.1:{free_port()}", "--metrics-addr": ""}
    addresses["--metrics-addr"] = f"127.0.0.1:{free_port()}"
    addresses[flag] = f"127.0.0.1:{taken_port}"
    stderr = run_operator(control_plane, namespace, *(x for kv in addresses.items() for x in kv))
    lines = [line for line in stderr.splitlines() if "is in use" in line]
    assert len(lines) == 1, stderr
    assert (
        f"port {taken_port} on 127.0.0.1 is in use; choose another with {flag} / {env}"
        in (lines[0])
    )


def test_a_taken_serve_graph_events_port_names_its_flag(
    control_plane: LocalControlPlane, namespace: str, taken_port: int
) -> None:
    stderr = run_operator(
        control_plane,
        namespace,
        "--health-addr",
        f"127.0.0.1:{free_port()}",
        "--metrics-addr",
        f"127.0.0.1:{free_port()}",
        "--serve-graph-events-port",
        str(taken_port),
    )
    lines = [line for line in stderr.splitlines() if "is in use" in line]
    assert len(lines) == 1, stderr
    assert "--serve-graph-events-port / RAY_OPERATOR_SERVE_GRAPH_EVENTS_PORT" in lines[0]
