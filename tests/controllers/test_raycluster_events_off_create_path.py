"""Events are off the create path: a cluster comes up while its Events wait (issue 32).

An operator records three Events for each new cluster (head Service, head Pod, workers). Written
inside the reconcile, they made every cluster wait three round trips more and took a quarter of
the operator's writes while the API server was busiest. Now they are queued and written one at a
time in the background. The proxy between the operator and the real API server holds every Event
write unanswered: the Pods, the head Service and the status must come all the same, and the
Events once the API server takes them again.
"""

from __future__ import annotations

from typing import Any

from ray_operator.app import Operator

from tests.controllers import lossy_proxy
from tests.controllers.clusters import scalable_cluster
from tests.controllers.conftest import Harness
from tests.controllers.lossy_proxy import LossyProxy

proxy = lossy_proxy.proxy
operator_behind_proxy = lossy_proxy.operator_behind_proxy


async def event_reasons(harness: Harness) -> set[str]:
    listed = await harness.get_json("events", "--field-selector", "involvedObject.name=scaling")
    items: list[dict[str, Any]] = listed["items"]
    return {event["reason"] for event in items}


async def test_a_cluster_comes_up_while_its_event_writes_hang_and_its_events_follow(
    harness: Harness, proxy: LossyProxy, operator_behind_proxy: Operator
) -> None:
    operator = operator_behind_proxy

    await lossy_proxy.caches_synced(harness, operator)
    proxy.hold_event_writes()
    await harness.apply(scalable_cluster(replicas=3))
    await harness.pods_settled("scaling", head=1, workers=3)

    async def ready() -> bool:
        return (await harness.cluster("scaling")).get("status", {}).get("state") == "ready"

    await harness.eventually(ready, what="status state ready")
    assert await harness.get_json_if_exists("service/scaling-head-svc") is not None
    # One Event write hangs at the proxy; the rest wait in the operator's queue, and no reconcile
    # waits for either.
    assert proxy.held_event_writes == 1
    assert await event_reasons(harness) == set()

    proxy.release_event_writes()

    async def told() -> bool:
        return {"CreatedService", "CreatedHeadPod", "CreatedWorkerPod"} <= await event_reasons(
            harness
        )

    await harness.eventually(told, what="the cluster's Events, once the API server takes them")
