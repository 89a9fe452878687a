"""A RayServeGraph's status, computed purely: its conditions, its phase, and whether to write it.

Four conditions (`spec.serve_graph_names`), each with `observedGeneration` and a message a user
can act on:
- `Fetched`: the last fetch (True `Fetched` for a new document, `NotModified` for a 304 or the same
  bytes again; False with the fetch's reason: `Unauthorized`, `SecretNotOptedIn`, `Timeout`, …);
- `Parsed`: the last document fetched (True `Parsed`; False `NotAServeGraph` / `InvalidGraph`
  naming the field path);
- `Deployed`: the RayService's readiness, mirrored (`deployed_condition`): True `RayServiceReady`
  only once the RayService is Ready, has acted on its current generation (so a changed
  `serveConfigV2` counts only once it was taken up), runs no cluster upgrade, and every Serve
  application it reports is RUNNING; otherwise False with the RayService's own Ready reason and
  message, or with ours (`NoRayService`, `RayServiceConflict`, `RayServiceUpdating`, …);
- `Ready`: True when the three are, so `kubectl wait --for=condition=Ready` works; otherwise False
  with the reason and message of the first one that is not (or `InvalidSpec`).

A failed fetch or a rejected document leaves everything else as it was: `artifact`, `graph`,
`revision` and `serveConfigDigest` describe the document that is deployed, not the last one seen.

`status_changed` ignores only `lastTransitionTime` (which `set_condition` keeps anyway while a
condition's status stays the same): an unchanged document — a 304, the same digest — therefore
computes the very same status and writes nothing.

Pure: no I/O. Messages are cut at `MAX_MESSAGE_LENGTH`; the RayService's are copied, never any
Secret's content.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ray_operator.spec.serve_graph_names import DEPLOYED, FETCHED, PARSED, READY
from ray_operator.status.conditions import set_condition

if TYPE_CHECKING:
    from ray_io.v1_views import RayService


Object = Mapping[str, Any]
JSON = dict[str, Any]

MAX_MESSAGE_LENGTH = 1024
"""Longest condition message (the CRD allows 32 KiB; a RayService's message is copied)."""
_NAMES_SHOWN = 3

# Phases (status.phase), for people; scripts read the conditions.
FETCHING = "Fetching"
INVALID = "Invalid"
DEPLOYING = "Deploying"
READY_PHASE = "Ready"
FAILED = "Failed"

# Reasons of our own (the fetch's and the parser's come with their errors).
FETCHED_REASON = "Fetched"
NOT_MODIFIED = "NotModified"
PARSED_REASON = "Parsed"
NOT_FETCHED = "NotFetched"
INVALID_SPEC = "InvalidSpec"
RAY_SERVICE_READY = "RayServiceReady"
NO_RAY_SERVICE = "NoRayService"
RAY_SERVICE_CONFLICT = "RayServiceConflict"
RAY_SERVICE_NOT_READY = "RayServiceNotReady"
RAY_SERVICE_UPDATING = "RayServiceUpdating"
UPGRADE_IN_PROGRESS = "UpgradeInProgress"
APPLICATIONS_NOT_RUNNING = "ServeApplicationsNotRunning"
GRAPH_READY = "GraphReady"


@dataclass(frozen=True, slots=True)
class ConditionState:
    """What one condition says (its time and generation are added by `compute_status`)."""

    status: str
    """"True", "False" or "Unknown"."""
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Deployment:
    """The document that is deployed, as the status reports it."""

    artifact: JSON
    """`status.artifact`: url, digest, etag (when the server sent one), fetchedAt, sizeBytes."""
    graph: JSON
    """`status.graph` (`validation.serve_graph.graph_summary`)."""
    serve_config_digest: str
    """sha256 of the `serveConfigV2` compiled from it."""


@dataclass(frozen=True, slots=True)
class Observed:
    """What one reconcile found; None fields leave the stored status as it was."""

    generation: int
    """`metadata.generation` of the RayServeGraph this reconcile read."""
    spec_problem: str | None = None
    """Why the spec is refused (then nothing was fetched or deployed)."""
    fetched: ConditionState | None = None
    """The outcome of a fetch made now (None: none was due)."""
    parsed: ConditionState | None = None
    """The outcome of parsing a new document (None: no new document)."""
    deployed: ConditionState | None = None
    """The RayService's readiness (None when the spec is refused: left as it was)."""
    deployment: Deployment | None = None
    """The document now deployed (None: the stored one stays)."""
    rayservice_name: str | None = None
    last_refresh_handled: str | None = None
    """The refresh annotation value acted on now (None: none)."""


def compute_status(old: Object, observed: Observed, *, now: datetime.datetime) -> JSON:
    """The new status: `old` updated with what was observed."""
    status: JSON = copy.deepcopy(dict(old))
    status["observedGeneration"] = observed.generation
    conditions: list[JSON] = list(status.get("conditions") or [])

    def mark(kind: str, state: ConditionState) -> None:
        nonlocal conditions
        conditions = with_condition(
            conditions, kind, state, now=now, generation=observed.generation
        )

    if observed.fetched is not None:
        mark(FETCHED, _keep_true(conditions, FETCHED, observed.fetched))
    if observed.parsed is not None:
        mark(PARSED, _keep_true(conditions, PARSED, observed.parsed))
    for kind in (FETCHED, PARSED):
        if _condition(conditions, kind) is None:
            mark(kind, ConditionState("Unknown", NOT_FETCHED, "no document fetched yet"))
    if observed.deployed is not None:
        mark(DEPLOYED, observed.deployed)
    elif _condition(conditions, DEPLOYED) is None:
        mark(DEPLOYED, ConditionState("False", NO_RAY_SERVICE, "nothing deployed yet"))
    mark(READY, ready_condition(conditions, spec_problem=observed.spec_problem))
    status["conditions"] = conditions
    _record_deployment(status, observed)
    status["phase"] = phase(conditions, spec_invalid=observed.spec_problem is not None)
    return status


def with_condition(
    conditions: list[JSON],
    kind: str,
    state: ConditionState,
    *,
    now: datetime.datetime,
    generation: int,
) -> list[JSON]:
    """`conditions` with `kind` set to `state` (its message cut at `MAX_MESSAGE_LENGTH`)."""
    return set_condition(
        conditions,
        kind,
        status=state.status,
        reason=state.reason,
        message=_short(state.message),
        now=now,
        generation=generation,
    )


def _keep_true(conditions: Sequence[Object], kind: str, state: ConditionState) -> ConditionState:
    """An unchanged document keeps a True condition as it is (reason and message): a 304
    must write nothing. It only turns a False one True (`NotModified`)."""
    current = _condition(conditions, kind)
    if state.reason == NOT_MODIFIED and current is not None and current.get("status") == "True":
        return ConditionState("True", str(current.get("reason")), str(current.get("message", "")))
    return state


def _record_deployment(status: JSON, observed: Observed) -> None:
    if observed.deployment is not None:
        deployment = observed.deployment
        status["artifact"] = copy.deepcopy(deployment.artifact)
        status["graph"] = copy.deepcopy(deployment.graph)
        status["serveConfigDigest"] = deployment.serve_config_digest
        status["revision"] = revision(str(deployment.artifact.get("digest") or ""))
    if observed.rayservice_name is not None:
        status["rayServiceName"] = observed.rayservice_name
    if observed.last_refresh_handled is not None:
        status["lastRefreshHandled"] = observed.last_refresh_handled


def revision(digest: str) -> str:
    """The printer column's short form of a `sha256:<hex>` digest: its first 12 hex digits."""
    return digest.partition(":")[2][:12]


def ready_condition(conditions: Sequence[Object], *, spec_problem: str | None) -> ConditionState:
    """Ready: True when Fetched, Parsed and Deployed are; else why not (the first that is not)."""
    if spec_problem is not None:
        return ConditionState("False", INVALID_SPEC, spec_problem)
    for kind in (FETCHED, PARSED, DEPLOYED):
        condition = _condition(conditions, kind)
        if condition is None or condition.get("status") != "True":
            reason = str((condition or {}).get("reason") or NOT_FETCHED)
            message = str((condition or {}).get("message") or "")
            return ConditionState("False", reason, f"{kind}: {message}")
    return ConditionState("True", GRAPH_READY, "the graph is fetched, parsed and serving")


def phase(conditions: Sequence[Object], *, spec_invalid: bool) -> str:
    """status.phase, from the conditions (in this order: Invalid, Failed, Fetching, Deploying)."""
    fetched = _status_of(conditions, FETCHED)
    parsed = _status_of(conditions, PARSED)
    if spec_invalid:
        return INVALID
    if fetched == "False":
        return FAILED
    if parsed == "False":
        return INVALID
    if fetched != "True" or parsed != "True":
        return FETCHING
    if _status_of(conditions, DEPLOYED) != "True":
        return DEPLOYING
    return READY_PHASE


def deployed_condition(rayservice: RayService | None, *, name: str, owned: bool) -> ConditionState:
    """Deployed, mirrored from the RayService named `name` (None: there is none). Pass the
    API server's answer to a write just made, not the cache's older copy: a RayService whose
    `serveConfigV2` just changed must not look deployed for one more reconcile."""
    if rayservice is None:
        return ConditionState("False", NO_RAY_SERVICE, f"the RayService {name} does not exist yet")
    if not owned:
        return ConditionState(
            "False",
            RAY_SERVICE_CONFLICT,
            f"a RayService named {name} exists and is not owned by this RayServeGraph: "
            "delete it or choose another spec.serviceName",
        )
    if rayservice["metadata"].get("deletionTimestamp"):
        return ConditionState("False", RAY_SERVICE_NOT_READY, f"the RayService {name} is deleted")
    status = rayservice.get("status") or {}
    ready = _condition(status.get("conditions") or (), READY)
    if ready is None or ready.get("status") != "True":
        reason = str((ready or {}).get("reason") or RAY_SERVICE_NOT_READY)
        message = str((ready or {}).get("message") or "not ready yet")
        return ConditionState("False", reason, f"RayService {name}: {message}")
    generation = int(rayservice["metadata"].get("generation") or 0)
    if int(status.get("observedGeneration") or 0) < generation:
        return ConditionState(
            "False", RAY_SERVICE_UPDATING, f"RayService {name} has not taken up its new spec yet"
        )
    upgrade = _condition(status.get("conditions") or (), UPGRADE_IN_PROGRESS)
    if upgrade is not None and upgrade.get("status") == "True":
        return ConditionState(
            "False", UPGRADE_IN_PROGRESS, f"RayService {name} is moving to a new RayCluster"
        )
    waiting = _applications_not_running(status)
    if waiting:
        return ConditionState(
            "False",
            APPLICATIONS_NOT_RUNNING,
            f"RayService {name}: Serve applications not running yet: {waiting}",
        )
    return ConditionState("True", RAY_SERVICE_READY, f"RayService {name} is ready")


def _applications_not_running(status: Object) -> str:
    """`name (STATUS)` of the active cluster's applications that are not RUNNING, a few shown."""
    apps = (status.get("activeServiceStatus") or {}).get("applicationStatuses") or {}
    if not isinstance(apps, Mapping):
        return ""
    waiting = sorted(
        f"{app} ({(details or {}).get('status')})"
        for app, details in apps.items()
        if (details or {}).get("status") != "RUNNING"
    )
    shown = ", ".join(waiting[:_NAMES_SHOWN])
    return shown + (
        f" and {len(waiting) - _NAMES_SHOWN} more" if len(waiting) > _NAMES_SHOWN else ""
    )


def status_changed(old: Object, new: Object) -> bool:
    """Whether to write: anything but the conditions' `lastTransitionTime`."""
    return _comparable(old) != _comparable(new)


def condition(status: Object, kind: str) -> Object | None:
    """The condition of type `kind` in a status, if any."""
    return _condition(status.get("conditions") or (), kind)


def _comparable(status: Object) -> JSON:
    result = copy.deepcopy(dict(status))
    result["conditions"] = sorted(
        (
            {key: value for key, value in c.items() if key != "lastTransitionTime"}
            for c in result.get("conditions") or ()
        ),
        key=lambda c: str(c.get("type")),
    )
    return result


def _condition(conditions: Sequence[Object], kind: str) -> Object | None:
    return next((c for c in conditions if c.get("type") == kind), None)


def _status_of(conditions: Sequence[Object], kind: str) -> str | None:
    found = _condition(conditions, kind)
    return None if found is None else str(found.get("status"))


def _short(message: str) -> str:
    if len(message) <= MAX_MESSAGE_LENGTH:
        return message
    return message[: MAX_MESSAGE_LENGTH - 1] + "…"


__all__ = [
    "ConditionState",
    "Deployment",
    "Observed",
    "compute_status",
    "condition",
    "deployed_condition",
    "phase",
    "ready_condition",
    "revision",
    "status_changed",
    "with_condition",
]
