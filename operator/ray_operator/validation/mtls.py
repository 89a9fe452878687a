"""Rules for `spec.tlsOptions` (KubeRay's `validateTLSOptions`), each problem with its field path.

With mTLS on, the operator owns the TLS env vars (`RAY_USE_TLS`, `RAY_TLS_*`) and the `ray-tls`
mount at `/etc/ray/tls` of the Ray containers and the autoscaler: a user's own would silently
override them (later env entries win) or hide the issued certificate, so KubeRay refuses them, and
so do we — but every one at once, where KubeRay stops at the first. Beyond KubeRay, a template's
own volume named `ray-tls` or init container named `wait-for-tls-ip-san` is refused too: KubeRay
would keep the user's in place of its own (mounting whatever the user named as the cluster's
certificate, or skipping the wait for the Pod's IP), which is never what mTLS means.

Only while the RayClusterMTLS gate is on: with it off, the field itself is refused
(`validation.raycluster._feature_gate_errors`). Read-only and O(size of the spec).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ray_operator import features
from ray_operator.builders.mtls import (
    TLS_ENV_VARS,
    TLS_MOUNT_PATH,
    TLS_VOLUME_NAME,
    WAIT_FOR_IP_SAN_CONTAINER,
    is_tls_enabled,
)
from ray_operator.spec.raycluster import spec
from ray_operator.validation.errors import FieldError, forbidden
from ray_operator.validation.limits import ClusterLimits

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster

_MANAGED = "the operator manages it when spec.tlsOptions.enabled is true"


def tls_options_errors(cluster: RayCluster, *, limits: ClusterLimits) -> Iterator[FieldError]:
    """Every clash between the templates and what mTLS injects; nothing while mTLS is off."""
    cluster_spec = spec(cluster)
    if not limits.feature_gates.enabled(features.RAY_CLUSTER_MTLS):
        return
    if not is_tls_enabled(cluster_spec):
        return
    head = cluster_spec.get("headGroupSpec")
    if isinstance(head, Mapping):
        yield from _template_errors(head.get("template"), "spec.headGroupSpec.template")
    groups = cluster_spec.get("workerGroupSpecs")
    for index, group in enumerate(groups if isinstance(groups, list) else ()):
        if isinstance(group, Mapping):
            path = f"spec.workerGroupSpecs[{index}].template"
            yield from _template_errors(group.get("template"), path)
    options = cluster_spec.get("autoscalerOptions")
    if isinstance(options, Mapping):
        yield from _container_errors(options, "spec.autoscalerOptions")


def _template_errors(template: Any, path: str) -> Iterator[FieldError]:
    pod_spec = template.get("spec") if isinstance(template, Mapping) else None
    if not isinstance(pod_spec, Mapping):
        return
    containers = pod_spec.get("containers")
    if isinstance(containers, list) and containers and isinstance(containers[0], Mapping):
        yield from _container_errors(containers[0], f"{path}.spec.containers[0]")
    for index, volume in _items(pod_spec.get("volumes")):
        if volume.get("name") == TLS_VOLUME_NAME:
            yield forbidden(
                f"{path}.spec.volumes[{index}].name",
                f"{TLS_VOLUME_NAME!r} is the volume of the cluster's certificate: {_MANAGED}",
            )
    for index, init in _items(pod_spec.get("initContainers")):
        if init.get("name") == WAIT_FOR_IP_SAN_CONTAINER:
            yield forbidden(
                f"{path}.spec.initContainers[{index}].name",
                f"{WAIT_FOR_IP_SAN_CONTAINER!r} is the init container mTLS adds: {_MANAGED}",
            )


def _container_errors(container: Mapping[str, Any], path: str) -> Iterator[FieldError]:
    for index, env in _items(container.get("env")):
        if env.get("name") in TLS_ENV_VARS:
            yield forbidden(
                f"{path}.env[{index}].name", f"{env['name']} may not be set: {_MANAGED}"
            )
    for index, mount in _items(container.get("volumeMounts")):
        if mount.get("name") == TLS_VOLUME_NAME:
            yield forbidden(
                f"{path}.volumeMounts[{index}].name",
                f"a volume mount named {TLS_VOLUME_NAME!r} may not be set: {_MANAGED}",
            )
        mount_path = mount.get("mountPath")
        # "/etc/ray/tls/" is the same directory (KubeRay compares the exact string only).
        if isinstance(mount_path, str) and mount_path.rstrip("/") == TLS_MOUNT_PATH:
            yield forbidden(
                f"{path}.volumeMounts[{index}].mountPath",
                f"nothing may be mounted at {TLS_MOUNT_PATH}: {_MANAGED}",
            )


def _items(value: Any) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """The mappings of a list field with their indices; anything else (the schema refuses it
    first) yields nothing."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        for index, item in enumerate(value):
            if isinstance(item, Mapping):
                yield index, item
