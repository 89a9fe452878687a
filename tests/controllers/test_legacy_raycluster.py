"""Specification: with `--legacy-clusters`, a legacy `cluster.ray.io/v1` RayCluster applied
unchanged runs as a ray.io/v1 RayCluster of the same name that it owns; its status says so in the
legacy fields; the legacy operator's habits hold (re-apply to update, change an annotation to
restart); a spec that cannot be converted is reported and breaks nothing; deleting it deletes
everything under it, explicitly (this plane has no garbage collector).

These tests run on a control plane of their own, with the legacy CRD installed: with it,
`kubectl get rayclusters` means cluster.ray.io (kubectl takes the first group alphabetically), so
every kubectl call here names the group.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import yaml
from ray_operator.app import Operator
from ray_operator.cli import install_crds
from ray_operator.controllers.legacy_raycluster import (
    LegacyRayClusterController,
    legacy_raycluster_controller,
)
from ray_operator.controllers.raycluster import RayClusterController
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.logs import PlainFormatter
from ray_operator.runtime.client import load_api_client
from ray_operator.validation.limits import ClusterLimits

from tests.conftest import REPO_ROOT, running_control_plane
from tests.controllers.conftest import Harness, operator_settings
from tests.operator_runs import operator_running

LEGACY_FIXTURES = REPO_ROOT.parent / "shared" / "fixtures" / "legacy-ray-operator"
LEGACY = "rayclusters.cluster.ray.io"
RAY_IO = "rayclusters.ray.io"


@pytest.fixture(scope="module")
def control_plane() -> Iterator[LocalControlPlane]:
    """This module's own plane (no garbage collector), with the legacy CRD installed."""
    with running_control_plane(controller_manager=False) as plane:
        install_crds(plane.kubeconfig, legacy=True)
        yield plane


@pytest.fixture
async def legacy_operator(
    control_plane: LocalControlPlane, namespace: str, harness: Harness
) -> AsyncIterator[Operator]:
    """The operator with `--legacy-clusters`: the legacy and the RayCluster controllers."""
    api = await load_api_client(control_plane.kubeconfig)
    settings = operator_settings(control_plane.kubeconfig, namespace)
    replica = Operator(
        dataclasses.replace(settings, legacy_clusters=True),
        api=api,
        controllers=[LegacyRayClusterController, RayClusterController],
    )
    async with operator_running(replica, name="legacy-operator-under-test", api=api):
        yield replica


def legacy_manifest(name: str = "example_cluster.yaml") -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((LEGACY_FIXTURES / name).read_text())
    return loaded


async def apply_legacy(harness: Harness, manifest: dict[str, Any]) -> None:
    """`kubectl apply -f` as the legacy docs do (client-side: kubectl's last-applied copy)."""
    await harness.kubectl("apply", "-f", "-", input_text=yaml.safe_dump(manifest))


async def legacy_status(harness: Harness, name: str) -> dict[str, Any]:
    found = await harness.get_json(f"{LEGACY}/{name}")
    status: dict[str, Any] = found.get("status") or {}
    return status


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or () if c["type"] == kind), {})


async def wait_for_phase(harness: Harness, name: str, phase: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        status = await legacy_status(harness, name)
        return status if status.get("phase") == phase else None

    found: dict[str, Any] = await harness.eventually(
        check, within=90, what=f"{name} in phase {phase}"
    )
    return found


async def pod_uids(harness: Harness, cluster: str) -> set[str]:
    return {pod["metadata"]["uid"] for pod in await harness.pods(cluster)}


async def test_both_legacy_examples_applied_unchanged_run_as_ready_ray_clusters(
    harness: Harness, legacy_operator: Operator
) -> None:
    for file, workers, resources in (
        ("example_cluster.yaml", 2, ("bar", "foo")),
        ("example_cluster2.yaml", 1, ("baz", "quux")),
    ):
        await harness.kubectl("apply", "-f", str(LEGACY_FIXTURES / file))
        name = legacy_manifest(file)["metadata"]["name"]
        status = await wait_for_phase(harness, name, "Running")
        assert condition(status, "Converted")["status"] == "True"
        assert condition(status, "Ready")["status"] == "True"
        assert (status["rayClusterName"], status["autoscalerRetries"]) == (name, 0)

        legacy = await harness.get_json(f"{LEGACY}/{name}")
        cluster = await harness.get_json(f"{RAY_IO}/{name}")
        (owner,) = cluster["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"]) == ("RayCluster", legacy["metadata"]["uid"])
        assert owner["apiVersion"] == "cluster.ray.io/v1"

        pods = await harness.pods_settled(name, head=1, workers=workers)
        for pod in pods:
            (ray,) = [c for c in pod["spec"]["containers"] if c["name"] == "ray-node"]
            command_line = " ".join([*ray.get("command", []), *ray.get("args", [])])
            assert "sleep infinity" not in command_line
            assert "ray start" in command_line
        (worker,) = {p["metadata"]["labels"]["ray.io/group"] for p in pods} - {"headgroup"}
        assert worker == "worker-node"
        worker_pod = next(p for p in pods if p["metadata"]["labels"]["ray.io/group"] != "headgroup")
        worker_args = " ".join(worker_pod["spec"]["containers"][0]["args"])
        _, _, after = worker_args.partition("--resources=")
        assert all(f'"{name}"' in after.split(" --")[0].replace("\\", "") for name in resources)


