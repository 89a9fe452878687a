"""The dashboard client's exception types; every failure talking to Ray is mapped here, once.

    DashboardError                   anything that went wrong talking to a Ray dashboard
    ├── DashboardUnavailable         no usable answer: refused, reset, DNS, timeout, no address
    │   └── DashboardTimeout         connected (or tried to) but no answer within the timeout
    ├── DashboardHTTPError           the dashboard answered with a failure status (.status)
    │   ├── DashboardUnauthorized    401/403: the Ray auth token is missing or wrong
    │   ├── JobNotFound              404 on a job: no job with that submission id
    │   └── SubmissionIdInUse        a submit whose submission id already exists
    └── DashboardBadResponse         an answer we cannot use: too large, not JSON, wrong shape

Each carries a short CamelCase `reason` (for Events and status messages) and, when the dashboard
could not be used at all, an `unreachable_cause` (`DNSFailure`, `ConnectionRefused`, `Timeout`,
`ServerError`, `Unauthorized`, `ConnectionFailed`, `NoAddress`) that the controllers put in a
condition and compare to report each change of cause once. Messages name the request (method and
path) and at most a short excerpt of Ray's answer — never request headers, so the bearer token
can never leak into logs, Events, status or tracebacks.

An excerpt lands in the owner's status and Events, so it may only ever come from the cluster's
own head: the in-cluster resolver answers with nothing but the IP of the head Pod the cluster
made (`resolver.py`), and other addresses come from the operator's flags, which a cluster admin
sets. A name a tenant could alias (a Service) is never asked, so no other host's answer, and no
probe of what answers where, reaches a tenant through these messages (issue 28, finding 2).
"""

from __future__ import annotations

# Ray's error bodies can be whole tracebacks; an excerpt is enough to explain a failure.
MAX_EXCERPT = 600


def excerpt(text: str, limit: int = MAX_EXCERPT) -> str:
    """`text` cut to `limit` characters (with a marker when cut)."""
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…(truncated)"


DNS_FAILURE = "DNSFailure"
CONNECTION_REFUSED = "ConnectionRefused"
CONNECTION_FAILED = "ConnectionFailed"
TIMEOUT = "Timeout"
SERVER_ERROR = "ServerError"
UNAUTHORIZED = "Unauthorized"
NO_ADDRESS = "NoAddress"


class DashboardError(Exception):
    """Anything that went wrong talking to a Ray dashboard."""

    reason = "DashboardError"

    @property
    def unreachable_cause(self) -> str | None:
        """Why the dashboard could not be used at all; None when it answered (a job it does not
        know, an answer we cannot use) or when nobody asked it (a cool-down)."""
        return None


class DashboardUnavailable(DashboardError):  # noqa: N818
    """No usable answer: connection refused or reset, DNS failure, no known address."""

    reason = "DashboardUnavailable"

    def __init__(self, message: str, *, cause: str = CONNECTION_FAILED) -> None:
        super().__init__(message)
        self._cause = cause

    @property
    def unreachable_cause(self) -> str | None:
        return self._cause


class DashboardCoolingDown(DashboardUnavailable):
    """Not asked: the dashboard failed just before and is left alone for a while."""

    reason = "DashboardCoolingDown"

    @property
    def unreachable_cause(self) -> str | None:
        return None


class DashboardTimeout(DashboardUnavailable):
    """The dashboard did not answer within the timeout."""

    reason = "DashboardTimeout"

    def __init__(self, message: str) -> None:
        super().__init__(message, cause=TIMEOUT)


class DashboardHTTPError(DashboardError):
    """The dashboard answered with a failure status."""

    reason = "DashboardHTTPError"

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status

    @property
    def unreachable_cause(self) -> str | None:
        # A 5xx is a dashboard (or a proxy before it) that cannot serve; a 4xx is an answer.
        return SERVER_ERROR if self.status >= 500 else None


class DashboardUnauthorized(DashboardHTTPError):  # noqa: N818
    """401/403: Ray token authentication refused the request."""

    reason = "DashboardUnauthorized"

    @property
    def unreachable_cause(self) -> str | None:
        return UNAUTHORIZED


class JobNotFound(DashboardHTTPError):  # noqa: N818
    """404: the dashboard has no job with that submission id."""

    reason = "JobNotFound"


class SubmissionIdInUse(DashboardHTTPError):  # noqa: N818
    """A submit was refused because a job with that submission id already exists."""

    reason = "SubmissionIdInUse"


class DashboardBadResponse(DashboardError):  # noqa: N818
    """An answer we cannot use: larger than allowed, not JSON, or not the expected shape."""

    reason = "DashboardBadResponse"
