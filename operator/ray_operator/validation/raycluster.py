"""Semantic validation of a RayCluster, shared by the controller and the admission webhook.

Covers what KubeRay's `utils/validation.go` (`ValidateRayClusterMetadata`, `ValidateRayClusterSpec`,
`ValidateRayClusterUpgradeOptions`, `ValidateRayClusterStatus`) and its webhook (unique group names)
check, but reports every violation at once with its field path, where KubeRay stops at the first.
Beyond KubeRay: a group name must be a valid label value (it becomes `ray.io/group`; KubeRay would
only fail at Pod creation). KubeRay's alpha fields (TLS, network policy, history server) are refused
while their feature gate (`--feature-gates`) is off; the embedded RocksDB GCS backend is accepted.
Beyond KubeRay too: the Pod templates are checked with Kubernetes' own Pod rules
(`validation/pod_template.py`: what the API server would refuse at Pod creation), the groups'
`resources` quantities are valid and bounded, and the Pods the cluster asks for stay within
`ClusterLimits.max_pods_per_cluster` (`validation/limits.py`). No Pod runs as the operator's own
ServiceAccount (`validation/identity.py`). And the head Service is never an ExternalName
(`serviceType`, `headService.spec.type` or `.externalName`): KubeRay keeps whatever type a custom
`headService` has, so an ExternalName one would make the cluster's address another tenant's head
Service (issue 28, finding 2).
`raycluster_warnings` lists what is legal but probably unintended (admission warnings).

Validation only reads: a mapping is looked at in place, never copied (the controller runs this
on its event loop at every reconcile, on objects of up to the API server's 3 MiB).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

from ray_operator import features
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.raycluster import (
    JSON,
    ClusterLike,
    autoscaler_version,
    cluster_annotations,
    head_group,
    is_auth_enabled,
    is_autoscaling_enabled,
    is_gcs_ft_enabled,
    is_k8s_token_auth_enabled,
    metadata,
    parse_version,
    spec,
)
from ray_operator.spec.replicas import desired_group_pods, hosts_per_replica
from ray_operator.validation.errors import (
    FieldError,
    duplicate,
    forbidden,
    invalid,
    not_supported,
    required,
    shown,
    too_long,
)
from ray_operator.validation.go_decoding import raycluster_go_decode_errors
from ray_operator.validation.history_server import history_server_errors
from ray_operator.validation.identity import cluster_identity_errors
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.mtls import tls_options_errors
from ray_operator.validation.network_policy import network_policy_errors
from ray_operator.validation.pod_template import pod_template_errors, quantity_map_errors

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster

    from ray_operator.spec.raycluster import GroupSpec

# 63 - len("-serve-svc"): the longest name whose derived Service names all fit in a DNS label.
MAX_CLUSTER_NAME_LENGTH = 53
_DNS1035_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN_RE = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_LABEL_KEY_RULE = (
    "a label key is an optional DNS subdomain prefix and '/', then a name of at most 63 "
    "alphanumeric characters, '-', '_' or '.', starting and ending with an alphanumeric character"
)
_LABEL_VALUE_RULE = (
    "a label value must be at most 63 alphanumeric characters, '-', '_' or '.', starting and "
    "ending with an alphanumeric character"
)
_RESOURCE_PARAMS = ("num-cpus", "num-gpus", "memory", "resources")
_V2_ENV_TRUE = ("1", "true")

HEAD = "spec.headGroupSpec"
# The head Service must select this cluster's head Pod: an ExternalName Service is only a DNS
# alias (a CNAME) for any host the spec names, another tenant's head Service included.
HEAD_SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")
_HEAD_SERVICE_TYPE_RULE = (
    "must be ClusterIP, NodePort or LoadBalancer: the head Service selects this cluster's head "
    "Pod, and an ExternalName Service would alias another host instead"
)


def validate_raycluster(
    cluster: ClusterLike, *, limits: ClusterLimits = DEFAULT_LIMITS
) -> list[FieldError]:
    """Every semantic violation in the RayCluster's metadata and spec; empty when it is valid."""
    manifest = read_only_cluster(cluster)
    checks: tuple[Callable[[RayCluster], Iterator[FieldError]], ...] = (
        _metadata_errors,
        _head_group_errors,
        _worker_group_errors,
        _fault_tolerance_errors,
        _autoscaling_errors,
        _auth_errors,
        functools.partial(_feature_gate_errors, limits=limits),
        functools.partial(tls_options_errors, limits=limits),
        functools.partial(history_server_errors, limits=limits),
        functools.partial(network_policy_errors, limits=limits),
        _upgrade_strategy_errors,
        _pod_template_errors,
        functools.partial(_pod_count_errors, limits=limits),
        functools.partial(cluster_identity_errors, identity=limits.operator_identity),
    )
    errors = [error for check in checks for error in check(manifest)]
    # Decoded as KubeRay's Go types only once every rule passed: one more O(size) pass, and a
    # spec Go refuses has no hash annotation to compare (the only thing left it could break).
    return errors or raycluster_go_decode_errors(manifest)


