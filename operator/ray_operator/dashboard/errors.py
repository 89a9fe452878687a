"""The dashboard client's exception types; every failure talking to Ray is mapped here, once.

    DashboardError                   anything that went wrong talking to a Ray dashboard
    ├── DashboardUnavailable         no usable answer: refused, reset, DNS, timeout, no address
    │   └── DashboardTimeout         connected (or tried to) but no answer within the timeout
    ├── DashboardHTTPError           the dashboard answered with a failure status (.status)
    │   ├── DashboardUnauthorized    401/403: the Ray auth token is missing or wrong
    │   ├── JobNotFound              404 on a job: no job with that submission id
    │   └── SubmissionIdInUse        a submit whose submission id already exists
    └── DashboardBadResponse         an answer we cannot use: too large, not JSON, wrong shape

Each carries a short CamelCase `reason` (for Events and status messages). Messages name the
request (method and path) and at most a short excerpt of Ray's answer — never request headers,
so the bearer token can never leak into logs, Events, status or tracebacks.
"""

from __future__ import annotations

# Ray's error bodies can be whole tracebacks; an excerpt is enough to explain a failure.
MAX_EXCERPT = 600


def excerpt(text: str, limit: int = MAX_EXCERPT) -> str:
    """`text` cut to `limit` characters (with a marker when cut)."""
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…(truncated)"


class DashboardError(Exception):
    """Anything that went wrong talking to a Ray dashboard."""

    reason = "DashboardError"


class DashboardUnavailable(DashboardError):  # noqa: N818
    """No usable answer: connection refused or reset, DNS failure, no known address."""

    reason = "DashboardUnavailable"


class DashboardTimeout(DashboardUnavailable):
    """The dashboard did not answer within the timeout."""

    reason = "DashboardTimeout"


class DashboardHTTPError(DashboardError):
    """The dashboard answered with a failure status."""

    reason = "DashboardHTTPError"

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class DashboardUnauthorized(DashboardHTTPError):  # noqa: N818
    """401/403: Ray token authentication refused the request."""

    reason = "DashboardUnauthorized"


class JobNotFound(DashboardHTTPError):  # noqa: N818
    """404: the dashboard has no job with that submission id."""

    reason = "JobNotFound"


class SubmissionIdInUse(DashboardHTTPError):  # noqa: N818
    """A submit was refused because a job with that submission id already exists."""

    reason = "SubmissionIdInUse"


class DashboardBadResponse(DashboardError):  # noqa: N818
    """An answer we cannot use: larger than allowed, not JSON, or not the expected shape."""

    reason = "DashboardBadResponse"