async def test_the_legacy_sample_runs_as_its_comment_says(
    harness: Harness, legacy_operator: Operator
) -> None:
    sample = REPO_ROOT / "samples" / "legacy" / "ray-cluster.legacy.yaml"
    await harness.kubectl("apply", "--validate=strict", "-f", str(sample))
    await wait_for_phase(harness, "legacy-mini", "Running")
    await harness.pods_settled("legacy-mini", head=1, workers=1)
    events = await harness.get_json("events", "--field-selector", "involvedObject.name=legacy-mini")
    assert not [e for e in events["items"] if e["reason"] == "ConvertedWithWarnings"]


async def test_editing_and_reapplying_updates_the_cluster_without_restarting_it(
    harness: Harness, legacy_operator: Operator
) -> None:
    manifest = legacy_manifest("example_cluster2.yaml")
    await apply_legacy(harness, manifest)
    await wait_for_phase(harness, "example-cluster2", "Running")
    await harness.pods_settled("example-cluster2", head=1, workers=1)
    before = await pod_uids(harness, "example-cluster2")

    manifest["spec"]["podTypes"][1]["minWorkers"] = 2
    await apply_legacy(harness, manifest)

    pods = await harness.pods_settled("example-cluster2", head=1, workers=2)
    assert before < {pod["metadata"]["uid"] for pod in pods}
    cluster = await harness.get_json(f"{RAY_IO}/example-cluster2")
    (group,) = cluster["spec"]["workerGroupSpecs"]
    assert (group["minReplicas"], group["replicas"]) == (2, 2)
    await wait_for_phase(harness, "example-cluster2", "Running")


async def test_a_changed_annotation_restarts_every_pod_of_the_cluster(
    harness: Harness, legacy_operator: Operator
) -> None:
    await harness.kubectl("apply", "-f", str(LEGACY_FIXTURES / "example_cluster2.yaml"))
    await wait_for_phase(harness, "example-cluster2", "Running")
    before = await pod_uids(harness, "example-cluster2")

    # The legacy docs' way to restart a cluster: add an annotation and re-apply.
    await harness.kubectl("annotate", f"{LEGACY}/example-cluster2", "try=again")

    async def all_replaced() -> set[str] | None:
        pods = await harness.pods("example-cluster2")
        uids = {pod["metadata"]["uid"] for pod in pods}
        return uids if len(pods) == 2 and not uids & before else None

    await harness.eventually(all_replaced, within=90, what="every Pod replaced")
    await harness.pods_settled("example-cluster2", head=1, workers=1, within=90)
    await wait_for_phase(harness, "example-cluster2", "Running")


async def test_a_spec_that_does_not_convert_is_reported_and_leaves_the_cluster_running(
    harness: Harness, legacy_operator: Operator
) -> None:
    await harness.kubectl("apply", "-f", str(LEGACY_FIXTURES / "example_cluster.yaml"))
    await wait_for_phase(harness, "example-cluster", "Running")
    cluster_before = await harness.get_json(f"{RAY_IO}/example-cluster")
    pods_before = await pod_uids(harness, "example-cluster")

    patch = {"spec": {"headPodType": "no-such-type"}}
    await harness.kubectl(
        "patch", f"{LEGACY}/example-cluster", "--type=merge", "-p", json.dumps(patch)
    )

    status = await wait_for_phase(harness, "example-cluster", "Error")
    converted = condition(status, "Converted")
    assert (converted["status"], converted["reason"]) == ("False", "InvalidSpec")
    assert "spec.headPodType" in converted["message"]
    events = await harness.get_json(
        "events", "--field-selector", "involvedObject.name=example-cluster,type=Warning"
    )
    assert any("spec.headPodType" in event["message"] for event in events["items"])
    # What runs keeps running, untouched.
    cluster_after = await harness.get_json(f"{RAY_IO}/example-cluster")
    assert cluster_after["spec"] == cluster_before["spec"]
    assert await pod_uids(harness, "example-cluster") == pods_before

    # Everyone else is served meanwhile.
    await harness.kubectl("apply", "-f", str(LEGACY_FIXTURES / "example_cluster2.yaml"))
    await wait_for_phase(harness, "example-cluster2", "Running")