def read_only_manifest(obj: ClusterLike) -> JSON:
    """`obj` as a JSON-shaped dict without copying a mapping (validation never writes to it)."""
    if isinstance(obj, dict):
        return obj
    if isinstance(obj, Mapping):
        return dict(obj)
    return obj.model_dump(mode="json", by_alias=True, exclude_none=True)


def read_only_cluster(obj: ClusterLike) -> RayCluster:
    """`read_only_manifest` of a RayCluster, typed: the schema admitted it before validation runs
    (admission validates after the API server's schema, the controller reads its cache)."""
    return cast("RayCluster", read_only_manifest(obj))


def validate_raycluster_status(cluster: ClusterLike) -> list[FieldError]:
    """The status must not claim to be suspending and suspended at once (KubeRay's invariant)."""
    conditions = read_only_cluster(cluster).get("status", {}).get("conditions") or []
    true_types = {c.get("type") for c in conditions if c.get("status") == "True"}
    if {"RayClusterSuspending", "RayClusterSuspended"} <= true_types:
        detail = "RayClusterSuspending and RayClusterSuspended must not both be True"
        return [invalid("status.conditions", sorted(true_types), detail)]
    return []


def raycluster_warnings(cluster: ClusterLike) -> list[str]:
    """Legal but surprising settings, worded for `kubectl apply` warnings (and Warning events)."""
    manifest = read_only_cluster(cluster)
    warnings = _replica_bound_warnings(manifest)
    cluster_spec = spec(manifest)
    if is_autoscaling_enabled(cluster_spec) and autoscaler_version(cluster_spec) == "v1":
        # KubeRay warns (without rejecting): autoscaler v1 also expects workers not to restart.
        restarting = [
            str(group.get("groupName"))
            for group in cluster_spec.get("workerGroupSpecs") or []
            if group.get("template", {}).get("spec", {}).get("restartPolicy")
            not in (None, "", "Never")
        ]
        if restarting:
            warnings.append(
                f"restartPolicy for worker groups [{', '.join(restarting)}] should be Never or "
                "unset when using autoscaler V1"
            )
    return warnings


def _replica_bound_warnings(cluster: RayCluster) -> list[str]:
    warnings = []
    for index, group in enumerate(spec(cluster).get("workerGroupSpecs") or []):
        replicas, low, high = (
            group.get("replicas"),
            group.get("minReplicas"),
            group.get("maxReplicas"),
        )
        path = f"spec.workerGroupSpecs[{index}].replicas"
        if replicas is not None and low is not None and replicas < low:
            warnings.append(f"{path}: {replicas} is below minReplicas ({low}); {low} will be used")
        if replicas is not None and high is not None and replicas > high:
            warnings.append(
                f"{path}: {replicas} is above maxReplicas ({high}); {high} will be used"
            )
    return warnings


def _metadata_errors(cluster: RayCluster) -> Iterator[FieldError]:
    name = str(metadata(cluster).get("name", ""))
    if len(name) > MAX_CLUSTER_NAME_LENGTH:
        # Otherwise `<name>-serve-svc` and `<name>-head-svc` would not fit in 63 characters.
        yield too_long("metadata.name", name, MAX_CLUSTER_NAME_LENGTH)
    if not _DNS1035_RE.match(name):
        detail = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
        detail += "start with an alphabetic character, and end with an alphanumeric character"
        yield invalid("metadata.name", name, detail)


def _head_group_errors(cluster: RayCluster) -> Iterator[FieldError]:
    group = head_group(cluster)
    if not _containers(group):
        yield required(
            f"{HEAD}.template.spec.containers", "headGroupSpec should have at least one container"
        )
    yield from _group_params_errors(HEAD, group)
    yield from _head_service_errors(group)


