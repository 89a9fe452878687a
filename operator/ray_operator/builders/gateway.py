"""What an incremental upgrade (`NewClusterWithIncrementalUpgrade`) creates, built purely: the
RayService's Gateway, its HTTPRoute splitting traffic between the active and pending clusters
by weight, and each cluster's own Serve Service that the route points at.

The same objects as KubeRay's `createGateway`, `createHTTPRoute` and `BuildServeService` (with
the incremental upgrade on): `<rayservice>-gateway` with one HTTP listener named `http` on port
80 of the RayService's `gatewayClassName`; `<rayservice>-httproute`, parent that Gateway, one
rule matching the path prefix `/` whose backends are `<cluster>-serve-svc` of the active cluster
and (during an upgrade) of the pending one, on the head's `serve` port, with their weights; the
Gateway and the route owned by the RayService, each Serve Service by its RayCluster (it goes with
the cluster). Beyond KubeRay, they carry our `app.kubernetes.io/created-by` label and the
`ray.io/originated-from-*` labels, so `kubectl get -l` finds them.

Also what the Gateway API reports back: whether the Gateway is Accepted and Programmed, whether
the route is Accepted with its references resolved by that Gateway, and the weights the route
gives each cluster (the status reads traffic from the route, as KubeRay's does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ray_operator.builders.metadata import owner_references
from ray_operator.builders.rayjob import originated_labels, owner_reference
from ray_operator.builders.rayservice import build_serve_service_for_service
from ray_operator.builders.services import head_ports
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.object_names import serve_service_name
from ray_operator.spec.raycluster import JSON

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster, RayService

Object = Mapping[str, Any]

GATEWAY_API_GROUP: Final = "gateway.networking.k8s.io"
GATEWAY_API_VERSION: Final = f"{GATEWAY_API_GROUP}/v1"
LISTENER_NAME: Final = "http"
LISTENER_PORT: Final = 80
DEFAULT_SERVE_PORT: Final = 8000


def gateway_name(rayservice: Object) -> str:
    return f"{rayservice['metadata']['name']}-gateway"


def httproute_name(rayservice: Object) -> str:
    return f"{rayservice['metadata']['name']}-httproute"


def gateway_class_name(rayservice: Object) -> str:
    strategy = (rayservice.get("spec") or {}).get("upgradeStrategy") or {}
    return str((strategy.get("clusterUpgradeOptions") or {}).get("gatewayClassName") or "")


def _metadata(rayservice: RayService, name: str) -> JSON:
    return {
        "name": name,
        "namespace": rayservice["metadata"]["namespace"],
        "labels": {
            **originated_labels(rayservice),
            names.CREATED_BY_LABEL: names.CREATED_BY,
        },
        "ownerReferences": [owner_reference(rayservice)],
    }


def build_gateway(rayservice: RayService) -> JSON:
    """`<rayservice>-gateway`: one HTTP listener on port 80 of the RayService's GatewayClass."""
    return {
        "apiVersion": GATEWAY_API_VERSION,
        "kind": "Gateway",
        "metadata": _metadata(rayservice, gateway_name(rayservice)),
        "spec": {
            "gatewayClassName": gateway_class_name(rayservice),
            "listeners": [{"name": LISTENER_NAME, "protocol": "HTTP", "port": LISTENER_PORT}],
        },
    }


@dataclass(frozen=True, slots=True)
class Backend:
    """One cluster the route sends traffic to, and its share (0..100)."""

    cluster: RayCluster
    weight: int


def build_httproute(rayservice: RayService, backends: Sequence[Backend]) -> JSON:
    """`<rayservice>-httproute` on the Gateway: everything under `/` split between `backends`
    (the active cluster first, then the pending one) by weight."""
    namespace = rayservice["metadata"]["namespace"]
    refs = [
        {
            "name": serve_service_name(backend.cluster["metadata"]["name"]),
            "namespace": namespace,
            "port": serve_port(backend.cluster),
            "weight": backend.weight,
        }
        for backend in backends
    ]
    return {
        "apiVersion": GATEWAY_API_VERSION,
        "kind": "HTTPRoute",
        "metadata": _metadata(rayservice, httproute_name(rayservice)),
        "spec": {
            "parentRefs": [{"name": gateway_name(rayservice), "namespace": namespace}],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "backendRefs": refs,
                }
            ],
        },
    }


