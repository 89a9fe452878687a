"""The cache's projection of Pods and Jobs keeps every field the operator reads.

Each reader of cached Pods and Jobs (status, scaling, replacement, RayJob and RayService
outcomes, the Serve proxy address) is run on full objects as the API server sends them and on
their projections, in the states that matter; the answers must be the same. A reader that starts
using a field the projection drops fails here, naming the reader and the state.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from ray_operator.builders import build_head_pod, build_worker_pod
from ray_operator.builders.redis_cleanup import is_redis_cleanup_job, job_outcome
from ray_operator.dashboard.resolver import InClusterResolver, head_pod_to_address
from ray_operator.planning.scaling import plan_scaling
from ray_operator.runtime.projection import JOB_FIELDS, POD_FIELDS, Projector
from ray_operator.runtime.store import Store
from ray_operator.spec import pods as observed
from ray_operator.spec.kinds import JOB, POD, SERVICE
from ray_operator.status import rayjob as rayjob_status
from ray_operator.status import waiting
from ray_operator.status.raycluster import compute_status
from ray_operator.status.rayservice import count_serve_endpoints

REPO_ROOT = Path(__file__).resolve().parents[2]
NOW = datetime.datetime(2026, 11, 26, 12, 0, tzinfo=datetime.UTC)
CLUSTER: dict[str, Any] = next(
    document
    for document in yaml.safe_load_all((REPO_ROOT / "samples/ray-cluster.complete.yaml").open())
    if document["kind"] == "RayCluster"
)
CLUSTER["metadata"].update(namespace="ns", uid="cluster-uid", generation=3)
GROUP = CLUSTER["spec"]["workerGroupSpecs"][0]["groupName"]

Obj = dict[str, Any]


def _as_served(pod: Obj, *, index: int, status: Obj, deleting: bool = False) -> Obj:
    """A built Pod as the API server returns it: server fields, a user's annotation, status."""
    served = copy.deepcopy(pod)
    metadata = served["metadata"]
    metadata["name"] = metadata.get("name") or f"{metadata['generateName']}{index:05d}"
    metadata.update(
        namespace="ns",
        uid=f"pod-uid-{index}",
        resourceVersion=str(1000 + index),
        generation=1,
        creationTimestamp=f"2026-11-26T11:{index:02d}:00Z",
        ownerReferences=[
            {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": CLUSTER["metadata"]["name"],
             "uid": "cluster-uid", "controller": True, "blockOwnerDeletion": True},
        ],
        managedFields=[{"manager": "ray-operator", "fieldsV1": {"f:spec": {}}}],
    )  # fmt: skip
    metadata.setdefault("annotations", {})["example.com/notes"] = "x" * 1000
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-26T11:59:00Z"
    served["spec"].update(nodeName="node-1", schedulerName="default-scheduler")
    served["status"] = status
    return served


def _containers(pod: Obj, **states: Obj) -> list[Obj]:
    """Container statuses for every container of `pod` (running unless named in `states`)."""
    return [
        {
            "name": container["name"],
            "image": container.get("image", ""),
            "imageID": "sha256:abc",
            "containerID": "containerd://abc",
            "ready": container["name"] not in states,
            "restartCount": 0,
            "started": True,
            "state": states.get(
                container["name"], {"running": {"startedAt": "2026-11-26T11:00:00Z"}}
            ),
        }
        for container in pod["spec"]["containers"]
    ]


def _conditions(*, ready: bool, reason: str = "", message: str = "") -> list[Obj]:
    stamp = {"lastProbeTime": None, "lastTransitionTime": "2026-11-26T11:00:00Z"}
    ready_condition: Obj = {"type": "Ready", "status": str(ready), **stamp}
    if reason:
        ready_condition.update(reason=reason, message=message)
    return [
        {"type": "PodReadyToStartContainers", "status": "True", **stamp},
        {"type": "Initialized", "status": "True", **stamp},
        ready_condition,
        {"type": "ContainersReady", "status": str(ready), **stamp},
        {"type": "PodScheduled", "status": "True", **stamp},
    ]


def _status(pod: Obj, phase: str, *, ready: bool, **states: Obj) -> Obj:
    reason = "" if ready else "ContainersNotReady"
    message = "" if ready else "containers with unready status: [ray-head]"
    return {
        "phase": phase,
        "podIP": "10.0.0.7",
        "podIPs": [{"ip": "10.0.0.7"}],
        "hostIP": "192.168.0.1",
        "qosClass": "Guaranteed",
        "startTime": "2026-11-26T11:00:00Z",
        "conditions": _conditions(ready=ready, reason=reason, message=message),
        "containerStatuses": _containers(pod, **states),
    }