def _head_service_errors(group: Mapping[str, Any]) -> Iterator[FieldError]:
    """`serviceType` and a custom `headService` may not make the head Service an alias."""
    service_type = group.get("serviceType")
    if service_type and service_type not in HEAD_SERVICE_TYPES:
        yield invalid(f"{HEAD}.serviceType", shown(service_type), _HEAD_SERVICE_TYPE_RULE)
    head_service = group.get("headService")
    service_spec = head_service.get("spec") if isinstance(head_service, Mapping) else None
    if not isinstance(service_spec, Mapping):
        return  # the CRD schema admits only an object here; nothing to alias with otherwise
    path = f"{HEAD}.headService.spec"
    custom_type = service_spec.get("type")
    if custom_type and custom_type not in HEAD_SERVICE_TYPES:
        yield invalid(f"{path}.type", shown(custom_type), _HEAD_SERVICE_TYPE_RULE)
    if service_spec.get("externalName"):
        yield forbidden(
            f"{path}.externalName",
            "a head Service is never an ExternalName Service: it selects this cluster's head Pod",
        )


def _group_params_errors(path: str, group: Mapping[str, Any]) -> Iterator[FieldError]:
    params = group.get("rayStartParams") or {}
    if group.get("resources") and any(params.get(key) for key in _RESOURCE_PARAMS):
        detail = (
            "resource fields should not be set in both rayStartParams and resources; use only one"
        )
        yield forbidden(f"{path}.resources", detail)
    if "labels" in params:
        yield forbidden(
            f"{path}.rayStartParams.labels", "not supported; use the top-level labels field instead"
        )
    for key, value in (group.get("labels") or {}).items():
        yield from _label_errors(f"{path}.labels", key, value)


def _label_errors(path: str, key: str, value: Any) -> Iterator[FieldError]:
    prefix, _, label_name = key.rpartition("/")
    bad_prefix = bool(prefix) and not is_dns1123_subdomain(prefix)
    if bad_prefix or not is_label_name(label_name):
        yield invalid(path, key, _LABEL_KEY_RULE)
    if value != "" and not is_label_name(str(value)):
        yield invalid(f"{path}[{key}]", value, _LABEL_VALUE_RULE)


def is_dns1123_subdomain(text: str) -> bool:
    """A DNS-1123 subdomain: what most object names (and a label key's prefix) must be."""
    return len(text) <= 253 and _DNS1123_SUBDOMAIN_RE.match(text) is not None


def is_label_name(text: str) -> bool:
    """A label name (or value), as a worker group's name must be one."""
    return len(text) <= 63 and _LABEL_NAME_RE.match(text) is not None


def _worker_group_errors(cluster: RayCluster) -> Iterator[FieldError]:
    seen: set[str] = set()
    autoscaling = is_autoscaling_enabled(spec(cluster))
    for index, group in enumerate(spec(cluster).get("workerGroupSpecs") or []):
        path = f"spec.workerGroupSpecs[{index}]"
        name = str(group.get("groupName", ""))
        if name in seen:
            yield duplicate(f"{path}.groupName", name)
        seen.add(name)
        if not is_label_name(name):
            yield invalid(
                f"{path}.groupName",
                name,
                "must be a valid label value (it becomes the ray.io/group label)",
            )
        if not _containers(group):
            yield required(
                f"{path}.template.spec.containers",
                "workerGroupSpec should have at least one container",
            )
        yield from _replica_errors(path, group, autoscaling=autoscaling)
        yield from _group_params_errors(path, group)
        yield from _autoscaler_v2_only_errors(path, group, cluster)


def _replica_errors(
    path: str, group: Mapping[str, Any], *, autoscaling: bool
) -> Iterator[FieldError]:
    low, high = group.get("minReplicas"), group.get("maxReplicas")
    for field, value in (("minReplicas", low), ("maxReplicas", high)):
        if value is None and not autoscaling:
            # Without the autoscaler nothing else bounds the group (the autoscaler can adjust them).
            yield required(
                f"{path}.{field}", "must be set when enableInTreeAutoscaling is not true"
            )
        elif value is not None and value < 0:
            yield invalid(f"{path}.{field}", value, "must be greater than or equal to 0")
    if low is not None and high is not None and low > high:
        yield invalid(
            f"{path}.minReplicas", low, f"must be less than or equal to maxReplicas ({high})"
        )
    if group.get("suspend") is True and autoscaling:
        yield forbidden(
            f"{path}.suspend",
            "a worker group cannot be suspended while the in-tree autoscaler is enabled",
        )


