"""Threat model, finding 3 of issue 28: a planted builder ConfigMap never reaches a Ray
container's PYTHONPATH.

The attacker may create, patch and delete ConfigMaps in the namespace and read (`view`) the
RayServeGraph — so it knows the graph's uid and can forge an ownerReference to it, and it can
name any field manager (managedFields prove nothing either). What it plants: a module of its
own, a `sitecustomize.py` (runs in every Python process whose path holds it) and a `.pth` in
`binaryData`. Whatever it does, the operator (`ray-operator run`, its own process, every
controller) ends with the ConfigMap holding exactly its module, and every Pod it creates mounts
that one file: the RayService, the RayCluster and the Pods are checked, not just the ConfigMap.

The plane has no kubelet that mounts volumes (nor a garbage collector): what reaches a
container is read from the Pod specs the operator wrote (`configMap.items`), the ConfigMap's
content from the API server.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from ray_operator.builders.serve_graph import BUILDER_FILE, builder_configmap_name, builder_source
from ray_operator.spec.serve_graph_names import (
    BUILDER_MOUNT_PATH,
    SECRET_HOSTS_ANNOTATION,
)

from tests.conftest import Kubectl
from tests.robustness.conftest import StartOperator
from tests.robustness.manifests import UNSCHEDULED, ray_cluster
from tests.runtime.processes import wait_until
from tests.servegraph.artifact_server import ArtifactServer
from tests.servegraph.graphs import document, pipeline_graph
from tests.servegraph.planted import PAYLOAD, PLANTED_WORDS, planted_builder_configmap

GRAPH = "pipeline"
NAME = builder_configmap_name(GRAPH)
TOKEN = "adversarial-registry-token"
ONLY_THE_MODULE = [{"key": BUILDER_FILE, "path": BUILDER_FILE}]
LOOPBACK_FETCHES = ("--serve-graph-allow-loopback",)


@pytest.fixture
def registry(kubectl: Kubectl, namespace: str) -> Iterator[ArtifactServer]:
    """The graph's document on a TLS server on loopback, its token and CA as Secrets."""
    with ArtifactServer.start(tls=True) as server:
        server.serve("/pipeline.pb", document(pipeline_graph()), token=TOKEN)
        parts = urllib.parse.urlsplit(server.url("/pipeline.pb"))
        annotations = {SECRET_HOSTS_ANNOTATION: f"{parts.hostname}:{parts.port}"}
        apply(kubectl, namespace, secret("registry-token", {"token": TOKEN}, annotations))
        apply(kubectl, namespace, secret("registry-ca", {"ca.crt": server.ca_pem.decode()}, {}))
        yield server


def secret(name: str, values: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    data = {key: base64.b64encode(value.encode()).decode() for key, value in values.items()}
    metadata = {"name": name, "annotations": annotations}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "data": data}


def rayservegraph(url: str) -> dict[str, Any]:
    """A graph on a head and one worker group (its workers never scheduled: nothing runs)."""
    cluster = ray_cluster("unused", scheduler=UNSCHEDULED)["spec"]
    return {
        "apiVersion": "ray-operator.io/v1alpha1",
        "kind": "RayServeGraph",
        "metadata": {"name": GRAPH},
        "spec": {
            "source": {
                "url": url,
                "tokenSecretRef": {"name": "registry-token", "key": "token"},
                "caBundleSecretRef": {"name": "registry-ca", "key": "ca.crt"},
                "timeoutSeconds": 5,
            },
            "rayClusterSpec": cluster,
        },
    }


def planted(*, owner_uid: str | None, labelled: bool = True) -> dict[str, Any]:
    return planted_builder_configmap(GRAPH, owner_uid=owner_uid, labelled=labelled)


def apply(kubectl: Kubectl, namespace: str, manifest: dict[str, Any]) -> None:
    kubectl(
        "apply", "--server-side", "-n", namespace, "-f", "-", input_text=yaml.safe_dump(manifest)
    )


def create(kubectl: Kubectl, namespace: str, manifest: dict[str, Any], *flags: str) -> None:
    kubectl("create", "-n", namespace, *flags, "-f", "-", input_text=json.dumps(manifest))


