"""AdmissionReview v1 in, AdmissionReview v1 out: the webhooks' logic, without HTTP.

`validate_review` and `mutate_review` answer one parsed review for one kind (`ADMISSION_KINDS`):

- CREATE/UPDATE only; anything else (DELETE, CONNECT) is allowed untouched.
- An UPDATE whose old object already has a deletionTimestamp is always allowed: the update is
  most likely a finalizer being removed, and no rule may leave an object stuck in Terminating.
- The object is parsed with the generated model; if it does not even parse, the validating
  webhook denies with each pydantic error as a field error (the mutating webhook then leaves the
  object alone, so one message comes from one place).
- Validation is the same code the controllers run (`ray_operator.validation`), plus the UPDATE
  rules (`immutable`). Every violation is reported in one 422 `Status`, Kubernetes style:
  `RayCluster.ray.io "c" is invalid: [spec.a: Invalid value: 1: …, spec.b: Required value: …]`,
  with one `cause` per violation.
- Defaulting is `ray_operator.defaults`, returned as a JSONPatch against the object as received.
- The generated models (and pydantic) are imported by the first review that needs one, not when
  the operator starts: they are ~12 MiB of a 50 MiB idle budget, and a replica that only
  reconciles (or whose webhooks another replica serves) never needs them.

No exception escapes: an unexpected one becomes a denial naming the error type (and a log line
with the traceback, never the object: it may hold secrets in env values).
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from ray_operator.defaults import default_raycluster, default_rayjob, default_rayservice
from ray_operator.features import RAY_CRON_JOB
from ray_operator.spec.raycluster import JSON, ClusterLike, as_manifest
from ray_operator.spec.serve_graph_names import SERVE_GRAPH_GROUP, SERVE_GRAPH_VERSION
from ray_operator.validation import FieldError, raycluster_warnings, validate_raycluster
from ray_operator.validation.errors import MAX_REPORTED_ERRORS, ErrorType, shown
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.raycluster import read_only_manifest
from ray_operator.validation.raycronjob import validate_raycronjob
from ray_operator.validation.rayjob import (
    rayjob_immutable_errors,
    rayjob_warnings,
    validate_rayjob,
)
from ray_operator.validation.rayservegraph import rayservegraph_errors
from ray_operator.validation.rayservice import validate_rayservice
from ray_operator.webhooks.jsonpatch import json_patch

if TYPE_CHECKING:
    import pydantic

logger = logging.getLogger(__name__)

ADMISSION_API_VERSION = "admission.k8s.io/v1"
GROUP = "ray.io"
VERSION = "v1"
_MAX_CAUSES = MAX_REPORTED_ERRORS  # a pathological spec must not produce a megabyte of causes


class Validator(Protocol):
    """Semantic validation of one kind, within the operator's `ClusterLimits`."""

    def __call__(self, obj: ClusterLike, /, *, limits: ClusterLimits = ...) -> list[FieldError]:
        """Every violation; empty when valid."""
        ...


class MalformedReviewError(ValueError):
    """The request body is not an AdmissionReview v1 that can be answered (HTTP 400)."""


@dataclasses.dataclass(frozen=True)
class AdmissionKind:
    """What the webhooks do for one kind: parse, validate, check updates, warn, default."""

    kind: str
    """The `kind`, e.g. `RayCluster`."""
    plural: str
    """The resource, e.g. `rayclusters`."""
    model: Callable[[], type[pydantic.BaseModel]]
    """The generated model the object must parse into, imported on first call."""
    validate: Validator
    """Semantic validation, shared with the controller."""
    immutable: Callable[[ClusterLike, ClusterLike], list[FieldError]]
    """Changes an UPDATE (new, old) may not make."""
    warnings: Callable[[ClusterLike], list[str]]
    """Legal but surprising settings, shown by kubectl as warnings."""
    default: Callable[[ClusterLike], JSON]
    """The defaulted copy of an object."""
    group: str = GROUP
    """Its API group: `ray.io` (KubeRay's kinds) or `ray-operator.io` (RayServeGraph)."""
    version: str = VERSION
    """Its API version, e.g. `v1`."""
    gate: str | None = None
    """The feature gate (`features.GATES`) without which the kind is refused; None: always on."""

    @property
    def singular(self) -> str:
        return self.kind.lower()


@dataclasses.dataclass(frozen=True)
class GeneratedModel:
    """A generated model class, named and imported on first call (picklable, for the workers)."""

    module: str
    name: str

    def __call__(self) -> type[pydantic.BaseModel]:
        model = getattr(importlib.import_module(self.module), self.name)
        return cast("type[pydantic.BaseModel]", model)


def _nothing_immutable(new: ClusterLike, old: ClusterLike) -> list[FieldError]:
    # The CRD's own CEL rules already guard managedBy and the GCS FT backend.
    return []


