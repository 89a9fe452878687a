"""Objects a RayCluster owns: a name taken by someone else, tampering, labels removed.

Issue 12, findings 4 and 10: a 409 on an object we do not own is an error (Event, condition, not
ready, no Pods); an edited head Service is brought back; a worker Pod whose `created-by` label was
removed is still counted (Pods are found by `ray.io/cluster`, owned by ownerReferences).
"""

from __future__ import annotations

import asyncio
from typing import Any

from ray_operator.app import Operator

from tests.controllers.clusters import scalable_cluster
from tests.controllers.conftest import Harness

FOREIGN_UID = "0b1c2d3e-0000-4000-8000-000000000001"


def foreign_head_service(name: str) -> dict[str, Any]:
    """A Service with the head Service's name that belongs to another RayCluster."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "ownerReferences": [
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayCluster",
                    "name": "other",
                    "uid": FOREIGN_UID,
                    "controller": True,
                }
            ],
        },
        "spec": {"selector": {"ray.io/cluster": "other"}, "ports": [{"name": "gcs", "port": 6379}]},
    }


async def condition(harness: Harness, name: str, kind: str) -> dict[str, Any] | None:
    conditions = (await harness.cluster(name)).get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == kind and c["status"] == "True"), None)


async def events(harness: Harness, reason: str) -> list[dict[str, Any]]:
    listed = await harness.get_json("events", "--field-selector", f"reason={reason}")
    items: list[dict[str, Any]] = listed["items"]
    return items


async def test_a_head_service_name_taken_by_another_cluster_is_an_error_until_it_is_freed(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(foreign_head_service("scaling-head-svc"))
    await harness.apply(scalable_cluster(replicas=1))

    async def failure() -> dict[str, Any] | None:
        return await condition(harness, "scaling", "ReplicaFailure")

    found = await harness.eventually(failure, what="ReplicaFailure condition")
    assert found["reason"] == "FailedCreateService"
    expected = (
        f"Service {harness.namespace}/scaling-head-svc exists and belongs to RayCluster other "
        f"(uid {FOREIGN_UID})"
    )
    assert found["message"].startswith(expected)
    [event] = await events(harness, "FailedToCreateService")
    assert event["type"] == "Warning"
    assert event["message"].startswith(expected)
    status = (await harness.cluster("scaling"))["status"]
    assert status.get("state") != "ready"
    assert harness.created_pods == {}  # no worker may join the foreign head

    # Retried with backoff (one Event whose count grows), and the cluster comes up once freed.
    await harness.kubectl("delete", "service", "scaling-head-svc")
    await harness.pods_settled("scaling", head=1, workers=1)
    service = await harness.get_json("service", "scaling-head-svc")
    owner = service["metadata"]["ownerReferences"][0]
    assert (owner["name"], owner["uid"]) == (
        "scaling",
        (await harness.cluster("scaling"))["metadata"]["uid"],
    )
    assert len(await events(harness, "FailedToCreateService")) == 1

    async def recovered() -> bool:
        return await condition(harness, "scaling", "ReplicaFailure") is None

    await harness.eventually(recovered, what="ReplicaFailure cleared")


async def test_an_edited_head_service_selector_is_restored_within_seconds(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(scalable_cluster(replicas=1))
    await harness.pods_settled("scaling", head=1, workers=1)
    original = (await harness.get_json("service", "scaling-head-svc"))["spec"]["selector"]
    await harness.kubectl(
        "patch",
        "service",
        "scaling-head-svc",
        "--type=merge",
        "-p",
        '{"spec": {"selector": {"ray.io/node-type": "worker", "stolen": "yes"}}}',
    )

    async def restored() -> bool:
        service = await harness.get_json("service", "scaling-head-svc")
        return bool(service["spec"]["selector"] == original)

    await harness.eventually(restored, within=5, what="head Service selector restored")
    [event] = await events(harness, "RepairedService")
    assert "spec.selector" in event["message"]


async def test_a_worker_pod_whose_created_by_label_was_removed_is_still_counted(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(scalable_cluster(replicas=2))
    pods = await harness.pods_settled("scaling", head=1, workers=2)
    worker = next(p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "worker")
    await harness.kubectl(
        "label", "pod", worker["metadata"]["name"], "app.kubernetes.io/created-by-"
    )
    # Scaling to 3 makes the operator count the group: an invisible worker would give 4.
    await harness.apply(scalable_cluster(replicas=3))
    await harness.pods_settled("scaling", head=1, workers=3)
    await asyncio.sleep(1.0)  # the one place to wait: proving no extra Pod follows
    assert len(harness.created_pods) == 1 + 3
    names = {p["metadata"]["name"] for p in await harness.pods("scaling")}
    assert worker["metadata"]["name"] in names


async def test_objects_as_the_api_server_defaults_them_are_not_repaired(
    harness: Harness, operator: Operator
) -> None:
    # Head Service, autoscaler ServiceAccount/Role/RoleBinding: all come back with server
    # defaults; none of that is drift, so a converged cluster costs no patch.
    await harness.apply(scalable_cluster(replicas=1, enableInTreeAutoscaling=True))
    await harness.pods_settled("scaling", head=1, workers=1)
    await harness.kubectl("annotate", "raycluster", "scaling", "poke=1")  # one more reconcile

    async def status_written() -> bool:
        return bool((await harness.cluster("scaling")).get("status", {}).get("head"))

    await harness.eventually(status_written, what="status written")
    await asyncio.sleep(1.0)
    listed = await harness.get_json("events")
    repairs = [e["message"] for e in listed["items"] if e["reason"].startswith("Repaired")]
    assert repairs == []


async def test_a_head_service_that_lost_the_label_we_watch_by_is_found_and_relabelled(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(scalable_cluster(replicas=1))
    await harness.pods_settled("scaling", head=1, workers=1)
    uid = (await harness.get_json("service", "scaling-head-svc"))["metadata"]["uid"]
    # Out of our watches' selectors (Services are watched by `ray.io/node-type`, `ray.io/serve`
    # or `ray.io/headless-worker-svc`): the cache forgets it, the create answers 409, and the
    # read shows it is ours (ownerReferences), so it is repaired rather than reported.
    await harness.kubectl("label", "service", "scaling-head-svc", "ray.io/node-type-")

    async def relabelled() -> bool:
        service = await harness.get_json("service", "scaling-head-svc")
        return bool(service["metadata"]["labels"].get("ray.io/node-type") == "head")

    await harness.eventually(relabelled, within=10, what="node-type label restored")
    assert (await harness.get_json("service", "scaling-head-svc"))["metadata"]["uid"] == uid
    assert await events(harness, "FailedToCreateService") == []