def get(kubectl: Kubectl, namespace: str, *what: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(kubectl("get", "-n", namespace, *what, "-o", "json"))
    return found


def graph_uid(kubectl: Kubectl, namespace: str) -> str:
    return str(get(kubectl, namespace, "rayservegraph", GRAPH)["metadata"]["uid"])


def configmap_is_the_operators(kubectl: Kubectl, namespace: str) -> dict[str, Any] | None:
    found = get(kubectl, namespace, "configmaps", "--field-selector", f"metadata.name={NAME}")
    (configmap,) = found["items"] or [None]
    if configmap is None:
        return None
    exact = configmap.get("data") == {BUILDER_FILE: builder_source()}
    clean = "binaryData" not in configmap and configmap.get("immutable") is True
    return configmap if exact and clean else None


def cluster_pods(kubectl: Kubectl, namespace: str) -> list[dict[str, Any]]:
    """The Pods of the graph's RayCluster, once its head and its worker exist."""
    found = get(kubectl, namespace, "pods", "-l", "ray.io/cluster")["items"]
    types = sorted(pod["metadata"]["labels"].get("ray.io/node-type") for pod in found)
    return found if types == ["head", "worker"] else []


def assert_only_the_module_is_mounted(pod_specs: list[dict[str, Any]]) -> None:
    """Every volume of the builder's ConfigMap projects the module alone, and what the Ray
    container has first on PYTHONPATH is that volume's mount."""
    assert pod_specs
    for spec in pod_specs:
        volumes = {volume["name"]: volume for volume in spec.get("volumes") or ()}
        builder = [v for v in volumes.values() if v.get("configMap", {}).get("name") == NAME]
        assert len(builder) == 1, spec.get("volumes")
        assert builder[0]["configMap"]["items"] == ONLY_THE_MODULE
        container = spec["containers"][0]
        mounts = [m for m in container["volumeMounts"] if m["mountPath"] == BUILDER_MOUNT_PATH]
        assert [volumes[m["name"]] for m in mounts] == builder
        env = {variable["name"]: variable.get("value") for variable in container.get("env") or ()}
        assert env["PYTHONPATH"].split(":")[0] == BUILDER_MOUNT_PATH


def templates(cluster_spec: dict[str, Any]) -> list[dict[str, Any]]:
    groups = [cluster_spec["headGroupSpec"], *cluster_spec.get("workerGroupSpecs", ())]
    return [group["template"]["spec"] for group in groups]


def assert_nothing_mounts_more_than_the_module(kubectl: Kubectl, namespace: str) -> None:
    """The RayService, its RayCluster and every Pod the operator created."""
    rayservice = get(kubectl, namespace, "rayservice", GRAPH)
    assert_only_the_module_is_mounted(templates(rayservice["spec"]["rayClusterConfig"]))
    (cluster,) = get(kubectl, namespace, "rayclusters")["items"]
    assert_only_the_module_is_mounted(templates(cluster["spec"]))
    pods: list[dict[str, Any]] = []
    wait_until(
        lambda: pods.extend(cluster_pods(kubectl, namespace)) or pods,
        timeout=60,
        what="the head and worker Pods",
    )
    assert_only_the_module_is_mounted([pod["spec"] for pod in pods])


def assert_nothing_planted_is_shown(kubectl: Kubectl, namespace: str) -> None:
    """Status and Events say what was found in fixed words, never what was planted."""
    status = get(kubectl, namespace, "rayservegraph", GRAPH).get("status") or {}
    events = get(kubectl, namespace, "events")["items"]
    shown = json.dumps(status) + json.dumps([event.get("message") for event in events])
    assert not [word for word in PLANTED_WORDS if word in shown]


def test_a_configmap_planted_before_the_operator_wrote_it_never_reaches_pythonpath(
    start_operator: StartOperator, kubectl: Kubectl, namespace: str, registry: ArtifactServer
) -> None:
    """Planted with a forged ownerReference (the graph's uid) and extra keys before the operator
    saw the graph: replaced by exactly the module before any RayService exists."""
    apply(kubectl, namespace, rayservegraph(registry.url("/pipeline.pb")))
    create(kubectl, namespace, planted(owner_uid=graph_uid(kubectl, namespace)))
    planted_uid = get(kubectl, namespace, "configmap", NAME)["metadata"]["uid"]

    start_operator(extra_args=LOOPBACK_FETCHES)
    wait_until(
        lambda: cluster_pods(kubectl, namespace), timeout=120, what="the graph's Pods created"
    )

    ours = configmap_is_the_operators(kubectl, namespace)
    assert ours is not None, get(kubectl, namespace, "configmap", NAME)
    assert ours["metadata"]["uid"] != planted_uid
    assert_nothing_mounts_more_than_the_module(kubectl, namespace)
    reasons = {event["reason"] for event in get(kubectl, namespace, "events")["items"]}
    assert "BuilderConfigMapReplaced" in reasons
    assert_nothing_planted_is_shown(kubectl, namespace)


def test_keys_patched_in_after_the_operator_wrote_it_never_reach_pythonpath(
    start_operator: StartOperator, kubectl: Kubectl, namespace: str, registry: ArtifactServer
) -> None:
    """The written ConfigMap refuses every patch of its content; swapped for a planted one
    (deleted and created with a forged owner, unlabelled so the operator's cache never sees
    it), it is replaced again, and a Pod created afterwards still mounts the module alone."""
    apply(kubectl, namespace, rayservegraph(registry.url("/pipeline.pb")))
    operator = start_operator(extra_args=LOOPBACK_FETCHES)
    wait_until(lambda: cluster_pods(kubectl, namespace), timeout=120, what="the graph's Pods")
    written = get(kubectl, namespace, "configmap", NAME)

    for patch in (
        {"data": {"sitecustomize.py": PAYLOAD}},
        {"data": {BUILDER_FILE: PAYLOAD}},
        {"binaryData": {"zz-evil.pth": base64.b64encode(PAYLOAD.encode()).decode()}},
        {"immutable": False},
    ):
        refused = kubectl.run("patch", "-n", namespace, "configmap", NAME, "-p", json.dumps(patch))
        assert refused.returncode != 0, f"the API server accepted {patch}"
        assert "immutable" in refused.stderr
    assert configmap_is_the_operators(kubectl, namespace) == written

    operator.stop()  # the swap is then certain to land before the operator looks
    kubectl("delete", "-n", namespace, "configmap", NAME)
    create(kubectl, namespace, planted(owner_uid=graph_uid(kubectl, namespace), labelled=False))
    swapped_uid = get(kubectl, namespace, "configmap", NAME)["metadata"]["uid"]
    start_operator(extra_args=LOOPBACK_FETCHES)

    def replaced() -> dict[str, Any] | None:
        found = configmap_is_the_operators(kubectl, namespace)
        return found if found is not None and found["metadata"]["uid"] != swapped_uid else None

    wait_until(replaced, timeout=60, what="the swapped ConfigMap replaced")
    # A Pod created after the swap: the worker, deleted, is created anew by the operator.
    (old_worker,) = get(kubectl, namespace, "pods", "-l", "ray.io/node-type=worker")["items"]
    kubectl("delete", "-n", namespace, "pod", old_worker["metadata"]["name"], "--wait=false")

    def new_worker() -> bool:
        pods = cluster_pods(kubectl, namespace)
        workers = [pod for pod in pods if pod["metadata"]["labels"]["ray.io/node-type"] == "worker"]
        uids = {pod["metadata"]["uid"] for pod in workers}
        return bool(uids) and old_worker["metadata"]["uid"] not in uids

    wait_until(new_worker, timeout=60, what="a new worker Pod")
    assert_nothing_mounts_more_than_the_module(kubectl, namespace)
    assert_nothing_planted_is_shown(kubectl, namespace)


def test_managed_fields_are_no_proof_of_who_wrote_a_configmap(
    kubectl: Kubectl, namespace: str
) -> None:
    """Why the operator trusts content, not managedFields: any client names any field manager."""
    forged = planted(owner_uid=None)
    create(kubectl, namespace, forged, "--field-manager", "ray-operator")
    found = get(kubectl, namespace, "configmap", NAME, "--show-managed-fields")
    managers = {entry["manager"] for entry in found["metadata"]["managedFields"]}
    assert managers == {"ray-operator"}