def _no_warnings(obj: ClusterLike) -> list[str]:
    return []


def _validate_rayservegraph(
    obj: ClusterLike, /, *, limits: ClusterLimits = DEFAULT_LIMITS
) -> list[FieldError]:
    return rayservegraph_errors(read_only_manifest(obj), limits=limits)


ADMISSION_KINDS: tuple[AdmissionKind, ...] = (
    AdmissionKind(
        "RayCluster",
        "rayclusters",
        GeneratedModel("ray_io.v1", "RayCluster"),
        validate=validate_raycluster,
        immutable=_nothing_immutable,
        warnings=raycluster_warnings,
        default=default_raycluster,
    ),
    AdmissionKind(
        "RayJob",
        "rayjobs",
        GeneratedModel("ray_io.v1", "RayJob"),
        validate=validate_rayjob,
        immutable=rayjob_immutable_errors,
        warnings=rayjob_warnings,
        default=default_rayjob,
    ),
    AdmissionKind(
        "RayService",
        "rayservices",
        GeneratedModel("ray_io.v1", "RayService"),
        validate=validate_rayservice,
        immutable=_nothing_immutable,
        warnings=_no_warnings,
        default=default_rayservice,
    ),
    # Defaulted by its CRD schema alone: each RayJob it creates gets the RayJob defaults then.
    AdmissionKind(
        "RayCronJob",
        "raycronjobs",
        GeneratedModel("ray_io.v1", "RayCronJob"),
        validate=validate_raycronjob,
        immutable=_nothing_immutable,
        warnings=_no_warnings,
        default=as_manifest,
        gate=RAY_CRON_JOB,
    ),
    # Our own kind: defaulted by its CRD schema alone (the RayService it becomes gets the
    # RayService defaults), so its mutating webhook only ever allows.
    AdmissionKind(
        "RayServeGraph",
        "rayservegraphs",
        GeneratedModel("ray_operator_io.v1alpha1.models", "RayServeGraph"),
        validate=_validate_rayservegraph,
        immutable=_nothing_immutable,
        warnings=_no_warnings,
        default=as_manifest,
        group=SERVE_GRAPH_GROUP,
        version=SERVE_GRAPH_VERSION,
    ),
)


def parse_review(body: bytes) -> JSON:
    """The AdmissionReview in `body`; `MalformedReviewError` when it is not one we can answer."""
    try:
        review = json.loads(body)
    except (ValueError, RecursionError) as error:
        raise MalformedReviewError(f"the body is not JSON: {type(error).__name__}") from None
    if not isinstance(review, dict):
        raise MalformedReviewError("the body is not a JSON object")
    if review.get("apiVersion") != ADMISSION_API_VERSION or review.get("kind") != "AdmissionReview":
        raise MalformedReviewError(f"expected an AdmissionReview of {ADMISSION_API_VERSION}")
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise MalformedReviewError("the AdmissionReview has no request with a uid")
    return review


def validate_review(
    review: JSON, kind: AdmissionKind, *, limits: ClusterLimits = DEFAULT_LIMITS
) -> JSON:
    """The validating webhook's answer to a parsed AdmissionReview."""
    request = review["request"]
    try:
        return _answer(request, _validate(request, kind, limits=limits))
    except Exception as error:  # a webhook must answer, never fail with a 500
        logger.exception("validating %s %s failed", kind.kind, _describe(request))
        return _answer(request, _deny_internal(error))


def refuse_gated_review(review: JSON, kind: AdmissionKind) -> JSON:
    """The validating answer for a kind whose feature gate is off: CREATE and UPDATE are denied
    with the flag that turns it on; anything else (a DELETE, a finalizer removal) is allowed."""
    request = review["request"]
    skip = _skip(request, kind)
    if skip is not None:
        return _answer(request, skip)
    message = (
        f'{kind.kind}.{kind.group} "{_object_name(request)}" is refused: the {kind.gate} feature '
        f"gate is off in this operator (--feature-gates={kind.gate}=true turns it on)"
    )
    return _answer(request, _deny(403, "Forbidden", message))


def mutate_review(review: JSON, kind: AdmissionKind) -> JSON:
    """The mutating webhook's answer: allowed, with a JSONPatch when defaults were added."""
    request = review["request"]
    try:
        return _answer(request, _mutate(request, kind))
    except Exception as error:  # a webhook must answer, never fail with a 500
        logger.exception("defaulting %s %s failed", kind.kind, _describe(request))
        return _answer(request, _deny_internal(error))


