"""Acceptance (issue 30): a RayCluster whose Pods wait says why, and so does the RayJob above it.

A Pod that no node can take (the real kube-scheduler's own message), or whose image cannot be
pulled, or that crash-loops, gives its RayCluster the condition `PodsWaiting` (reason
Unschedulable, ImagePullFailed, CrashLoop; the message names the Pod) and ONE Warning Event
`PodsWaiting`, however many reconciles follow; the RayJob using the cluster gets the same
condition, its `message` while Initializing, and its own single Event (a RayService too, for
the cluster it prepares). `kubectl get -o wide`
shows the reason in the `waiting` column. When the Pods recover the condition goes.

KWOK does not pull images or run containers: for the image and crash-loop cases the head Pod is
bound to a node that has no kubelet at all (`spec.nodeName`), and the test plays that kubelet,
writing the Pod status a kubelet writes through the API server's status subresource.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from ray_operator.app import Operator
from ray_operator.controllers.raycluster import RayClusterController
from ray_operator.controllers.rayjob import rayjob_controller
from ray_operator.controllers.rayservice import rayservice_controller
from ray_operator.localcluster.controlplane import FAKE_NODE_NAME, LocalControlPlane

from tests.api.crds import table
from tests.controllers.conftest import Harness, running_operator
from tests.controllers.ray_fixtures import RAY_VERSION

NODE_WITHOUT_KUBELET = "node-whose-kubelet-is-the-test"
SCHEDULER_WORDS = "didn't match Pod's node affinity/selector"


@pytest.fixture
async def operator(
    control_plane: LocalControlPlane, namespace: str, harness: Harness
) -> AsyncIterator[Operator]:
    """The RayCluster, RayJob and RayService controllers on this test's namespace (no
    dashboard is asked: the RayJobs are InteractiveMode, the RayService's cluster never gets
    ready)."""
    controllers = [RayClusterController, rayjob_controller(), rayservice_controller()]
    async with running_operator(control_plane.kubeconfig, namespace, controllers) as replica:
        yield replica


def pod_template(container: str, **pod_spec: Any) -> dict[str, Any]:
    return {
        "spec": {
            "containers": [
                {
                    "name": container,
                    "image": f"rayproject/ray:{RAY_VERSION}",
                    "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
            **pod_spec,
        }
    }


def cluster_spec(
    *, head: dict[str, Any] | None = None, worker: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A cluster whose head (and one worker, if given) have these extra Pod spec fields."""
    cluster: dict[str, Any] = {
        "rayVersion": RAY_VERSION,
        "headGroupSpec": {"rayStartParams": {}, "template": pod_template("ray-head", **head or {})},
    }
    if worker is not None:
        cluster["workerGroupSpecs"] = [
            {
                "groupName": "small",
                "replicas": 1,
                "minReplicas": 1,
                "maxReplicas": 1,
                "rayStartParams": {},
                "template": pod_template("ray-worker", **worker),
            }
        ]
    return cluster


def rayjob(
    name: str, *, head: dict[str, Any] | None = None, worker: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An InteractiveMode RayJob with `cluster_spec(head=..., worker=...)`."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name},
        "spec": {
            "submissionMode": "InteractiveMode",
            "rayClusterSpec": cluster_spec(head=head, worker=worker),
        },
    }