def _autoscaler_v2_only_errors(
    path: str, group: Mapping[str, Any], cluster: RayCluster
) -> Iterator[FieldError]:
    idle = group.get("idleTimeoutSeconds")
    if idle is not None and idle < 0:
        yield invalid(f"{path}.idleTimeoutSeconds", idle, "must be greater than or equal to 0")
    elif idle is not None and not _autoscaler_v2(cluster):
        yield forbidden(
            f"{path}.idleTimeoutSeconds",
            "requires autoscaler v2: set spec.autoscalerOptions.version to v2",
        )
    priority = group.get("priority")
    if priority:
        version = parse_version(spec(cluster).get("rayVersion"))
        if version is None or version < (2, 56, 0):
            yield forbidden(f"{path}.priority", "requires spec.rayVersion 2.56.0 or later")
        if not _autoscaler_v2(cluster):
            yield forbidden(
                f"{path}.priority",
                "requires autoscaler v2: set spec.autoscalerOptions.version to v2",
            )


def _autoscaler_v2(cluster: RayCluster) -> bool:
    """v2 by `autoscalerOptions.version`, or by the head env var KubeRay < 1.4 used."""
    return (
        autoscaler_version(spec(cluster)) == "v2"
        or _head_env(cluster).get(names.ENV_RAY_ENABLE_AUTOSCALER_V2) in _V2_ENV_TRUE
    )


def _fault_tolerance_errors(cluster: RayCluster) -> Iterator[FieldError]:
    cluster_spec = spec(cluster)
    options = cluster_spec.get("gcsFaultToleranceOptions")
    env = _head_env(cluster)
    params = cluster_spec.get("headGroupSpec", {}).get("rayStartParams") or {}
    container_env = f"{HEAD}.template.spec.containers[0].env"
    if cluster_annotations(cluster).get(names.FT_ENABLED_ANNOTATION) and options is not None:
        yield forbidden(
            "spec.gcsFaultToleranceOptions",
            f"the {names.FT_ENABLED_ANNOTATION} annotation is also set; "
            "use only gcsFaultToleranceOptions",
        )
    if not is_gcs_ft_enabled(cluster) and names.ENV_RAY_REDIS_ADDRESS in env:
        yield forbidden(
            container_env,
            f"{names.ENV_RAY_REDIS_ADDRESS} implicitly enables GCS fault tolerance; "
            "set gcsFaultToleranceOptions instead",
        )
    if params.get("redis-username") or names.ENV_REDIS_USERNAME in env:
        yield forbidden(
            f"{HEAD}.rayStartParams",
            "set the Redis username with gcsFaultToleranceOptions.redisUsername",
        )
    if options is not None:
        yield from _gcs_ft_options_errors(cluster, options, env=env, params=params)


def _gcs_ft_options_errors(
    cluster: RayCluster,
    options: Mapping[str, Any],
    *,
    env: Mapping[str, str],
    params: Mapping[str, str],
) -> Iterator[FieldError]:
    container_env = f"{HEAD}.template.spec.containers[0].env"
    if params.get("redis-password"):
        yield forbidden(
            f"{HEAD}.rayStartParams.redis-password",
            "use gcsFaultToleranceOptions.redisPassword instead",
        )
    if names.ENV_REDIS_PASSWORD in env:
        yield forbidden(
            container_env,
            f"{names.ENV_REDIS_PASSWORD} is managed from gcsFaultToleranceOptions.redisPassword",
        )
    if names.ENV_RAY_REDIS_ADDRESS in env:
        yield forbidden(
            container_env,
            f"{names.ENV_RAY_REDIS_ADDRESS} is managed from gcsFaultToleranceOptions.redisAddress",
        )
    if cluster_annotations(cluster).get(names.EXTERNAL_STORAGE_NAMESPACE_ANNOTATION):
        yield forbidden(
            "metadata.annotations",
            f"{names.EXTERNAL_STORAGE_NAMESPACE_ANNOTATION} conflicts with "
            "gcsFaultToleranceOptions.externalStorageNamespace",
        )
    path = "spec.gcsFaultToleranceOptions"
    if options.get("backend") == "rocksdb":
        yield from _embedded_backend_errors(cluster, options, env=env)
    elif options.get("storage") is not None:
        yield forbidden(f"{path}.storage", "applies only to backend rocksdb")


