"""The watch cache: the latest trimmed copy of every watched object, and the lookups on it.

Only the watchers write to the `Store` (`upsert`, `remove`, `replace`); controllers get it as a
`StoreView` and read: `get` one object, `list` a kind, `list_for_cluster` (Pods/Services by
namespace + `ray.io/cluster` label) and `list_owned_by` (dependents by owner uid). Reads are
synchronous and cost no API call — the hot path of every reconcile.

Objects are plain dicts as the API sent them, minus `metadata.managedFields` and the
`kubectl.kubernetes.io/last-applied-configuration` annotation (often larger than the object itself);
Pods and Jobs, held by the thousand, are kept as projections: only the fields the operator reads
(`projection.py`); every object's strings are interned. They are shared, not copied — between
readers, and equal parts of projected objects between objects: callers must not mutate them
(build a model or deep-copy first).

A controller sees its own writes once the watch delivers them (usually milliseconds later): the
written object's event enqueues its key again, so "create, then find it in the cache" is a matter
of the next reconcile; controllers that must not act twice meanwhile keep expectations.

`Store.sync` (a `CacheSync`) says which parts of the cache are complete. A part (a kind, in one
namespace or all) is unsynced from the moment its watch breaks — the API server went away, 410
Gone — until its next LIST has been applied: meanwhile the cache may miss objects created just
before the break, and a reconcile planned from it would create them again (issue 12, finding 5:
duplicate Pods after an API-server crash). The workers hold such reconciles back; `synced(kind,
namespace)` lets a controller ask too.
"""

from __future__ import annotations

import builtins
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

from ray_operator.runtime.projection import CACHE_PROJECTIONS, Fields, Projector, interned
from ray_operator.spec.kinds import Kind, Viewed
from ray_operator.spec.kuberay_names import CLUSTER_LABEL

Object = dict[str, Any]

LAST_APPLIED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"


class StoreView(Protocol):
    """The read-only face of the cache that controllers get."""

    def get(self, kind: Kind[Viewed], namespace: str, name: str) -> Viewed | None:
        """The cached object, or None when the cache has not seen it (or saw it deleted)."""
        ...

    def list(self, kind: Kind[Viewed], *, namespace: str | None = None) -> builtins.list[Viewed]:
        """All cached objects of a kind, optionally in one namespace."""
        ...

    def list_for_cluster(
        self, kind: Kind[Viewed], namespace: str, cluster: str
    ) -> builtins.list[Viewed]:
        """Objects of `kind` in `namespace` labelled `ray.io/cluster=<cluster>`."""
        ...

    def list_owned_by(self, kind: Kind[Viewed], owner_uid: str) -> builtins.list[Viewed]:
        """Objects of `kind` with an ownerReference to `owner_uid`."""
        ...

    def synced(self, kind: Kind, namespace: str) -> bool:
        """Whether the cache of `kind` in `namespace` is complete (listed, no watch gap since)."""
        ...

    def keep(self, kind: Kind, obj: Object) -> Object:
        """What the cache would keep of `obj` (see `Store.keep`)."""
        ...


@dataclass(frozen=True, slots=True)
class Change:
    """What one cache update did: `old` is None for an add, `new` is None for a delete."""

    kind: Kind
    old: Object | None
    new: Object | None

    @property
    def latest(self) -> Object:
        """The newest state known (the deleted object's last state for a delete)."""
        obj = self.new if self.new is not None else self.old
        assert obj is not None
        return obj


_Name = tuple[str, str]  # (namespace, name)


