"""Specification of `status/waiting.py`: why Pods wait, aggregated into one bounded condition,
and told in an Event only when the set of reasons changes."""

from __future__ import annotations

import datetime
from typing import Any

from ray_operator.status import raycluster as cluster_status
from ray_operator.status import waiting

NOW = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
SCHEDULER_MESSAGE = (
    "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. "
    "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
)


def pod(name: str, *, node_type: str = "worker", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {"ray.io/node-type": node_type, "ray.io/group": "g"},
        },
        "spec": {"containers": [{"name": "ray-worker"}]},
        "status": {"phase": "Pending", **status},
    }


def unschedulable(name: str, message: str = SCHEDULER_MESSAGE, **kw: Any) -> dict[str, Any]:
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
    }
    return pod(name, conditions=[condition], **kw)


def container_waiting(name: str, reason: str, message: str, *, init: bool = False) -> Any:
    field = "initContainerStatuses" if init else "containerStatuses"
    container = "wait-gcs-ready" if init else "ray-worker"
    statuses = [{"name": container, "state": {"waiting": {"reason": reason, "message": message}}}]
    return pod(name, **{field: statuses})


def test_an_unschedulable_pod_is_told_with_the_schedulers_words_and_its_name() -> None:
    found = waiting.pods_waiting([unschedulable("c-head-x", node_type="head")])

    assert found == waiting.Waiting(
        "Unschedulable", f"1 Pod cannot be scheduled: c-head-x: {SCHEDULER_MESSAGE}"
    )


def test_a_container_the_kubelet_cannot_create_is_told_with_its_words() -> None:
    missing = 'configmap "ray-settings" not found'

    found = waiting.pods_waiting(
        [container_waiting("c-head-x", "CreateContainerConfigError", missing)]
    )

    assert found == waiting.Waiting(
        "ContainerConfigFailed",
        "1 Pod cannot create its container: c-head-x: ray-worker: CreateContainerConfigError: "
        + missing,
    )


def test_pods_with_the_same_message_are_listed_together() -> None:
    found = waiting.pods_waiting([unschedulable("b"), unschedulable("a")])

    assert found is not None
    assert found.message == f"2 Pods cannot be scheduled: a, b: {SCHEDULER_MESSAGE}"


def test_image_pull_and_crash_loop_reasons_of_containers_and_init_containers() -> None:
    pods = [
        container_waiting("p1", "ImagePullBackOff", 'Back-off pulling image "nope"'),
        container_waiting("p2", "InvalidImageName", "bad ref", init=True),
        container_waiting("p3", "CrashLoopBackOff", "back-off 10s restarting failed container"),
        container_waiting("p4", "ContainerCreating", ""),  # normal progress: not waiting
        unschedulable("p5"),
    ]

    found = waiting.pods_waiting(pods)

    assert found is not None
    assert found.reason == "Unschedulable,ImagePullFailed,CrashLoop"
    assert "2 Pods cannot pull their image: p1: ray-worker: ImagePullBackOff" in found.message
    assert "p2: wait-gcs-ready: InvalidImageName: bad ref" in found.message
    assert "1 Pod is crash-looping: p3: ray-worker: CrashLoopBackOff" in found.message
    assert "p4" not in found.message


def test_no_waiting_pod_and_terminating_pods_give_nothing() -> None:
    leaving = unschedulable("gone")
    leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    scheduled = pod("ok", conditions=[{"type": "PodScheduled", "status": "True"}])

    assert waiting.pods_waiting([leaving, scheduled]) is None


def test_thousands_of_pods_with_huge_distinct_messages_give_a_bounded_message() -> None:
    pods = [unschedulable(f"pod-{i}", message=f"{i} " + "x" * 100_000) for i in range(5000)]
    pods += [unschedulable(f"same-{i}") for i in range(5000)]

    found = waiting.pods_waiting(pods)

    assert found is not None
    assert len(found.message) <= waiting.MESSAGE_LENGTH
    assert found.message.startswith("10000 Pods cannot be scheduled: ")
    # Names and texts are capped each: at most a few of each appear.
    assert found.message.count("pod-") <= waiting.MESSAGES_PER_REASON


def test_identical_pods_beyond_the_cap_are_counted_not_listed() -> None:
    found = waiting.pods_waiting([unschedulable(f"p{i:02}") for i in range(20)])

    assert found is not None
    assert found.message.startswith("20 Pods cannot be scheduled: p00, p01, p02 and 17 more: ")


def test_the_raycluster_condition_appears_while_pods_wait_and_goes_once_they_do_not() -> None:
    cluster: dict[str, Any] = {
        "metadata": {"name": "c", "namespace": "n", "uid": "u", "generation": 1},
        "spec": {"headGroupSpec": {"template": {"spec": {"containers": [{"name": "h"}]}}}},
    }
    waiting_status = cluster_status.compute_status(
        cluster, pods=[unschedulable("c-head", node_type="head")], services=[], now=NOW
    )
    condition = waiting.condition_of(waiting_status["conditions"])
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "Unschedulable")

    cluster["status"] = waiting_status
    recovered = cluster_status.compute_status(
        cluster, pods=[pod("c-head", node_type="head")], services=[], now=NOW
    )
    assert waiting.condition_of(recovered["conditions"]) is None


def test_an_event_is_news_only_when_the_set_of_reasons_changes() -> None:
    def conditions(reason: str, message: str) -> list[dict[str, Any]]:
        return [{"type": waiting.PODS_WAITING, "reason": reason, "message": message}]

    first = waiting.news([], conditions("Unschedulable", "1 Pod ..."))
    same_reason = waiting.news(
        conditions("Unschedulable", "1 Pod"), conditions("Unschedulable", "2")
    )
    more = waiting.news(
        conditions("Unschedulable", "a"), conditions("Unschedulable,CrashLoop", "b")
    )
    gone = waiting.news(conditions("CrashLoop", "b"), [])

    assert first == waiting.News("Warning", "PodsWaiting", "1 Pod ...")
    assert same_reason is None
    assert more == waiting.News("Warning", "PodsWaiting", "b")
    assert gone == waiting.News(
        "Normal", "PodsNoLongerWaiting", "No Pod waits any more (was: CrashLoop)"
    )


def test_a_rayjob_takes_its_clusters_condition_and_gives_back_only_its_own_message() -> None:
    cluster = {
        "metadata": {"name": "c"},
        "status": {"conditions": [{"type": "PodsWaiting", "reason": "CrashLoop", "message": "m"}]},
    }

    told = waiting.with_clusters_waiting(
        {"jobDeploymentStatus": "Initializing"},
        [cluster],
        now=NOW,
        generation=2,
        mirror_message=True,
    )
    cleared = waiting.with_clusters_waiting(told, [None], now=NOW, generation=2)

    condition = waiting.condition_of(told["conditions"])
    assert condition is not None
    assert (condition["reason"], condition["message"]) == ("CrashLoop", "RayCluster c: m")
    assert told["message"] == "RayCluster c: m"
    assert cleared == {"jobDeploymentStatus": "Initializing"}