async def test_what_the_conversion_dropped_is_told_in_one_event(
    harness: Harness, legacy_operator: Operator
) -> None:
    manifest = legacy_manifest("example_cluster2.yaml")
    manifest["spec"]["podTypes"][1]["podConfig"]["spec"]["restartPolicy"] = "Always"
    await apply_legacy(harness, manifest)
    await wait_for_phase(harness, "example-cluster2", "Running")

    events = await harness.get_json(
        "events", "--field-selector", "involvedObject.name=example-cluster2"
    )
    told = [e for e in events["items"] if e["reason"] == "ConvertedWithWarnings"]
    assert len(told) == 1
    assert told[0]["type"] == "Normal"
    assert "spec.podTypes[1].podConfig.spec.restartPolicy" in told[0]["message"]


async def test_a_legacy_cluster_beyond_the_operators_pod_limit_is_refused_by_name(
    harness: Harness, control_plane: LocalControlPlane, namespace: str
) -> None:
    api = await load_api_client(control_plane.kubeconfig)
    settings = dataclasses.replace(
        operator_settings(control_plane.kubeconfig, namespace), legacy_clusters=True
    )
    limited = legacy_raycluster_controller(limits=ClusterLimits(max_pods_per_cluster=2))
    replica = Operator(settings, api=api, controllers=[limited, RayClusterController])
    stop = asyncio.Event()
    task = asyncio.create_task(replica.run(stop), name="legacy-operator-with-limits")
    try:
        # 1 head + 2 workers: one Pod too many.
        await harness.kubectl("apply", "-f", str(LEGACY_FIXTURES / "example_cluster.yaml"))
        status = await wait_for_phase(harness, "example-cluster", "Error")
        converted = condition(status, "Converted")
        assert converted["reason"] == "InvalidSpec"
        assert "--max-pods-per-cluster" in converted["message"]
        assert not (await harness.get_json(RAY_IO))["items"]
    finally:
        stop.set()
        assert await asyncio.wait_for(task, timeout=30) == 0
        await api.close()


async def test_a_ray_cluster_of_the_same_name_that_is_not_ours_is_left_alone(
    harness: Harness, legacy_operator: Operator
) -> None:
    theirs = (REPO_ROOT / "samples" / "ray-cluster.mini.yaml").read_text()
    manifest = yaml.safe_load(theirs)
    manifest["metadata"]["name"] = "example-cluster"
    await harness.apply(manifest)
    await harness.kubectl("apply", "-f", str(LEGACY_FIXTURES / "example_cluster.yaml"))

    status = await wait_for_phase(harness, "example-cluster", "Error")
    converted = condition(status, "Converted")
    assert (converted["status"], converted["reason"]) == ("False", "RayClusterExists")
    cluster = await harness.get_json(f"{RAY_IO}/example-cluster")
    assert not cluster["metadata"].get("ownerReferences")
    assert cluster["spec"]["workerGroupSpecs"][0]["groupName"] != "worker-node"


async def test_deleting_the_legacy_cluster_deletes_its_ray_cluster_and_pods(
    harness: Harness, legacy_operator: Operator
) -> None:
    await harness.kubectl("apply", "-f", str(LEGACY_FIXTURES / "example_cluster2.yaml"))
    await wait_for_phase(harness, "example-cluster2", "Running")
    await harness.pods_settled("example-cluster2", head=1, workers=1)

    await harness.kubectl("delete", f"{LEGACY}/example-cluster2", "--wait=false")

    async def all_gone() -> bool:
        legacy = await harness.get_json(LEGACY)
        clusters = await harness.get_json(RAY_IO)
        pods = await harness.get_json("pods", "-l", "ray.io/cluster=example-cluster2")
        return not (legacy["items"] or clusters["items"] or pods["items"])

    await harness.eventually(all_gone, within=90, what="the legacy cluster and all under it gone")


