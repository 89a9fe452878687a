"""The embedded control plane behaves like a small real cluster, and its CLI cleans up."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from ray_operator.localcluster.binaries import ensure_binaries
from ray_operator.localcluster.controlplane import LocalControlPlane, _is_alive

from tests.conftest import Kubectl

POD = """
apiVersion: v1
kind: Pod
metadata:
  name: hello
spec:
  containers:
  - name: main
    image: busybox
    resources:
      requests: {cpu: 100m, memory: 64Mi}
"""


def test_api_server_answers_readyz(kubectl: Kubectl) -> None:
    assert kubectl("get", "--raw", "/readyz") == "ok"


def test_api_server_reports_its_pinned_version(kubectl: Kubectl) -> None:
    version = json.loads(kubectl("get", "--raw", "/version"))
    assert version["gitVersion"] == "v1.34.4"


def test_created_pod_is_scheduled_and_becomes_running_and_ready(
    kubectl: Kubectl, namespace: str
) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input_text=POD)
    kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/hello", "--timeout=60s")
    pod = json.loads(kubectl("get", "-n", namespace, "pod/hello", "-o", "json"))
    assert pod["status"]["phase"] == "Running"
    assert pod["spec"]["nodeName"] == "kwok-node-0"
    assert pod["status"]["podIP"].startswith("10.244.")


def test_deleted_pod_goes_away_without_a_kubelet(kubectl: Kubectl, namespace: str) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input_text=POD)
    kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/hello", "--timeout=60s")
    kubectl("delete", "-n", namespace, "pod/hello", "--wait=true", "--timeout=60s")
    assert kubectl("get", "-n", namespace, "pods", "-o", "name") == ""


def test_second_lookup_reuses_the_built_binaries_without_rebuilding() -> None:
    progress = io.StringIO()
    ensure_binaries(progress=progress)
    lines = progress.getvalue().splitlines()
    assert lines, "ensure_binaries said nothing"
    assert all("no rebuild" in line or "KUBEBUILDER_ASSETS" in line for line in lines), lines


def test_cli_start_status_stop_leaves_no_process_behind(tmp_path: Path) -> None:
    state_dir = tmp_path / "cli-plane"
    cli = [sys.executable, "-m", "ray_operator.cli", "local-cluster"]
    started = subprocess.run(
        [*cli, "start", "--dir", str(state_dir)],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    kubeconfig = Path(started.stdout.strip().splitlines()[-1])
    assert kubeconfig.is_file()
    try:
        readyz = subprocess.run(
            ["kubectl", "--kubeconfig", str(kubeconfig), "get", "--raw", "/readyz"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert readyz.stdout == "ok"
        status = subprocess.run(
            [*cli, "status", "--dir", str(state_dir)], capture_output=True, text=True, timeout=30
        )
        assert status.returncode == 0, status.stdout
        assert "readyz           ok" in status.stdout
        recorded = LocalControlPlane(state_dir)
        recorded.load_state()
        components = dict(recorded._processes)
        assert set(components) == {"etcd", "kube-apiserver", "kube-scheduler", "kwok"}
    finally:
        subprocess.run([*cli, "stop", "--dir", str(state_dir)], timeout=60, check=True)
    assert not any(_is_alive(process) for process in components.values())
    after = subprocess.run(
        [*cli, "status", "--dir", str(state_dir)], capture_output=True, text=True, timeout=30
    )
    assert after.returncode == 1
