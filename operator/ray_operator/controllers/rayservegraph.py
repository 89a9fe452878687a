"""The RayServeGraph controller: a Serve DAG described in a protobuf document behind an
authenticated URL, fetched, parsed, compiled and kept deployed as a RayService.

`reconcile` reads as a table of contents: the finalizer `ray-operator.io/serve-graph-cleanup`
(deletion removes the RayService and the builder ConfigMap explicitly: the local control plane
has no garbage collector), the spec's rules (the webhook's, again; an invalid spec fetches and
deploys nothing), the fetch when one is due, parse, compile, the builder ConfigMap (trusted only
when it holds exactly the module, immutable: `serve_graph_builder`), the RayService (created or
patched only then), the builder ConfigMaps of other module versions retired, then the status
(`status/rayservegraph`), written only when it changed.

What each outcome changes:
- an unchanged document (304, or the same digest) computes the same status: nothing is written;
- a failed fetch or a rejected document changes nothing deployed: `Fetched`/`Parsed` turn False
  with the reason and, for a document, the field path; the last good document keeps serving;
- a new good document is compiled (deterministic text) and, when the text differs from the
  RayService's `serveConfigV2`, that one field is patched (the RayService controller updates Serve
  in place). `rayClusterConfig`, `upgradeStrategy` and `rayClusterDeletionDelaySeconds` are
  patched when the hash of what we built from `spec.rayClusterSpec` differs from the one we
  stamped on the RayService (`SPEC_HASH_ANNOTATION`; the API server defaults fields inside it,
  so the object itself is not comparable with what we built). Never deleted and recreated.

When a fetch is due, how it runs beside the workers and backs off, and what its outcome leaves
in the graph's memory: `serve_graph_fetch`; the Secrets it sends: `serve_graph_secrets`; that
memory itself: `serve_graph_documents`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ray_operator.controllers import status_writer
from ray_operator.controllers.finalizers import add_finalizer, has_finalizer, remove_finalizer
from ray_operator.controllers.serve_graph_documents import Compiled, GraphMemory
from ray_operator.controllers.serve_graph_fetch import GraphFetches
from ray_operator.runtime.client import PatchType
from ray_operator.runtime.controller import (
    ControllerContext,
    ControllerFactory,
    Result,
    names_owner,
    owner_keys,
)
from ray_operator.runtime.errors import (
    AlreadyExists,
    BadRequest,
    Invalid,
    KubeError,
)
from ray_operator.servegraph.fetch import Fetcher
from ray_operator.spec.fetch_types import FetchPolicy
from ray_operator.spec.kinds import (
    CONFIG_MAP,
    RAY_CLUSTER,
    RAY_SERVE_GRAPH,
    RAY_SERVICE,
    Kind,
    ObjectKey,
)
from ray_operator.spec.serve_graph_names import (
    SERVE_GRAPH_GROUP,
)
from ray_operator.spec.version_memo import VersionMemo
from ray_operator.status import rayservegraph as rules
from ray_operator.status.rayservegraph import ConditionState
from ray_operator.validation.errors import summarize
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.rayservegraph import validate_rayservegraph

if TYPE_CHECKING:
    from ray_io.v1_views import RayService

    from ray_operator.controllers.serve_graph_builder import BuilderConfigMaps

# The graph's protobuf parser and the Serve config compiler (with protobuf, ~2 MiB) are imported
# by the first RayServeGraph that needs them, not at start: most operators never see one.

logger = logging.getLogger(__name__)

Object = Mapping[str, Any]
JSON = dict[str, Any]

FINALIZER = f"{SERVE_GRAPH_GROUP}/serve-graph-cleanup"
SPEC_HASH_ANNOTATION = f"{SERVE_GRAPH_GROUP}/serve-graph-cluster-hash"
"""On the RayService: sha256 of the cluster part we last wrote (`rayClusterConfig`,
`upgradeStrategy`, `rayClusterDeletionDelaySeconds`)."""
CLUSTER_FIELDS = ("rayClusterConfig", "upgradeStrategy", "rayClusterDeletionDelaySeconds")

CONFLICT_RECHECK_SECONDS = 30.0
"""A RayService or builder ConfigMap of the wanted name that is not ours: looked at again this
often (its deletion does not map back to the graph: it has no ownerReference to it). So is a
builder ConfigMap of another module version still mounted (a RayCluster's deletion does not map
back either)."""


@dataclasses.dataclass(frozen=True, slots=True)
class RayServiceState:
    """The RayService after `ensure_rayservice`: the freshest copy we know, whether it is ours,
    and whether it now carries the compiled config."""

    name: str
    obj: RayService | None
    owned: bool
    carries_config: bool = False
    refused: ConditionState | None = None
    """Why the API server refused our create or patch (then `Deployed` says so)."""


class RayServeGraphController:
    """Reconciles RayServeGraphs; their RayService and builder ConfigMap map back by owner."""

    kind = RAY_SERVE_GRAPH
    reads = (RAY_SERVE_GRAPH, RAY_SERVICE, CONFIG_MAP, RAY_CLUSTER)

    def __init__(
        self,
        context: ControllerContext,
        *,
        policy: FetchPolicy,
        limits: ClusterLimits = DEFAULT_LIMITS,
        clock: Callable[[], datetime.datetime] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = context.store
        self._client = context.client
        self._events = context.events
        self._limits = limits
        self._now = clock or (lambda: datetime.datetime.now(datetime.UTC))
        self._fetches = GraphFetches(
            context.client,
            events=context.events,
            metrics=context.metrics,
            fetcher=Fetcher(policy),
            clock=self._now,
            monotonic=monotonic,
        )
        self._memory: dict[ObjectKey, GraphMemory] = {}
        # Per object, the spec's problems ("" for none) as the version last checked had them.
        self._spec_problems: VersionMemo[ObjectKey, str] = VersionMemo()
        self._builder_configmaps: BuilderConfigMaps | None = None

    def keys_for(self, kind: Kind, obj: Object) -> Iterable[ObjectKey]:
        if kind == RAY_SERVE_GRAPH:
            return [ObjectKey.of(obj)]
        if kind in (RAY_SERVICE, CONFIG_MAP):
            return owner_keys(obj, owner=RAY_SERVE_GRAPH)
        return []

    async def reconcile(self, key: ObjectKey) -> Result:
        rsg = self._store.get(RAY_SERVE_GRAPH, key.namespace, key.name)
        if rsg is None:
            self.forget(key)
            return Result()
        if rsg["metadata"].get("deletionTimestamp"):
            return await self.finalize(rsg)
        if await add_finalizer(self._client, RAY_SERVE_GRAPH, rsg, FINALIZER):
            return Result(requeue_after=1.0)  # the watch brings it back with the finalizer
        memory = self._memory.setdefault(key, GraphMemory())
        stored: JSON = dict(rsg.get("status") or {})
        generation = int(rsg["metadata"].get("generation") or 0)
        problem = self.spec_problem(key, rsg)
        if problem is not None:
            return await self.report_invalid_spec(rsg, stored, problem)
        await self._fetches.fetch_if_due(rsg, memory, stored)
        # Tens of milliseconds for a graph at the parser's bounds: off the event loop.
        compiled = await asyncio.to_thread(self.compile, rsg, memory)
        conflict = await self.builder_configmaps.ensure(rsg) if compiled is not None else None
        stale_builders_mounted = False
        if conflict is None:
            rayservice = await self.ensure_rayservice(rsg, memory, compiled)
            if compiled is not None:
                stale_builders_mounted = await self.builder_configmaps.retire_stale(rsg)
        else:
            rayservice = self._rayservice_left_alone(rsg, conflict)
        observed = rules.Observed(
            generation=generation,
            fetched=memory.fetched,
            parsed=memory.parsed,
            deployed=rayservice.refused
            or rules.deployed_condition(
                rayservice.obj, name=rayservice.name, owned=rayservice.owned
            ),
            deployment=self._deployment(memory, compiled, stored)
            if rayservice.carries_config
            else None,
            rayservice_name=rayservice.name,
            last_refresh_handled=memory.refresh_handled,
        )
        await self.write_status(
            rsg, stored, rules.compute_status(stored, observed, now=self._now())
        )
        # A conflicting RayService or ConfigMap, or the RayCluster mounting an old builder, is
        # not ours to watch: look again later.
        look_again = not rayservice.owned or conflict is not None or stale_builders_mounted
        return Result(requeue_after=self.next_look(rsg, memory, stored, conflict=look_again))

    @property
    def builder_configmaps(self) -> BuilderConfigMaps:
        """The builder ConfigMap step (imported with the Serve compiler, on first use)."""
        if self._builder_configmaps is None:
            from ray_operator.controllers.serve_graph_builder import BuilderConfigMaps

            self._builder_configmaps = BuilderConfigMaps(self._store, self._client, self._events)
        return self._builder_configmaps

    # --- the spec ------------------------------------------------------------------------------

    def spec_problem(self, key: ObjectKey, rsg: Object) -> str | None:
        """The webhook's rules, again (an object may predate the webhook or bypass it); checked
        once per version of the object (its resourceVersion), as RayCluster validation is."""
        problem = self._spec_problems.get(key, rsg)
        if problem is None:
            problems = validate_rayservegraph(rsg, limits=self._limits)
            problem = self._spec_problems.remember(key, rsg, summarize(problems))
        return problem or None

    async def report_invalid_spec(self, rsg: Object, stored: JSON, problem: str) -> Result:
        """Ready False `InvalidSpec` and a Warning: nothing fetched, nothing deployed, no retry
        (a spec change brings the object back)."""
        self._events.record(rsg, reason="InvalidSpec", message=problem, type="Warning")
        observed = rules.Observed(
            generation=int(rsg["metadata"].get("generation") or 0), spec_problem=problem
        )
        await self.write_status(
            rsg, stored, rules.compute_status(stored, observed, now=self._now())
        )
        return Result()

    # --- compiling and deploying ---------------------------------------------------------------

    def compile(self, rsg: Object, memory: GraphMemory) -> Compiled | None:
        """The `serveConfigV2` of the last good document (None: there is none in memory);
        compiled once per document, name and `serveHttpOptions`."""
        good = memory.good
        if good is None or good.graph is None:
            return None
        http_options = (rsg.get("spec") or {}).get("serveHttpOptions")
        inputs = (good.digest, _name(rsg), json.dumps(http_options, sort_keys=True))
        if memory.compiled is not None and memory.compiled.inputs == inputs:
            return memory.compiled
        from ray_operator.builders.serve_graph import compile_serve_config, digest

        text = compile_serve_config(
            good.graph, default_application_name=_name(rsg), http_options=http_options
        )
        memory.compiled = Compiled(inputs=inputs, text=text, digest=digest(text))
        return memory.compiled

    def _rayservice_left_alone(self, rsg: Object, conflict: ConditionState) -> RayServiceState:
        name = service_name(rsg)
        existing = self._store.get(RAY_SERVICE, rsg["metadata"]["namespace"], name)
        owned = existing is None or names_owner(existing, rsg["metadata"]["uid"])
        return RayServiceState(name, existing, owned=owned, refused=conflict)

    async def ensure_rayservice(
        self, rsg: Object, memory: GraphMemory, compiled: Compiled | None
    ) -> RayServiceState:
        """Create the RayService once there is a config; afterwards patch only what differs."""
        namespace = rsg["metadata"]["namespace"]
        name = service_name(rsg)
        await self.delete_renamed_rayservices(rsg, keep=name)
        existing = self._store.get(RAY_SERVICE, namespace, name)
        if existing is not None and not names_owner(existing, rsg["metadata"]["uid"]):
            return RayServiceState(name, existing, owned=False)
        if existing is not None and existing["metadata"].get("deletionTimestamp"):
            return RayServiceState(name, existing, owned=True)
        cluster_part, cluster_hash = self._cluster_part(rsg, memory)
        if existing is None:
            if compiled is None:
                return RayServiceState(name, None, owned=True)
            try:
                created = await self._create_rayservice(rsg, compiled, cluster_hash)
            except (Invalid, BadRequest) as error:
                return self._refused(rsg, name, None, error)
            return RayServiceState(name, created, owned=True, carries_config=created is not None)
        operations: list[JSON] = []
        if compiled is not None and existing.get("spec", {}).get("serveConfigV2") != compiled.text:
            operations.append({"op": "add", "path": "/spec/serveConfigV2", "value": compiled.text})
        stamped = (existing["metadata"].get("annotations") or {}).get(SPEC_HASH_ANNOTATION)
        if stamped != cluster_hash:
            operations += _cluster_operations(existing, cluster_part, cluster_hash)
        if not operations:
            return RayServiceState(name, existing, owned=True, carries_config=compiled is not None)
        try:
            updated = await self._client.patch(
                RAY_SERVICE, name, operations, namespace=namespace, patch_type=PatchType.JSON
            )
        except (Invalid, BadRequest) as error:
            return self._refused(rsg, name, existing, error)
        self._report_rayservice_update(rsg, name, operations, compiled)
        return RayServiceState(name, updated, owned=True, carries_config=compiled is not None)

    def _refused(
        self, rsg: Object, name: str, existing: RayService | None, error: KubeError
    ) -> RayServiceState:
        """The API server refused the RayService we built (say, a field its schema does not
        allow): said in `Deployed` and a Warning, not retried in a loop — a new spec or
        document tries again. What runs keeps running."""
        message = f"the API server refused RayService {name}: {error}"
        logger.info("%s", message)
        self._events.record(rsg, reason="RayServiceRefused", message=message, type="Warning")
        return RayServiceState(
            name,
            existing,
            owned=True,
            refused=ConditionState("False", "RayServiceRefused", message),
        )

    async def _create_rayservice(
        self, rsg: Object, compiled: Compiled, cluster_hash: str
    ) -> RayService | None:
        from ray_operator.builders.serve_graph import build_rayservice

        body = build_rayservice(rsg, serve_config=compiled.text)
        body["metadata"].setdefault("annotations", {})[SPEC_HASH_ANNOTATION] = cluster_hash
        namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
        try:
            created = await self._client.create(RAY_SERVICE, body, namespace=namespace)
        except AlreadyExists:
            return None  # the cache is behind: the next reconcile sees it
        logger.info("created RayService %s", name)
        self._events.record(
            rsg,
            reason="RayServiceCreated",
            message=f"created RayService {namespace}/{name} serving revision "
            f"{rules.revision(compiled.inputs[0])}",
        )
        return created

    def _report_rayservice_update(
        self, rsg: Object, name: str, operations: list[JSON], compiled: Compiled | None
    ) -> None:
        paths = {operation["path"] for operation in operations}
        if "/spec/serveConfigV2" in paths and compiled is not None:
            revision = rules.revision(compiled.inputs[0])
            logger.info("updated serveConfigV2 of RayService %s to revision %s", name, revision)
            self._events.record(
                rsg,
                reason="ServeConfigUpdated",
                message=f"updated serveConfigV2 of RayService {name} to revision {revision}",
            )
        if "/spec/rayClusterConfig" in paths:
            logger.info("updated the cluster spec of RayService %s", name)
            self._events.record(
                rsg,
                reason="RayClusterSpecUpdated",
                message=f"updated rayClusterConfig of RayService {name}",
            )

    def _cluster_part(self, rsg: Object, memory: GraphMemory) -> tuple[JSON, str]:
        """The RayService's cluster fields as built from the spec, and their hash; built once
        per generation (the copy and the injection are O(spec))."""
        metadata = rsg["metadata"]
        version = (str(metadata.get("uid", "")), int(metadata.get("generation") or 0))
        if memory.cluster_part is not None and memory.cluster_part[0] == version:
            return memory.cluster_part[1], memory.cluster_part[2]
        from ray_operator.builders.serve_graph import build_rayservice

        spec = build_rayservice(rsg, serve_config="")["spec"]
        part = {key: spec[key] for key in CLUSTER_FIELDS if key in spec}
        text = json.dumps(part, sort_keys=True, separators=(",", ":"))
        part_hash = hashlib.sha256(text.encode()).hexdigest()
        memory.cluster_part = (version, part, part_hash)
        return part, part_hash

    async def delete_renamed_rayservices(self, rsg: Object, *, keep: str) -> None:
        """After a change of `spec.serviceName`, the RayService of the old name goes."""
        for rayservice in self._store.list_owned_by(RAY_SERVICE, rsg["metadata"]["uid"]):
            metadata = rayservice["metadata"]
            if metadata["name"] == keep or metadata.get("deletionTimestamp"):
                continue
            await self._client.delete_seen(RAY_SERVICE, rayservice)
            self._events.record(
                rsg,
                reason="DeletedRayService",
                message=f"deleted RayService {metadata['name']}: spec.serviceName is now {keep}",
            )

    def _deployment(
        self, memory: GraphMemory, compiled: Compiled | None, stored: Object
    ) -> rules.Deployment | None:
        good = memory.good
        if good is None or compiled is None:
            return None
        previous = stored.get("artifact") or {}
        artifact: JSON = {
            "url": good.url,
            "digest": good.digest,
            # The same document found again after a restart keeps its time: nothing to write.
            "fetchedAt": previous.get("fetchedAt")
            if previous.get("digest") == good.digest and previous.get("fetchedAt")
            else good.fetched_at,
            "sizeBytes": good.size,
        }
        if good.etag is not None:
            artifact["etag"] = good.etag
        from ray_operator.validation.serve_graph import graph_summary

        graph = graph_summary(good.graph) if good.graph is not None else {}
        return rules.Deployment(artifact=artifact, graph=graph, serve_config_digest=compiled.digest)

    # --- status and scheduling -----------------------------------------------------------------

    async def write_status(self, rsg: Object, old: JSON, new: JSON) -> None:
        if not rules.status_changed(old, new):
            return
        # A Conflict (a stale cache) is retried from fresh data.
        await status_writer.write_status(self._client, RAY_SERVE_GRAPH, rsg, old, new)

    def next_look(
        self, rsg: Object, memory: GraphMemory, stored: Object, *, conflict: bool
    ) -> float | None:
        """Seconds until a fetch is due again (a retry, a waiting refresh or a poll), if any."""
        due = self._fetches.due_in(rsg, memory, stored)
        if conflict:
            due.append(CONFLICT_RECHECK_SECONDS)
        return max(0.0, min(due)) if due else None

    # --- deletion ------------------------------------------------------------------------------

    def forget(self, key: ObjectKey) -> None:
        """Drop what this replica remembers of an object that is gone or going; stop its fetch."""
        forgotten = self._memory.pop(key, None)
        if forgotten is not None:
            forgotten.forget()
        self._spec_problems.forget(key)

    async def finalize(self, rsg: Object) -> Result:
        """Being deleted: delete what it owns (no garbage collector does it here), then let go."""
        self.forget(ObjectKey.of(rsg))
        if not has_finalizer(rsg, FINALIZER):
            return Result()
        uid = rsg["metadata"]["uid"]
        for kind in (RAY_SERVICE, CONFIG_MAP):
            for owned in self._store.list_owned_by(kind, uid):
                if owned["metadata"].get("deletionTimestamp"):
                    continue
                await self._client.delete_seen(kind, owned)
                logger.info("deleted %s %s", kind, owned["metadata"]["name"])
                if kind == RAY_SERVICE:
                    self._events.record(
                        rsg,
                        reason="DeletedRayService",
                        message=f"deleted RayService {owned['metadata']['name']}",
                    )
        await remove_finalizer(self._client, RAY_SERVE_GRAPH, rsg, FINALIZER)
        return Result()


# --- pure helpers ------------------------------------------------------------------------------


def service_name(rsg: Object) -> str:
    """The RayService's name: `spec.serviceName`, else the graph's own."""
    return str((rsg.get("spec") or {}).get("serviceName") or rsg["metadata"]["name"])


def _cluster_operations(existing: Object, part: JSON, part_hash: str) -> list[JSON]:
    """JSON patch operations setting the cluster fields exactly (a merge patch would keep keys
    we dropped) and stamping their hash."""
    spec = existing.get("spec") or {}
    operations: list[JSON] = []
    for key in CLUSTER_FIELDS:
        if key in part:
            operations.append({"op": "add", "path": f"/spec/{key}", "value": part[key]})
        elif key in spec:
            operations.append({"op": "remove", "path": f"/spec/{key}"})
    if existing["metadata"].get("annotations"):
        path = "/metadata/annotations/" + _pointer(SPEC_HASH_ANNOTATION)
        operations.append({"op": "add", "path": path, "value": part_hash})
    else:
        operations.append(
            {
                "op": "add",
                "path": "/metadata/annotations",
                "value": {SPEC_HASH_ANNOTATION: part_hash},
            }
        )
    return operations


def _pointer(key: str) -> str:
    """A JSON pointer segment (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _name(rsg: Object) -> str:
    return str(rsg["metadata"]["name"])


def rayservegraph_controller(
    *, policy: FetchPolicy, limits: ClusterLimits = DEFAULT_LIMITS
) -> ControllerFactory:
    """The factory `app.run(..., controllers=[...])` takes, with the operator's fetch policy
    (`--serve-graph-allowed-hosts`, `--serve-graph-allow-loopback`)."""

    def factory(context: ControllerContext) -> RayServeGraphController:
        return RayServeGraphController(context, policy=policy, limits=limits)

    return factory


__all__ = [
    "FINALIZER",
    "SPEC_HASH_ANNOTATION",
    "RayServeGraphController",
    "rayservegraph_controller",
    "service_name",
]
