"""`DashboardClient`: the Jobs and Serve REST APIs of one Ray dashboard, over aiohttp.

Every request has a connect timeout and a total timeout (`DashboardOptions`), follows no
redirects and reads at most `max_response_bytes` of the answer: a slow, dead or hostile dashboard
costs a reconcile a few seconds at most, never a hung worker or the operator's memory. Failures
are mapped once, here, to `spec.dashboard_errors`.

When the cluster has a Ray auth token, it goes out as `Authorization: Bearer <token>` and as
`X-Ray-Authorization: Bearer <token>`: Ray accepts either, and the second survives proxies that
consume `Authorization` themselves (KubeRay sends only that one for this reason, since it may go
through the API server's service proxy). The token is never logged nor put into an exception.

    async with DashboardClient(DashboardEndpoint("http://127.0.0.1:8265", token=t)) as ray:
        await ray.submit_job(JobSubmission(entrypoint="python x.py", submission_id="job-abcde"))
        info = await ray.get_job("job-abcde")
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any
from urllib.parse import quote

import aiohttp

from ray_operator.spec.dashboard_errors import (
    CONNECTION_FAILED,
    CONNECTION_REFUSED,
    DNS_FAILURE,
    DashboardBadResponse,
    DashboardError,
    DashboardHTTPError,
    DashboardTimeout,
    DashboardUnauthorized,
    DashboardUnavailable,
    JobNotFound,
    SubmissionIdInUse,
    excerpt,
)
from ray_operator.spec.dashboard_models import (
    JobInfo,
    JobSubmission,
    ServeApplicationStatus,
    ServeDetails,
    parse_serve_details,
)

logger = logging.getLogger(__name__)

JOBS_PATH = "/api/jobs/"
SERVE_APPLICATIONS_PATH = "/api/serve/applications/"
VERSION_PATH = "/api/version"
# Ray's answer to a submit whose submission id exists (HTTP 500 or 400, depending on the path
# the request took inside the dashboard); KubeRay matches the same words.
_DUPLICATE_SUBMISSION = "Please use a different submission_id"


@dataclass(frozen=True, slots=True)
class DashboardOptions:
    """Limits on every request to a dashboard."""

    connect_timeout: float = 2.0
    """Seconds to establish the TCP connection."""
    request_timeout: float = 5.0
    """Seconds for the whole request, answer included."""
    start_timeout: float = 20.0
    """Seconds for requests that make Ray start something (job submit, Serve deploy): the
    first job on a cluster waits for Ray to start its job supervisor. Both are idempotent, so a
    timeout only means "look again": the next reconcile sees the job or the apps."""
    max_response_bytes: int = 4 * 1024 * 1024
    """Answers longer than this are refused (job logs are the biggest: Ray caps nothing)."""


@dataclass(frozen=True, slots=True)
class DashboardEndpoint:
    """Where one cluster's dashboard answers, and the token it wants (if any)."""

    url: str
    """Base URL, e.g. `http://raycluster-head-svc.ns.svc.cluster.local:8265`."""
    token: str | None = field(default=None, repr=False)
    """Ray auth token (`authOptions.mode: token`); excluded from repr so it cannot be logged."""


