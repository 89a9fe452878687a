"""What a RayCluster's `spec.historyServerOptions` must satisfy once its gate is on.

KubeRay's rules (`ValidateRayClusterSpec` and `validateCollectorOptions`), each reported with its
field path where KubeRay stops at the first: `collectorOptions` set, with an `image`; none of the
env vars KubeRay injects into the collector (`MANAGED_COLLECTOR_ENV`) in `collectorOptions.env`;
`STORAGE_BACKEND` given there as a literal value, with what the named backend needs (GCS: a bucket;
S3: a region; Azure Blob: a connection string or an account URL by auth mode; Aliyun OSS: bucket,
endpoint and region); no container of a template already called `ray-history-collector`.

Beyond KubeRay, what the API server would otherwise refuse only when it creates the Pods (a cluster
that never gets a Pod): the image without surrounding whitespace, `imagePullPolicy` one of
Kubernetes' three, env names Kubernetes accepts, valid resource quantities with requests at most
limits (Kubernetes' own container rules, `validation.pod_template`); and at most `MAX_COLLECTOR_ENV`
env entries (KubeRay sets no bound; each entry lands in every Pod of the cluster).
The gate itself is checked by `validation.raycluster` (`GATED_FIELDS`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from ray_operator.builders.history_server import COLLECTOR_CONTAINER_NAME, MANAGED_COLLECTOR_ENV
from ray_operator.features import RAY_CLUSTER_HISTORY_SERVER
from ray_operator.spec.raycluster import head_group, pod_spec, spec, worker_groups
from ray_operator.validation.errors import (
    FieldError,
    forbidden,
    invalid,
    not_supported,
    required,
    shown,
)
from ray_operator.validation.limits import ClusterLimits
from ray_operator.validation.pod_template import container_errors

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster

    from ray_operator.spec.raycluster import GroupSpec

PATH: Final = "spec.historyServerOptions"
OPTIONS_PATH: Final = f"{PATH}.collectorOptions"
ENV_PATH: Final = f"{OPTIONS_PATH}.env"
MAX_COLLECTOR_ENV: Final = 256
STORAGE_BACKEND: Final = "STORAGE_BACKEND"
_PULL_POLICIES = ["Always", "IfNotPresent", "Never"]
_AZURE_CONNECTION_STRING = "AZURE_STORAGE_CONNECTION_STRING"
_AZURE_ACCOUNT_URL = "AZURE_STORAGE_ACCOUNT_URL"
# What each backend needs besides STORAGE_BACKEND (Azure Blob depends on its auth mode, below).
_BACKEND_NEEDS: Final[Mapping[str, tuple[str, ...]]] = {
    "GCS": ("GCS_BUCKET",),
    "S3": ("S3_REGION",),
    "ALIYUNOSS": ("OSS_BUCKET", "OSS_ENDPOINT", "OSS_REGION"),
}


def history_server_errors(cluster: RayCluster, *, limits: ClusterLimits) -> Iterator[FieldError]:
    """Every problem of `spec.historyServerOptions`; nothing when it is absent, or refused
    already because its gate is off."""
    options = spec(cluster).get("historyServerOptions")
    if options is None or not limits.feature_gates.enabled(RAY_CLUSTER_HISTORY_SERVER):
        return
    collector = options.get("collectorOptions") if isinstance(options, Mapping) else None
    if not isinstance(collector, Mapping):
        yield required(OPTIONS_PATH, "the history server needs its collector sidecar")
        return
    yield from _collector_errors(collector)
    yield from _container_name_errors(cluster)


def _collector_errors(collector: Mapping[str, Any]) -> Iterator[FieldError]:
    image = collector.get("image")
    if not image:
        yield required(f"{OPTIONS_PATH}.image", "the collector container's image")
    policy = collector.get("imagePullPolicy")
    if policy is not None and policy not in _PULL_POLICIES:
        yield not_supported(f"{OPTIONS_PATH}.imagePullPolicy", shown(policy), _PULL_POLICIES)
    env = collector.get("env") or []
    if len(env) > MAX_COLLECTOR_ENV:
        yield invalid(ENV_PATH, len(env), f"must have at most {MAX_COLLECTOR_ENV} items")
        return
    # Kubernetes' container rules on what becomes the collector container (the image's absence
    # is reported above, with KubeRay's reason).
    as_container = {"image": image or "-", "env": env, "resources": collector.get("resources")}
    yield from container_errors(OPTIONS_PATH, as_container)
    yield from _env_errors(env)


def _env_errors(env: list[Any]) -> Iterator[FieldError]:
    by_name: dict[str, Mapping[str, Any]] = {}
    for index, variable in enumerate(env):
        name = variable.get("name") if isinstance(variable, Mapping) else None
        if name in MANAGED_COLLECTOR_ENV:
            yield forbidden(
                f"{ENV_PATH}[{index}].name",
                f"{name} is set by the operator in the collector container",
            )
        if isinstance(name, str):
            by_name[name] = variable  # the last one wins, as in the container
    backend = by_name.get(STORAGE_BACKEND)
    if backend is None or not backend.get("value"):
        yield required(ENV_PATH, f"{STORAGE_BACKEND} must be set with a literal value")
        return
    yield from _backend_errors(str(backend["value"]), by_name)


def _backend_errors(backend: str, env: Mapping[str, Mapping[str, Any]]) -> Iterator[FieldError]:
    """KubeRay's per-backend requirements; an unknown backend is the collector's to judge."""
    kind = backend.upper()
    if kind == "AZUREBLOB":
        yield from _azure_errors(env)
        return
    for needed in _BACKEND_NEEDS.get(kind, ()):
        if not _has_value(env, needed):
            yield required(ENV_PATH, f"{needed} must be set when {STORAGE_BACKEND} is {kind}")


def _azure_errors(env: Mapping[str, Mapping[str, Any]]) -> Iterator[FieldError]:
    mode = str((env.get("AZURE_STORAGE_AUTH_MODE") or {}).get("value") or "").strip().lower()
    if mode == "connection_string":
        needed: tuple[str, ...] = (_AZURE_CONNECTION_STRING,)
    elif mode in ("workload_identity", "default"):
        needed = (_AZURE_ACCOUNT_URL,)
    else:
        needed = (_AZURE_CONNECTION_STRING, _AZURE_ACCOUNT_URL)
    if not any(_has_value(env, name) for name in needed):
        either = " or ".join(needed)
        yield required(ENV_PATH, f"{either} must be set when {STORAGE_BACKEND} is AZUREBLOB")


def _has_value(env: Mapping[str, Mapping[str, Any]], name: str) -> bool:
    variable = env.get(name) or {}
    return bool(variable.get("value")) or variable.get("valueFrom") is not None


def _container_name_errors(cluster: RayCluster) -> Iterator[FieldError]:
    groups: list[tuple[str, GroupSpec]] = [("spec.headGroupSpec", head_group(cluster))]
    groups += [
        (f"spec.workerGroupSpecs[{index}]", group)
        for index, group in enumerate(worker_groups(cluster))
    ]
    for path, group in groups:
        for index, container in enumerate(pod_spec(group).get("containers") or []):
            if container.get("name") == COLLECTOR_CONTAINER_NAME:
                yield invalid(
                    f"{path}.template.spec.containers[{index}].name",
                    COLLECTOR_CONTAINER_NAME,
                    "is the name of the collector sidecar historyServerOptions adds",
                )
