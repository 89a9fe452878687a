"""The RayServeGraph step that keeps its builder ConfigMap exactly what the operator wrote.

Whatever a RayServeGraph's Ray containers find first on PYTHONPATH runs in every Python process
of its cluster, so the ConfigMap `<graph>-serve-graph-builder-<version>` is trusted by what no
tenant can forge: its content. A ConfigMap of that name is used only when it holds exactly the
module, nothing else, and is immutable (`builder_configmap_findings` is empty): then the API
server refuses any later change of its content, whoever created it. Its ownerReferences and
managedFields prove nothing (any client may write an ownerReference with the graph's uid, which
`view` shows, and name any field manager on create or update); they only decide what happens to
a ConfigMap that fails the check:

- none of that name: created, immutable (the RayService is built in the same reconcile);
- exact but not labelled and owned as ours (say, someone removed our labels): adopted, its
  labels and ownerReferences set as we build them (metadata may change on an immutable object);
- not exact, and the name is this graph's — an ownerReference claims the graph (a planted one
  with a forged owner), or a RayService of the graph already mounts that name (one swapped in
  after we wrote ours, whatever it claims): replaced — its finalizers cleared (they would keep
  it, and its content, mounted while it terminates), deleted by uid, created anew; a Warning
  says what was found, in fixed words. Writing exactly the module where something else was is
  never a risk; it only must not destroy what may be someone else's, hence:
- not exact, not claiming the graph, and a name the graph does not mount yet: someone else's,
  neither used nor changed: `Deployed` turns False with reason `BuilderConfigMapConflict` and
  nothing is deployed or updated until it is gone (a RayService made before, on another name,
  is left as it is).

The RayService is created or patched only in a reconcile that found the ConfigMap exact (or
wrote it). What remains, by design of Kubernetes volumes (they name a ConfigMap, not a version):
a principal who may delete *and* create ConfigMaps in the namespace can swap the module for Pods
that start before the operator notices and replaces it (a watch event away; nodes already
running one of the graph's Pods keep the immutable copy they cached). Such a principal acts in
its own namespace on its own clusters only.

An operator whose module differs names a new ConfigMap (the version is part of the name), so the
RayService's cluster rolls out with it; the ConfigMaps of other versions this graph owns are
deleted once no RayCluster of the namespace mounts them (`retire_stale`), and until then any that
is not immutable (written by an operator before this check) is made so, holding the current
module as that operator would have written it in place.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ray_operator.builders.serve_graph import (
    build_builder_configmap,
    builder_configmap_findings,
    builder_configmap_name,
    mounted_configmap_names,
)
from ray_operator.runtime.controller import names_owner
from ray_operator.runtime.errors import AlreadyExists
from ray_operator.spec.kinds import CONFIG_MAP, RAY_CLUSTER, RAY_SERVICE
from ray_operator.status.rayservegraph import ConditionState

if TYPE_CHECKING:
    from ray_operator.runtime.client import KubeClient
    from ray_operator.runtime.events import EventRecorder
    from ray_operator.runtime.store import StoreView

logger = logging.getLogger(__name__)

Object = Mapping[str, Any]

CONFLICT_REASON = "BuilderConfigMapConflict"
REPLACED_REASON = "BuilderConfigMapReplaced"


@dataclass(frozen=True)
class BuilderConfigMaps:
    """The builder ConfigMap step of the RayServeGraph controller: its cache, client and events."""

    store: StoreView
    client: KubeClient
    events: EventRecorder

    async def ensure(self, rsg: Object) -> ConditionState | None:
        """Make the graph's builder ConfigMap exactly what the operator writes; None when it is
        (the RayService may then be built), else why nothing may be deployed now."""
        desired = build_builder_configmap(rsg)
        existing = await self._existing_or_created(desired)
        if existing is None:
            return None
        findings = builder_configmap_findings(existing)
        if not findings:
            await self._adopt(existing, desired)
            return None
        if names_owner(existing, rsg["metadata"].get("uid")) or self._mounted_by_graph(rsg):
            return await self._replace(rsg, existing, desired, findings)
        return self._conflict(rsg, existing, findings)

    async def retire_stale(self, rsg: Object) -> bool:
        """Delete this graph's builder ConfigMaps of other versions that no RayCluster of the
        namespace mounts; make those still mounted immutable. True while some are mounted (look
        again later: a RayCluster's deletion does not bring the graph back)."""
        stale = self._other_versions(rsg)
        if not stale:
            return False
        mounted = self._mounted_configmaps(rsg["metadata"]["namespace"])
        for configmap in stale:
            if configmap["metadata"]["name"] not in mounted:
                await self.client.delete_seen(CONFIG_MAP, configmap)
                logger.info(
                    "deleted the unused builder ConfigMap %s", configmap["metadata"]["name"]
                )
            elif configmap.get("immutable") is not True:
                await self._harden(rsg, configmap)
        return any(configmap["metadata"]["name"] in mounted for configmap in stale)

    # --- the steps -----------------------------------------------------------------------------

    async def _existing_or_created(self, desired: Object) -> Object | None:
        """The ConfigMap of that name (from the cache, else the API), or None once we created it."""
        namespace, name = desired["metadata"]["namespace"], desired["metadata"]["name"]
        existing = self.store.get(CONFIG_MAP, namespace, name)
        if existing is not None:
            return existing
        try:
            await self.client.create(CONFIG_MAP, desired, namespace=namespace)
        except AlreadyExists:
            # Not in the cache: only labelled ConfigMaps are, so it may be anyone's.
            return await self.client.get(CONFIG_MAP, name, namespace=namespace)
        logger.info("created the builder ConfigMap %s", name)
        return None

    async def _adopt(self, existing: Object, desired: Object) -> None:
        """Put our labels and ownerReferences on an exact ConfigMap that lacks them."""
        metadata, wanted = existing["metadata"], desired["metadata"]
        labels = metadata.get("labels") or {}
        if metadata.get("ownerReferences") == wanted.get("ownerReferences") and all(
            labels.get(key) == value for key, value in wanted["labels"].items()
        ):
            return
        patch = {
            "metadata": {
                "labels": wanted["labels"],
                "ownerReferences": wanted.get("ownerReferences"),
                "resourceVersion": metadata["resourceVersion"],
            }
        }
        await self.client.patch(
            CONFIG_MAP, metadata["name"], patch, namespace=metadata["namespace"]
        )
        logger.info("labelled and owned the builder ConfigMap %s", metadata["name"])

    def _conflict(self, rsg: Object, existing: Object, findings: list[str]) -> ConditionState:
        name = existing["metadata"]["name"]
        message = (
            f"ConfigMap {name} exists, is not this RayServeGraph's and is not what the operator "
            f"writes ({_listed(findings)}): its Ray containers would import it, so nothing is "
            "deployed until it is deleted"
        )
        self.events.record(rsg, reason=CONFLICT_REASON, message=message, type="Warning")
        return ConditionState("False", CONFLICT_REASON, message)

    async def _replace(
        self, rsg: Object, existing: Object, desired: Object, findings: list[str]
    ) -> ConditionState | None:
        """Delete a ConfigMap of the graph's name that is not what we write; create ours."""
        metadata = existing["metadata"]
        name, namespace = metadata["name"], metadata["namespace"]
        message = (
            f"ConfigMap {name} was not what the operator writes ({_listed(findings)}): "
            "replaced by the operator's builder module"
        )
        logger.warning("%s", message)
        self.events.record(rsg, reason=REPLACED_REASON, message=message, type="Warning")
        if metadata.get("finalizers"):
            # A finalizer would keep it, and its content mounted by new Pods, while it terminates.
            clear = {
                "metadata": {"finalizers": None, "resourceVersion": metadata["resourceVersion"]}
            }
            await self.client.patch(CONFIG_MAP, name, clear, namespace=namespace)
        await self.client.delete_seen(CONFIG_MAP, existing)
        try:
            await self.client.create(CONFIG_MAP, desired, namespace=namespace)
        except AlreadyExists:
            # Not gone yet, or another one already: judged again on the next look.
            return ConditionState("False", REPLACED_REASON, f"{message}; waiting for it to go")
        return None

    async def _harden(self, rsg: Object, configmap: Object) -> None:
        """Rewrite a mutable builder ConfigMap of another version still mounted as exactly the
        current module, immutable (what the operator that wrote it would have updated in place)."""
        metadata = configmap["metadata"]
        body = build_builder_configmap(rsg)
        body["metadata"] |= {
            "name": metadata["name"],
            "resourceVersion": metadata["resourceVersion"],
        }
        await self.client.replace(CONFIG_MAP, body)
        logger.info("made the builder ConfigMap %s immutable", metadata["name"])

    def _mounted_by_graph(self, rsg: Object) -> bool:
        """Whether a RayService of this graph already mounts the builder ConfigMap's name."""
        name = builder_configmap_name(rsg["metadata"]["name"])
        for rayservice in self.store.list_owned_by(RAY_SERVICE, rsg["metadata"]["uid"]):
            spec = rayservice.get("spec")
            config = spec.get("rayClusterConfig") if spec else None
            if config and name in mounted_configmap_names(config):
                return True
        return False

    def _other_versions(self, rsg: Object) -> list[Object]:
        """This graph's builder ConfigMaps (by ownerReference) but the current version's, not
        being deleted."""
        current = builder_configmap_name(rsg["metadata"]["name"])
        return [
            configmap
            for configmap in self.store.list_owned_by(CONFIG_MAP, rsg["metadata"]["uid"])
            if configmap["metadata"]["name"] != current
            and not configmap["metadata"].get("deletionTimestamp")
        ]

    def _mounted_configmaps(self, namespace: str) -> set[str]:
        mounted: set[str] = set()
        for cluster in self.store.list(RAY_CLUSTER, namespace=namespace):
            mounted |= mounted_configmap_names(cluster.get("spec") or {})
        return mounted


def _listed(findings: list[str]) -> str:
    return "; ".join(findings)