class DashboardClient:
    """One dashboard's Jobs and Serve APIs. Use as `async with` (it owns an HTTP session)."""

    def __init__(
        self,
        endpoint: DashboardEndpoint,
        *,
        options: DashboardOptions | None = None,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.endpoint = endpoint
        self._options = options or DashboardOptions()
        self._session = session
        self._owns_session = session is None

    async def __aenter__(self) -> DashboardClient:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session if this client opened it."""
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    # --- Jobs ----------------------------------------------------------------------------------

    async def version(self) -> dict[str, Any]:
        """`GET /api/version`: Ray's version; a cheap liveness check."""
        return _object(await self._request("GET", VERSION_PATH))

    async def submit_job(self, submission: JobSubmission) -> str:
        """Submit a job; its submission id. `SubmissionIdInUse` when that id exists already."""
        answer = _object(
            await self._request("POST", JOBS_PATH, body=submission.to_json(), slow=True)
        )
        return str(answer.get("submission_id") or answer.get("job_id") or "")

    async def get_job(self, submission_id: str) -> JobInfo:
        """The job with that submission id; `JobNotFound` when the dashboard has none."""
        return JobInfo.from_json(
            await self._request("GET", _job_path(submission_id), not_found=submission_id)
        )

    async def list_jobs(self) -> list[JobInfo]:
        """Every job the cluster knows (submitted ones and drivers run directly)."""
        answer = await self._request("GET", JOBS_PATH)
        if not isinstance(answer, list):
            raise DashboardBadResponse(f"GET {JOBS_PATH}: expected a list of jobs")
        return [JobInfo.from_json(item) for item in answer]

    async def job_logs(self, submission_id: str) -> str:
        """The job's driver logs so far (bounded by `max_response_bytes`)."""
        answer = _object(
            await self._request("GET", _job_path(submission_id) + "/logs", not_found=submission_id)
        )
        return str(answer.get("logs") or "")

    async def stop_job(self, submission_id: str) -> bool:
        """Ask Ray to stop the job; False when it had already ended (not an error)."""
        answer = _object(
            await self._request("POST", _job_path(submission_id) + "/stop", not_found=submission_id)
        )
        return bool(answer.get("stopped"))

    async def delete_job(self, submission_id: str) -> bool:
        """Forget a finished job (Ray refuses to delete a running one: stop it first)."""
        answer = _object(
            await self._request("DELETE", _job_path(submission_id), not_found=submission_id)
        )
        return bool(answer.get("deleted"))

    # --- Serve ---------------------------------------------------------------------------------

    async def deploy_serve_applications(self, config: Mapping[str, Any]) -> None:
        """`PUT /api/serve/applications/`: make the cluster's Serve apps match `config`."""
        await self._request("PUT", SERVE_APPLICATIONS_PATH, body=config, slow=True)

    async def serve_applications(self) -> dict[str, ServeApplicationStatus]:
        """Declaratively deployed Serve applications by name, with their deployments."""
        return (await self.serve_details()).applications

    async def serve_details(self) -> ServeDetails:
        """`GET /api/serve/applications/` (declarative applications only): each application's
        status and `deployed_app_config`, and the instance's `target_capacity`. The answer is
        bounded like every other (`max_response_bytes`): its size grows with the user's config
        and the number of replicas."""
        answer = await self._request(
            "GET", SERVE_APPLICATIONS_PATH, query={"api_type": "declarative"}
        )
        return parse_serve_details(answer)

    async def delete_serve_applications(self) -> None:
        """`DELETE /api/serve/applications/`: shut Serve down on the cluster."""
        await self._request("DELETE", SERVE_APPLICATIONS_PATH)

    # --- transport -----------------------------------------------------------------------------

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        not_found: str | None = None,
        slow: bool = False,
    ) -> Any:
        if self._session is None:
            raise RuntimeError("DashboardClient used outside `async with`")
        what = f"{method} {path}"
        options = self._options
        seconds = options.start_timeout if slow else options.request_timeout
        timeout = aiohttp.ClientTimeout(total=seconds, sock_connect=options.connect_timeout)
        try:
            async with self._session.request(
                method,
                self.endpoint.url.rstrip("/") + path,
                json=body,
                params=query,
                headers=self._headers(),
                timeout=timeout,
                allow_redirects=False,
            ) as response:
                data = await _read_bounded(response, options.max_response_bytes, what=what)
                status = response.status
        except TimeoutError as error:
            raise DashboardTimeout(f"{what}: no answer within {seconds:g}s") from error
        except aiohttp.ClientError as error:
            # aiohttp's messages name host and port, never headers: safe to show.
            raise DashboardUnavailable(
                f"{what}: {type(error).__name__}: {error}", cause=connection_cause(error)
            ) from error
        text = data.decode("utf-8", errors="replace")
        if status >= 400:
            raise _http_error(status, text, what=what, not_found=not_found)
        if 300 <= status < 400:
            raise DashboardBadResponse(f"{what}: refusing to follow a redirect ({status})")
        if not text.strip():
            return None
        try:
            return json.loads(text)
        except RecursionError as error:
            # Nesting deeper than Python's recursion limit: a hostile answer, not a crash.
            raise DashboardBadResponse(f"{what}: answer is nested too deeply") from error
        except ValueError as error:
            raise DashboardBadResponse(
                f"{what}: answer is not JSON: {excerpt(text, 200)}"
            ) from error

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        token = self.endpoint.token
        if token:
            headers["Authorization"] = f"Bearer {token}"
            headers["X-Ray-Authorization"] = f"Bearer {token}"
        return headers


def connection_cause(error: aiohttp.ClientError) -> str:
    """The unreachable cause of a failed connection: DNS, refused, or anything else."""
    if isinstance(error, aiohttp.ClientConnectorDNSError):
        return DNS_FAILURE
    if isinstance(error, aiohttp.ClientConnectorError) and isinstance(
        error.os_error, ConnectionRefusedError
    ):
        return CONNECTION_REFUSED
    return CONNECTION_FAILED


async def check_serve_proxy(
    url: str,
    *,
    options: DashboardOptions | None = None,
    session: aiohttp.ClientSession | None = None,
) -> bool:
    """Whether the Serve HTTP proxy at `url` answers its health check (`GET /-/healthz`)."""
    options = options or DashboardOptions()
    timeout = aiohttp.ClientTimeout(
        total=options.request_timeout, sock_connect=options.connect_timeout
    )
    own = session is None
    active = session or aiohttp.ClientSession()
    try:
        async with active.get(
            url.rstrip("/") + "/-/healthz", timeout=timeout, allow_redirects=False
        ) as response:
            await _read_bounded(response, 64 * 1024, what="GET /-/healthz")
            return response.status == 200
    except (TimeoutError, aiohttp.ClientError, DashboardError) as error:
        logger.debug("serve proxy health check failed: %s", type(error).__name__)
        return False
    finally:
        if own:
            await active.close()


async def _read_bounded(response: aiohttp.ClientResponse, limit: int, *, what: str) -> bytes:
    declared = response.content_length
    if declared is not None and declared > limit:
        raise DashboardBadResponse(f"{what}: answer of {declared} bytes exceeds {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise DashboardBadResponse(f"{what}: answer exceeds {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _http_error(status: int, text: str, *, what: str, not_found: str | None) -> DashboardError:
    message = f"{what}: HTTP {status}: {excerpt(text)}"
    if _DUPLICATE_SUBMISSION in text:
        return SubmissionIdInUse(
            f"{what}: a job with this submission id exists already", status=status
        )
    if status in (401, 403):
        return DashboardUnauthorized(message, status=status)
    if status == 404 and not_found is not None:
        return JobNotFound(f"job {not_found} does not exist on the cluster", status=status)
    return DashboardHTTPError(message, status=status)


def _object(answer: Any) -> dict[str, Any]:
    if answer is None:
        return {}
    if not isinstance(answer, dict):
        raise DashboardBadResponse(f"expected a JSON object, got {type(answer).__name__}")
    return answer


def _job_path(submission_id: str) -> str:
    return JOBS_PATH + quote(submission_id, safe="")
