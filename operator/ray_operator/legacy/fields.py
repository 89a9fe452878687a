"""Typed reads of legacy fields: each returns the value when it has the type the legacy CRD gives
it, or records a problem naming the field and returns None.

A legacy object may come from a file rather than from the API server, so nothing in it is
trusted to match the legacy schema; numbers are also bounded by what ray.io/v1 can hold.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ray_operator.legacy.findings import Findings, show

# ray.io/v1's replica counts and idleTimeoutSeconds are int32 (our CRD refuses more).
MAX_INT32 = 2**31 - 1


def read_count(
    container: Mapping[str, Any], key: str, *, path: str, findings: Findings
) -> int | None:
    """A non-negative integer of at most 2^31-1, or None when absent or bad."""
    value = container.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        findings.problem(path, f"must be a non-negative integer, got {show(value)}")
        return None
    if value > MAX_INT32:
        findings.problem(path, f"must be at most {MAX_INT32}, got {show(value)}")
        return None
    return value


def read_number(
    container: Mapping[str, Any], key: str, *, path: str, findings: Findings
) -> float | None:
    """A finite non-negative number, or None when absent or bad."""
    value = container.get(key)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        findings.problem(path, f"must be a non-negative number, got {show(value)}")
        return None
    return float(value)


def read_string(
    container: Mapping[str, Any], key: str, *, path: str, findings: Findings
) -> str | None:
    """A non-empty string, or None when absent or bad."""
    value = container.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        findings.problem(path, f"must be a non-empty string, got {show(value)}")
        return None
    return value


def read_strings(
    container: Mapping[str, Any], key: str, *, path: str, findings: Findings
) -> list[str]:
    """A list of strings (empty when absent); a bad entry is a problem and left out."""
    value = container.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        findings.problem(path, f"must be a list of strings, got {show(value)}")
        return []
    strings = []
    for index, item in enumerate(value):
        if isinstance(item, str):
            strings.append(item)
        else:
            findings.problem(f"{path}[{index}]", f"must be a string, got {show(item)}")
    return strings


def read_mapping(
    container: Mapping[str, Any], key: str, *, path: str, findings: Findings
) -> Mapping[str, Any] | None:
    """An object, or None when absent or bad."""
    value = container.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        findings.problem(path, f"must be an object, got {show(value)}")
        return None
    return value


def read_list(
    container: Mapping[str, Any], key: str, *, path: str, findings: Findings
) -> Sequence[Any] | None:
    """A list, or None when absent or bad."""
    value = container.get(key)
    if value is None:
        return None
    if not isinstance(value, list):
        findings.problem(path, f"must be a list, got {show(value)}")
        return None
    return value


def warn_unknown_fields(
    container: Mapping[str, Any], known: frozenset[str], *, path: str, findings: Findings
) -> None:
    """A warning per field the legacy schema does not have (the API server would have pruned
    it; a file may still carry it)."""
    for key in container:
        if key not in known:
            findings.warn(f"{path}.{key}", "dropped: not a field of the legacy RayCluster")