def serve_port(cluster: RayCluster) -> int:
    """The head's port named `serve` (8000 when it names none: KubeRay's `GetServePort`)."""
    return head_ports(cluster).get(names.SERVE_PORT_NAME, DEFAULT_SERVE_PORT)


def build_cluster_serve_service(rayservice: RayService, cluster: RayCluster) -> JSON:
    """`<cluster>-serve-svc`: the RayService's Serve Service, but named and labelled after one
    cluster and owned by it (`spec.serveService` does not apply: the route names the Service)."""
    spec = {key: value for key, value in rayservice["spec"].items() if key != "serveService"}
    service = build_serve_service_for_service({**rayservice, "spec": spec}, cluster)  # type: ignore[typeddict-item]
    name = cluster["metadata"]["name"]
    meta = service["metadata"]
    meta["name"] = serve_service_name(name)
    meta["labels"][names.ORIGINATED_FROM_CR_NAME_LABEL] = name
    meta["labels"][names.SERVE_LABEL] = f"{name}-serve"
    meta["ownerReferences"] = owner_references(cluster)
    return service


# --- what the Gateway API reports --------------------------------------------------------------


def _true(conditions: object, kind: str) -> bool:
    return isinstance(conditions, list) and any(
        isinstance(c, dict) and c.get("type") == kind and c.get("status") == "True"
        for c in conditions
    )


def gateway_ready(gateway: Object | None) -> bool:
    """The Gateway is Accepted and Programmed (KubeRay's `IsGatewayReady`)."""
    if gateway is None:
        return False
    conditions = (gateway.get("status") or {}).get("conditions")
    return _true(conditions, "Accepted") and _true(conditions, "Programmed")


def httproute_ready(gateway: Object | None, route: Object | None) -> bool:
    """A parent of the route is our Gateway and it Accepted the route with its references
    resolved (KubeRay's `IsHTTPRouteReady`)."""
    if gateway is None or route is None:
        return False
    for parent in (route.get("status") or {}).get("parents") or ():
        if not isinstance(parent, dict):
            continue
        ref = parent.get("parentRef") or {}
        if ref.get("name") != gateway["metadata"]["name"]:
            continue
        if ref.get("namespace") not in (None, gateway["metadata"].get("namespace")):
            continue
        conditions = parent.get("conditions")
        if _true(conditions, "Accepted") and _true(conditions, "ResolvedRefs"):
            return True
    return False


def route_weights(
    route: Object | None, *, active: str, pending: str
) -> tuple[int | None, int | None]:
    """The weights the route gives the active and the pending cluster's Serve Service (None:
    not in the route). By exact Service name, where KubeRay matches a substring of it."""
    found: dict[str, int] = {}
    rules = ((route or {}).get("spec") or {}).get("rules") or []
    refs = (rules[0].get("backendRefs") or []) if rules and isinstance(rules[0], dict) else []
    for ref in refs:
        weight = ref.get("weight")
        found[str(ref.get("name"))] = weight if isinstance(weight, int) else 1
    return (
        found.get(serve_service_name(active)) if active else None,
        found.get(serve_service_name(pending)) if pending else None,
    )


def _route_projection(route: Object) -> object:
    spec = route.get("spec") or {}
    parents = [(p.get("name"), p.get("namespace")) for p in spec.get("parentRefs") or ()]
    rules = [
        (
            rule.get("matches"),
            [
                (r.get("name"), r.get("namespace"), r.get("port"), r.get("weight", 1))
                for r in rule.get("backendRefs") or ()
            ],
        )
        for rule in spec.get("rules") or ()
    ]
    return parents, rules, spec.get("hostnames") or []


def httproute_differs(existing: Object, desired: Object) -> bool:
    """Whether the route's parents, matches or backends (names, ports, weights) differ from
    what is wanted; what the API server or a Gateway controller defaults does not count."""
    return _route_projection(existing) != _route_projection(desired)


def gateway_differs(existing: Object, desired: Object) -> bool:
    """Whether the Gateway's class or listeners (name, protocol, port) differ from the wanted."""

    def projection(gateway: Object) -> object:
        spec = gateway.get("spec") or {}
        listeners = [
            (item.get("name"), item.get("protocol"), item.get("port"))
            for item in spec.get("listeners") or ()
        ]
        return spec.get("gatewayClassName"), listeners

    return projection(existing) != projection(desired)
