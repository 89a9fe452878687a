"""RayCluster status computed from spec, previous status and observed objects (KubeRay's rules)."""

from __future__ import annotations

import copy
import datetime
from typing import Any

from ray_io.v1 import RayCluster
from ray_operator.status import ReplicaFailure, compute_status, status_changed

from tests.builders.clusters import ray_container, raycluster, worker_group
from tests.status.observed import head, head_service, pod

T0 = datetime.datetime(2026, 11, 23, 5, 0, 0, tzinfo=datetime.UTC)
T1 = T0 + datetime.timedelta(minutes=1)


def _status(
    cluster: Any,
    pods: list[dict[str, Any]],
    services: list[dict[str, Any]] | None = None,
    now: datetime.datetime = T0,
    **kwargs: Any,
) -> dict[str, Any]:
    return compute_status(cluster, pods=pods, services=services or [], now=now, **kwargs)


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def _ready_cluster_pods() -> list[dict[str, Any]]:
    return [head(), pod("demo-workers-worker-aaaaa")]


def test_all_pods_ready_makes_the_cluster_ready_and_provisioned() -> None:
    status = _status(raycluster(), _ready_cluster_pods())
    assert status["state"] == "ready"
    assert status["stateTransitionTimes"] == {"ready": "2026-11-23T05:00:00Z"}
    provisioned = _condition(status, "RayClusterProvisioned")
    assert (provisioned["status"], provisioned["reason"]) == (
        "True",
        "AllPodRunningAndReadyFirstTime",
    )
    assert _condition(status, "HeadPodReady")["reason"] == "HeadPodRunningAndReady"


def test_missing_worker_keeps_the_cluster_provisioning() -> None:
    status = _status(raycluster(), [head()])
    assert "state" not in status
    provisioned = _condition(status, "RayClusterProvisioned")
    assert (provisioned["status"], provisioned["reason"]) == ("False", "RayClusterPodsProvisioning")


def test_provisioned_is_not_withdrawn_when_a_pod_later_fails() -> None:
    cluster = raycluster()
    cluster["status"] = _status(cluster, _ready_cluster_pods())
    later = _status(cluster, [head(), pod("demo-workers-worker-aaaaa", ready=False)], now=T1)
    assert _condition(later, "RayClusterProvisioned")["status"] == "True"


def test_head_pod_not_found() -> None:
    condition = _condition(_status(raycluster(), []), "HeadPodReady")
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "HeadPodNotFound",
        "Head Pod not found",
    )


def test_head_pod_not_ready_explains_which_container_waits() -> None:
    waiting = {
        "name": "ray",
        "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}},
    }
    not_ready = head(
        ready=False,
        status={
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "reason": "ContainersNotReady",
                    "message": "containers with unready status: [ray]",
                },
            ],
            "containerStatuses": [waiting],
        },
    )
    condition = _condition(_status(raycluster(), [not_ready]), "HeadPodReady")
    assert condition["reason"] == "ImagePullBackOff"
    assert condition["message"] == "containers with unready status: [ray]; ray: no such image"


def test_replica_counts() -> None:
    groups = [
        worker_group("a", replicas=3, min_replicas=1, max_replicas=4),
        worker_group("b", replicas=9, max_replicas=2),
    ]
    pods = [
        head(),
        pod("a1", group="a"),
        pod("a2", group="a", ready=False),
        pod("a3", group="a", phase="Pending", ready=None),
    ]
    status = _status(raycluster(groups=groups), pods)
    assert status["readyWorkerReplicas"] == 1
    assert status["availableWorkerReplicas"] == 2
    assert status["desiredWorkerReplicas"] == 5  # 3 + min(9, 2)
    assert (status["minWorkerReplicas"], status["maxWorkerReplicas"]) == (1, 6)


def test_multi_host_groups_count_pods_not_replicas() -> None:
    cluster = raycluster(groups=[worker_group(replicas=2, max_replicas=3, numOfHosts=4)])
    status = _status(cluster, [])
    assert (status["desiredWorkerReplicas"], status["maxWorkerReplicas"]) == (8, 12)


def test_unbounded_max_replicas_is_clamped_to_int32() -> None:
    group = worker_group()
    del group["maxReplicas"]
    assert (
        _status(raycluster(groups=[group, worker_group("b")]), [])["maxWorkerReplicas"] == 2**31 - 1
    )


