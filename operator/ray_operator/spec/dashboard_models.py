"""Plain data exchanged with Ray's Jobs and Serve REST APIs, and their (pure) parsing.

`JobSubmission` is what `POST /api/jobs/` takes (KubeRay's `RayJobRequest`); `JobInfo` is what
`GET /api/jobs/{id}` answers; `ServeDetails` is what `GET /api/serve/applications/` answers
(the part we read: each application's status, deployments and `deployed_app_config`, and the
instance's `target_capacity`). Parsing is lenient about extra fields (Ray adds some in every
release) and strict about the ones we decide on, raising `DashboardBadResponse`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ray_operator.spec.dashboard_errors import DashboardBadResponse

# Ray's JobStatus values (ray.dashboard.modules.job.common.JobStatus).
PENDING = "PENDING"
RUNNING = "RUNNING"
STOPPED = "STOPPED"
SUCCEEDED = "SUCCEEDED"
FAILED = "FAILED"
TERMINAL_JOB_STATUSES = frozenset({STOPPED, SUCCEEDED, FAILED})

# Ray Serve's ApplicationStatus values.
APP_RUNNING = "RUNNING"
# KubeRay's name for the application of a config without `name` (utils.DefaultServeAppName).
DEFAULT_SERVE_APP_NAME = "default"


def is_job_terminal(status: str | None) -> bool:
    """Whether a Ray job status can never change again (KubeRay's `IsJobTerminal`)."""
    return status in TERMINAL_JOB_STATUSES


@dataclass(frozen=True, slots=True)
class JobSubmission:
    """The body of `POST /api/jobs/`."""

    entrypoint: str
    submission_id: str
    runtime_env: Mapping[str, Any] | None = None
    metadata: Mapping[str, str] | None = None
    entrypoint_num_cpus: float | None = None
    entrypoint_num_gpus: float | None = None
    entrypoint_resources: Mapping[str, float] | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON body, leaving out unset fields (Ray applies its own defaults)."""
        body: dict[str, Any] = {"entrypoint": self.entrypoint, "submission_id": self.submission_id}
        optional = {
            "runtime_env": self.runtime_env,
            "metadata": self.metadata,
            "entrypoint_num_cpus": self.entrypoint_num_cpus,
            "entrypoint_num_gpus": self.entrypoint_num_gpus,
            "entrypoint_resources": self.entrypoint_resources,
        }
        body.update({key: value for key, value in optional.items() if value})
        return body


@dataclass(frozen=True, slots=True)
class JobInfo:
    """What the dashboard knows about one submitted job."""

    submission_id: str
    status: str
    entrypoint: str = ""
    message: str = ""
    error_type: str | None = None
    start_time_ms: int = 0
    end_time_ms: int = 0
    metadata: Mapping[str, str] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return is_job_terminal(self.status)

    @classmethod
    def from_json(cls, data: Any) -> JobInfo:
        """Parse one job of `GET /api/jobs/{id}` or of the list `GET /api/jobs/`."""
        if not isinstance(data, Mapping) or not isinstance(data.get("status"), str):
            raise DashboardBadResponse(f"not a Ray job: {str(data)[:200]}")
        return cls(
            submission_id=str(data.get("submission_id") or data.get("job_id") or ""),
            status=data["status"],
            entrypoint=str(data.get("entrypoint") or ""),
            message=str(data.get("message") or ""),
            error_type=data.get("error_type"),
            start_time_ms=int(data.get("start_time") or 0),
            end_time_ms=int(data.get("end_time") or 0),
            metadata=dict(data.get("metadata") or {}),
        )


@dataclass(frozen=True, slots=True)
class ServeDeploymentStatus:
    """One deployment of a Serve application."""

    status: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class ServeApplicationStatus:
    """One Serve application and its deployments, as `GET /api/serve/applications/` reports."""

    status: str
    message: str = ""
    deployments: Mapping[str, ServeDeploymentStatus] = field(default_factory=dict)
    deployed_config: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)
    """`deployed_app_config`: the application's part of the config last PUT, as Serve keeps it
    (None while Serve has none, e.g. for an application being deleted). Out of repr: its
    `runtime_env` may hold secrets."""

    @property
    def running(self) -> bool:
        return self.status == APP_RUNNING


@dataclass(frozen=True, slots=True)
class ServeDetails:
    """The Serve instance of a cluster: its applications by name, and its target capacity."""

    applications: dict[str, ServeApplicationStatus] = field(default_factory=dict)
    target_capacity: float | None = None
    """The `target_capacity` of the config last PUT (None when it set none)."""


def parse_serve_details(data: Any) -> ServeDetails:
    """A Serve details answer, parsed (the unnamed application is `default`)."""
    if not isinstance(data, Mapping):
        raise DashboardBadResponse(f"not a Serve details object: {str(data)[:200]}")
    applications = data.get("applications") or {}
    if not isinstance(applications, Mapping):
        raise DashboardBadResponse("Serve details: `applications` is not an object")
    capacity = data.get("target_capacity")
    if capacity is not None and (
        isinstance(capacity, bool) or not isinstance(capacity, int | float)
    ):
        raise DashboardBadResponse("Serve details: `target_capacity` is not a number")
    return ServeDetails(
        applications={
            str(name) or DEFAULT_SERVE_APP_NAME: _parse_application(str(name), app)
            for name, app in applications.items()
        },
        target_capacity=None if capacity is None else float(capacity),
    )


def parse_serve_applications(data: Any) -> dict[str, ServeApplicationStatus]:
    """Applications by name from a Serve details answer (the unnamed one is `default`)."""
    return parse_serve_details(data).applications


def _parse_application(name: str, app: Any) -> ServeApplicationStatus:
    if not isinstance(app, Mapping):
        raise DashboardBadResponse(f"Serve application {name!r} is not an object")
    deployments = app.get("deployments") or {}
    if not isinstance(deployments, Mapping):
        raise DashboardBadResponse(f"Serve application {name!r}: `deployments` is not an object")
    config = app.get("deployed_app_config")
    return ServeApplicationStatus(
        status=str(app.get("status") or ""),
        message=str(app.get("message") or ""),
        deployments={
            str(deployment_name): ServeDeploymentStatus(
                status=str(_mapping(deployment).get("status") or ""),
                message=str(_mapping(deployment).get("message") or ""),
            )
            for deployment_name, deployment in deployments.items()
        },
        # Anything but an object means "no config we can compare with".
        deployed_config=config if isinstance(config, Mapping) else None,
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