def _restarted(status: Obj, container: str, *, last: Obj, count: int) -> Obj:
    """`status` where `container` has restarted `count` times, last ending as `last`."""
    for entry in status["containerStatuses"]:
        if entry["name"] == container:
            entry.update(lastState=last, restartCount=count)
    return status


def _pod_states() -> dict[str, Obj]:
    """Full head and worker Pods in each state a reader tells apart."""
    head = build_head_pod(CLUSTER, suffix="abcde")
    head["metadata"]["labels"]["ray.io/serve"] = "true"
    worker = build_worker_pod(CLUSTER, GROUP, suffix="fghij", replica_index=0)
    ray_container = worker["spec"]["containers"][0]["name"]
    never = copy.deepcopy(worker)
    never["spec"]["restartPolicy"] = "Never"
    sidecar_head = copy.deepcopy(head)
    sidecar_head["spec"]["containers"].append({"name": rayjob_status.SUBMITTER_CONTAINER_NAME})
    exited = {"terminated": {"exitCode": 1, "reason": "Error", "message": "job failed",
                             "startedAt": "2026-11-26T11:00:00Z",
                             "finishedAt": "2026-11-26T11:30:00Z"}}  # fmt: skip
    pulling = {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": "0/1 nodes are available", "lastProbeTime": None}  # fmt: skip
    crash_loop = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}}
    head_container = head["spec"]["containers"][0]["name"]
    submitter = rayjob_status.SUBMITTER_CONTAINER_NAME
    states = {
        "head running and ready": (head, _status(head, "Running", ready=True)),
        "worker running and ready": (worker, _status(worker, "Running", ready=True)),
        "head pending, image pull back-off": (
            head,
            _status(head, "Pending", ready=False, **{head_container: pulling}),
        ),
        "worker Ray container exited, restartPolicy Never": (
            never,
            _status(never, "Running", ready=False, **{ray_container: exited}),
        ),
        "worker Ray container exited, will restart": (
            worker,
            _status(worker, "Running", ready=False, **{ray_container: exited}),
        ),
        "worker failed": (worker, {**_status(worker, "Failed", ready=False), "reason": "Evicted"}),
        "worker succeeded": (worker, _status(worker, "Succeeded", ready=False)),
        "head with a SidecarMode submitter that exited 1": (
            sidecar_head,
            _status(sidecar_head, "Running", ready=True, **{submitter: exited}),
        ),
        "head with no status yet": (head, {"phase": "Pending"}),
        "worker unschedulable": (worker, {"phase": "Pending", "conditions": [unschedulable]}),
        "worker init container crash-looping": (
            worker,
            {
                **_status(worker, "Pending", ready=False),
                "initContainerStatuses": [
                    {"name": "wait-gcs-ready", "restartCount": 3, "state": crash_loop}
                ],
            },
        ),
        "head with a restartable submitter restarted twice": (
            sidecar_head,
            _restarted(
                _status(sidecar_head, "Running", ready=True), submitter, last=exited, count=2
            ),
        ),
    }
    served = {
        state: _as_served(pod, index=index, status=status)
        for index, (state, (pod, status)) in enumerate(states.items())
    }
    served["worker being deleted"] = _as_served(
        worker, index=99, status=_status(worker, "Running", ready=True), deleting=True
    )
    return served


POD_STATES = _pod_states()

POD_READERS: Mapping[str, Callable[[Obj], Any]] = {
    "pod_name": observed.pod_name,
    "pod_labels": observed.pod_labels,
    "pod_phase": observed.pod_phase,
    "is_terminating": observed.is_terminating,
    "is_head": observed.is_head,
    "is_worker": observed.is_worker,
    "in_group": lambda pod: observed.in_group(pod, GROUP),
    # Its callers read the condition's status, reason and message (not its timestamps).
    "ready_condition": lambda pod: {
        key: (observed.ready_condition(pod) or {}).get(key)
        for key in ("status", "reason", "message")
    },
    "is_running_and_ready": observed.is_running_and_ready,
    "replacement_verdict": observed.replacement_verdict,
    "ray_container_terminated": observed.ray_container_terminated,
    "sidecar_failed": lambda pod: rayjob_status.sidecar_failed({"jobStatus": "RUNNING"}, pod),
    "sidecar_finished_at": rayjob_status.sidecar_finished_at,
    "restartable_sidecar_failed": lambda pod: rayjob_status.sidecar_failed(
        {"jobStatus": "RUNNING"}, pod, restartable=True
    ),
    "serve_proxy_url": lambda pod: InClusterResolver().serve_proxy_url(CLUSTER, pod),
    "dashboard_url": lambda pod: InClusterResolver().dashboard_url(CLUSTER, pod),
    "head_pod_to_address": lambda pod: head_pod_to_address(CLUSTER, [pod]) is not None,
    "count_serve_endpoints": lambda pod: count_serve_endpoints([pod], cluster="ray-complete"),
    "waiting_pod": waiting.waiting_pod,
}


