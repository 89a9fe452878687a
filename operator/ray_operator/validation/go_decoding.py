"""Specs that KubeRay's Go types cannot decode, as invalid specs with the field that breaks them.

The CRD schema admits a little that apimachinery refuses when it decodes the typed object: a
quantity such as `1e99999999999999999999` matches the CRD's Quantity pattern, but its exponent
overflows `ParseQuantity`. KubeRay cannot read such an object at all, and its hash annotations
(which we must reproduce value for value) cannot exist, so `spec.hashing` raises
`GoDecodeError`. With the webhook on, such a spec may still arrive (an object written before the
webhook was, or with it off); the controllers then report it here, as every invalid spec: a Warning
Event and a condition, never a crash loop.

Cost: one `go_json` pass over the spec, O(its size), bounded by etcd's object limit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ray_operator.spec.go_json import GoDecodeError
from ray_operator.spec.hashing import pod_template_hash
from ray_operator.validation.errors import FieldError, invalid, shown

# `field`, `.field`, `[index]` or `[key]`: the steps of a `GoDecodeError.path`.
_STEP = re.compile(r"\.?([^.\[\]]+)|\[([^\]]*)\]")
_UNDECODABLE = "KubeRay's Go types cannot decode it"
_NOT_FOUND = object()


def raycluster_go_decode_errors(cluster: Mapping[str, Any]) -> list[FieldError]:
    """The field of a RayCluster's spec that Go cannot decode (empty when it decodes)."""
    try:
        pod_template_hash(cluster)
    except GoDecodeError as error:
        return [_field_error(error, cluster.get("spec") or {}, prefix="spec")]
    return []


def _field_error(error: GoDecodeError, root: Any, *, prefix: str) -> FieldError:
    field = f"{prefix}.{error.path}" if error.path else prefix
    value = _value_at(root, error.path)
    detail = f"{error.reason}: {_UNDECODABLE}"
    if value is _NOT_FOUND:
        return invalid(field, "<unreadable>", detail)
    return invalid(field, shown(value), detail)


def _value_at(root: Any, path: str) -> Any:
    """The value `path` names inside `root` (`_NOT_FOUND` when the path does not lead to one)."""
    value = root
    for match in _STEP.finditer(path):
        name, index = match.groups()
        step = name if name is not None else index
        if isinstance(value, Mapping) and step in value:
            value = value[step]
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            return _NOT_FOUND
    return value