def _embedded_backend_errors(
    cluster: RayCluster, options: Mapping[str, Any], *, env: Mapping[str, str]
) -> Iterator[FieldError]:
    path = "spec.gcsFaultToleranceOptions"
    for field in ("redisAddress", "redisUsername", "redisPassword", "externalStorageNamespace"):
        if options.get(field):
            yield forbidden(f"{path}.{field}", "not allowed when backend is rocksdb")
    storage = options.get("storage") or {}
    if storage.get("claimName") and any(
        storage.get(f) for f in ("size", "storageClassName", "accessModes")
    ):
        yield forbidden(
            f"{path}.storage.claimName",
            "mutually exclusive with size, storageClassName and accessModes",
        )
    head_spec = head_group(cluster).get("template", {}).get("spec", {})
    containers = head_spec.get("containers") or []
    container: Mapping[str, Any] = containers[0] if containers else {}
    managed_env = names.ENV_RAY_GCS_STORAGE in env or names.ENV_RAY_GCS_STORAGE_PATH in env
    managed_mount = any(
        m.get("name") == names.GCS_STORAGE_VOLUME_NAME
        or m.get("mountPath") == names.GCS_STORAGE_MOUNT_PATH
        for m in container.get("volumeMounts") or []
    )
    managed_volume = any(
        v.get("name") == names.GCS_STORAGE_VOLUME_NAME for v in head_spec.get("volumes") or []
    )
    if managed_env or managed_mount or managed_volume:
        yield forbidden(
            f"{HEAD}.template.spec",
            f"the {names.GCS_STORAGE_VOLUME_NAME} volume, its mount and RAY_gcs_storage* env vars "
            "are managed by the operator",
        )


def _autoscaling_errors(cluster: RayCluster) -> Iterator[FieldError]:
    cluster_spec = spec(cluster)
    env = _head_env(cluster)
    v2_env = env.get(names.ENV_RAY_ENABLE_AUTOSCALER_V2)
    options = cluster_spec.get("autoscalerOptions") or {}
    if not is_autoscaling_enabled(cluster_spec) and v2_env in _V2_ENV_TRUE:
        yield invalid(
            f"{HEAD}.template.spec.containers[0].env",
            v2_env,
            f"{names.ENV_RAY_ENABLE_AUTOSCALER_V2} requires enableInTreeAutoscaling: true",
        )
    if is_autoscaling_enabled(cluster_spec):
        if options.get("version") is not None and v2_env is not None:
            yield forbidden(
                "spec.autoscalerOptions.version",
                f"the head also sets {names.ENV_RAY_ENABLE_AUTOSCALER_V2}; "
                "use only autoscalerOptions.version",
            )
        if autoscaler_version(cluster_spec) == "v2":
            yield from _restart_policy_errors(cluster)
    idle = options.get("idleTimeoutSeconds")
    if idle is not None and idle < 0:
        yield invalid(
            "spec.autoscalerOptions.idleTimeoutSeconds", idle, "must be greater than or equal to 0"
        )
    if any(
        e.get("name") == names.ENV_KUBERAY_GEN_AUTOSCALER_START_CMD
        for e in options.get("env") or []
    ):
        yield forbidden(
            "spec.autoscalerOptions.env",
            f"{names.ENV_KUBERAY_GEN_AUTOSCALER_START_CMD} is managed by the operator",
        )


def _restart_policy_errors(cluster: RayCluster) -> Iterator[FieldError]:
    # Autoscaler v2 replaces failed Pods itself; restarting containers in place would confuse it.
    for path, group in _groups(cluster):
        policy = group.get("template", {}).get("spec", {}).get("restartPolicy")
        if policy not in (None, "", "Never"):
            yield invalid(
                f"{path}.template.spec.restartPolicy",
                policy,
                "must be Never or unset with autoscaler v2",
            )


def _auth_errors(cluster: RayCluster) -> Iterator[FieldError]:
    cluster_spec = spec(cluster)
    path = "spec.authOptions"
    if not is_auth_enabled(cluster_spec):
        if is_k8s_token_auth_enabled(cluster_spec):
            yield forbidden(f"{path}.enableK8sTokenAuth", "requires authOptions.mode: token")
        return
    version = parse_version(cluster_spec.get("rayVersion"))
    if version is None or version < (2, 52, 0):
        yield invalid(
            "spec.rayVersion",
            cluster_spec.get("rayVersion", ""),
            "token authentication requires Ray 2.52.0 or later",
        )
    if is_k8s_token_auth_enabled(cluster_spec):
        if version is None or version < (2, 55, 0):
            yield invalid(
                "spec.rayVersion",
                cluster_spec.get("rayVersion", ""),
                "Kubernetes token authentication requires Ray 2.55.0 or later",
            )
        if (cluster_spec.get("authOptions") or {}).get("secretName"):
            yield forbidden(f"{path}.secretName", "cannot be set with enableK8sTokenAuth")