def _validate(request: JSON, kind: AdmissionKind, *, limits: ClusterLimits) -> JSON:
    skip = _skip(request, kind)
    if skip is not None:
        return skip
    obj = request["object"]
    name = _object_name(request)
    from pydantic import ValidationError  # loaded with the models, by the first review

    try:
        model = kind.model().model_validate(obj)
    except ValidationError as error:
        return _deny_invalid(kind, name, _schema_errors(error))
    manifest = model.model_dump(by_alias=True, exclude_none=True)
    errors = kind.validate(manifest, limits=limits)
    if request.get("operation") == "UPDATE" and isinstance(request.get("oldObject"), dict):
        errors += kind.immutable(manifest, request["oldObject"])
    if errors:
        return _deny_invalid(kind, name, errors)
    allowed: JSON = {"allowed": True}
    warnings = kind.warnings(manifest)
    if warnings:
        allowed["warnings"] = warnings
    return allowed


def _mutate(request: JSON, kind: AdmissionKind) -> JSON:
    if _skip(request, kind) is not None:
        return {"allowed": True}
    obj = request["object"]
    from pydantic import ValidationError

    try:
        kind.model().model_validate(obj)
    except ValidationError:
        return {"allowed": True}  # the validating webhook denies it, with the reasons
    patch = json_patch(obj, kind.default(obj))
    if not patch:
        return {"allowed": True}
    encoded = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
    return {"allowed": True, "patchType": "JSONPatch", "patch": encoded}


def _skip(request: JSON, kind: AdmissionKind) -> JSON | None:
    """An answer that needs no look at the object, or None when it must be examined."""
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE"):
        return {"allowed": True}
    old = request.get("oldObject")
    being_deleted = isinstance(old, dict) and (old.get("metadata") or {}).get("deletionTimestamp")
    if operation == "UPDATE" and being_deleted:
        return {"allowed": True}
    requested = request.get("kind") or {}
    if not isinstance(requested, dict) or requested.get("kind") != kind.kind:
        found = requested.get("kind") if isinstance(requested, dict) else requested
        return _deny(400, "BadRequest", f"this webhook admits {kind.kind}, not {shown(found)!r}")
    if not isinstance(request.get("object"), dict):
        return _deny(400, "BadRequest", f"the request carries no {kind.kind} object")
    return None


def _schema_errors(error: pydantic.ValidationError) -> list[FieldError]:
    errors = []
    for detail in error.errors(include_url=False)[:_MAX_CAUSES]:
        field = _field_path(detail.get("loc", ()))
        value = detail.get("input")
        message = str(detail.get("msg", "invalid"))
        if detail.get("type") == "missing":
            errors.append(FieldError(ErrorType.REQUIRED, field, detail=message))
        else:
            errors.append(FieldError(ErrorType.INVALID, field, _json_safe(value), message))
    return errors


def _field_path(location: tuple[int | str, ...] | Any) -> str:
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "<root>"


def _json_safe(value: Any) -> Any:
    """A short, printable form of an offending value (may be a huge map or string)."""
    if isinstance(value, str | int | float | bool) or value is None:
        return shown(value)
    if isinstance(value, list):
        return f"<list of {len(value)}>"
    if isinstance(value, dict):
        return f"<object with {len(value)} fields>"
    return shown(repr(value))


def _deny_invalid(kind: AdmissionKind, name: str, errors: list[FieldError]) -> JSON:
    listed = [str(error) for error in errors[:_MAX_CAUSES]]
    if len(errors) > _MAX_CAUSES:
        listed.append(f"and {len(errors) - _MAX_CAUSES} more errors")
    summary = listed[0] if len(listed) == 1 else "[" + ", ".join(listed) + "]"
    denial = _deny(422, "Invalid", f'{kind.kind}.{kind.group} "{name}" is invalid: {summary}')
    denial["status"]["details"] = {
        "name": name,
        "group": kind.group,
        "kind": kind.kind,
        "causes": [
            {"reason": error.reason, "message": error.body(), "field": error.field}
            for error in errors[:_MAX_CAUSES]
        ],
    }
    return denial


def _deny_internal(error: Exception) -> JSON:
    return _deny(500, "InternalError", f"the webhook failed: {type(error).__name__}")


def _deny(code: int, reason: str, message: str) -> JSON:
    status = {"status": "Failure", "code": code, "reason": reason, "message": message}
    return {"allowed": False, "status": status}


def _answer(request: Mapping[str, Any], response: JSON) -> JSON:
    return {
        "apiVersion": ADMISSION_API_VERSION,
        "kind": "AdmissionReview",
        "response": {"uid": request["uid"], **response},
    }


def _object_name(request: JSON) -> str:
    metadata = request["object"].get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    return str(shown(name if isinstance(name, str) and name else request.get("name") or ""))


def _describe(request: JSON) -> str:
    return f"{shown(request.get('namespace'))}/{shown(request.get('name'))} ({request.get('uid')})"