def test_desired_resources_are_quantities() -> None:
    gpu_group = worker_group("gpu", replicas=2)
    gpu_group["template"]["spec"]["containers"] = [ray_container(cpu="500m", memory="1Gi")]
    gpu_group["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    status = _status(raycluster(groups=[gpu_group]), [])
    assert status["desiredCPU"] == "2"  # head 1 + 2 x 500m
    assert status["desiredMemory"] == "4Gi"  # head 2Gi + 2 x 1Gi
    assert status["desiredGPU"] == "2"
    assert status["desiredTPU"] == "0"


def test_suspend_sets_suspending_then_suspended_when_pods_are_gone() -> None:
    cluster = raycluster(suspend=True)
    cluster["status"] = _status(raycluster(), _ready_cluster_pods())
    suspending = _status(cluster, _ready_cluster_pods(), now=T1)
    assert _condition(suspending, "RayClusterSuspending")["status"] == "True"
    assert suspending["state"] == "ready"
    cluster["status"] = suspending
    suspended = _status(cluster, [], now=T1)
    assert _condition(suspended, "RayClusterSuspending")["status"] == "False"
    assert _condition(suspended, "RayClusterSuspended")["status"] == "True"
    assert (
        _condition(suspended, "RayClusterProvisioned")["message"] == "RayCluster has been suspended"
    )
    assert suspended["state"] == "suspended"


def test_resume_clears_suspended_even_when_the_field_is_removed() -> None:
    cluster = raycluster(suspend=True)
    cluster["status"] = _status(cluster, [])
    cluster["status"] = _status(cluster, [])
    assert _condition(cluster["status"], "RayClusterSuspended")["status"] == "True"
    del cluster["spec"]["suspend"]
    assert _condition(_status(cluster, [], now=T1), "RayClusterSuspended")["status"] == "False"


def test_replica_failure_is_reported_and_cleared() -> None:
    cluster = raycluster()
    failure = ReplicaFailure("FailedCreateWorkerPod", "pods is forbidden: exceeded quota")
    cluster["status"] = _status(cluster, _ready_cluster_pods(), failure=failure)
    condition = _condition(cluster["status"], "ReplicaFailure")
    assert (condition["status"], condition["reason"]) == ("True", "FailedCreateWorkerPod")
    assert "state" not in cluster["status"]
    assert "ReplicaFailure" not in {
        c["type"] for c in _status(cluster, _ready_cluster_pods())["conditions"]
    }


def test_invalid_spec_is_reported_as_a_condition() -> None:
    status = _status(
        raycluster(), [], invalid_spec="spec.workerGroupSpecs[0].minReplicas: Invalid value: 5"
    )
    condition = _condition(status, "InvalidSpec")
    assert (condition["status"], condition["reason"]) == ("True", "ValidationFailed")


def test_head_info_uses_pod_ip_behind_a_headless_service() -> None:
    status = _status(raycluster(), [head(pod_ip="10.1.2.3")], [head_service()])
    assert status["head"] == {
        "podIP": "10.1.2.3",
        "podName": "demo-head-aaaaa",
        "serviceIP": "10.1.2.3",
        "serviceName": "demo-head-svc",
    }


def test_head_info_uses_the_cluster_ip_when_there_is_one() -> None:
    status = _status(raycluster(), [head()], [head_service(cluster_ip="10.96.0.7")])
    assert status["head"]["serviceIP"] == "10.96.0.7"


def test_endpoints_prefer_node_ports() -> None:
    assert _status(raycluster(), [], [head_service()])["endpoints"] == {"dashboard": "8265"}
    assert _status(raycluster(), [], [head_service(node_port=30001)])["endpoints"] == {
        "dashboard": "30001"
    }


def test_observed_generation_follows_metadata() -> None:
    cluster = raycluster()
    cluster["metadata"]["generation"] = 7
    assert _status(cluster, [])["observedGeneration"] == 7


def test_condition_transition_time_moves_only_when_status_flips() -> None:
    cluster = raycluster()
    cluster["status"] = _status(cluster, [head(ready=False)])
    again = _status(cluster, [head(ready=False)], now=T1)
    assert _condition(again, "HeadPodReady")["lastTransitionTime"] == "2026-11-23T05:00:00Z"
    flipped = _status(cluster, [head()], now=T1)
    assert _condition(flipped, "HeadPodReady")["lastTransitionTime"] == "2026-11-23T05:01:00Z"


def test_status_changed_ignores_the_update_timestamp() -> None:
    cluster = raycluster()
    cluster["status"] = _status(cluster, _ready_cluster_pods())
    same = _status(cluster, _ready_cluster_pods(), now=T1)
    assert same["lastUpdateTime"] != cluster["status"]["lastUpdateTime"]
    assert not status_changed(cluster["status"], same)
    assert status_changed(cluster["status"], _status(cluster, [head()], now=T1))


def test_status_changed_on_first_write() -> None:
    assert status_changed({}, _status(raycluster(), []))


def test_typed_clusters_get_the_same_status_as_their_manifests() -> None:
    cluster = raycluster()
    cluster["status"] = _status(cluster, [head()])
    typed = RayCluster.model_validate(cluster)
    pods = _ready_cluster_pods()
    assert _status(typed, pods, now=T1) == _status(cluster, pods, now=T1)


def _every_container(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [value, *(c for item in value.values() for c in _every_container(item))]
    if isinstance(value, list):
        return [value, *(c for item in value for c in _every_container(item))]
    return []


def test_computing_the_status_reads_the_cached_cluster_and_shares_nothing_with_it() -> None:
    # The cluster comes straight from the cache, uncopied (a copy was a fifth of a no-op
    # reconcile): the new status must be built of fresh maps and lists only.
    cluster = raycluster()
    cluster["status"] = _status(cluster, _ready_cluster_pods(), [head_service()])
    before = copy.deepcopy(cluster)
    status = _status(cluster, [head()], [head_service()], now=T1)
    assert cluster == before
    cached = {id(container) for container in _every_container(cluster)}
    assert not [c for c in _every_container(status) if id(c) in cached]
