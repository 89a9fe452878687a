"""Kubernetes status conditions, set as apimachinery's `SetStatusCondition` does.

Its own module, below every kind's status rules, so that any of them (and the PodsWaiting rules
that RayCluster, RayJob and RayService share) can set a condition without importing another
kind's rules and what those import.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

JSON = dict[str, Any]


def set_condition(
    conditions: list[JSON],
    kind: str,
    *,
    status: str,
    reason: str,
    message: str,
    now: datetime.datetime,
    generation: int,
) -> list[JSON]:
    """`conditions` with `kind` set; `lastTransitionTime` moves only when `status` changes
    (apimachinery's `SetStatusCondition`)."""
    result = [dict(c) for c in conditions if c.get("type") != kind]
    previous = next((c for c in conditions if c.get("type") == kind), None)
    moment = (
        previous.get("lastTransitionTime")
        if previous and previous.get("status") == status
        else None
    ) or now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    result.append(
        {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": moment,
            "observedGeneration": generation,
        }
    )
    return sorted(result, key=lambda c: str(c["type"]))


def condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    """Whether the object's status holds the condition `kind` with status "True"."""
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or ()
    )
