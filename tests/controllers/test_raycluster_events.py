"""Events that aggregate (issue 12, finding 9): per reason and cluster, with a count.

An Event per unknown `workersToDelete` name, or per retry of a Pod whose random name changes
each time, once made 1100 Events from one cluster; now each is one Event whose count grows.
"""

from __future__ import annotations

import json
from typing import Any

from ray_operator.app import Operator

from tests.controllers.clusters import scalable_cluster
from tests.controllers.conftest import Harness

UNKNOWN_NAMES = 1100


async def events(harness: Harness, reason: str) -> list[dict[str, Any]]:
    listed = await harness.get_json("events", "--field-selector", f"reason={reason}")
    items: list[dict[str, Any]] = listed["items"]
    return items


async def test_eleven_hundred_unknown_workers_to_delete_make_one_event_with_a_count(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(scalable_cluster(replicas=1))
    await harness.pods_settled("scaling", head=1, workers=1)
    names = [f"no-such-worker-{number:05d}" for number in range(UNKNOWN_NAMES)]
    asks = 3
    for ask in range(1, asks + 1):
        # Written as Ray's autoscaler writes it (a JSON patch), then cleared by the operator.
        patch = [
            {
                "op": "add",
                "path": "/spec/workerGroupSpecs/0/scaleStrategy",
                "value": {"workersToDelete": names},
            }
        ]
        await harness.kubectl(
            "patch", "raycluster", "scaling", "--type=json", "-p", json.dumps(patch)
        )

        async def reported_and_cleared(ask: int = ask) -> bool:
            found = await events(harness, "UnknownWorkerToDelete")
            group = (await harness.cluster("scaling"))["spec"]["workerGroupSpecs"][0]
            cleared = not (group.get("scaleStrategy") or {}).get("workersToDelete")
            return cleared and sum(e["count"] for e in found) >= ask

        await harness.eventually(reported_and_cleared, what=f"unknown names reported ({ask})")
    [event] = await events(harness, "UnknownWorkerToDelete")
    assert event["count"] == asks
    assert event["type"] == "Warning"
    assert f"names {UNKNOWN_NAMES} Pods" in event["message"]
    assert "small/no-such-worker-00000" in event["message"]
    assert f"and {UNKNOWN_NAMES - 10} more" in event["message"]
    assert "no-such-worker-00010" not in event["message"]
    await harness.pods_settled("scaling", head=1, workers=1)


async def test_retried_creates_of_a_rejected_worker_pod_make_one_event(
    harness: Harness, operator: Operator
) -> None:
    # The API server's Priority admission refuses these Pods (and quotes each Pod's name).
    cluster = scalable_cluster(replicas=3)
    worker_pod = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    worker_pod["priorityClassName"] = "no-such-priority"
    await harness.apply(cluster)

    async def retried() -> list[dict[str, Any]] | None:
        found = await events(harness, "FailedToCreateWorkerPod")
        return found if sum(e["count"] for e in found) >= 6 else None

    found = await harness.eventually(retried, what="two reconciles' failed creates")
    assert len(found) == 1
    # The random part of the name is masked, so every retry has the same message.
    assert "scaling-small-worker-*****" in found[0]["message"]
    assert "no PriorityClass with name no-such-priority" in found[0]["message"]
