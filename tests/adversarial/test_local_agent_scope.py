"""Finding 4 of issue 28: the local Ray agent never runs other people's Pods on the developer's
machine.

`ray-operator dev` is pointed, through KUBECONFIG, at a cluster it did not start: this suite's
control plane, which has a node named `kwok-node-0` as the embedded plane has. A tenant there
plants code the way the finding describes: a ConfigMap with a `sitecustomize.py` on the
`PYTHONPATH` of a Pod bound to that node. Python imports it as the `ray` command starts, so a
marker file appears on this machine the moment the agent runs such a Pod (and the process then
exits at once: no real Ray is started).

- Without `--local-ray` the agent does not run at all against that cluster: even the operator's
  own head Pod of a RayCluster is not run here.
- With `--local-ray`, `dev` warns what that runs, the operator's own head Pod runs (its marker
  appears), and a Pod the tenant created (bound to the node, labelled and owned as a head of a
  RayCluster the operator sees but does not manage) never becomes a process.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_operator.localcluster.controlplane import FAKE_NODE_NAME, LocalControlPlane

from tests.conftest import Kubectl
from tests.localray.dev_operator import DevOperator, events_of, head_pod
from tests.robustness.manifests import as_text, ray_cluster
from tests.runtime.processes import wait_until

pytestmark = pytest.mark.timeout(600)

SITE = "planted-site"
SITE_PATH = "/opt/site"
# Writes the file $MARKER names, then ends the process before Ray does anything.
SITECUSTOMIZE = "import os\nopen(os.environ['MARKER'], 'w').write(str(os.getpid()))\nos._exit(0)\n"
PASSES = 8.0
"""Seconds (agent passes, one a second) a Pod gets to become a process where none must start;
where one must start, it takes about one pass once its Pod is Running."""


def planted_site(kubectl: Kubectl, namespace: str) -> None:
    site = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": SITE},
        "data": {"sitecustomize.py": SITECUSTOMIZE},
    }
    kubectl("apply", "-n", namespace, "-f", "-", input_text=as_text(site))


def with_planted_site(pod_spec: dict[str, Any], marker: Path) -> None:
    """The Ray container imports the planted `sitecustomize.py`, which writes `marker` (through
    a hostPath volume: a local Pod's /tmp is its own)."""
    container = pod_spec["containers"][0]
    container["env"] = [
        {"name": "PYTHONPATH", "value": SITE_PATH},
        {"name": "MARKER", "value": f"/markers/{marker.name}"},
    ]
    container["volumeMounts"] = [
        {"name": "site", "mountPath": SITE_PATH},
        {"name": "markers", "mountPath": "/markers"},
    ]
    pod_spec["volumes"] = [
        {"name": "site", "configMap": {"name": SITE}},
        {"name": "markers", "hostPath": {"path": str(marker.parent)}},
    ]


def cluster_with_planted_site(name: str, marker: Path, **spec: Any) -> dict[str, Any]:
    manifest = ray_cluster(name, replicas=0)
    with_planted_site(manifest["spec"]["headGroupSpec"]["template"]["spec"], marker)
    manifest["spec"].update(spec)
    return manifest


def tenants_head_pod(cluster: dict[str, Any], marker: Path) -> dict[str, Any]:
    """A Pod anyone who may create Pods can write: bound to the node, labelled and owned as the
    head of `cluster` (a RayCluster the operator sees)."""
    metadata = cluster["metadata"]
    spec: dict[str, Any] = {
        "nodeName": FAKE_NODE_NAME,
        "containers": [{"name": "ray-head", "image": "rayproject/ray:2.52.0"}],
    }
    with_planted_site(spec, marker)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "tenants-head",
            "labels": {
                "ray.io/cluster": metadata["name"],
                "ray.io/node-type": "head",
                "ray.io/group": "headgroup",
                "ray.io/is-ray-node": "yes",
                "app.kubernetes.io/created-by": "kuberay-operator",
            },
            "ownerReferences": [
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayCluster",
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": spec,
    }


def apply(kubectl: Kubectl, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    kubectl("apply", "-n", namespace, "-f", "-", input_text=as_text(manifest))
    kind, name = manifest["kind"].lower(), manifest["metadata"]["name"]
    applied: dict[str, Any] = json.loads(kubectl("get", kind, name, "-n", namespace, "-o", "json"))
    return applied


def running_head(kubectl: Kubectl, namespace: str, cluster: str) -> str:
    """The cluster's head Pod, once KWOK reports it Running."""
    found: list[str] = []

    def running() -> bool:
        found[:] = [head_pod(kubectl, namespace, cluster)]
        if not found[0]:
            return False
        phase = kubectl("get", "pod", found[0], "-n", namespace, "-o", "jsonpath={.status.phase}")
        return phase == "Running"

    wait_until(running, timeout=60, interval=0.5, what=f"the head Pod of {cluster} Running")
    return found[0]


StartDev = Callable[..., DevOperator]


@pytest.fixture
def start_dev(
    control_plane: LocalControlPlane, namespace: str, tmp_path: Path
) -> Iterator[StartDev]:
    """Starts `ray-operator dev FLAGS` for the test's namespace with KUBECONFIG naming the
    suite's cluster (ready when returned, stopped afterwards)."""
    started: list[DevOperator] = []

    def start(*flags: str) -> DevOperator:
        operator = DevOperator(
            tmp_path / "dev", "--namespace", namespace, *flags, kubeconfig=control_plane.kubeconfig
        )
        started.append(operator)
        operator.wait_ready()
        return operator

    yield start
    for operator in started:
        operator.stop()


def test_dev_against_a_cluster_it_did_not_start_runs_no_local_process_unless_asked(
    start_dev: StartDev, kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    dev = start_dev()
    planted_site(kubectl, namespace)
    marker = tmp_path / "ran-the-operators-head"
    apply(kubectl, namespace, cluster_with_planted_site("mine", marker))
    head = running_head(kubectl, namespace, "mine")

    time.sleep(PASSES)

    assert not marker.exists(), "the agent ran a Pod of a cluster dev did not start"
    assert not events_of(kubectl, namespace, head, "LocalRayStarted")
    assert not dev.recorded_process_groups
    assert "Local Ray is off" in dev.log_tail(200), dev.log_tail()


def test_local_ray_against_another_cluster_warns_what_it_runs(
    start_dev: StartDev, control_plane: LocalControlPlane
) -> None:
    dev = start_dev("--local-ray")
    log = dev.log_tail(200)
    assert f"WARNING: --local-ray against the cluster of {control_plane.kubeconfig}" in log, log
    assert f"bound to node {FAKE_NODE_NAME} run as processes on this machine, as your user" in log
    # No kubelet endpoint for a plane dev did not start: its node's port stays unanswered.
    assert "kubelet endpoint" not in log, log
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", control_plane.ports.kubelet), timeout=5).close()


def test_with_local_ray_a_tenants_pod_on_the_node_never_becomes_a_process(
    start_dev: StartDev, kubectl: Kubectl, namespace: str, tmp_path: Path
) -> None:
    start_dev("--local-ray")
    planted_site(kubectl, namespace)
    # A RayCluster the operator sees but leaves to another controller: nothing deletes a Pod that
    # claims to be its head, so the agent has every chance to run it.
    elsewhere = apply(
        kubectl,
        namespace,
        cluster_with_planted_site(
            "elsewhere", tmp_path / "unused", managedBy="kueue.x-k8s.io/multikueue"
        ),
    )
    tenants_marker = tmp_path / "ran-the-tenants-pod"
    apply(kubectl, namespace, tenants_head_pod(elsewhere, tenants_marker))
    operators_marker = tmp_path / "ran-the-operators-head"
    apply(kubectl, namespace, cluster_with_planted_site("mine", operators_marker))

    running_head(kubectl, namespace, "mine")
    wait_until(operators_marker.exists, timeout=60, interval=0.5, what="the operator's head run")
    time.sleep(PASSES)

    assert not tenants_marker.exists(), "the agent ran a Pod the operator did not create"
    told = events_of(kubectl, namespace, "tenants-head", "LocalRayNotRun")
    assert len(told) == 1, told
    assert "did not create this Pod for RayCluster elsewhere" in told[0]
    assert not events_of(kubectl, namespace, "tenants-head", "LocalRayStarted")
