"""The RayCluster controller against the real API server, with KWOK playing the kubelet.

Each scenario checks the exact Pod set it converges to and counts every Pod ever created in the
namespace (a watch from before the test's first apply): no duplicates, ever.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import yaml
from ray_operator.app import Operator

from tests.controllers.clusters import reconcile_count, scalable_cluster, worker_names
from tests.controllers.conftest import Harness

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def ray_start_line(pod: dict[str, Any]) -> str:
    container = pod["spec"]["containers"][0]
    return " ".join(container.get("command", []) + container.get("args", []))


async def test_mini_sample_gets_head_worker_service_and_becomes_ready(
    harness: Harness, operator: Operator
) -> None:
    await harness.kubectl("apply", "-f", str(SAMPLES / "ray-cluster.mini.yaml"))
    pods = await harness.pods_settled("ray-mini", head=1, workers=1)
    service = await harness.get_json("service/ray-mini-head-svc")
    ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    assert {"gcs-server": 6379, "dashboard": 8265, "client": 10001}.items() <= ports.items()
    await harness.kubectl(
        "wait", "--for=condition=RayClusterProvisioned", "raycluster/ray-mini", "--timeout=60s"
    )

    async def ready() -> dict[str, Any] | None:
        status = (await harness.cluster("ray-mini")).get("status", {})
        return status if status.get("state") == "ready" else None

    status = await harness.eventually(ready, what="state ready")
    assert status["readyWorkerReplicas"] == 1
    assert status["desiredWorkerReplicas"] == 1
    assert status["head"]["podName"] in {p["metadata"]["name"] for p in pods}
    assert status["head"]["serviceName"] == "ray-mini-head-svc"
    assert len(harness.created_pods) == 2


async def test_heterogeneous_groups_get_their_own_resources_and_ray_start_flags(
    harness: Harness, operator: Operator
) -> None:
    manifest = yaml.safe_load((SAMPLES / "ray-cluster.heterogeneous.yaml").read_text())
    name = manifest["metadata"]["name"]
    groups = manifest["spec"]["workerGroupSpecs"]
    await harness.apply(manifest)
    expected_workers = sum(g.get("replicas", 1) for g in groups)
    pods = await harness.pods_settled(name, head=1, workers=expected_workers)
    for group in groups:
        members = [p for p in pods if p["metadata"]["labels"]["ray.io/group"] == group["groupName"]]
        assert len(members) == group.get("replicas", 1)
        limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
        for pod in members:
            assert pod["spec"]["containers"][0]["resources"]["limits"] == limits
            line = ray_start_line(pod)
            assert f"--num-cpus={_cpus(limits['cpu'])}" in line
            assert "--memory=" in line
            assert f"--address={name}-head-svc.{harness.namespace}.svc.cluster.local:6379" in line


def _cpus(quantity: str) -> str:
    return str(int(quantity[:-1]) // 1000) if quantity.endswith("m") else quantity


async def test_scale_up_then_down_creates_exactly_what_is_needed(
    harness: Harness, operator: Operator
) -> None:
    cluster = scalable_cluster(replicas=1)
    await harness.apply(cluster)
    await harness.pods_settled("scaling", head=1, workers=1)
    cluster["spec"]["workerGroupSpecs"][0]["replicas"] = 10
    await harness.apply(cluster)
    await harness.pods_settled("scaling", head=1, workers=10)
    cluster["spec"]["workerGroupSpecs"][0]["replicas"] = 3
    await harness.apply(cluster)
    await harness.pods_settled("scaling", head=1, workers=3)
    assert len(harness.created_pods) == 11  # 1 head + 10 workers, never one more


async def test_replicas_beyond_max_are_clamped_to_max(harness: Harness, operator: Operator) -> None:
    await harness.apply(scalable_cluster(replicas=8, max_replicas=4))
    await harness.pods_settled("scaling", head=1, workers=4)
    assert len(harness.created_pods) == 5


async def test_workers_to_delete_removes_exactly_those_pods_and_is_cleared(
    harness: Harness, operator: Operator
) -> None:
    cluster = scalable_cluster(replicas=4)
    await harness.apply(cluster)
    pods = await harness.pods_settled("scaling", head=1, workers=4)
    doomed = sorted(worker_names(pods))[:2]
    survivors = worker_names(pods) - set(doomed)
    group = cluster["spec"]["workerGroupSpecs"][0]
    group["replicas"] = 2
    group["scaleStrategy"] = {"workersToDelete": doomed}
    await harness.apply(cluster)

    async def converged() -> bool:
        return worker_names(await harness.pods("scaling")) == survivors

    await harness.eventually(converged, what="exactly the survivors left")

    async def cleared() -> bool:
        spec = (await harness.cluster("scaling"))["spec"]
        return not (spec["workerGroupSpecs"][0].get("scaleStrategy") or {}).get("workersToDelete")

    await harness.eventually(cleared, what="workersToDelete cleared")
    await harness.pods_settled("scaling", head=1, workers=2)
    assert len(harness.created_pods) == 5


async def test_externally_deleted_worker_is_recreated_once(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(scalable_cluster(replicas=2))
    pods = await harness.pods_settled("scaling", head=1, workers=2)
    victim = sorted(worker_names(pods))[0]
    await harness.kubectl("delete", "pod", victim, "--wait=true")
    settled = await harness.pods_settled("scaling", head=1, workers=2)
    assert victim not in worker_names(settled)
    assert len(harness.created_pods) == 4


async def test_failed_head_pod_is_replaced(harness: Harness, operator: Operator) -> None:
    await harness.apply(scalable_cluster(replicas=1))
    pods = await harness.pods_settled("scaling", head=1, workers=1)
    head = next(p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head")
    failed_status = {
        "status": {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "The node was low on resource: memory.",
        }
    }
    await harness.kubectl(
        "patch",
        "pod",
        head["metadata"]["name"],
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(failed_status),
    )

    async def replaced() -> bool:
        heads = [
            p
            for p in await harness.pods("scaling")
            if p["metadata"]["labels"]["ray.io/node-type"] == "head"
        ]
        return len(heads) == 1 and heads[0]["metadata"]["name"] != head["metadata"]["name"]

    await harness.eventually(replaced, what="a new head Pod")
    await harness.pods_settled("scaling", head=1, workers=1)
    assert len(harness.created_pods) == 3


async def test_suspend_deletes_every_pod_and_resume_brings_them_back(
    harness: Harness, operator: Operator
) -> None:
    cluster = scalable_cluster(replicas=2)
    await harness.apply(cluster)
    await harness.pods_settled("scaling", head=1, workers=2)
    cluster["spec"]["suspend"] = True
    await harness.apply(cluster)
    await harness.pods_settled("scaling", head=0, workers=0)

    async def suspended() -> bool:
        status = (await harness.cluster("scaling")).get("status", {})
        conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
        return (
            status.get("state") == "suspended" and conditions.get("RayClusterSuspended") == "True"
        )

    await harness.eventually(suspended, what="state suspended")
    cluster["spec"]["suspend"] = False
    await harness.apply(cluster)
    await harness.pods_settled("scaling", head=1, workers=2)
    assert len(harness.created_pods) == 6


async def test_recreate_upgrade_replaces_pods_when_the_template_changes(
    harness: Harness, operator: Operator
) -> None:
    cluster = scalable_cluster(replicas=2, upgradeStrategy={"type": "Recreate"})
    await harness.apply(cluster)
    before = await harness.pods_settled("scaling", head=1, workers=2)
    container = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    container["image"] = "rayproject/ray:2.53.0"
    await harness.apply(cluster)

    async def upgraded() -> list[dict[str, Any]] | None:
        pods = await harness.pods("scaling")
        heads = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
        new = heads and heads[0]["spec"]["containers"][0]["image"] == "rayproject/ray:2.53.0"
        return pods if new and len(pods) == 3 else None

    await harness.eventually(upgraded, what="Pods of the new template")
    after = await harness.pods_settled("scaling", head=1, workers=2)
    assert not {p["metadata"]["name"] for p in before} & {p["metadata"]["name"] for p in after}
    assert len(harness.created_pods) == 6


async def test_template_change_without_recreate_leaves_running_pods_alone(
    harness: Harness, operator: Operator
) -> None:
    cluster = scalable_cluster(replicas=2)
    await harness.apply(cluster)
    before = await harness.pods_settled("scaling", head=1, workers=2)
    cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] = "other:1"
    await harness.apply(cluster)
    await harness.kubectl(
        "wait",
        "--for=jsonpath={.status.observedGeneration}=2",
        "raycluster/scaling",
        "--timeout=30s",
    )
    after = await harness.pods_settled("scaling", head=1, workers=2)
    assert {p["metadata"]["uid"] for p in before} == {p["metadata"]["uid"] for p in after}
    assert len(harness.created_pods) == 3


async def test_restart_annotation_restarts_every_pod_once(
    harness: Harness, operator: Operator
) -> None:
    cluster = scalable_cluster(replicas=2)
    await harness.apply(cluster)
    before = await harness.pods_settled("scaling", head=1, workers=2)
    cluster["metadata"]["annotations"] = {"ray.io/restart": "2026-11-23T06:00"}
    await harness.apply(cluster)

    async def restarted() -> bool:
        pods = await harness.pods("scaling")
        old = {p["metadata"]["uid"] for p in before}
        return len(pods) == 3 and not ({p["metadata"]["uid"] for p in pods} & old)

    await harness.eventually(restarted, what="every Pod restarted")
    await harness.pods_settled("scaling", head=1, workers=2)
    assert len(harness.created_pods) == 6


async def test_deleting_the_raycluster_deletes_its_pods_and_services(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(scalable_cluster(replicas=2))
    await harness.pods_settled("scaling", head=1, workers=2)
    await harness.kubectl("delete", "raycluster/scaling")
    await harness.pods_settled("scaling", head=0, workers=0)

    async def no_services() -> bool:
        listed = await harness.get_json("services", "-l", "ray.io/cluster=scaling")
        return not listed["items"]

    await harness.eventually(no_services, what="Services deleted")


async def test_semantically_invalid_spec_gives_warning_event_and_condition_without_hot_loop(
    harness: Harness, operator: Operator
) -> None:
    cluster = scalable_cluster(replicas=2, max_replicas=1)
    cluster["spec"]["workerGroupSpecs"][0]["minReplicas"] = 3
    await harness.apply(cluster)

    async def invalid_condition() -> dict[str, Any] | None:
        conditions = (await harness.cluster("scaling")).get("status", {}).get("conditions", [])
        return next(
            (c for c in conditions if c["type"] == "InvalidSpec" and c["status"] == "True"), None
        )

    condition = await harness.eventually(invalid_condition, what="InvalidSpec condition")
    assert "spec.workerGroupSpecs[0].minReplicas" in condition["message"]
    events = await harness.get_json(
        "events", "--field-selector", "involvedObject.name=scaling,type=Warning"
    )
    assert any(e["reason"] == "InvalidRayClusterSpec" for e in events["items"])
    reconciles = reconcile_count(operator)
    await asyncio.sleep(2.0)  # long enough for several backoff retries
    assert (
        reconcile_count(operator) - reconciles <= 1
    )  # no retry loop on a spec only a user can fix
    assert harness.created_pods == {}


def _api_requests(operator: Operator) -> dict[str, float]:
    """Requests the operator sent, by verb (all answer codes together)."""
    counts: dict[str, float] = {}
    for metric in operator.metrics.registry.collect():
        if metric.name != "ray_operator_api_requests":
            continue
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                verb = sample.labels["verb"]
                counts[verb] = counts.get(verb, 0) + sample.value
    return counts


WRITE_VERBS = ("create", "update", "patch", "apply", "delete")


async def test_creating_a_cluster_costs_its_objects_and_one_status_write_per_headline(
    harness: Harness, operator: Operator
) -> None:
    workers = 5
    before = _api_requests(operator)
    await harness.apply(scalable_cluster(replicas=workers))
    await harness.pods_settled("scaling", head=1, workers=workers)

    async def ready() -> bool:
        return (await harness.cluster("scaling")).get("status", {}).get("state") == "ready"

    await harness.eventually(ready, what="state ready")
    await asyncio.sleep(1.0)  # let the last status write and its echo settle
    after = _api_requests(operator)
    pod_and_service_creates = workers + 2
    writes = sum(after.get(v, 0) - before.get(v, 0) for v in WRITE_VERBS)
    events = sum(1 for _ in await _event_names(harness))
    status_writes = after.get("patch", 0) - before.get("patch", 0)
    # Events are writes too, but KubeRay's budget counts the objects and the status; report both.
    # The status is written once per headline it goes through: provisioning, head Pod ready, all
    # ready. Whether the last two come in one reconcile depends on how fast the Pods start.
    assert writes - events - status_writes == pod_and_service_creates, (after, before, events)
    assert 1 <= status_writes <= 3, (after, before)


async def _event_names(harness: Harness) -> list[str]:
    listed = await harness.get_json("events", "--field-selector", "involvedObject.name=scaling")
    return [e["metadata"]["name"] for e in listed["items"]]


async def test_a_converged_cluster_causes_no_writes_and_no_lists(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(scalable_cluster(replicas=2))
    await harness.pods_settled("scaling", head=1, workers=2)

    async def ready() -> bool:
        return (await harness.cluster("scaling")).get("status", {}).get("state") == "ready"

    await harness.eventually(ready, what="state ready")
    await asyncio.sleep(1.0)
    before = _api_requests(operator)
    await asyncio.sleep(3.0)
    after = _api_requests(operator)
    changed = {
        verb: after[verb] - before.get(verb, 0)
        for verb in after
        if after[verb] != before.get(verb, 0)
    }
    assert changed == {}


async def test_autoscaled_cluster_gets_the_autoscalers_rbac_and_loses_it_on_delete(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(scalable_cluster(replicas=1, enableInTreeAutoscaling=True))
    await harness.pods_settled("scaling", head=1, workers=1)

    async def rbac() -> tuple[Any, Any, Any] | None:
        found = [
            await harness.get_json(kind, "-l", "ray.io/cluster=scaling")
            for kind in ("serviceaccounts", "roles", "rolebindings")
        ]
        return tuple(f["items"][0] for f in found) if all(f["items"] for f in found) else None

    account, role, binding = await harness.eventually(rbac, what="autoscaler RBAC")
    assert account["metadata"]["name"] == role["metadata"]["name"] == "scaling"
    head = next(p for p in await harness.pods("scaling") if "head" in p["metadata"]["name"])
    assert head["spec"]["serviceAccountName"] == "scaling"
    granted = {(r["apiGroups"][0], r["resources"][0]): set(r["verbs"]) for r in role["rules"]}
    assert granted[("ray.io", "rayclusters")] == {"get", "patch"}
    assert {"list", "patch"} <= granted[("", "pods")]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "scaling", "namespace": harness.namespace}
    ]
    await harness.kubectl("delete", "raycluster/scaling")

    async def rbac_gone() -> bool:
        for kind in ("serviceaccounts", "roles", "rolebindings"):
            if (await harness.get_json(kind, "-l", "ray.io/cluster=scaling"))["items"]:
                return False
        return True

    await harness.eventually(rbac_gone, what="autoscaler RBAC deleted")


async def test_pod_the_api_server_rejects_gives_failed_to_create_event_and_replica_failure(
    harness: Harness, operator: Operator
) -> None:
    cluster = scalable_cluster(replicas=1)
    # Passes our own validation (it cannot know the cluster's PriorityClasses), refused by the
    # API server's Priority admission plugin.
    cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["priorityClassName"] = "no-such"
    await harness.apply(cluster)

    async def replica_failure() -> dict[str, Any] | None:
        conditions = (await harness.cluster("scaling")).get("status", {}).get("conditions", [])
        return next(
            (c for c in conditions if c["type"] == "ReplicaFailure" and c["status"] == "True"),
            None,
        )

    condition = await harness.eventually(replica_failure, what="ReplicaFailure condition")
    assert condition["reason"] == "FailedCreateWorkerPod"
    assert "no PriorityClass with name no-such was found" in condition["message"]
    events = await harness.get_json(
        "events", "--field-selector", "involvedObject.name=scaling,reason=FailedToCreateWorkerPod"
    )
    assert "no PriorityClass with name no-such was found" in events["items"][0]["message"]
    await harness.pods_settled("scaling", head=1, workers=0)


async def test_token_auth_cluster_gets_a_generated_token_secret_its_pods_read(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(scalable_cluster(replicas=1, authOptions={"mode": "token"}))
    await harness.pods_settled("scaling", head=1, workers=1)
    secret = await harness.get_json("secret/scaling")
    token = base64.b64decode(secret["data"]["auth_token"])
    assert len(base64.b64decode(token)) == 32
    assert secret["metadata"]["ownerReferences"][0]["name"] == "scaling"
    for pod in await harness.pods("scaling"):
        env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
        reference = env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert reference == {"name": "scaling", "key": "auth_token"}
    await harness.kubectl("delete", "raycluster/scaling")

    async def secret_gone() -> bool:
        result = await harness.kubectl("get", "secrets", "-o", "name")
        return "secret/scaling" not in result.split()

    await harness.eventually(secret_gone, what="the generated Secret deleted with its cluster")


async def test_a_users_own_secret_of_the_same_name_is_never_replaced_or_deleted(
    harness: Harness, operator: Operator
) -> None:
    await harness.kubectl(
        "create", "secret", "generic", "scaling", "--from-literal=auth_token=users-own-token"
    )
    await harness.apply(scalable_cluster(replicas=1, authOptions={"mode": "token"}))
    await harness.pods_settled("scaling", head=1, workers=1)
    await harness.kubectl("delete", "raycluster/scaling")
    await harness.pods_settled("scaling", head=0, workers=0)
    secret = await harness.get_json("secret/scaling")
    assert base64.b64decode(secret["data"]["auth_token"]) == b"users-own-token"