def legacy_operator_leftovers(legacy: dict[str, Any]) -> list[dict[str, Any]]:
    """What the legacy Python operator made for `legacy`: its head and worker Pods (tagged by
    Ray's autoscaler, controlled by the legacy object, kept alive by `sleep infinity`) and its
    `<name>-ray-head` Service."""
    name, uid = legacy["metadata"]["name"], legacy["metadata"]["uid"]
    owner = {
        "apiVersion": "cluster.ray.io/v1",
        "kind": "RayCluster",
        "name": name,
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-ray-{kind}-legacy{index}",
                "labels": {
                    "ray-cluster-name": name,
                    "ray-node-type": kind,
                    "cluster.ray.io/component": f"{name}-ray-{kind}",
                },
                "ownerReferences": [owner],
            },
            "spec": {
                "containers": [
                    {
                        "name": "ray-node",
                        "image": "rayproject/ray:1.13.0",
                        "command": ["/bin/bash", "-c", "--"],
                        "args": ["trap : TERM INT; sleep infinity & wait;"],
                    }
                ]
            },
        }
        for index, kind in enumerate(("head", "worker"))
    ]
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{name}-ray-head", "ownerReferences": [owner]},
        "spec": {
            "selector": {"cluster.ray.io/component": f"{name}-ray-head"},
            "ports": [
                {"name": "client", "protocol": "TCP", "port": 10001, "targetPort": 10001},
                {"name": "dashboard", "protocol": "TCP", "port": 8265, "targetPort": 8265},
                {"name": "ray-serve", "protocol": "TCP", "port": 8000, "targetPort": 8000},
            ],
        },
    }
    return [*pods, service]


async def test_taking_over_from_the_legacy_operator_retires_its_pods_and_keeps_its_service(
    harness: Harness, control_plane: LocalControlPlane, namespace: str
) -> None:
    # The legacy operator ran here: the object, its Pods, its head Service. Then it was stopped.
    await harness.kubectl("apply", "-f", str(LEGACY_FIXTURES / "example_cluster2.yaml"))
    legacy = await harness.get_json(f"{LEGACY}/example-cluster2")
    for leftover in legacy_operator_leftovers(legacy):
        await harness.kubectl("create", "-f", "-", input_text=json.dumps(leftover))

    api = await load_api_client(control_plane.kubeconfig)
    settings = dataclasses.replace(
        operator_settings(control_plane.kubeconfig, namespace), legacy_clusters=True
    )
    replica = Operator(
        settings, api=api, controllers=[LegacyRayClusterController, RayClusterController]
    )
    stop = asyncio.Event()
    task = asyncio.create_task(replica.run(stop), name="legacy-takeover")
    try:
        await wait_for_phase(harness, "example-cluster2", "Running")

        async def legacy_pods_gone() -> bool:
            listed = await harness.get_json("pods", "-l", "ray-cluster-name=example-cluster2")
            return not listed["items"]

        await harness.eventually(legacy_pods_gone, what="the legacy operator's Pods deleted")
        # Workloads still reach ray://example-cluster2-ray-head:10001: it selects the new head.
        service = await harness.get_json("service/example-cluster2-ray-head")
        assert service["spec"]["selector"] == {
            "ray.io/cluster": "example-cluster2",
            "ray.io/node-type": "head",
        }
        assert [p["port"] for p in service["spec"]["ports"]] == [10001, 8265, 8000]
        await harness.pods_settled("example-cluster2", head=1, workers=1)
        reasons = {
            event["reason"]
            for event in (
                await harness.get_json(
                    "events", "--field-selector", "involvedObject.name=example-cluster2"
                )
            )["items"]
        }
        assert {"DeletedLegacyOperatorPods", "RepointedLegacyHeadService"} <= reasons

        # Deleting the legacy object takes its head Service too (no garbage collector here).
        await harness.kubectl("delete", f"{LEGACY}/example-cluster2", "--wait=false")

        async def service_gone() -> bool:
            found = await harness.get_json("services")
            return not [s for s in found["items"] if s["metadata"]["name"].startswith("example")]

        await harness.eventually(service_gone, within=90, what="the legacy head Service deleted")
    finally:
        stop.set()
        assert await asyncio.wait_for(task, timeout=30) == 0
        await api.close()


async def test_plain_log_lines_about_a_legacy_cluster_begin_with_its_name(
    harness: Harness, legacy_operator: Operator
) -> None:
    # The legacy docs: `kubectl logs <operator pod> | grep ^example-cluster2:`.
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(PlainFormatter())
    root = logging.getLogger("ray_operator")
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        await harness.kubectl("apply", "-f", str(LEGACY_FIXTURES / "example_cluster2.yaml"))
        await wait_for_phase(harness, "example-cluster2", "Running")
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    about_it = [line for line in lines.getvalue().splitlines() if "RayCluster" in line]
    assert any(line.startswith("example-cluster2: INFO ") for line in about_it)
    created = [line for line in about_it if "created RayCluster example-cluster2" in line]
    assert created
    assert all(line.startswith("example-cluster2: ") for line in created)