def _projected(obj: Obj, kind: Any) -> Obj:
    return Store().keep(kind, copy.deepcopy(obj))


@pytest.mark.parametrize("reader", POD_READERS)
@pytest.mark.parametrize("state", POD_STATES)
def test_every_pod_reader_answers_the_same_on_the_projection(state: str, reader: str) -> None:
    pod = POD_STATES[state]
    assert POD_READERS[reader](_projected(pod, POD)) == POD_READERS[reader](pod)


@pytest.mark.parametrize("pods", [list(POD_STATES), [s for s in POD_STATES if "worker" in s]])
def test_cluster_status_and_scaling_are_the_same_on_projected_pods(pods: list[str]) -> None:
    full = [POD_STATES[state] for state in pods]
    projected = [_projected(pod, POD) for pod in full]
    assert compute_status(CLUSTER, pods=projected, services=[], now=NOW) == compute_status(
        CLUSTER, pods=full, services=[], now=NOW
    )
    assert plan_scaling(CLUSTER, pods=projected) == plan_scaling(CLUSTER, pods=full)
    assert plan_scaling(CLUSTER, pods=projected, provisioned=True) == plan_scaling(
        CLUSTER, pods=full, provisioned=True
    )


def _job(*conditions: Obj, labels: Mapping[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "submitter", "namespace": "ns", "uid": "job-uid", "resourceVersion": "7",
            "labels": dict(labels or {}),
            "annotations": {"ray.io/external-storage-namespace": "ns-x", "example.com/x": "y"},
            "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "j",
                                 "uid": "rayjob-uid", "controller": True}],
            "managedFields": [{"manager": "kube-controller-manager"}],
        },
        "spec": {"backoffLimit": 2, "template": {"spec": {"containers": [{"name": "submit"}]}}},
        "status": {"startTime": "2026-11-26T11:00:00Z", "conditions": list(conditions)},
    }  # fmt: skip


def _job_condition(kind: str, status: str = "True") -> Obj:
    stamp = "2026-11-26T11:10:00Z"
    return {"type": kind, "status": status, "reason": f"{kind}Reason", "message": f"{kind} said",
            "lastProbeTime": stamp, "lastTransitionTime": stamp}  # fmt: skip


JOB_STATES = {
    "running": _job(),
    "complete": _job(_job_condition("SuccessCriteriaMet"), _job_condition("Complete")),
    "failed": _job(_job_condition("FailureTarget"), _job_condition("Failed")),
    "failure target only": _job(_job_condition("FailureTarget")),
    "redis clean-up, finished": _job(
        _job_condition("Complete"), labels={"ray.io/node-type": "redis-cleanup"}
    ),
}

JOB_READERS: Mapping[str, Callable[[Obj], Any]] = {
    "job_outcome": job_outcome,
    "is_redis_cleanup_job": is_redis_cleanup_job,
    "submitter_failed": lambda job: rayjob_status.submitter_failed({"jobStatus": "PENDING"}, job),
    "submitter_finished_at": rayjob_status.submitter_finished_at,
}


@pytest.mark.parametrize("reader", JOB_READERS)
@pytest.mark.parametrize("state", JOB_STATES)
def test_every_job_reader_answers_the_same_on_the_projection(state: str, reader: str) -> None:
    job = JOB_STATES[state]
    assert JOB_READERS[reader](_projected(job, JOB)) == JOB_READERS[reader](job)


def test_the_projection_leaves_out_what_is_not_read() -> None:
    pod = _projected(POD_STATES["worker running and ready"], POD)
    assert "managedFields" not in pod["metadata"]
    assert "example.com/notes" not in pod["metadata"]["annotations"]
    assert set(pod["spec"]) == {"restartPolicy", "containers"}
    assert pod["spec"]["containers"] == [{"name": pod["spec"]["containers"][0]["name"]}]
    assert [condition["type"] for condition in pod["status"]["conditions"]] == [
        "Ready",
        "PodScheduled",
    ]
    assert "hostIP" not in pod["status"]


def test_projecting_twice_changes_nothing_and_the_input_is_left_alone() -> None:
    pod = copy.deepcopy(POD_STATES["head pending, image pull back-off"])
    before = copy.deepcopy(pod)
    projector = Projector()
    once = projector.project(pod, POD_FIELDS)
    assert projector.project(once, POD_FIELDS) == once
    assert pod == before
    job = JOB_STATES["failed"]
    assert projector.project(projector.project(job, JOB_FIELDS), JOB_FIELDS) == projector.project(
        job, JOB_FIELDS
    )


