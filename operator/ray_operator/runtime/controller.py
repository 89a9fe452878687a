"""The contract between the runtime and a controller, and the usual ways to map events to keys.

A controller reconciles one kind. The runtime gives its factory a `ControllerContext` (cache view,
API client, event recorder) and then, for every cache change of any watched kind, asks
`controller.keys_for(kind, obj)` which of its keys the change concerns; those keys go through the
work queue to `controller.reconcile(key)`, one reconcile per key at a time.

`reconcile` is level-triggered: it reads the object (and what it owns) from the cache, never from
the event that caused it. It returns `Result()` when done, `Result(requeue_after=s)` to be looked
at again later (e.g. to poll the Ray dashboard), and raises on failure — the worker loop alone
decides on retry and backoff. A cached object that is gone means the object was deleted: return
`Result()`. A controller may name the kinds it reads in an optional `reads` attribute (a tuple of
`Kind`s): while one of them relists after a broken watch, its keys wait (runtime.workers); without
it, they wait for every watched kind.

The mapping helpers cover our kinds: `own_key` (an object of the controller's kind → itself),
`cluster_key_from_label` (a Pod/Service → its RayCluster via `ray.io/cluster`) and
`owner_keys` (a RayCluster or Job → its RayJob/RayService via ownerReferences).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.events import EventRecorder
from ray_operator.runtime.store import StoreView
from ray_operator.spec.kinds import RAY_CLUSTER, Kind, ObjectKey
from ray_operator.spec.kuberay_names import CLUSTER_LABEL

if TYPE_CHECKING:
    from ray_operator.metrics import Metrics


@dataclass(frozen=True, slots=True)
class Result:
    """How a reconcile ended (when it did not raise)."""

    requeue_after: float | None = None
    """Reconcile this key again after so many seconds (None: only when something changes)."""


class Controller(Protocol):
    """What the runtime needs from a controller."""

    kind: Kind
    """The kind it reconciles; keys with this `kind.kind` are routed to it."""

    def keys_for(self, kind: Kind, obj: Mapping[str, Any]) -> Iterable[ObjectKey]:
        """The key mapper: keys to reconcile because `obj` (of `kind`) was added/changed/deleted."""
        ...

    async def reconcile(self, key: ObjectKey) -> Result:
        """Make the world match the object named by `key`; raise to be retried with backoff."""
        ...


@dataclass(frozen=True, slots=True)
class ControllerContext:
    """What a controller factory gets: everything a reconcile may touch."""

    store: StoreView
    """The watch cache (read-only)."""
    client: KubeClient
    """The API client; its writes fail with `NotLeader` once this replica lost the lease."""
    events: EventRecorder
    """Records core/v1 Events about objects."""
    metrics: Metrics | None = None
    """The operator's metrics, for a controller that counts something of its own."""


ControllerFactory = Callable[[ControllerContext], Controller]
"""Builds a controller from its context; `app.run(settings, controllers=[...])` takes these."""


def own_key(kind: Kind, obj: Mapping[str, Any], *, of: Kind) -> list[ObjectKey]:
    """`[key of obj]` when `obj` is of kind `of`, else `[]`."""
    return [of.key(obj)] if kind == of else []


def cluster_key_from_label(obj: Mapping[str, Any]) -> list[ObjectKey]:
    """The RayCluster a Pod or Service belongs to, by its `ray.io/cluster` label."""
    metadata = obj["metadata"]
    cluster = (metadata.get("labels") or {}).get(CLUSTER_LABEL)
    if not cluster:
        return []
    return [ObjectKey(RAY_CLUSTER.kind, metadata.get("namespace", ""), cluster)]


def names_owner(obj: Mapping[str, Any], uid: str | None) -> bool:
    """Whether `obj`'s ownerReferences name `uid`: a claim whoever wrote `obj` made (the uid of
    an object is readable with `view`), so it decides what `obj` belongs to, never whether its
    content may be trusted."""
    references = obj["metadata"].get("ownerReferences") or ()
    return uid is not None and any(reference.get("uid") == uid for reference in references)


def owner_keys(obj: Mapping[str, Any], *, owner: Kind) -> list[ObjectKey]:
    """The owners of kind `owner` named in `obj`'s ownerReferences (same namespace)."""
    metadata = obj["metadata"]
    return [
        ObjectKey(owner.key_kind, metadata.get("namespace", ""), ref["name"])
        for ref in metadata.get("ownerReferences") or ()
        if ref.get("kind") == owner.kind
        and str(ref.get("apiVersion", "")).rpartition("/")[0] == owner.group
    ]
