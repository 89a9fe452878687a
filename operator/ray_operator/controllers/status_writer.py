"""The one way a controller writes a custom resource's status: a merge patch of the status
subresource from the status it read (`old`) to the one it computed (`new`).

- A merge patch keeps the fields it does not mention: every key of `old` missing from `new` is
  named `null`, and so is every vanished key inside the `nested` entries (objects a merge patch
  would merge rather than replace, such as a RayService's `activeServiceStatus`).
- The patch carries the `metadata.resourceVersion` the status was decided on: a write computed
  from a stale cache (one that would, say, choose a second submission id) fails with Conflict
  instead of overwriting what another write decided. By default the Conflict propagates and the
  worker retries the key from fresh data; with `drop_conflicts` it is dropped, for kinds whose
  every change reaches the controller anyway (level-triggered: the change that made the version
  stale enqueues the key again, and nothing is lost by not retrying this write).
- An object deleted meanwhile has no status left to write: NotFound is not an error.

Whether a status changed at all is each kind's own rule (`status.<kind>.status_changed`, which
ignores timestamps): the caller asks it before calling `write_status`, which always writes.
Events that tell of a status change are the caller's too, recorded only once the write landed;
`record_pods_waiting_news` is the one the RayJob and RayService controllers share.

(The RayCluster controller writes its status its own way: without a resourceVersion, paced, and
remembering what it wrote; see `controllers/raycluster.py`.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ray_operator.runtime.errors import Conflict, NotFound
from ray_operator.status import waiting

if TYPE_CHECKING:
    from ray_operator.runtime.client import KubeClient
    from ray_operator.runtime.events import EventRecorder
    from ray_operator.spec.kinds import Kind

Object = Mapping[str, Any]


def status_patch(old: Object, new: Object, *, nested: Iterable[str] = ()) -> dict[str, Any]:
    """The merge patch turning status `old` into `new`: vanished keys (also inside the `nested`
    entries) named as null."""
    patch: dict[str, Any] = {**{key: None for key in old if key not in new}, **new}
    for entry in nested:
        old_entry, new_entry = old.get(entry) or {}, new.get(entry) or {}
        patch[entry] = {**{key: None for key in old_entry if key not in new_entry}, **new_entry}
    return patch


async def write_status(
    client: KubeClient,
    kind: Kind[Any],
    obj: Object,
    old: Object,
    new: Object,
    *,
    nested: Iterable[str] = (),
    drop_conflicts: bool = False,
) -> bool:
    """Patch `obj`'s status from `old` to `new` at the resourceVersion it was decided on; False
    when nothing was written (the object is gone, or a Conflict dropped with `drop_conflicts`)."""
    metadata = obj["metadata"]
    try:
        await client.patch_status(
            kind,
            metadata["name"],
            {
                "metadata": {"resourceVersion": metadata["resourceVersion"]},
                "status": status_patch(old, new, nested=nested),
            },
            namespace=metadata["namespace"],
        )
    except NotFound:
        return False
    except Conflict:
        if drop_conflicts:
            return False
        raise
    return True


def record_pods_waiting_news(events: EventRecorder, obj: Object, old: Object, new: Object) -> None:
    """The Event a change of the `PodsWaiting` condition deserves (`status.waiting.news`), if
    any."""
    told = waiting.news(old.get("conditions") or (), new.get("conditions") or ())
    if told is not None:
        events.record(obj, reason=told.reason, message=told.message, type=told.type)