def test_equal_labels_owners_and_specs_of_two_pods_are_stored_once() -> None:
    projector = Projector()
    worker = POD_STATES["worker running and ready"]
    second = copy.deepcopy(worker)
    second["metadata"].update(name="other", uid="other-uid")
    first, other = (projector.project(pod, POD_FIELDS) for pod in (worker, second))
    assert first["metadata"]["labels"] is other["metadata"]["labels"]
    assert first["metadata"]["ownerReferences"] is other["metadata"]["ownerReferences"]
    assert first["spec"] is other["spec"]
    assert first["metadata"]["uid"] != other["metadata"]["uid"]


def test_the_table_of_shared_parts_is_bounded() -> None:
    projector = Projector(shared_limit=10)
    worker = POD_STATES["worker running and ready"]
    for index in range(100):
        pod = copy.deepcopy(worker)
        pod["metadata"]["labels"]["example.com/unique"] = str(index)
        projector.project(pod, POD_FIELDS)
    assert len(projector._shared) <= 10


def test_a_subtree_too_large_to_share_is_kept_by_its_object_alone() -> None:
    # The table outlives the objects: huge labels created and deleted must not accumulate there.
    projector = Projector()
    pod = copy.deepcopy(POD_STATES["worker running and ready"])
    pod["metadata"]["labels"]["example.com/big"] = "x" * 63
    pod["metadata"]["labels"].update({f"example.com/k{i}": "v" * 63 for i in range(20)})
    first = projector.project(pod, POD_FIELDS)
    second = projector.project(copy.deepcopy(pod), POD_FIELDS)
    assert first["metadata"]["labels"] == second["metadata"]["labels"]
    assert first["metadata"]["labels"] is not second["metadata"]["labels"]
    assert all(len(str(shared)) < 4 * 1024 for shared in projector._shared.values())


def test_other_kinds_are_cached_whole_without_managed_fields() -> None:
    service = {
        "metadata": {"name": "s", "namespace": "ns", "managedFields": [{}],
                     "annotations": {"example.com/a": "b"}},
        "spec": {"selector": {"a": "b"}, "sessionAffinity": "None"},
    }  # fmt: skip
    kept = Store().keep(SERVICE, copy.deepcopy(service))
    del service["metadata"]["managedFields"]
    assert kept == service


def _leaf_paths(value: Any, path: str = "") -> set[str]:
    if isinstance(value, dict) and value:
        return {
            leaf
            for key, item in value.items()
            for leaf in _leaf_paths(item, f"{path}.{key}" if path else key)
        }
    if isinstance(value, list) and value:
        return {leaf for item in value for leaf in _leaf_paths(item, f"{path}[]")}
    return {path}


def test_the_cache_keeps_exactly_these_fields_of_a_running_worker_pod() -> None:
    # What the cache holds per Pod sets the operator's memory with thousands of clusters and
    # the time to fill it after a restart (issue 32): a field kept beyond these fails here.
    served = POD_STATES["worker running and ready"]
    kept = _projected(served, POD)
    assert kept["metadata"]["labels"] == served["metadata"]["labels"]
    assert {path for path in _leaf_paths(kept) if not path.startswith("metadata.labels.")} == {
        "apiVersion",
        "kind",
        "metadata.annotations",
        "metadata.creationTimestamp",
        "metadata.generation",
        "metadata.name",
        "metadata.namespace",
        "metadata.ownerReferences[].apiVersion",
        "metadata.ownerReferences[].blockOwnerDeletion",
        "metadata.ownerReferences[].controller",
        "metadata.ownerReferences[].kind",
        "metadata.ownerReferences[].name",
        "metadata.ownerReferences[].uid",
        "metadata.resourceVersion",
        "metadata.uid",
        "spec.containers[].name",
        "spec.restartPolicy",
        "status.conditions[].status",
        "status.conditions[].type",
        "status.containerStatuses[].name",
        "status.containerStatuses[].restartCount",
        "status.containerStatuses[].state",
        "status.phase",
        "status.podIP",
    }


def test_shared_parts_equal_in_value_but_not_in_type_are_kept_apart() -> None:
    # To a dict, 1 == 1.0 == True: sharing must not turn one Pod's value into another's.
    projector = Projector()
    owners = []
    for controller in (True, 1, 1.0):
        pod = copy.deepcopy(POD_STATES["worker running and ready"])
        pod["metadata"]["ownerReferences"][0]["controller"] = controller
        owners.append(projector.project(pod, POD_FIELDS)["metadata"]["ownerReferences"][0])
    assert [type(owner["controller"]) for owner in owners] == [bool, int, float]
