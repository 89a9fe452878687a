"""Drift of an owned object from what we built: the merge patch that repairs it, or nothing.

Someone may `kubectl edit` the head Service (its selector, ports, type) or the autoscaler's Role;
the reconciler compares the fields *we set* with the cached object and patches only those that
differ. The comparison is a subset test, because the API server defaults fields we never set
(`clusterIP`, `sessionAffinity`, `ipFamilies`, a port's `protocol` and `targetPort`, ...) and users
may add labels: neither is drift, so a converged object costs no request. Exceptions:
- maps listed as exact (a Service's `selector`) must equal ours: an added key changes what the
  Service selects, so extra keys are removed (`null` in the merge patch);
- lists must have our length and match element by element (a JSON merge patch can only replace
  a list whole; the API server keeps allocated node ports of a Service's ports on that update);
- fields the API server allocates or that are immutable (`clusterIP`, a RoleBinding's `roleRef`)
  are never compared: a patch could not change them anyway;
- an empty value we did not really choose (`""`, `{}`, `[]`, null) is not compared either.

Only `metadata.labels` of the metadata is compared; ownerReferences, annotations and status are
left alone. Pure: no I/O. The work is O(size of the object we built) — bounded by the API
server's object size limit, not by anything larger.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

Path = tuple[str, ...]
"""A field path; `[]` stands for every element of a list."""

_EXACT_MAPS: Final[Mapping[str, frozenset[Path]]] = {
    "Service": frozenset({("spec", "selector")}),
}
_IGNORED: Final[Mapping[str, frozenset[Path]]] = {
    "Service": frozenset(
        {
            ("spec", "clusterIP"),
            ("spec", "clusterIPs"),
            ("spec", "ipFamilies"),
            ("spec", "healthCheckNodePort"),
        }
    ),
    "RoleBinding": frozenset({("roleRef",)}),
}
_NOT_COMPARED: Final = frozenset({"apiVersion", "kind", "metadata", "status"})


def repair_patch(desired: Mapping[str, Any], actual: Mapping[str, Any]) -> dict[str, Any] | None:
    """A JSON merge patch that brings `actual`'s fields we set back to `desired`; None: no drift."""
    kind = str(desired.get("kind", ""))
    exact = _EXACT_MAPS.get(kind, frozenset())
    ignored = _IGNORED.get(kind, frozenset())
    patch: dict[str, Any] = {}
    labels = (desired.get("metadata") or {}).get("labels") or {}
    drifted_labels = _diff(labels, (actual.get("metadata") or {}).get("labels"), (), exact, ignored)
    if drifted_labels is not None:
        patch["metadata"] = {"labels": drifted_labels}
    for field, value in desired.items():
        if field in _NOT_COMPARED:
            continue
        drifted = _diff(value, actual.get(field), (field,), exact, ignored)
        if drifted is not None:
            patch[field] = drifted
    return patch or None


def _diff(
    desired: Any, actual: Any, path: Path, exact: frozenset[Path], ignored: frozenset[Path]
) -> Any:
    """What to write at `path` (the merge-patch value), or None when `actual` agrees."""
    if path in ignored or _is_empty(desired):
        return None
    if isinstance(desired, Mapping):
        if not isinstance(actual, Mapping):
            return dict(desired)
        if path in exact:
            if dict(desired) == dict(actual):
                return None
            return {**{key: None for key in actual if key not in desired}, **desired}
        changes = {
            key: change
            for key, value in desired.items()
            if (change := _diff(value, actual.get(key), (*path, key), exact, ignored)) is not None
        }
        return changes or None
    if isinstance(desired, list):
        return None if _list_agrees(desired, actual, path, exact, ignored) else list(desired)
    return None if desired == actual else desired


def _list_agrees(
    desired: Sequence[Any],
    actual: Any,
    path: Path,
    exact: frozenset[Path],
    ignored: frozenset[Path],
) -> bool:
    if not isinstance(actual, list) or len(actual) != len(desired):
        return False
    element = (*path, "[]")
    return all(
        _diff(wanted, found, element, exact, ignored) is None
        for wanted, found in zip(desired, actual, strict=True)
    )


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | Mapping | list) and not value)


def owner_description(obj: Mapping[str, Any]) -> str:
    """Who owns `obj`, for a message: its controller (or first) ownerReference, or nobody."""
    references = (obj.get("metadata") or {}).get("ownerReferences") or []
    if not references:
        return "is not owned by any object"
    owner = next((r for r in references if r.get("controller")), references[0])
    return f"belongs to {owner.get('kind')} {owner.get('name')} (uid {owner.get('uid')})"
