"""Field errors in the shape Kubernetes reports them (apimachinery's `field.Error`).

A `FieldError` prints as `spec.workerGroupSpecs[1].minReplicas: Invalid value: 5: must be less
than or equal to maxReplicas (3)`, and its `reason` is the StatusCause type the admission webhook
returns, so `kubectl apply` shows our messages exactly as it shows the API server's own.

Messages are bounded whatever the user wrote: a value is shown as at most `MAX_SHOWN_VALUE`
characters of its JSON (encoded lazily, so a value that shares one list a million times through
YAML aliases costs no more than a short one), a detail as at most `MAX_ERROR_LENGTH` (it may quote
the value), one error in a summary as at most `MAX_ERROR_LENGTH`, and `summarize` lists at most
`MAX_REPORTED_ERRORS`.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Sequence
from typing import Any

MAX_SHOWN_VALUE = 256
"""Characters of a value's JSON an error shows (then `...`)."""
MAX_ERROR_LENGTH = 1024
"""Characters of one error in a summary (then `...`)."""
MAX_REPORTED_ERRORS = 50
"""Errors one summary or one admission answer lists (then how many more there are)."""


class ErrorType(enum.Enum):
    """The kinds of field error Kubernetes knows; values are the StatusCause reasons."""

    INVALID = "FieldValueInvalid"
    REQUIRED = "FieldValueRequired"
    DUPLICATE = "FieldValueDuplicate"
    FORBIDDEN = "FieldValueForbidden"
    TOO_LONG = "FieldValueTooLong"
    NOT_SUPPORTED = "FieldValueNotSupported"


_OMITTED = object()


@dataclasses.dataclass(frozen=True)
class FieldError:
    """One violation: where (`field`, e.g. `spec.headGroupSpec.rayStartParams`), what, why."""

    type: ErrorType
    field: str
    value: Any = _OMITTED
    detail: str = ""

    @property
    def reason(self) -> str:
        return self.type.value

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    def body(self) -> str:
        """The message without the field path, as apimachinery's `ErrorBody`."""
        # A detail may quote what the user wrote (a zone name, a parser's complaint): cut too.
        detail = f": {_cut(self.detail, MAX_ERROR_LENGTH)}" if self.detail else ""
        match self.type:
            case ErrorType.INVALID:
                return f"Invalid value: {_show(self.value)}{detail}"
            case ErrorType.DUPLICATE:
                return f"Duplicate value: {_show(self.value)}"
            case ErrorType.NOT_SUPPORTED:
                return f"Unsupported value: {_show(self.value)}{detail}"
            case ErrorType.REQUIRED:
                return f"Required value{detail}"
            case ErrorType.FORBIDDEN:
                return f"Forbidden{detail}"
            case ErrorType.TOO_LONG:
                return f"Too long{detail}"


def _show(value: Any) -> str:
    if value is _OMITTED:
        return "<omitted>"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return _cut(json.dumps(value[: MAX_SHOWN_VALUE + 1]), MAX_SHOWN_VALUE)
    return _bounded_json(value)


_COMPACT_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def _bounded_json(value: Any) -> str:
    """The JSON of `value`, encoded piece by piece until `MAX_SHOWN_VALUE` characters."""
    pieces: list[str] = []
    length = 0
    try:
        for piece in _COMPACT_JSON.iterencode(value):
            pieces.append(piece)
            length += len(piece)
            if length > MAX_SHOWN_VALUE:
                break
    except (TypeError, ValueError):  # keys JSON cannot sort, a circular value
        return f"<{type(value).__name__}>"
    return _cut("".join(pieces), MAX_SHOWN_VALUE)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError(ErrorType.INVALID, field, value, detail)


def required(field: str, detail: str) -> FieldError:
    return FieldError(ErrorType.REQUIRED, field, detail=detail)


def duplicate(field: str, value: Any) -> FieldError:
    return FieldError(ErrorType.DUPLICATE, field, value)


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError(ErrorType.FORBIDDEN, field, detail=detail)


def too_long(field: str, value: Any, limit: int) -> FieldError:
    return FieldError(ErrorType.TOO_LONG, field, value, f"may not be more than {limit} bytes")


def not_supported(field: str, value: Any, supported: list[str]) -> FieldError:
    listing = ", ".join(json.dumps(item) for item in supported)
    return FieldError(ErrorType.NOT_SUPPORTED, field, value, f"supported values: {listing}")


def summarize(errors: Sequence[FieldError | str]) -> str:
    """The errors in one line, for an Event or a condition message: the first
    `MAX_REPORTED_ERRORS`, each cut at `MAX_ERROR_LENGTH`, then how many more there are."""
    listed = [_cut(str(error), MAX_ERROR_LENGTH) for error in errors[:MAX_REPORTED_ERRORS]]
    if len(errors) > MAX_REPORTED_ERRORS:
        listed.append(f"and {len(errors) - MAX_REPORTED_ERRORS} more errors")
    return "; ".join(listed)


_SHOWN_STRING_LENGTH = 80


def shown(value: Any) -> Any:
    """A value fit for a message: long strings are cut (a manifest may carry megabytes)."""
    if isinstance(value, str) and len(value) > _SHOWN_STRING_LENGTH:
        return value[:_SHOWN_STRING_LENGTH] + "..."
    return value
