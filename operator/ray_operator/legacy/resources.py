"""Ray resources (legacy `rayResources`, or a `ray start --resources` JSON) as rayStartParams.

Ray's own resources have flags of their own (Ray's `--resources` refuses CPU and GPU); the others
go into `resources` in the form KubeRay's samples write and Ray's KubeRay autoscaler reads back
(`"{\\"name\\": 1}"`: JSON in double quotes, for the bash command KubeRay builds).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from ray_operator.legacy.findings import Findings, shorten, show

# Each of these flags takes an integer.
RESOURCE_FLAGS = {
    "CPU": "num-cpus",
    "GPU": "num-gpus",
    "memory": "memory",
    "object_store_memory": "object-store-memory",
}
# Ray resources are floats; a whole number beyond 2^53 would not survive the trip.
MAX_RESOURCE_AMOUNT = 2**53
# `resources` is written inside double quotes in a bash command; these would be expanded there.
_SHELL_ESCAPED = str.maketrans({"$": "\\$", "`": "\\`", '"': '\\"'})


def resource_params(
    resources: Mapping[Any, Any], *, path: str, findings: Findings
) -> dict[str, str]:
    """rayStartParams for `resources` (found at `path`); a bad name or amount is a problem."""
    params: dict[str, str] = {}
    custom: dict[str, int] = {}
    for name in sorted(resources, key=str):
        name_path = f"{path}.{shorten(str(name))}"
        amount = _resource_amount(resources[name], path=name_path, findings=findings)
        if amount is None:
            continue
        if name in RESOURCE_FLAGS:
            params[RESOURCE_FLAGS[name]] = str(amount)
        elif not _is_writable_resource_name(name):
            findings.problem(name_path, 'a resource name must be printable text without \\ or "')
        else:
            custom[name] = amount
    if custom:
        text = json.dumps(custom, ensure_ascii=False, sort_keys=True)
        params["resources"] = '"' + text.translate(_SHELL_ESCAPED) + '"'
    return params


def _is_writable_resource_name(name: object) -> bool:
    """Whether `name` survives KubeRay's form of `resources`: Ray's autoscaler reads it back by
    removing every backslash, so JSON escapes (of quotes, backslashes, control characters) must
    not be needed."""
    if not isinstance(name, str) or not name:
        return False
    return name.isprintable() and "\\" not in name and '"' not in name


def _resource_amount(value: Any, *, path: str, findings: Findings) -> int | None:
    """A whole, non-negative amount: `ray start` takes integers for its resource flags, and
    Ray's KubeRay autoscaler reads `resources` values as integers (kuberay/
    autoscaling_config.py, `_get_custom_resources`)."""
    number_like = isinstance(value, int | float) and not isinstance(value, bool)
    if not number_like or not math.isfinite(value) or value < 0:
        findings.problem(path, f"must be a non-negative number, got {show(value)}")
        return None
    if value > MAX_RESOURCE_AMOUNT:
        findings.problem(path, f"must be at most {MAX_RESOURCE_AMOUNT}, got {show(value)}")
        return None
    if value != int(value):
        findings.problem(path, f"must be a whole number, got {show(value)}")
        return None
    return int(value)
