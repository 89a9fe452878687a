"""The embedded control plane behaves like a small real cluster, and its CLI cleans up."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path

from ray_operator.localcluster.binaries import ensure_binaries
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.localcluster.processes import is_alive as _is_alive

from tests.conftest import REPO_ROOT, Kubectl

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


def test_the_fake_node_sends_the_api_server_to_the_planes_kubelet_port(
    control_plane: LocalControlPlane, kubectl: Kubectl
) -> None:
    node = json.loads(kubectl("get", "node", "kwok-node-0", "-o", "json"))
    # KWOK writes both at start-up and keeps them in its heartbeats.
    endpoint = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    assert endpoint == control_plane.kubelet_credentials().port != 0
    assert {"type": "InternalIP", "address": "127.0.0.1"} in node["status"]["addresses"]


def test_deleted_pod_goes_away_without_a_kubelet(kubectl: Kubectl, namespace: str) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input_text=POD)
    kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/hello", "--timeout=60s")
    kubectl("delete", "-n", namespace, "pod/hello", "--wait=true", "--timeout=60s")
    assert kubectl("get", "-n", namespace, "pods", "-o", "name") == ""


def _owned_config_map_and_pod(kubectl: Kubectl, namespace: str) -> None:
    kubectl("create", "configmap", "owner", "-n", namespace)
    uid = kubectl("get", "configmap", "owner", "-n", namespace, "-o", "jsonpath={.metadata.uid}")
    owned = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "hello",
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid}
                ],
            },
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        }
    )
    kubectl("apply", "-n", namespace, "-f", "-", input_text=owned)
    kubectl("delete", "configmap", "owner", "-n", namespace)


def test_the_garbage_collector_deletes_what_a_deleted_owner_owned(
    kubectl: Kubectl, namespace: str
) -> None:
    _owned_config_map_and_pod(kubectl, namespace)
    kubectl("wait", "-n", namespace, "--for=delete", "pod/hello", "--timeout=60s")


def test_the_plane_without_gc_leaves_what_a_deleted_owner_owned(
    control_plane_without_gc: LocalControlPlane,
) -> None:
    kubectl = Kubectl(control_plane_without_gc.kubeconfig)
    namespace = "no-gc-owner-check"
    kubectl("create", "namespace", namespace)
    _owned_config_map_and_pod(kubectl, namespace)
    # Long enough for a garbage collector to have acted on the default plane many times over.
    kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/hello", "--timeout=60s")
    completed = kubectl.run("wait", "-n", namespace, "--for=delete", "pod/hello", "--timeout=5s")
    assert completed.returncode != 0, "the Pod went away on a plane without a garbage collector"
    assert "kube-controller-manager" not in control_plane_without_gc.running_components()


def test_a_jobs_pod_runs_and_completes_the_job(kubectl: Kubectl, namespace: str) -> None:
    kubectl("create", "job", "hello", "-n", namespace, "--image=busybox", "--", "true")
    kubectl("wait", "-n", namespace, "--for=condition=Complete", "job/hello", "--timeout=90s")


def test_a_deployment_gets_its_pods(kubectl: Kubectl, namespace: str) -> None:
    kubectl("create", "deployment", "redis", "-n", namespace, "--image=redis", "--replicas=2")
    kubectl(
        "wait", "-n", namespace, "--for=condition=Available", "deployment/redis", "--timeout=90s"
    )


def test_a_resource_quota_refuses_a_pod_beyond_it_as_in_a_cluster(
    kubectl: Kubectl, namespace: str
) -> None:
    """KubeRay's e2e tests set a quota to make Pod creation fail (FailedCreateHeadPod); the
    admission plugin only enforces what the quota controller has counted (`status.hard`)."""
    kubectl("create", "quota", "no-pods", "-n", namespace, "--hard=pods=0")
    kubectl(
        "wait",
        "-n",
        namespace,
        "--for=jsonpath={.status.hard.pods}=0",
        "resourcequota/no-pods",
        "--timeout=60s",
    )
    refused = kubectl.run("run", "p", "-n", namespace, "--image=busybox")
    assert refused.returncode != 0
    assert "exceeded quota: no-pods" in refused.stderr


def test_the_complete_samples_claim_binds_a_local_volume_and_its_pods_run(
    kubectl: Kubectl, namespace: str
) -> None:
    sample = REPO_ROOT / "samples" / "ray-cluster.complete.yaml"
    claim = next(
        document
        for document in sample.read_text().split("\n---\n")
        if "kind: PersistentVolumeClaim" in document
    )
    kubectl("apply", "-n", namespace, "-f", "-", input_text=claim)
    kubectl(
        "wait",
        "-n",
        namespace,
        "--for=jsonpath={.status.phase}=Bound",
        "pvc/ray-shared-data",
        "--timeout=60s",
    )
    uses_claim = json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "hello"},
            "spec": {
                "containers": [{"name": "main", "image": "busybox"}],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "ray-shared-data"}}
                ],
            },
        }
    )
    kubectl("apply", "-n", namespace, "-f", "-", input_text=uses_claim)
    kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/hello", "--timeout=60s")


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
        assert "readyz                   ok" in status.stdout
        recorded = LocalControlPlane(state_dir)
        recorded.load_state()
        components = dict(recorded._processes)
        assert set(components) == {
            "etcd",
            "kube-apiserver",
            "kube-scheduler",
            "kube-controller-manager",
            "kwok",
        }
        assert "kube-controller-manager  running" in status.stdout
    finally:
        subprocess.run([*cli, "stop", "--dir", str(state_dir)], timeout=60, check=True)
    assert not any(_is_alive(process) for process in components.values())
    after = subprocess.run(
        [*cli, "status", "--dir", str(state_dir)], capture_output=True, text=True, timeout=30
    )
    assert after.returncode == 1


def test_the_dev_planes_kubelet_leaves_a_deleted_pods_finalizers_to_their_owner(
    tmp_path: Path,
) -> None:
    """A kubelet stops a deleted Pod's containers; the Pod stays Terminating until whoever put a
    finalizer on it takes it off (KubeRay's TestRayClusterScalingDown counts such Pods). KWOK's
    stock stage emptied the finalizers itself."""
    plane = LocalControlPlane(
        tmp_path / "plane", ensure_binaries(), ray_job_submitters_run_locally=True
    )
    plane.start()
    try:
        kubectl = Kubectl(plane.kubeconfig)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "held",
                "namespace": "default",
                "finalizers": ["example.com/hold"],
            },
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        }
        kubectl("apply", "-f", "-", input_text=json.dumps(pod))
        kubectl("wait", "--for=condition=Ready", "pod/held", "--timeout=60s")
        kubectl("delete", "pod", "held", "--wait=false")
        time.sleep(3)  # KWOK's stages act within a second; the Pod must still be there after
        kept = json.loads(kubectl("get", "pod", "held", "-o", "json"))
        assert kept["metadata"]["finalizers"] == ["example.com/hold"]
        assert kept["metadata"]["deletionTimestamp"]
        kubectl("patch", "pod", "held", "--type=merge", "-p", '{"metadata":{"finalizers":[]}}')
        kubectl("wait", "--for=delete", "pod/held", "--timeout=60s")
    finally:
        plane.stop()
