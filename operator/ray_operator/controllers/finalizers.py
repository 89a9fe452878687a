"""Adding and removing a finalizer (RayJob, RayService, RayCluster), as compare-and-swap writes.

Both writes are conditional on what the cache showed: adding carries the resourceVersion, and
removing tests the finalizer list first. A stale cache therefore makes the write fail (and the
reconcile retry) instead of dropping another controller's finalizer or re-adding ours to an
object that moved on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from ray_operator.runtime.client import KubeClient, PatchType
from ray_operator.runtime.errors import NotFound
from ray_operator.spec.kinds import Kind


def has_finalizer(obj: Mapping[str, Any], finalizer: str) -> bool:
    return finalizer in (obj["metadata"].get("finalizers") or ())


async def add_finalizer(
    client: KubeClient, kind: Kind, obj: Mapping[str, Any], finalizer: str
) -> bool:
    """Add `finalizer`; True when it had to be added (look again once the change is cached)."""
    metadata = obj["metadata"]
    finalizers = list(metadata.get("finalizers") or [])
    if finalizer in finalizers:
        return False
    patch = {
        "metadata": {
            "finalizers": [*finalizers, finalizer],
            "resourceVersion": metadata["resourceVersion"],
        }
    }
    await client.patch(kind, metadata["name"], patch, namespace=metadata["namespace"])
    return True


async def remove_finalizer(
    client: KubeClient, kind: Kind, obj: Mapping[str, Any], finalizer: str
) -> None:
    """Remove `finalizer` if the object still has exactly the finalizers the cache showed."""
    metadata = obj["metadata"]
    finalizers = list(metadata.get("finalizers") or [])
    remaining = [f for f in finalizers if f != finalizer]
    operations = [
        {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
        {"op": "replace", "path": "/metadata/finalizers", "value": remaining},
    ]
    with contextlib.suppress(NotFound):  # already gone: nothing holds it any more
        await client.patch(
            kind, metadata["name"], operations, namespace=metadata["namespace"],
            patch_type=PatchType.JSON,
        )  # fmt: skip
