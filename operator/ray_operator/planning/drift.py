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
  a Service's ports are paired by name, in any order;
- fields the API server allocates or that are immutable (`clusterIP`, a RoleBinding's `roleRef`)
  are never compared: a patch could not change them anyway;
- an empty value we did not really choose (`""`, `{}`, `[]`, null) is not compared either.

Only `metadata.labels` of the metadata is compared; ownerReferences, annotations and status are
left alone. Labels, so that taking over what KubeRay made writes nothing (issue 13):
- `app.kubernetes.io/created-by` is never compared: it names whichever operator made the object
  (`kuberay-operator` after a takeover) or is missing (KubeRay puts none on some Services), and
  nothing selects by our value of it;
- on an object another operator made (its `created-by` is not ours) a label we set is restored
  only when its value changed, never added — unless the cache finds Services by it
  (`ray.io/node-type`, `ray.io/serve`, `ray.io/headless-worker-svc`): KubeRay's headless worker
  Service carries `ray.io/headless-worker-svc` alone, and is found by that label and its
  ownerReferences, so our `ray.io/cluster` is not added to it.
A head Service's selector stays exact: KubeRay's also requires `created-by=kuberay-operator`,
which ours omits, so taking over KubeRay's head Service removes that key (one patch; the same
head Pod stays selected) — else a head Pod we create later would not be selected.

Pure: no I/O. The work is O(size of the object we built) — bounded by the API server's object
size limit, not by anything larger.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from ray_operator.spec.kuberay_names import (
    CREATED_BY,
    CREATED_BY_LABEL,
    HEADLESS_WORKER_SERVICE_LABEL,
    NODE_TYPE_LABEL,
    SERVE_LABEL,
)

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
_FOUND_BY: Final = frozenset({NODE_TYPE_LABEL, SERVE_LABEL, HEADLESS_WORKER_SERVICE_LABEL})
"""Labels the cache finds Services by (`spec/kinds.py: SERVICE_SELECTORS`): restored even on
another operator's object, or it would fall out of the cache (a create answering 409 on every
reconcile)."""
_MATCHED_BY_NAME: Final = frozenset({("spec", "ports")})
"""Lists whose order means nothing: elements are paired by `name` (a Service's ports: KubeRay
appends the default ports of a user's `headService` in its own order, we sort them)."""


def repair_patch(desired: Mapping[str, Any], actual: Mapping[str, Any]) -> dict[str, Any] | None:
    """A JSON merge patch that brings `actual`'s fields we set back to `desired`; None: no drift."""
    kind = str(desired.get("kind", ""))
    exact = _EXACT_MAPS.get(kind, frozenset())
    ignored = _IGNORED.get(kind, frozenset())
    patch: dict[str, Any] = {}
    actual_labels = (actual.get("metadata") or {}).get("labels") or {}
    labels = _compared_labels((desired.get("metadata") or {}).get("labels") or {}, actual_labels)
    drifted_labels = _diff(labels, actual_labels, (), exact, ignored)
    if drifted_labels is not None:
        patch["metadata"] = {"labels": drifted_labels}
    for field, value in desired.items():
        if field in _NOT_COMPARED:
            continue
        drifted = _diff(value, actual.get(field), (field,), exact, ignored)
        if drifted is not None:
            patch[field] = drifted
    return patch or None


def selector_patch(desired: Mapping[str, Any], actual: Mapping[str, Any]) -> dict[str, Any] | None:
    """A merge patch that makes `actual`'s Service selector exactly `desired`'s; None: equal.

    For the Services a RayJob or RayService points at its cluster: switching clusters, or taking
    over KubeRay's (whose selector also requires `created-by=kuberay-operator`, which a head Pod
    we create lacks), must drop the keys we do not select by — a merge patch only adds keys unless
    a removed one is set to null.
    """
    wanted = (desired.get("spec") or {}).get("selector") or {}
    current = (actual.get("spec") or {}).get("selector") or {}
    if wanted == current:
        return None
    selector: dict[str, Any] = {key: None for key in current if key not in wanted}
    selector.update({key: value for key, value in wanted.items() if current.get(key) != value})
    return {"spec": {"selector": selector}}


def _compared_labels(desired: Mapping[str, str], actual: Mapping[str, str]) -> dict[str, str]:
    """The labels of `desired` to hold `actual` to (see the module docstring)."""
    made_by_us = actual.get(CREATED_BY_LABEL) == CREATED_BY
    return {
        key: value
        for key, value in desired.items()
        if key != CREATED_BY_LABEL and (made_by_us or key in actual or key in _FOUND_BY)
    }


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
    if path in _MATCHED_BY_NAME:
        actual = _in_order_of(desired, actual)
    return all(
        _diff(wanted, found, element, exact, ignored) is None
        for wanted, found in zip(desired, actual, strict=True)
    )


def _in_order_of(desired: Sequence[Any], actual: list[Any]) -> list[Any]:
    """`actual`'s elements reordered to pair with `desired`'s by name (unmatched: None)."""
    by_name = {item.get("name"): item for item in actual if isinstance(item, Mapping)}
    return [
        by_name.get(wanted.get("name")) if isinstance(wanted, Mapping) else None
        for wanted in desired
    ]


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | Mapping | list) and not value)


def owner_description(obj: Mapping[str, Any]) -> str:
    """Who owns `obj`, for a message: its controller (or first) ownerReference, or nobody."""
    references = (obj.get("metadata") or {}).get("ownerReferences") or []
    if not references:
        return "is not owned by any object"
    owner = next((r for r in references if r.get("controller")), references[0])
    return f"belongs to {owner.get('kind')} {owner.get('name')} (uid {owner.get('uid')})"