class CacheSync:
    """Which parts of the cache are complete; a part is a kind in one namespace (or in all: None),
    through one label selector (a kind may be watched through several, e.g. Services).

    Watchers register their part as unsynced when they are built, mark it synced once a LIST is
    applied and unsynced again when their watch breaks. Kinds nobody watches count as synced.
    Listeners registered with `on_synced` are called (synchronously) whenever a part syncs.
    """

    def __init__(self) -> None:
        self._unsynced: dict[Kind, set[tuple[str | None, str]]] = {}
        self._listeners: list[Callable[[], None]] = []

    def mark_unsynced(self, kind: Kind, namespace: str | None, selector: str = "") -> None:
        """The cache of `kind` in `namespace` (None: all) may be missing objects from now on."""
        self._unsynced.setdefault(kind, set()).add((namespace, selector))

    def mark_synced(self, kind: Kind, namespace: str | None, selector: str = "") -> None:
        """A LIST of `kind` in `namespace` (None: all) was applied; tell the listeners."""
        parts = self._unsynced.get(kind)
        if parts is None or (namespace, selector) not in parts:
            return
        parts.discard((namespace, selector))
        if not parts:
            del self._unsynced[kind]
        for listener in self._listeners:
            listener()

    def synced(self, kind: Kind, namespace: str) -> bool:
        """Whether the objects of `kind` in `namespace` are all in the cache."""
        parts = self._unsynced.get(kind)
        return not parts or not any(part in (None, namespace) for part, _ in parts)

    def all_synced(self, kinds: Iterable[Kind] | None, namespace: str) -> bool:
        """`synced` for each of `kinds` (None: every kind) in `namespace`."""
        if kinds is None:
            kinds = self._unsynced
        return all(self.synced(kind, namespace) for kind in kinds)

    def unsynced_kinds(self) -> builtins.list[Kind]:
        """The kinds with at least one unsynced part (empty: the whole cache is complete)."""
        return list(self._unsynced)

    def on_synced(self, listener: Callable[[], None]) -> None:
        """Call `listener()` each time a part becomes synced."""
        self._listeners.append(listener)


