"""Creates whose answer was lost (issue 12, finding 5): no duplicate Pod, even on a stale cache.

A reverse proxy (tests/controllers/lossy_proxy.py) between the operator and the real API server
forwards Pod creates but drops the connection instead of answering, and holds back the Pod
watch meanwhile, as after an API-server crash. The operator must count those Pods as existing
(by their client-generated names) until the cache shows them.
"""

from __future__ import annotations

import asyncio

from ray_operator.app import Operator

from tests.controllers import lossy_proxy
from tests.controllers.clusters import reconcile_count, scalable_cluster
from tests.controllers.conftest import Harness
from tests.controllers.lossy_proxy import LossyProxy

# The operator under test reaches the API server through the proxy.
proxy = lossy_proxy.proxy
operator_behind_proxy = lossy_proxy.operator_behind_proxy


async def test_pods_whose_create_answer_was_lost_are_not_created_again(
    harness: Harness, proxy: LossyProxy, operator_behind_proxy: Operator
) -> None:
    operator = operator_behind_proxy

    await lossy_proxy.caches_synced(harness, operator)
    proxy.hold_watch_events("pods")
    proxy.answers_to_lose = 2
    await harness.apply(scalable_cluster(replicas=3))

    async def lost_and_retried() -> bool:
        return len(proxy.lost) == 2 and reconcile_count(operator) >= 3

    # The reconcile that lost the answers failed; later ones ran on a cache without the Pods.
    await harness.eventually(lost_and_retried, what="two lost answers and a retry")
    assert len(harness.created_pods) == 4
    proxy.release_watch_events("pods")
    await harness.pods_settled("scaling", head=1, workers=3)
    await asyncio.sleep(1.0)  # the one place to wait: proving no duplicate follows
    assert len(harness.created_pods) == 4, harness.created_pods
    assert set(proxy.lost) <= {p["metadata"]["name"] for p in await harness.pods("scaling")}