def waiting_condition(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or ()
    return next((c for c in conditions if c["type"] == "PodsWaiting"), None)


async def cluster_of(harness: Harness, job: str) -> str:
    async def named() -> str:
        found = await harness.get_json_if_exists(f"rayjob/{job}")
        return str(((found or {}).get("status") or {}).get("rayClusterName") or "")

    name: str = await harness.eventually(named, what=f"the cluster of RayJob {job}")
    return name


async def told_waiting(harness: Harness, what: str, reason: str) -> dict[str, Any]:
    """The PodsWaiting condition of `what` (e.g. `raycluster/x`), once it has `reason`."""

    async def check() -> dict[str, Any] | None:
        condition = waiting_condition(await harness.get_json_if_exists(what))
        return condition if condition and condition["reason"] == reason else None

    condition: dict[str, Any] = await harness.eventually(check, what=f"{what} PodsWaiting {reason}")
    assert condition["status"] == "True"
    return condition


async def no_longer_waiting(harness: Harness, what: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        found = await harness.get_json(what)
        return None if waiting_condition(found) else found

    found: dict[str, Any] = await harness.eventually(check, what=f"{what} without PodsWaiting")
    return found


async def recovered(harness: Harness, cluster: str, job: str) -> None:
    """The condition goes from the RayCluster and the RayJob (and the message it put there),
    each telling it in one Normal Event."""
    await no_longer_waiting(harness, f"raycluster/{cluster}")
    found = await no_longer_waiting(harness, f"rayjob/{job}")
    assert not found["status"].get("message")
    await the_single_event(harness, "RayCluster", cluster, "PodsNoLongerWaiting")
    await the_single_event(harness, "RayJob", job, "PodsNoLongerWaiting")


async def events(harness: Harness, kind: str, name: str, reason: str) -> list[dict[str, Any]]:
    listed = await harness.get_json("events")
    return [
        event
        for event in listed["items"]
        if event["involvedObject"].get("kind") == kind
        and event["involvedObject"].get("name") == name
        and event["reason"] == reason
    ]


async def the_single_event(harness: Harness, kind: str, name: str, reason: str) -> dict[str, Any]:
    """The one Event of `reason` about the object, told once (count 1)."""
    found = await harness.eventually(
        lambda: events(harness, kind, name, reason), what=f"{reason} Event of {kind} {name}"
    )
    assert [(e["type"], e.get("count", 1)) for e in found] == [
        ("Warning" if reason == "PodsWaiting" else "Normal", 1)
    ], found
    event: dict[str, Any] = found[0]
    return event


async def head_pod(harness: Harness, cluster: str) -> dict[str, Any]:
    async def found() -> dict[str, Any] | None:
        heads = [
            p
            for p in await harness.pods(cluster)
            if p["metadata"]["labels"]["ray.io/node-type"] == "head"
        ]
        return heads[0] if heads else None

    pod: dict[str, Any] = await harness.eventually(found, what=f"the head Pod of {cluster}")
    return pod


async def head_on_a_node_whose_kubelet_is_the_test(harness: Harness, job: str) -> tuple[str, str]:
    """Apply RayJob `job` whose head is bound to NODE_WITHOUT_KUBELET: (cluster, head Pod)."""
    await harness.apply(rayjob(job, head={"nodeName": NODE_WITHOUT_KUBELET}))
    cluster = await cluster_of(harness, job)
    return cluster, (await head_pod(harness, cluster))["metadata"]["name"]


async def kubelet_writes(harness: Harness, pod: str, status: dict[str, Any]) -> None:
    """Write a Pod's status as its kubelet would (status subresource of the real API server)."""
    patch = json.dumps({"status": status})
    await harness.kubectl("patch", "pod", pod, "--subresource=status", "--type=merge", "-p", patch)


def kubelet_status(container: str, state: dict[str, Any], *, phase: str) -> dict[str, Any]:
    ready = "True" if "running" in state else "False"
    return {
        "phase": phase,
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": ready},
        ],
        "containerStatuses": [
            {
                "name": container,
                "image": f"rayproject/ray:{RAY_VERSION}",
                "imageID": "",
                "ready": ready == "True",
                "restartCount": 0 if "waiting" not in state else 5,
                "state": state,
            }
        ],
    }


async def test_an_unschedulable_head_is_told_on_the_raycluster_and_its_rayjob(
    operator: Operator, harness: Harness
) -> None:
    await harness.apply(rayjob("nowhere", head={"nodeSelector": {"no-such-label": "x"}}))
    cluster = await cluster_of(harness, "nowhere")
    head = (await head_pod(harness, cluster))["metadata"]["name"]

    condition = await told_waiting(harness, f"raycluster/{cluster}", "Unschedulable")
    job_condition = await told_waiting(harness, "rayjob/nowhere", "Unschedulable")

    assert condition["message"].startswith(f"1 Pod cannot be scheduled: {head}: 0/1 nodes")
    assert SCHEDULER_WORDS in condition["message"]
    assert job_condition["message"] == f"RayCluster {cluster}: {condition['message']}"
    job = await harness.get_json("rayjob/nowhere")
    assert job["status"]["jobDeploymentStatus"] == "Initializing"
    assert job["status"]["message"] == job_condition["message"]
    event = await the_single_event(harness, "RayCluster", cluster, "PodsWaiting")
    assert event["message"] == condition["message"]
    await the_single_event(harness, "RayJob", "nowhere", "PodsWaiting")
    # `kubectl get -o wide` shows why; the default columns stay KubeRay's.
    # (The last column; empty cells before it leave no gap to split on.)
    wide = await harness.kubectl("get", "raycluster,rayjob", "-o", "wide")
    for name in (f"raycluster.ray.io/{cluster}", "rayjob.ray.io/nowhere"):
        header, row = table(wide, name)
        assert (header[-1], row[-1]) == ("WAITING", "Unschedulable"), wide
    default_header, _ = table(await harness.kubectl("get", "raycluster"), cluster)
    assert "WAITING" not in default_header


async def test_an_unschedulable_worker_is_told_and_cleared_once_a_node_fits(
    operator: Operator, harness: Harness
) -> None:
    label = f"ray-operator-test/{harness.namespace}"[:63]
    await harness.apply(rayjob("fussy", worker={"nodeSelector": {label: "yes"}}))
    cluster = await cluster_of(harness, "fussy")

    condition = await told_waiting(harness, f"raycluster/{cluster}", "Unschedulable")
    await told_waiting(harness, "rayjob/fussy", "Unschedulable")

    assert condition["message"].startswith(f"1 Pod cannot be scheduled: {cluster}-small-worker-")
    assert SCHEDULER_WORDS in condition["message"]
    await the_single_event(harness, "RayCluster", cluster, "PodsWaiting")
    await the_single_event(harness, "RayJob", "fussy", "PodsWaiting")

    # The node gets the label: the real scheduler binds the worker, KWOK runs it.
    await harness.kubectl("label", "node", FAKE_NODE_NAME, f"{label}=yes")
    try:
        await recovered(harness, cluster, "fussy")
    finally:
        await harness.kubectl("label", "node", FAKE_NODE_NAME, f"{label}-")


async def test_an_image_that_cannot_be_pulled_is_told_and_cleared_once_it_runs(
    operator: Operator, harness: Harness
) -> None:
    cluster, head = await head_on_a_node_whose_kubelet_is_the_test(harness, "badimage")
    pulling = 'Back-off pulling image "rayproject/ray:no-such-tag"'

    await kubelet_writes(
        harness,
        head,
        kubelet_status(
            "ray-head",
            {"waiting": {"reason": "ImagePullBackOff", "message": pulling}},
            phase="Pending",
        ),
    )

    condition = await told_waiting(harness, f"raycluster/{cluster}", "ImagePullFailed")
    job_condition = await told_waiting(harness, "rayjob/badimage", "ImagePullFailed")
    expected = f"1 Pod cannot pull its image: {head}: ray-head: ImagePullBackOff: {pulling}"
    assert condition["message"] == expected
    assert job_condition["message"] == f"RayCluster {cluster}: {expected}"
    await the_single_event(harness, "RayCluster", cluster, "PodsWaiting")
    await the_single_event(harness, "RayJob", "badimage", "PodsWaiting")

    started = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    await kubelet_writes(harness, head, kubelet_status("ray-head", started, phase="Running"))
    await recovered(harness, cluster, "badimage")


async def test_a_crash_looping_head_is_told_on_the_raycluster_and_its_rayjob(
    operator: Operator, harness: Harness
) -> None:
    cluster, head = await head_on_a_node_whose_kubelet_is_the_test(harness, "crashing")

    async def crash_loop_backs_off(delay: str) -> str:
        back_off = f"back-off {delay} restarting failed container=ray-head pod={head}"
        state = {"waiting": {"reason": "CrashLoopBackOff", "message": back_off}}
        await kubelet_writes(harness, head, kubelet_status("ray-head", state, phase="Running"))
        return f"1 Pod is crash-looping: {head}: ray-head: CrashLoopBackOff: {back_off}"

    expected = await crash_loop_backs_off("10s")
    condition = await told_waiting(harness, f"raycluster/{cluster}", "CrashLoop")
    await told_waiting(harness, "rayjob/crashing", "CrashLoop")
    assert condition["message"] == expected
    await the_single_event(harness, "RayCluster", cluster, "PodsWaiting")
    await the_single_event(harness, "RayJob", "crashing", "PodsWaiting")

    # The kubelet's back-off grows with each restart: the condition follows, no new Event.
    expected = await crash_loop_backs_off("5m0s")

    async def updated() -> bool:
        found = waiting_condition(await harness.get_json(f"raycluster/{cluster}"))
        job = waiting_condition(await harness.get_json("rayjob/crashing"))
        return bool(found and job and found["message"] == expected and expected in job["message"])

    await harness.eventually(updated, what="the longer back-off in both conditions")
    await the_single_event(harness, "RayCluster", cluster, "PodsWaiting")
    await the_single_event(harness, "RayJob", "crashing", "PodsWaiting")
    # The Pod is not replaced: a crash loop is the kubelet's to retry, not a terminal state.
    assert (await head_pod(harness, cluster))["metadata"]["name"] == head


async def test_a_rayservice_tells_why_the_pods_of_the_cluster_it_prepares_wait(
    operator: Operator, harness: Harness
) -> None:
    await harness.apply(
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayService",
            "metadata": {"name": "serving"},
            "spec": {
                "serveConfigV2": "applications: []\n",
                "rayClusterConfig": cluster_spec(head={"nodeSelector": {"no-such-label": "x"}}),
            },
        }
    )

    condition = await told_waiting(harness, "rayservice/serving", "Unschedulable")

    service = await harness.get_json("rayservice/serving")
    cluster = service["status"]["pendingServiceStatus"]["rayClusterName"]
    assert condition["message"].startswith(f"RayCluster {cluster}: 1 Pod cannot be scheduled: ")
    assert SCHEDULER_WORDS in condition["message"]
    await the_single_event(harness, "RayService", "serving", "PodsWaiting")
    header, row = table(await harness.kubectl("get", "rayservice", "-o", "wide"), "serving")
    assert (header[-1], row[-1]) == ("WAITING", "Unschedulable")