class Store:
    """The in-memory cache behind `StoreView`, with its indexes kept in step on every write."""

    def __init__(self, *, projections: Mapping[Kind, Fields] = CACHE_PROJECTIONS) -> None:
        self.sync = CacheSync()
        """Which parts of the cache are complete (written by the watchers)."""
        self._projections = projections
        self._projector = Projector()
        self._objects: dict[Kind, dict[_Name, Object]] = defaultdict(dict)
        self._by_cluster: dict[tuple[Kind, str, str], set[str]] = defaultdict(set)
        self._by_owner: dict[tuple[Kind, str], set[_Name]] = defaultdict(set)

    # -- reads (StoreView) ------------------------------------------------------------------

    # The views are the objects themselves: the API server validated them against the schema the
    # views are generated from, and a projection keeps the same paths. Hence the casts, no copy.

    def get(self, kind: Kind[Viewed], namespace: str, name: str) -> Viewed | None:
        return cast("Viewed | None", self._objects[kind].get((namespace, name)))

    def list(self, kind: Kind[Viewed], *, namespace: str | None = None) -> builtins.list[Viewed]:
        objects = self._objects[kind]
        if namespace is None:
            return cast("builtins.list[Viewed]", list(objects.values()))
        return cast(
            "builtins.list[Viewed]", [obj for (ns, _), obj in objects.items() if ns == namespace]
        )

    def list_for_cluster(
        self, kind: Kind[Viewed], namespace: str, cluster: str
    ) -> builtins.list[Viewed]:
        objects = self._objects[kind]
        names = self._by_cluster.get((kind, namespace, cluster), ())
        return cast("builtins.list[Viewed]", [objects[(namespace, name)] for name in sorted(names)])

    def list_owned_by(self, kind: Kind[Viewed], owner_uid: str) -> builtins.list[Viewed]:
        objects = self._objects[kind]
        owned = [objects[key] for key in sorted(self._by_owner.get((kind, owner_uid), ()))]
        return cast("builtins.list[Viewed]", owned)

    def synced(self, kind: Kind, namespace: str) -> bool:
        return self.sync.synced(kind, namespace)

    def count(self, kind: Kind) -> int:
        """How many objects of a kind the cache holds."""
        return len(self._objects[kind])

    # -- writes (watchers only) -------------------------------------------------------------

    def keep(self, kind: Kind, obj: Object) -> Object:
        """What the cache keeps of `obj`: its projection, or its trimmed copy, strings interned.

        A LIST applies it page by page as pages arrive, so the full objects of a page are garbage
        before the next page is read (`replace(..., kept=True)`). Idempotent.
        """
        projection = self._projections.get(kind)
        if projection is None:
            kept: Object = interned(trim(obj))
            return kept
        return self._projector.project(obj, projection)

    def upsert(self, kind: Kind, obj: Object, *, kept: bool = False) -> Change:
        """Store the new state of an object (as `keep` makes it, unless it is `kept` already)."""
        if not kept:
            obj = self.keep(kind, obj)
        key = _name_of(obj)
        old = self._objects[kind].get(key)
        if old is not None:
            self._unindex(kind, old)
        self._objects[kind][key] = obj
        self._index(kind, obj)
        return Change(kind, old, obj)

    def remove(self, kind: Kind, obj: Mapping[str, Any]) -> Change:
        """Forget a deleted object; the change carries the last state we had (or the event's)."""
        key = _name_of(obj)
        old = self._objects[kind].pop(key, None)
        if old is not None:
            self._unindex(kind, old)
            return Change(kind, old, None)
        return Change(kind, dict(obj), None)

    def replace(
        self,
        kind: Kind,
        objects: Iterable[Object],
        *,
        namespace: str | None = None,
        part: Callable[[Object], bool] | None = None,
        kept: bool = False,
    ) -> builtins.list[Change]:
        """Make the cache of `kind` (in `namespace`, or everywhere; of the objects `part`
        accepts, when the kind is listed through several selectors) equal a fresh list.

        Returns the differences — adds, updates (resourceVersion changed) and the deletions that
        happened while we were not watching — so they are dispatched like watch events.
        `kept`: the objects went through `keep` already (a LIST applies it page by page).
        """
        changes: list[Change] = []
        seen: set[_Name] = set()
        for obj in objects:
            key = _name_of(obj)
            seen.add(key)
            old = self._objects[kind].get(key)
            if old is None or _resource_version(old) != _resource_version(obj):
                changes.append(self.upsert(kind, obj, kept=kept))
        for key, old in list(self._objects[kind].items()):
            if key in seen or (namespace is not None and key[0] != namespace):
                continue
            if part is None or part(old):
                changes.append(self.remove(kind, old))
        return changes

    def _index(self, kind: Kind, obj: Object) -> None:
        metadata = obj["metadata"]
        namespace, name = metadata.get("namespace", ""), metadata["name"]
        cluster = (metadata.get("labels") or {}).get(CLUSTER_LABEL)
        if cluster is not None:
            self._by_cluster[(kind, namespace, cluster)].add(name)
        for owner in metadata.get("ownerReferences") or ():
            self._by_owner[(kind, owner["uid"])].add((namespace, name))

    def _unindex(self, kind: Kind, obj: Object) -> None:
        metadata = obj["metadata"]
        namespace, name = metadata.get("namespace", ""), metadata["name"]
        cluster = (metadata.get("labels") or {}).get(CLUSTER_LABEL)
        if cluster is not None:
            _discard(self._by_cluster, (kind, namespace, cluster), name)
        for owner in metadata.get("ownerReferences") or ():
            _discard(self._by_owner, (kind, owner["uid"]), (namespace, name))


def trim(obj: Object) -> Object:
    """Drop what the operator never reads and that costs memory: managedFields, last-applied."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
        annotations = metadata.get("annotations")
        if annotations and LAST_APPLIED_ANNOTATION in annotations:
            annotations.pop(LAST_APPLIED_ANNOTATION)
    return obj


def _name_of(obj: Mapping[str, Any]) -> _Name:
    metadata = obj["metadata"]
    return metadata.get("namespace", ""), metadata["name"]


def _resource_version(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"].get("resourceVersion", ""))


def _discard(index: dict[Any, set[Any]], key: Any, member: Any) -> None:
    members = index.get(key)
    if members is not None:
        members.discard(member)
        if not members:
            del index[key]
