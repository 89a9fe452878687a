"""The operator's own exception types for talking to the API server; mapped once, in `client.py`.

Reconcilers catch these (never kubernetes-asyncio's `ApiException`, never aiohttp's errors) and
mostly let them propagate: only the worker loop decides on requeue and backoff.

    KubeError                       anything that went wrong talking to the API server
    ├── ApiError                    the server answered with a failure `Status` (.status, .reason)
    │   ├── BadRequest              400
    │   ├── Unauthorized            401
    │   ├── Forbidden               403
    │   │   └── NamespaceTerminating  403 with the `NamespaceTerminating` cause: a create in a
    │   │                               namespace being deleted (never allowed again there)
    │   ├── NotFound                404
    │   ├── Conflict                409 (stale resourceVersion: re-read from the cache and retry)
    │   │   └── AlreadyExists       409, reason AlreadyExists (create of an existing name)
    │   ├── Gone                    410 (watch/list resourceVersion too old: relist)
    │   ├── Invalid                 422 (the object failed validation; .causes name the fields)
    │   ├── TooManyRequests         429
    │   └── ServerError             5xx
    │       └── ServerTimeout       504
    ├── TransportError              no answer: connection refused/reset, timeout, broken stream
    └── NotLeader                   refused locally: this replica does not hold the lease

    ReportedError                   a reconcile failure already told on its object by an Event

The names are Kubernetes' own `Status.reason` values (hence no `Error` suffix, ruff's N818).

Messages carry the verb, kind and object name and the server's message — never request headers or
bodies, so bearer tokens and Secret data cannot leak into logs or events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class KubeError(Exception):
    """Anything that went wrong talking to the API server."""


class ApiError(KubeError):
    """The API server answered with a failure `Status`."""

    status: int
    """HTTP status code."""
    reason: str
    """The `Status.reason` (e.g. `NotFound`, `AlreadyExists`), or the HTTP reason phrase."""
    causes: tuple[Mapping[str, Any], ...]
    """`Status.details.causes`: for `Invalid`, the fields and rules that failed."""

    def __init__(
        self, message: str, *, status: int, reason: str, causes: tuple[Mapping[str, Any], ...] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.causes = causes


class BadRequest(ApiError):  # noqa: N818
    """400: the request itself was malformed."""


class Unauthorized(ApiError):  # noqa: N818
    """401: the credentials were refused."""


class Forbidden(ApiError):  # noqa: N818
    """403: RBAC (or an admission plugin) denied the request."""


class NamespaceTerminating(Forbidden):
    """403 from the API server's NamespaceLifecycle admission: nothing new may be created in a
    namespace being deleted ("unable to create new content in namespace X because it is being
    terminated"). Told apart from RBAC's 403 by the `NamespaceTerminating` cause it carries."""


NAMESPACE_TERMINATING_CAUSE = "NamespaceTerminating"
"""The cause of that refusal (`v1.NamespaceTerminatingCause`); a `StatusCause`'s type is
serialised as its `reason`."""


class NotFound(ApiError):  # noqa: N818
    """404: the object (or its namespace, or the resource type) does not exist."""


class Conflict(ApiError):  # noqa: N818
    """409: the write raced another one (stale resourceVersion)."""


class AlreadyExists(Conflict):
    """409 with reason AlreadyExists: an object with that name exists already."""


class Gone(ApiError):  # noqa: N818
    """410: the resourceVersion asked for is older than the server remembers."""


class Invalid(ApiError):  # noqa: N818
    """422: the object failed validation; `causes` name the fields."""


class TooManyRequests(ApiError):  # noqa: N818
    """429: the server (API priority and fairness) asked us to slow down."""


class ServerError(ApiError):
    """5xx: the server failed."""


class ServerTimeout(ServerError):  # noqa: N818
    """504: the server gave up waiting (often on etcd)."""


class TransportError(KubeError):
    """No answer from the server: connection refused or reset, timeout, broken stream."""


class NotLeader(KubeError):  # noqa: N818
    """A write was refused locally: this replica does not (or may no longer) hold the lease."""


class ReportedError(Exception):
    """A reconcile failure a Warning Event on the object already explains (what is missing,
    what to do): retried with backoff like any failure, logged without a traceback, since the
    operator is healthy and the fix is the user's (a CRD to install, a label to correct)."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
    504: ServerTimeout,
}


def error_from_status(status: int, body: Mapping[str, Any] | None, *, what: str) -> ApiError:
    """The exception for a failed response; `what` names the request (verb, kind, object)."""
    body = body or {}
    reason = str(body.get("reason") or "")
    message = str(body.get("message") or reason or f"HTTP {status}")
    details = body.get("details")
    causes = tuple(details.get("causes") or ()) if isinstance(details, Mapping) else ()
    if status == 409 and reason == "AlreadyExists":
        error_type: type[ApiError] = AlreadyExists
    elif (
        status == 403 and reason == "Forbidden" and _has_cause(causes, NAMESPACE_TERMINATING_CAUSE)
    ):
        error_type = NamespaceTerminating
    elif status in _BY_STATUS:
        error_type = _BY_STATUS[status]
    elif status >= 500:
        error_type = ServerError
    else:
        error_type = ApiError
    return error_type(
        f"{what}: {message}", status=status, reason=reason or str(status), causes=causes
    )


def _has_cause(causes: tuple[Mapping[str, Any], ...], cause_type: str) -> bool:
    return any(isinstance(cause, Mapping) and cause.get("reason") == cause_type for cause in causes)
