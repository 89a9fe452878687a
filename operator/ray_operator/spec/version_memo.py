"""A value computed from one version of an object, kept until the object changes.

A controller reconciles a key for every event of what the object owns (a RayCluster's Pods change
far more often than the RayCluster), so it sees the same version of the object again and again.
Work that is a pure function of the object and O(its size) — validating a spec, converting a legacy
cluster — is done once per version: `(uid, resourceVersion)` names one, since the API server gives
every write a new resourceVersion and a re-created object a new uid. One value per key (that of
the last version computed); the controller that owns the memo forgets a key once the object is
gone. No I/O: a plain dict, owned by one controller, touched only by its reconciles.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any, Generic, TypeVar

ObjectVersion = tuple[str, str]
"""(uid, resourceVersion) of one version of an object."""

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def object_version(obj: Mapping[str, Any]) -> ObjectVersion:
    """The (uid, resourceVersion) of `obj`; empty strings where its metadata lacks them."""
    metadata = obj["metadata"]
    return (str(metadata.get("uid", "")), str(metadata.get("resourceVersion", "")))


class VersionMemo(Generic[K, V]):
    """Per key, the value computed from the last version of the object seen (never None)."""

    def __init__(self) -> None:
        self._last: dict[K, tuple[ObjectVersion, V]] = {}

    def get(self, key: K, obj: Mapping[str, Any]) -> V | None:
        """The value remembered for this very version of `obj`, or None."""
        known = self._last.get(key)
        if known is not None and known[0] == object_version(obj):
            return known[1]
        return None

    def remember(self, key: K, obj: Mapping[str, Any], value: V) -> V:
        """Keep `value` as computed from this version of `obj` (replacing an older one)."""
        self._last[key] = (object_version(obj), value)
        return value

    def forget(self, key: K) -> None:
        self._last.pop(key, None)
