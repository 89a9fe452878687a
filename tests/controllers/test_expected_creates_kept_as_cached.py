"""What the RayCluster controller remembers of its own creates is what the cache keeps (issue 32).

Until the cache shows a Pod the controller created, the API server's answer stands in for it
(expectations). A cluster's next reconcile — the one that sees the cache catch up and lets the
answer go — can come a minute later while a thousand new clusters queue before it. The answer
carries managedFields and every defaulted field; kept whole, five of them per cluster held 125 KiB
per new cluster while creating (RSS 83 → 173 MiB at 1000 clusters once Events left the reconcile).
Kept as the cache keeps a Pod, they cost what the cache entry costs, and plans see the same shape
whichever of the two they read.
"""

from __future__ import annotations

from ray_operator.bench.manifests import bench_cluster
from ray_operator.builders.pods import build_worker_pod
from ray_operator.controllers.owned_objects import OwnedObjects
from ray_operator.metrics import Metrics
from ray_operator.runtime.events import EventRecorder
from ray_operator.runtime.store import Store
from ray_operator.spec.kinds import POD, RAY_CLUSTER, ObjectKey

from tests.controllers.conftest import Harness


async def test_a_created_pod_is_remembered_as_the_cache_keeps_it_until_the_cache_shows_it(
    harness: Harness,
) -> None:
    namespace = harness.namespace
    cluster = bench_cluster("kept", namespace=namespace)
    cluster["metadata"]["uid"] = "0b5e6c5e-0000-4000-8000-000000000001"
    key = ObjectKey(RAY_CLUSTER.kind, namespace, "kept")
    store = Store()
    objects = OwnedObjects(
        store=store,
        client=harness.client,
        events=EventRecorder(harness.client, metrics=Metrics(), instance="test"),
    )
    pod = build_worker_pod(cluster, "workers", suffix="abcde", replica_index=0)
    answer = await harness.client.create(POD, pod, namespace=namespace)
    assert answer["metadata"]["managedFields"]  # what is not worth keeping

    objects.expect_created(key, POD, answer)

    [expected] = objects.observed_pods(key, cluster)
    assert "managedFields" not in expected["metadata"]
    assert expected == store.keep(POD, POD.with_type_meta(dict(answer)))
    # The watch delivers it: the cached object is the one plans see, and nothing stays pending.
    store.upsert(POD, POD.with_type_meta(dict(answer)))
    assert objects.observed_pods(key, cluster) == [
        store.get(POD, namespace, pod["metadata"]["name"])
    ]
    assert objects.expectations[POD].pending_count(key) == 0
