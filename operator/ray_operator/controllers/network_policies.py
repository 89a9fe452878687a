"""The RayCluster step that keeps its NetworkPolicies as `spec.networkPolicy` says (KubeRay's
NetworkPolicy controller, behind the RayClusterNetworkPolicy feature gate).

Each reconcile of a cluster, with the gate on: every policy `builders/network_policies.py` builds
is created when missing, and put back as built when its spec or one of our labels differs
(edited by hand, or the cluster's spec changed) — a whole-object update guarded by its
resourceVersion, as KubeRay's Update: a merge patch could not remove what someone added to a
selector. Policies this cluster owns that are no longer wanted (the field removed, a worker group
gone) are deleted. A policy of that name the cluster does not own is left alone, with a Warning
(KubeRay's `NetworkPolicyNameCollision`); the cluster goes on, as under KubeRay, where a separate
controller makes the policies. A deleted cluster's policies go with its other dependents
(`RayClusterController.delete_everything_of_deleted_cluster`): no garbage collector is needed.

The step runs before any Pod is created, so a new cluster's Pods start isolated. With the gate
off nothing is looked at: NetworkPolicies are not cached and the operator has no rights on them
(validation refuses the field meanwhile).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ray_operator.builders.network_policies import build_network_policies, network_policy_drifted
from ray_operator.controllers.owned_objects import OwnedObjects
from ray_operator.runtime.errors import ApiError, Conflict, Invalid, NotFound
from ray_operator.spec.kinds import NETWORK_POLICY, ObjectKey

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster

    from ray_operator.runtime.client import KubeClient
    from ray_operator.runtime.events import EventRecorder

logger = logging.getLogger(__name__)

Object = Mapping[str, Any]


@dataclass(frozen=True)
class NetworkPolicySteps:
    """What the step needs from the RayCluster controller: its owned-object writer (so
    expectations, collisions and Events stay in one place), client and events."""

    enabled: bool
    """The RayClusterNetworkPolicy feature gate: off, the step does nothing."""
    objects: OwnedObjects
    client: KubeClient
    events: EventRecorder

    async def ensure_network_policies(self, key: ObjectKey, cluster: RayCluster) -> None:
        """Create, restore and delete this cluster's NetworkPolicies to match its spec."""
        if not self.enabled:
            return
        desired = build_network_policies(cluster)
        owned = {
            existing["metadata"]["name"]: existing
            for existing in self.objects.observed(NETWORK_POLICY, key, cluster)
        }
        for policy in desired:
            await self._ensure_one(key, cluster, policy, owned.get(policy["metadata"]["name"]))
        wanted = {policy["metadata"]["name"] for policy in desired}
        uid = cluster["metadata"]["uid"]
        for name, existing in owned.items():
            if name not in wanted and _controlled_by(existing, uid):
                await self._delete_unwanted(key, cluster, existing)

    async def _ensure_one(
        self, key: ObjectKey, cluster: RayCluster, desired: Object, existing: Object | None
    ) -> None:
        """Missing, or someone else's (not among the cluster's own): a 409 tells, and whose."""
        name = desired["metadata"]["name"]
        report_collision = self.objects.collision_reported_once(
            key,
            cluster,
            NETWORK_POLICY,
            finding=f"networkpolicy-collision/{name}",
            reason="NetworkPolicyNameCollision",
            consequence=": its isolation is not applied; rename or delete that NetworkPolicy",
        )

        async def update_when_drifted(existing: Object) -> None:
            if network_policy_drifted(desired, existing):
                await self._update(key, cluster, desired, existing)

        await self.objects.ensure(
            key,
            cluster,
            NETWORK_POLICY,
            desired,
            existing=existing,
            owns=_controlled_by,
            on_collision=report_collision,
            repair=update_when_drifted,
        )

    async def _update(
        self, key: ObjectKey, cluster: RayCluster, desired: Object, existing: Object
    ) -> None:
        """KubeRay's Update: our spec and labels on the object as cached (its resourceVersion
        makes a stale cache answer 409, and the newer version's event brings us back)."""
        name = desired["metadata"]["name"]
        body = copy.deepcopy(dict(existing))
        body["metadata"]["labels"] = {
            **(body["metadata"].get("labels") or {}),
            **desired["metadata"]["labels"],
        }
        body["spec"] = copy.deepcopy(desired["spec"])
        what = f"NetworkPolicy {key.namespace}/{name}"
        try:
            await self.client.replace(NETWORK_POLICY, body)
        except (NotFound, Conflict):
            return
        except ApiError as error:
            self.events.record(
                cluster,
                reason="FailedToUpdateNetworkPolicy",
                type="Warning",
                message=f"Failed to update {what}: {error}",
            )
            if isinstance(error, Invalid):
                return  # Validation should have refused such a spec: an Event, no retry loop.
            raise
        logger.info("%s: updated %s", key, what)
        self.events.record(cluster, reason="UpdatedNetworkPolicy", message=f"Updated {what}")

    async def _delete_unwanted(self, key: ObjectKey, cluster: RayCluster, policy: Object) -> None:
        what = f"NetworkPolicy {key.namespace}/{policy['metadata']['name']}"
        try:
            await self.objects.delete(key, NETWORK_POLICY, policy)
        except ApiError as error:
            self.events.record(
                cluster,
                reason="FailedToDeleteNetworkPolicy",
                type="Warning",
                message=f"Failed to delete {what}: {error}",
            )
            raise
        logger.info("%s: deleted %s (no longer in spec.networkPolicy)", key, what)
        self.events.record(cluster, reason="DeletedNetworkPolicy", message=f"Deleted {what}")


def _controlled_by(obj: Object, uid: str) -> bool:
    """KubeRay's `IsControlledBy`: the cluster is the object's controller, not just an owner."""
    return any(
        reference.get("uid") == uid and reference.get("controller") is True
        for reference in obj["metadata"].get("ownerReferences") or ()
    )
