"""The `DashboardReachable` condition of RayJobs and RayServices (pure).

A RayJob or RayService whose cluster's dashboard cannot be used gets `DashboardReachable=False`
with the cause as its reason (`DNSFailure`, `ConnectionRefused`, `Timeout`, `ServerError`,
`Unauthorized`, `ConnectionFailed`, `NoAddress`, see `spec/dashboard_errors.py`) and a message
naming the URL and the error; once the dashboard answers again it turns True. The condition is
absent until a dashboard first fails, so objects whose dashboards always answered look as in
KubeRay.

The condition is also the memory of what was reported: the controller tells the user (Warning
Event, a WARNING log line) only when `reported_cause` differs from the new cause, so a dashboard
that stays down costs one Event per cause, not one per poll — and that survives a restart.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ray_operator.status.conditions import set_condition

DASHBOARD_REACHABLE = "DashboardReachable"
ANSWERED = "DashboardAnswered"

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Reachability:
    """What one dashboard check found: `cause` None means it answered."""

    url: str
    cause: str | None
    detail: str = ""

    @property
    def message(self) -> str:
        where = f" at {self.url}" if self.url else ""  # no URL: no address to ask (NoAddress)
        if self.cause is None:
            return f"The Ray dashboard{where} answers."
        return f"The Ray dashboard{where} cannot be reached ({self.cause}): {self.detail}"


def reported_cause(status: Mapping[str, Any]) -> str | None:
    """The cause the condition in `status` reports; None when reachable or never checked."""
    for condition in status.get("conditions") or ():
        if condition.get("type") == DASHBOARD_REACHABLE and condition.get("status") == "False":
            return str(condition.get("reason") or "")
    return None


def has_condition(status: Mapping[str, Any]) -> bool:
    return any(c.get("type") == DASHBOARD_REACHABLE for c in status.get("conditions") or ())


def with_reachability(
    status: Mapping[str, Any], found: Reachability, *, now: datetime.datetime, generation: int
) -> JSON:
    """`status` with the condition for `found`; untouched when it answered and never failed."""
    new = dict(status)
    if found.cause is None and not has_condition(status):
        return new
    new["conditions"] = set_condition(
        list(status.get("conditions") or []),
        DASHBOARD_REACHABLE,
        status="True" if found.cause is None else "False",
        reason=found.cause or ANSWERED,
        message=found.message,
        now=now,
        generation=generation,
    )
    return new


def cause_changed(status: Mapping[str, Any], found: Reachability) -> bool:
    """Whether `found` is news: another cause than the one reported, or an answer after one."""
    if found.cause is None:
        return reported_cause(status) is not None
    return reported_cause(status) != found.cause
