"""The harness's side of the API: bounded bulk creates, namespaces, and wiping a namespace.

Creates go through the operator's own `KubeClient` (dicts in and out, no model parsing), so the
bare-client ceiling of M1 pays the same client costs as the operator. Wiping uses DeleteCollection
with a zero grace period (one request per kind, no kubelet confirmation to wait for) from
kubernetes-asyncio's generated API, with the response left unparsed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import Any

from kubernetes_asyncio import client as kube_client

from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.errors import AlreadyExists
from ray_operator.spec.kinds import NAMESPACE, RAY_CLUSTER, Kind


async def create_all(
    client: KubeClient, objects: Iterable[tuple[Kind, Mapping[str, Any]]], *, concurrency: int
) -> float:
    """Create every (kind, body) with at most `concurrency` requests in flight; the seconds."""
    return await _run_bounded(
        [partial(client.create, kind, body) for kind, body in objects], concurrency=concurrency
    )


async def delete_all(
    client: KubeClient, kind: Kind, names: Iterable[str], *, namespace: str, concurrency: int
) -> float:
    """Delete the named objects with at most `concurrency` requests in flight; the seconds."""
    return await _run_bounded(
        [partial(client.delete, kind, name, namespace=namespace) for name in names],
        concurrency=concurrency,
    )


async def _run_bounded(calls: list[Callable[[], Awaitable[object]]], *, concurrency: int) -> float:
    """Await every call, in the given order, `concurrency` at a time at most; the seconds."""
    queue = list(calls)
    queue.reverse()  # pop() from the end keeps the given order

    async def worker() -> None:
        while queue:
            await queue.pop()()

    started = time.monotonic()
    async with asyncio.TaskGroup() as group:
        for _ in range(min(concurrency, len(queue))):
            group.create_task(worker())
    return time.monotonic() - started


async def ensure_namespace(client: KubeClient, name: str) -> None:
    """Create namespace `name` unless it exists."""
    with contextlib.suppress(AlreadyExists):
        await client.create(
            NAMESPACE, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )


async def wipe_namespace(api: kube_client.ApiClient, namespace: str) -> None:
    """Delete every RayCluster, Pod, Service and Event of `namespace`, without grace."""
    core = kube_client.CoreV1Api(api)
    custom = kube_client.CustomObjectsApi(api)
    # Unparsed (_preload_content=False): the answer lists every deleted object.
    # RayClusters first, so an operator still watching does not recreate what goes next.
    response: Any = await custom.delete_collection_namespaced_custom_object(
        RAY_CLUSTER.group,
        RAY_CLUSTER.version,
        namespace,
        RAY_CLUSTER.plural,
        grace_period_seconds=0,
        _preload_content=False,
    )
    response.release()
    for delete in (
        core.delete_collection_namespaced_pod,
        core.delete_collection_namespaced_service,
        core.delete_collection_namespaced_event,
    ):
        response = await delete(namespace, grace_period_seconds=0, _preload_content=False)
        response.release()
