"""What we already asked the API server to create or delete, until the watch cache shows it.

The cache lags our own writes by a few milliseconds to a few seconds. A reconcile that plans from
the raw cache in that window would create the same Pod twice or delete one twice. So every create
and delete a controller issues is remembered here, per owner key, and `observe` folds those
requests into what the cache shows:

- a Pod we created that the cache has not seen yet is added, as the API returned it;
- a Pod we deleted is left out until the cache no longer has it (a delete counts as done only
  when the object is gone, not when the API accepted the request).

A create whose answer was lost (a timeout, a reset connection, a 5xx: the server may have written
it) is remembered as *maybe created* under its client-generated name: counted as existing while
we plan, so the next reconcile does not make a duplicate, until the cache shows that name or
`uncertain_ttl` passes (then it surely never happened: the cache has had that long to see it).

Entries that the cache never confirms (a watch gap after a relist can hide a create-then-delete)
expire after `ttl` seconds so a lost event cannot wedge a cluster forever.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ray_operator.spec.kinds import ObjectKey

DEFAULT_TTL_SECONDS = 300.0
# Long enough for a watch to reconnect and relist after an API-server restart; short enough that
# a create that never happened is retried soon after.
DEFAULT_UNCERTAIN_TTL_SECONDS = 60.0

Object = Mapping[str, Any]


@dataclass
class _Pending:
    creates: dict[str, tuple[Object, float]] = field(default_factory=dict)
    # name -> (the body we sent, when): creates whose outcome we do not know
    maybe_creates: dict[str, tuple[Object, float]] = field(default_factory=dict)
    deletes: dict[str, tuple[str, float]] = field(default_factory=dict)  # name -> (uid, when)


class Expectations:
    """Pending creates and deletes of one kind of dependent, per owner key."""

    def __init__(
        self,
        *,
        ttl: float = DEFAULT_TTL_SECONDS,
        uncertain_ttl: float = DEFAULT_UNCERTAIN_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl = ttl
        self._uncertain_ttl = uncertain_ttl
        self._clock = clock
        self._pending: dict[ObjectKey, _Pending] = {}

    def created(self, owner: ObjectKey, obj: Object) -> None:
        """Remember an object the API server just created for `owner`."""
        name = obj["metadata"]["name"]
        self._pending.setdefault(owner, _Pending()).creates[name] = (obj, self._clock())

    def maybe_created(self, owner: ObjectKey, obj: Object) -> None:
        """Remember a create of `obj` (the body we sent) whose answer was lost."""
        name = obj["metadata"]["name"]
        self._pending.setdefault(owner, _Pending()).maybe_creates[name] = (obj, self._clock())

    def deleted(self, owner: ObjectKey, obj: Object) -> None:
        """Remember an object whose deletion the API server just accepted."""
        metadata = obj["metadata"]
        pending = self._pending.setdefault(owner, _Pending())
        # A delete supersedes our create of it: the cache may never show the short-lived object.
        pending.creates.pop(metadata["name"], None)
        pending.maybe_creates.pop(metadata["name"], None)
        pending.deletes[metadata["name"]] = (str(metadata.get("uid", "")), self._clock())

    def forget(self, owner: ObjectKey) -> None:
        """Drop everything remembered for `owner` (it is gone)."""
        self._pending.pop(owner, None)

    def observe(self, owner: ObjectKey, cached: Sequence[Object]) -> list[Object]:
        """The cached objects corrected by our pending requests; settles confirmed ones."""
        pending = self._pending.get(owner)
        if pending is None:
            return list(cached)
        self._expire(pending)
        by_name = {obj["metadata"]["name"]: obj for obj in cached}
        for name in [n for n in pending.creates if n in by_name]:
            del pending.creates[name]
        for name in [n for n in pending.maybe_creates if n in by_name]:
            del pending.maybe_creates[name]
        for name, (uid, _) in list(pending.deletes.items()):
            still_there = by_name.get(name)
            if still_there is None or str(still_there["metadata"].get("uid", "")) != uid:
                del pending.deletes[name]
        if not pending.creates and not pending.deletes and not pending.maybe_creates:
            del self._pending[owner]
        result = [obj for name, obj in by_name.items() if name not in pending.deletes]
        result += [obj for obj, _ in pending.creates.values()]
        result += [obj for obj, _ in pending.maybe_creates.values()]
        return result

    def pending_count(self, owner: ObjectKey) -> int:
        """How many requests for `owner` the cache has not confirmed yet."""
        pending = self._pending.get(owner)
        if pending is None:
            return 0
        return len(pending.creates) + len(pending.deletes) + len(pending.maybe_creates)

    def uncertain_count(self, owner: ObjectKey) -> int:
        """How many creates for `owner` have an unknown outcome (counted as existing meanwhile)."""
        pending = self._pending.get(owner)
        return 0 if pending is None else len(pending.maybe_creates)

    def _expire(self, pending: _Pending) -> None:
        cutoff = self._clock() - self._ttl
        for name in [n for n, (_, when) in pending.creates.items() if when < cutoff]:
            del pending.creates[name]
        for name in [n for n, (_, when) in pending.deletes.items() if when < cutoff]:
            del pending.deletes[name]
        uncertain_cutoff = self._clock() - self._uncertain_ttl
        for name in [
            n for n, (_, when) in pending.maybe_creates.items() if when < uncertain_cutoff
        ]:
            del pending.maybe_creates[name]
