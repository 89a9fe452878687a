"""The Gateway API objects of an incremental upgrade, written: each cluster's own Serve Service
`<cluster>-serve-svc`, the RayService's Gateway `<name>-gateway` and its HTTPRoute
`<name>-httproute` (built purely in `builders/gateway.py`), and their deletion when the RayService
is suspended or deleted.

Missing Gateway API CRDs are told by a Warning event on each attempt (aggregated) and a WARNING
log line once per RayService (DEBUG afterwards); the RayService keeps serving through its
Services as before. A 404 that names the object means the object is absent; one that does not
means the resource type is not served.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from ray_operator.builders import gateway as gw
from ray_operator.builders.services import NoServePortError
from ray_operator.runtime.errors import AlreadyExists, Forbidden, KubeError, NotFound
from ray_operator.spec.kinds import SERVICE, Kind, ObjectKey
from ray_operator.status.incremental_upgrade_pass import applies

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster, RayService

    from ray_operator.runtime.client import KubeClient
    from ray_operator.runtime.events import EventRecorder
    from ray_operator.runtime.store import StoreView

logger = logging.getLogger(__name__)

JSON = dict[str, Any]

GATEWAY: Final[Kind[JSON]] = Kind(gw.GATEWAY_API_GROUP, "v1", "gateways", "Gateway")
HTTP_ROUTE: Final[Kind[JSON]] = Kind(gw.GATEWAY_API_GROUP, "v1", "httproutes", "HTTPRoute")
MISSING_CRDS = (
    "the Gateway API is not installed (no gateway.networking.k8s.io/v1 {kind} resource): "
    "NewClusterWithIncrementalUpgrade needs its CRDs and a Gateway controller"
)


class GatewayRouting:
    """The Gateway, HTTPRoute and per-cluster Serve Services of incrementally upgraded
    RayServices; one per RayService controller."""

    def __init__(self, *, client: KubeClient, store: StoreView, events: EventRecorder) -> None:
        self._client = client
        self._store = store
        self._events = events
        # RayServices told in the log that the Gateway API is missing (the Event aggregates).
        self._told_missing: set[ObjectKey] = set()

    def forget(self, key: ObjectKey) -> None:
        self._told_missing.discard(key)

    async def ensure_routing_objects(
        self, rayservice: RayService, clusters: Iterable[RayCluster | None]
    ) -> tuple[JSON | None, JSON | None]:
        """Each cluster's Serve Service, the Gateway, and the route as stored (None for what the
        Gateway API does not have: the Gateway None when the API is missing)."""
        for cluster in clusters:
            if cluster is not None:
                await self.ensure_cluster_serve_service(rayservice, cluster)
        gateway = await self.ensure_gateway(rayservice)
        if gateway is None:
            return None, None
        try:
            name = gw.httproute_name(rayservice)
            return gateway, await self._get(HTTP_ROUTE, rayservice, name)
        except NotFound:
            self._missing(rayservice, "HTTPRoute", reason="FailedToCreateHTTPRoute")
            return None, None

    async def ensure_cluster_serve_service(
        self, rayservice: RayService, cluster: RayCluster
    ) -> None:
        """`<cluster>-serve-svc`, created once (KubeRay's `reconcilePerClusterServeService`)."""
        namespace = rayservice["metadata"]["namespace"]
        try:
            service = gw.build_cluster_serve_service(rayservice, cluster)
        except NoServePortError as error:
            self._events.record(
                rayservice, reason="InvalidServeService", message=str(error), type="Warning"
            )
            return
        if self._store.get(SERVICE, namespace, service["metadata"]["name"]) is not None:
            return
        try:
            await self._client.create(SERVICE, service, namespace=namespace)
        except AlreadyExists:
            return
        logger.info("created the Serve Service %s", service["metadata"]["name"])

    async def ensure_gateway(self, rayservice: RayService) -> JSON | None:
        """The RayService's Gateway as stored (created or updated to the wanted one); None when
        it cannot be had (the Gateway API is missing, or the request failed: told by an Event)."""
        desired = gw.build_gateway(rayservice)
        name = desired["metadata"]["name"]
        namespace = rayservice["metadata"]["namespace"]
        events = self._events
        try:
            existing = await self._get(GATEWAY, rayservice, name)
            if existing is None:
                created = await self._client.create(GATEWAY, desired, namespace=namespace)
                events.record(
                    rayservice,
                    reason="CreatedGateway",
                    message=f"Created Gateway for RayService {namespace}/{name}",
                )
                return created
            if not gw.gateway_differs(existing, desired):
                return existing
            updated = await self._client.patch(
                GATEWAY, name, {"spec": desired["spec"]}, namespace=namespace
            )
            events.record(
                rayservice,
                reason="UpdatedGateway",
                message=f"Updated the Gateway {namespace}/{name}",
            )
            return updated
        except NotFound:
            self._missing(rayservice, "Gateway", reason="FailedToCreateGateway")
        except KubeError as error:
            events.record(
                rayservice,
                reason="FailedToCreateGateway",
                message=f"Failed to create or update the Gateway {namespace}/{name}: {error}",
                type="Warning",
            )
        return None

    async def ensure_httproute(
        self, rayservice: RayService, desired: JSON, existing: JSON | None
    ) -> bool:
        """Create or update the route; whether it now has the wanted weights."""
        name = desired["metadata"]["name"]
        namespace = rayservice["metadata"]["namespace"]
        events, client = self._events, self._client
        try:
            if existing is None:
                await client.create(HTTP_ROUTE, desired, namespace=namespace)
                events.record(
                    rayservice,
                    reason="CreatedHTTPRoute",
                    message=f"Created HTTPRoute for RayService {namespace}/{name}",
                )
            elif gw.httproute_differs(existing, desired):
                await client.patch(HTTP_ROUTE, name, {"spec": desired["spec"]}, namespace=namespace)
                events.record(
                    rayservice,
                    reason="UpdatedHTTPRoute",
                    message=f"Updated the HTTPRoute {namespace}/{name}",
                )
        except NotFound:
            self._missing(rayservice, "HTTPRoute", reason="FailedToCreateHTTPRoute")
            return False
        except KubeError as error:
            events.record(
                rayservice,
                reason="FailedToUpdateHTTPRoute",
                message=f"Failed to create or update the HTTPRoute {namespace}/{name}: {error}",
                type="Warning",
            )
            return False
        return True

    async def delete_routing(self, rayservice: RayService) -> bool:
        """Delete the Gateway and the HTTPRoute (suspend, deletion) of an incrementally upgraded
        RayService; True when none is left."""
        if not applies(rayservice):
            return True
        left = False
        for kind, name in (
            (HTTP_ROUTE, gw.httproute_name(rayservice)),
            (GATEWAY, gw.gateway_name(rayservice)),
        ):
            try:
                existing = await self._get(kind, rayservice, name)
            except NotFound:
                continue  # the Gateway API is not installed: nothing to delete
            except Forbidden:
                # An operator without the Gateway API rule (the gate turned off and the rule
                # dropped): the objects are owned, the garbage collector removes them.
                logger.info(
                    "%s: may not read its %s; left to the garbage collector",
                    ObjectKey.of(rayservice),
                    kind.kind,
                )
                continue
            if existing is None:
                continue
            left = True
            if not existing["metadata"].get("deletionTimestamp"):
                await self._client.delete_seen(kind, existing)
                namespace = rayservice["metadata"]["namespace"]
                self._events.record(
                    rayservice,
                    reason=f"Deleted{kind.kind}",
                    message=f"Deleted the {kind.kind} {namespace}/{name}",
                )
        return not left

    async def _get(self, kind: Kind[JSON], rayservice: RayService, name: str) -> JSON | None:
        """The object, None when absent; NotFound raised when the kind itself is not served
        (a missing object's 404 names it, a missing resource type's does not)."""
        namespace = rayservice["metadata"]["namespace"]
        try:
            return await self._client.get(kind, name, namespace=namespace)
        except NotFound as error:
            if f'"{name}"' not in str(error):
                raise
            return None

    def _missing(self, rayservice: RayService, kind: str, *, reason: str) -> None:
        message = MISSING_CRDS.format(kind=kind)
        key = ObjectKey.of(rayservice)
        level = logging.DEBUG if key in self._told_missing else logging.WARNING
        self._told_missing.add(key)
        logger.log(level, "%s: %s", key, message)
        self._events.record(rayservice, reason=reason, message=message, type="Warning")
