"""The operator runtime: API client, watch cache, work queue, workers and leader election.

Data flows one way: `watcher` (list+watch per kind) → `store` (trimmed dicts, indexed) →
`workers.dispatch` (each controller's key mapper turns a change into `ObjectKey`s) → `queue`
(coalescing, one reconcile per key at a time, backoff) → `Controller.reconcile(key)` → `client`
(API writes, guarded by `leader`) and `events`. `app.Operator` wires them; nothing in here knows
about RayClusters beyond their names (`spec.kinds`).

How a controller plugs in
-------------------------
Write a class with a `kind` (the `Kind` it reconciles, e.g. `kinds.RAY_CLUSTER`), a key mapper
`keys_for(kind, obj) -> Iterable[ObjectKey]` (use `controller.own_key`,
`controller.cluster_key_from_label`, `controller.owner_keys`) and
`async def reconcile(self, key: ObjectKey) -> Result`. Its constructor takes a `ControllerContext`:

- `context.store`, the read-only cache: `get(kind, namespace, name)`, `list(kind, namespace=)`,
  `list_for_cluster(kind, namespace, cluster)`, `list_owned_by(kind, owner_uid)`;
- `context.client`, a `KubeClient`: get/list/create/replace/patch/patch_status/apply/delete/
  delete_collection on any `Kind`, dicts in and out, errors from `runtime.errors`;
- `context.events`, an `EventRecorder`: `record(obj, reason=, message=, type=)`.

Pass the class (or any `ControllerContext -> Controller` callable) to
`ray_operator.app.run(settings, controllers=[RayClusterController, ...])`.

A reconcile reads only the cache (never the event), returns `Result()` or
`Result(requeue_after=seconds)`, and raises on failure: the worker loop retries with per-key
backoff. It may write only while this replica leads; otherwise the client raises `NotLeader`.
Log lines written during a reconcile are prefixed with the key's `namespace/name` automatically.
"""

from ray_operator.runtime.client import KubeClient, ObjectList, PatchType, WatchEvent
from ray_operator.runtime.controller import (
    Controller,
    ControllerContext,
    ControllerFactory,
    Result,
    cluster_key_from_label,
    own_key,
    owner_keys,
)
from ray_operator.runtime.events import EventRecorder
from ray_operator.runtime.store import StoreView
from ray_operator.spec.kinds import (
    AUTOSCALER_RBAC_KINDS,
    EVENT,
    JOB,
    LEASE,
    OPERATOR_NAME,
    OWNED_SELECTOR,
    POD,
    RAY_CLUSTER,
    RAY_JOB,
    RAY_SERVICE,
    ROLE,
    ROLE_BINDING,
    SERVICE,
    SERVICE_ACCOUNT,
    Kind,
    ObjectKey,
)

__all__ = [
    "AUTOSCALER_RBAC_KINDS",
    "EVENT",
    "JOB",
    "LEASE",
    "OPERATOR_NAME",
    "OWNED_SELECTOR",
    "POD",
    "RAY_CLUSTER",
    "RAY_JOB",
    "RAY_SERVICE",
    "ROLE",
    "ROLE_BINDING",
    "SERVICE",
    "SERVICE_ACCOUNT",
    "Controller",
    "ControllerContext",
    "ControllerFactory",
    "EventRecorder",
    "Kind",
    "KubeClient",
    "ObjectKey",
    "ObjectList",
    "PatchType",
    "Result",
    "StoreView",
    "WatchEvent",
    "cluster_key_from_label",
    "own_key",
    "owner_keys",
]
