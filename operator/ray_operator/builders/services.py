"""Services of a RayCluster: the head Service, the headless worker Service, the serve Service.

Mirrors KubeRay's `common/service.go`. The head Service `<cluster>-head-svc` exposes the head
container's named ports (or, when it declares none, gcs-server 6379, dashboard 8265, client 10001,
serve 8000) plus always `metrics` 8080, sorted by name, with `appProtocol: tcp`. With type
ClusterIP it is headless and publishes not-ready addresses: a cluster has one head Pod, and workers
must resolve it before its probes pass. `headGroupSpec.headService` is a user-supplied Service that
we complete rather than replace. Every Service also carries our `app.kubernetes.io/created-by` label
(KubeRay's headless and serve Services carry none); the runtime finds Services by their `ray.io/*`
labels (`spec/kinds.py: SERVICE_SELECTORS`), and the head Service's selector leaves
`created-by` out (KubeRay's has it), so it selects either operator's head Pod.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ray_operator.builders.metadata import head_service_selector, owner_references
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.object_names import (
    head_service_name,
    headless_service_name,
    serve_service_name,
)
from ray_operator.spec.raycluster import (
    JSON,
    ClusterLike,
    as_cluster_manifest,
    as_manifest,
    cluster_name,
    cluster_namespace,
    head_group,
    json_copy,
    pod_spec,
    ray_container,
    read_cluster_manifest,
    spec,
    worker_groups,
)

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster


_DEFAULT_HEAD_PORTS = {
    names.CLIENT_PORT_NAME: names.CLIENT_PORT,
    names.GCS_PORT_NAME: names.GCS_PORT,
    names.DASHBOARD_PORT_NAME: names.DASHBOARD_PORT,
    names.METRICS_PORT_NAME: names.METRICS_PORT,
    names.SERVE_PORT_NAME: names.SERVE_PORT,
}


class NoServePortError(ValueError):
    """The head container declares no `serve`/`serve-*` port, so no serve Service can be built."""


def head_ports(cluster: ClusterLike) -> dict[str, int]:
    """Port name → number the head Service exposes (KubeRay's `getServicePorts`)."""
    manifest = read_cluster_manifest(cluster)  # only names and numbers are taken
    container = ray_container(pod_spec(head_group(manifest)))
    ports: dict[str, int] = {}
    for port in container.get("ports") or []:
        number = int(port["containerPort"])
        # Unnamed ports still need a Service port name; KubeRay calls them "<number>-port".
        ports[port.get("name") or f"{number}-port"] = number
    if not ports:
        ports = dict(_DEFAULT_HEAD_PORTS)
    ports.setdefault(names.METRICS_PORT_NAME, names.METRICS_PORT)
    return ports


def build_head_service(cluster: ClusterLike, *, headless: bool = True) -> JSON:
    """The head Service; `headless=False` is KubeRay's ENABLE_RAY_HEAD_CLUSTER_IP_SERVICE."""
    manifest = as_cluster_manifest(cluster)
    group = head_group(manifest)
    selector = _head_selector(manifest)
    service_annotations = dict(spec(manifest).get("headServiceAnnotations") or {})
    ports = [
        {"name": name, "port": number, "appProtocol": "tcp"}
        for name, number in sorted(head_ports(manifest).items())
    ]
    custom = group.get("headService")
    if custom is not None:
        return _complete_user_head_service(
            manifest,
            json_copy(custom),
            selector=selector,
            ports=ports,
            annotations=service_annotations,
        )
    service_type = group.get("serviceType") or "ClusterIP"
    service_spec: JSON = {"selector": selector, "ports": ports, "type": service_type}
    if headless and service_type == "ClusterIP":
        service_spec["clusterIP"] = "None"
        service_spec["publishNotReadyAddresses"] = True
    labels = {**selector, names.CREATED_BY_LABEL: names.CREATED_BY}
    meta = _meta(manifest, name=head_service_name(manifest), labels=labels)
    if service_annotations:
        meta["annotations"] = service_annotations
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": service_spec}


def _head_selector(cluster: RayCluster) -> dict[str, str]:
    selector = head_service_selector(cluster)
    # KubeRay lets a template's `app.kubernetes.io/name` replace the default in the selector.
    template_labels = ((head_group(cluster).get("template") or {}).get("metadata") or {}).get(
        "labels"
    ) or {}
    if names.APP_NAME_LABEL in template_labels:
        selector[names.APP_NAME_LABEL] = template_labels[names.APP_NAME_LABEL]
    return selector


def _complete_user_head_service(
    cluster: RayCluster,
    service: JSON,
    *,
    selector: dict[str, str],
    ports: list[JSON],
    annotations: dict[str, str],
) -> JSON:
    """Fill in a user's `headService`: our selector and labels win, `headServiceAnnotations` win."""
    meta = service.setdefault("metadata", {})
    meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
    meta["labels"] = {
        **(meta.get("labels") or {}),
        **selector,
        names.CREATED_BY_LABEL: names.CREATED_BY,
    }
    meta["name"] = meta.get("name") or head_service_name(cluster)
    meta["namespace"] = cluster_namespace(cluster)
    owners = owner_references(cluster)
    if owners:
        meta["ownerReferences"] = owners
    service_spec = service.setdefault("spec", {})
    service_spec["selector"] = selector
    # KubeRay appends the default ports blindly; skipping names the user already declared avoids
    # a Service the API server would reject for duplicate port names.
    declared = {port.get("name") for port in service_spec.get("ports") or []}
    service_spec["ports"] = [
        *(service_spec.get("ports") or []),
        *(p for p in ports if p["name"] not in declared),
    ]
    service_spec.setdefault("type", (head_group(cluster).get("serviceType") or "ClusterIP"))
    service.setdefault("apiVersion", "v1")
    service.setdefault("kind", "Service")
    service.pop("status", None)
    return service


def needs_headless_service(cluster: ClusterLike) -> bool:
    """Whether any worker group is multi-host (`numOfHosts` > 1)."""
    return any(
        int(group.get("numOfHosts") or 1) > 1
        for group in worker_groups(read_cluster_manifest(cluster))
    )


def build_headless_service(cluster: ClusterLike) -> JSON:
    """`<cluster>-headless`: DNS for peer traffic between hosts of multi-host worker replicas."""
    manifest = as_cluster_manifest(cluster)
    name = cluster_name(manifest)
    labels = {
        names.HEADLESS_WORKER_SERVICE_LABEL: name,
        names.CLUSTER_LABEL: name,
        names.CREATED_BY_LABEL: names.CREATED_BY,
    }
    service_spec = {
        "clusterIP": "None",
        "selector": {names.CLUSTER_LABEL: name, names.NODE_TYPE_LABEL: names.WORKER_NODE},
        "type": "ClusterIP",
        # Peers must find each other whether or not Ray's proxy made them ready.
        "publishNotReadyAddresses": True,
    }
    meta = _meta(manifest, name=headless_service_name(manifest), labels=labels)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": service_spec}


def wants_serve_service(cluster: ClusterLike) -> bool:
    """Whether the RayCluster asks for a serve Service (`ray.io/enable-serve-service: "true"`)."""
    meta = as_manifest(cluster).get("metadata") or {}
    return (meta.get("annotations") or {}).get(names.ENABLE_SERVE_SERVICE_ANNOTATION) == "true"


def build_serve_service(cluster: ClusterLike) -> JSON:
    """`<cluster>-serve-svc` over every Pod of the cluster, exposing the head's serve ports."""
    manifest = as_cluster_manifest(cluster)
    name = cluster_name(manifest)
    ports = [
        {"name": port_name, "port": number}
        for port_name, number in sorted(head_ports(manifest).items())
        if port_name == names.SERVE_PORT_NAME or port_name.startswith(names.SERVE_PORT_NAME + "-")
    ]
    if not ports:
        raise NoServePortError(
            "Please specify a port named 'serve' (or with the prefix 'serve-', e.g. 'serve-grpc') "
            "in the Ray head container; otherwise, the Kubernetes service for Ray Serve will not "
            "be created."
        )
    labels = {
        names.ORIGINATED_FROM_CR_NAME_LABEL: name,
        names.ORIGINATED_FROM_CRD_LABEL: names.CRD_RAY_CLUSTER,
        names.SERVE_LABEL: f"{name}-serve",
        names.CLUSTER_LABEL: name,
        names.CREATED_BY_LABEL: names.CREATED_BY,
    }
    service_spec = {
        "selector": {names.CLUSTER_LABEL: name},
        "ports": ports,
        "type": head_group(manifest).get("serviceType") or "ClusterIP",
    }
    meta = _meta(manifest, name=serve_service_name(name), labels=labels)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": service_spec}


def _meta(cluster: RayCluster, *, name: str, labels: dict[str, str]) -> JSON:
    meta: JSON = {"name": name, "namespace": cluster_namespace(cluster), "labels": labels}
    owners = owner_references(cluster)
    if owners:
        meta["ownerReferences"] = owners
    return meta