# KubeRay's alpha fields, each behind the feature gate of the same name in KubeRay.
GATED_FIELDS: Mapping[str, str] = {
    "networkPolicy": features.RAY_CLUSTER_NETWORK_POLICY,
    "tlsOptions": features.RAY_CLUSTER_MTLS,
    "historyServerOptions": features.RAY_CLUSTER_HISTORY_SERVER,
}


def _feature_gate_errors(cluster: RayCluster, *, limits: ClusterLimits) -> Iterator[FieldError]:
    """A gated field is refused while its gate is off, naming the flag that turns it on."""
    for field, gate in GATED_FIELDS.items():
        if spec(cluster).get(field) is not None and not limits.feature_gates.enabled(gate):
            yield forbidden(f"spec.{field}", features.gate_off_detail(gate))


def _upgrade_strategy_errors(cluster: RayCluster) -> Iterator[FieldError]:
    kind = (spec(cluster).get("upgradeStrategy") or {}).get("type")
    if kind is None:
        return
    if kind not in ("Recreate", "None"):
        yield not_supported("spec.upgradeStrategy.type", kind, ["Recreate", "None"])
    creator = (metadata(cluster).get("labels") or {}).get(names.ORIGINATED_FROM_CRD_LABEL)
    if creator in (names.CRD_RAY_JOB, names.CRD_RAY_SERVICE):
        yield forbidden(
            "spec.upgradeStrategy", f"cannot be set on a RayCluster created by a {creator}"
        )


def _pod_template_errors(cluster: RayCluster) -> Iterator[FieldError]:
    """Kubernetes' Pod rules on every template, and the groups' `resources` quantities."""
    for path, group in _groups(cluster):
        yield from pod_template_errors(f"{path}.template", group.get("template"))
        yield from quantity_map_errors(f"{path}.resources", group.get("resources"))


def _pod_count_errors(cluster: RayCluster, *, limits: ClusterLimits) -> Iterator[FieldError]:
    """No group, and not the whole cluster, may want more Pods than the operator allows."""
    bound = limits.max_pods_per_cluster
    rule = f"at most {bound} Pods per cluster (the operator's --max-pods-per-cluster)"
    total, reported = 1, False  # the head
    for index, group in enumerate(spec(cluster).get("workerGroupSpecs") or []):
        path = f"spec.workerGroupSpecs[{index}]"
        hosts = hosts_per_replica(group)
        desired = desired_group_pods(group)  # replicas clamped into [min, max], x numOfHosts
        total += desired
        # maxReplicas alone creates nothing (the CRD defaults it to 2147483647 for the
        # autoscaler); `replicas`, or `minReplicas` when it is larger, is what gets created.
        low, replicas = int(group.get("minReplicas") or 0), group.get("replicas")
        field = "minReplicas" if replicas is None or replicas < low else "replicas"
        if desired > bound:
            detail = f"asks for {desired} Pods (x numOfHosts {hosts}); {rule}"
            yield invalid(f"{path}.{field}", group.get(field), detail)
            reported = True
        if field != "minReplicas" and low * hosts > bound:
            detail = f"asks for {low * hosts} Pods (x numOfHosts {hosts}); {rule}"
            yield invalid(f"{path}.minReplicas", low, detail)
            reported = True
    if total > bound and not reported:  # one group alone was already named
        yield invalid(
            "spec.workerGroupSpecs",
            total,
            f"the head and every group's replicas x numOfHosts add up to this many Pods; {rule}",
        )


def _groups(cluster: RayCluster) -> list[tuple[str, GroupSpec]]:
    groups: list[tuple[str, GroupSpec]] = [(HEAD, head_group(cluster))]
    groups += [
        (f"spec.workerGroupSpecs[{i}]", g)
        for i, g in enumerate(spec(cluster).get("workerGroupSpecs") or [])
    ]
    return groups


def _containers(group: Mapping[str, Any]) -> list[JSON]:
    return list(((group.get("template") or {}).get("spec") or {}).get("containers") or [])


def _head_env(cluster: RayCluster) -> dict[str, str]:
    """Literal env vars of the head's Ray container (valueFrom entries map to "")."""
    containers = _containers(head_group(cluster))
    env = (containers[0].get("env") or []) if containers else []
    return {str(e.get("name")): str(e.get("value", "")) for e in env}
