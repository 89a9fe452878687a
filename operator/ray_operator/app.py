"""The operator process: wires cache, watchers, queue, workers, leader election and HTTP server.

`run(settings, controllers=[...], components=[...])` is the synchronous entry of
`ray-operator run`: it installs uvloop, runs `Operator.run` until SIGTERM/SIGINT and returns the
exit code. Controllers come in as factories (`ControllerContext -> Controller`), so the
RayCluster/RayJob/RayService controllers plug in from the outside and the runtime runs (and is
tested) with none. Components are whatever else every replica runs beside them — the admission
webhooks: a factory (`ComponentContext -> Component`, both in `components`) whose `run()` becomes
one more root task, named after the component's class (`Webhooks` → `webhooks`).

All root tasks are named and started in `Operator.run`, in one place:

    watch:<Kind>[:<ns>]  one per watched kind (and namespace)    every replica
    heartbeat            event-loop liveness for /healthz         every replica
    server               /healthz /readyz /metrics                every replica
    metrics              /metrics over HTTPS to authorized callers, instead (--metrics-auth)
    leader-election      campaign / renew the Lease               every replica
    reconcilers          runs the workers while this replica leads
    resync               re-enqueues everything every resync period, while leading
    <component>          webhooks, servegraphevents (RayServeGraph events, when on)   every replica

When any of them ends, everything stops (exit code 1). On SIGTERM/SIGINT the operator stops taking
work, lets in-flight reconciles finish within `shutdown_timeout`, stops the other tasks, releases
the Lease so a standby takes over within one retry period, and exits 0.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import Coroutine, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any, NoReturn

import uvloop

from ray_operator.components import ComponentContext, ComponentFactory
from ray_operator.features import RAY_CLUSTER_MTLS, RAY_CLUSTER_NETWORK_POLICY
from ray_operator.features import RAY_CRON_JOB as RAY_CRON_JOB_GATE
from ray_operator.logs import configure_logging
from ray_operator.metrics import Metrics
from ray_operator.runtime.capabilities import unmet_gate_prerequisites
from ray_operator.runtime.client import KubeClient, load_api_client
from ray_operator.runtime.controller import ControllerContext, ControllerFactory
from ray_operator.runtime.errors import Forbidden, KubeError, NotFound
from ray_operator.runtime.events import EVENTS_GRACE_SECONDS, EventRecorder
from ray_operator.runtime.leader import AlwaysLeader, LeaderElector, Leadership, LeaseConfig
from ray_operator.runtime.queue import WorkQueue
from ray_operator.runtime.store import Store
from ray_operator.runtime.watcher import Watcher
from ray_operator.runtime.workers import Workers
from ray_operator.server import Heartbeat, ListenerInUse, metrics_routes, probe_routes, serve
from ray_operator.settings import Settings, metrics_need_authentication
from ray_operator.spec.kinds import (
    CERT_MANAGER_KINDS,
    CERTIFICATE,
    ISSUER,
    LEGACY_RAY_CLUSTER,
    NETWORK_POLICY,
    OPTIONAL_KINDS,
    POD_GROUP_KINDS,
    RAY_CRON_JOB,
    WATCHED_KINDS,
    Kind,
    watch_selectors,
)

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

    from ray_operator.secure_metrics import SecureMetricsServer

logger = logging.getLogger(__name__)


def run(
    settings: Settings,
    *,
    controllers: Sequence[ControllerFactory] = (),
    components: Sequence[ComponentFactory] = (),
) -> int:
    """Run the operator on uvloop until SIGTERM/SIGINT; the process exit code."""
    configure_logging(log_format=settings.log_format, level=settings.log_level)
    # What is loaded by now (modules, classes, settings) lives as long as the process: keep it
    # out of the collector's full passes, which the many objects of a first list trigger again
    # and again (collections were a quarter of the time to decode and keep 4000 Pods).
    gc.freeze()
    return uvloop.run(_main(settings, controllers=controllers, components=components))


async def _main(
    settings: Settings,
    *,
    controllers: Sequence[ControllerFactory],
    components: Sequence[ComponentFactory],
) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    wanted = watched_kinds(settings)
    watches = sum(len(watch_selectors(kind)) for kind in wanted)
    api = await load_api_client(
        settings.kubeconfig, watches=watches * max(1, len(settings.namespaces))
    )
    try:
        client = KubeClient(api, metrics=Metrics())
        kinds = await served_kinds(client, wanted, namespaces=settings.namespaces)
        unmet = await unmet_gate_prerequisites(
            client, settings.feature_gates, namespaces=settings.namespaces
        )
        for problem in unmet:
            logger.error("%s", problem)
        if unmet:
            return 1
        operator = Operator(
            settings, api=api, controllers=controllers, components=components, kinds=kinds
        )
        return await operator.run(stop)
    finally:
        await api.close()


def watched_kinds(settings: Settings) -> tuple[Kind, ...]:
    """The kinds a replica caches: the default ones (RayCronJobs only with their feature gate
    on, cert-manager's Issuers and Certificates only with RayClusterMTLS, NetworkPolicies only
    with RayClusterNetworkPolicy), the legacy RayCluster when it serves that kind
    (`--legacy-clusters`), and the PodGroups of the chosen `--batch-scheduler`."""
    kinds = WATCHED_KINDS
    if not settings.feature_gates.enabled(RAY_CRON_JOB_GATE):
        kinds = tuple(kind for kind in kinds if kind != RAY_CRON_JOB)
    if settings.feature_gates.enabled(RAY_CLUSTER_MTLS):
        kinds = (*kinds, *CERT_MANAGER_KINDS)
    if settings.batch_scheduler in POD_GROUP_KINDS:
        kinds = (*kinds, POD_GROUP_KINDS[settings.batch_scheduler])
    if settings.feature_gates.enabled(RAY_CLUSTER_NETWORK_POLICY):
        kinds = (*kinds, NETWORK_POLICY)
    return (*kinds, LEGACY_RAY_CLUSTER) if settings.legacy_clusters else kinds


SERVED_PROBE_SECONDS = 30.0

_CERT_MANAGER = "cert-manager (https://cert-manager.io/docs/installation/)"
CRD_SOURCES: dict[Kind, str] = {
    LEGACY_RAY_CLUSTER: "crd/legacy/ (config/legacy)",
    ISSUER: _CERT_MANAGER,
    CERTIFICATE: _CERT_MANAGER,
    **{kind: f"the {name} scheduler's CRDs" for name, kind in POD_GROUP_KINDS.items()},
}
"""Where the CRD of an optional kind is, when not in crd/."""


async def served_kinds(
    client: KubeClient, kinds: Sequence[Kind], *, namespaces: Sequence[str] = ()
) -> list[Kind]:
    """`kinds` without the optional ones (`OPTIONAL_KINDS`) the API server does not serve or
    the operator may not list, and without what is cached only for those; each one left out is
    logged as an error that says what to apply. One request per optional kind, at start."""
    missing: set[Kind] = set()
    for kind, companions in OPTIONAL_KINDS.items():
        if kind not in kinds:
            continue
        answer = await _probe(client, kind, namespaces=namespaces)
        if answer is _Probe.NOT_SERVED:
            logger.error(
                "the API server does not serve %s %s: the CustomResourceDefinition %s.%s is "
                "not installed, so those objects are not managed; apply %s and restart the "
                "operator",
                kind.api_version,
                kind.kind,
                kind.plural,
                kind.group,
                CRD_SOURCES.get(kind, "crd/ (make run and config/ do)"),
            )
        elif answer is _Probe.FORBIDDEN:
            # A watch the operator may not list would keep every cache from syncing: without
            # this, a gate turned on without its kustomize component stopped every tenant.
            logger.error(
                "the operator may not list %s %s (Forbidden), so those objects are not "
                "managed; grant it get/list/watch on %s.%s (the kustomize component under "
                "config/ that turns this feature on does) and restart the operator",
                kind.api_version,
                kind.kind,
                kind.plural,
                kind.group or "core",
            )
        if answer is not _Probe.SERVED:
            missing |= {kind, *companions}
    return [kind for kind in kinds if kind not in missing]


class _Probe(Enum):
    SERVED = "served"
    NOT_SERVED = "not served"
    FORBIDDEN = "forbidden"


async def _probe(client: KubeClient, kind: Kind, *, namespaces: Sequence[str]) -> _Probe:
    """Whether the API server serves `kind` to this operator. Other answers than 404 and 403
    (a CRD just applied answers 429 while its storage initialises; the server may be away) are
    retried for a while, then the kind counts as served: its watcher keeps retrying, as for
    any other kind."""
    delay = 0.2
    deadline = asyncio.get_running_loop().time() + SERVED_PROBE_SECONDS
    while True:
        try:
            # A name no object has: an empty answer when served, 404 when the CRD is missing.
            await client.list(
                kind,
                namespace=namespaces[0] if namespaces else None,
                field_selector="metadata.name=ray-operator-probe-",
            )
            return _Probe.SERVED
        except NotFound:
            return _Probe.NOT_SERVED
        except Forbidden:
            return _Probe.FORBIDDEN
        except KubeError as error:
            if asyncio.get_running_loop().time() + delay > deadline:
                logger.warning("could not tell whether %s is served: %s", kind, error)
                return _Probe.SERVED
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)


class Operator:
    """One operator replica: every component, built from `Settings` and an `ApiClient`.

    The `ApiClient` stays the caller's: the operator uses it but does not close it.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        api: ApiClient,
        controllers: Sequence[ControllerFactory] = (),
        components: Sequence[ComponentFactory] = (),
        metrics: Metrics | None = None,
        kinds: Sequence[Kind] | None = None,
    ) -> None:
        self.settings = settings
        kinds = watched_kinds(settings) if kinds is None else kinds
        self.metrics = metrics or Metrics()
        self.store = Store()
        self.metrics.watch_resources(self.store)
        api_client = KubeClient(api, metrics=self.metrics)
        self.leadership = self._leadership(api_client)
        # Everything a controller writes goes through the guard: no writes without the lease.
        self.client = api_client.with_write_guard(self.leadership.check_may_write)
        self.events = EventRecorder(self.client, metrics=self.metrics, instance=settings.identity)
        context = ControllerContext(
            store=self.store, client=self.client, events=self.events, metrics=self.metrics
        )
        # The controller of an optional kind the API server does not serve stays out.
        self.controllers = [
            controller
            for controller in (factory(context) for factory in controllers)
            if controller.kind not in OPTIONAL_KINDS or controller.kind in kinds
        ]
        self.queue: WorkQueue[Any] = WorkQueue(metrics=self.metrics)
        self.workers = Workers(
            self.controllers,
            self.queue,
            metrics=self.metrics,
            concurrency=settings.max_concurrent_reconciles,
            sync=self.store.sync,
        )
        self.watchers = [
            Watcher(
                api_client,
                self.store,
                kind,
                on_change=self.workers.dispatch,
                metrics=self.metrics,
                namespace=namespace,
                label_selector=selector,
                timeout_seconds=settings.watch_timeout,
            )
            for kind in kinds
            for selector in watch_selectors(kind)
            for namespace in (settings.namespaces or (None,))
        ]
        component_context = ComponentContext(
            client=api_client, store=self.store, settings=settings, metrics=self.metrics
        )
        self.components = [factory(component_context) for factory in components]
        self.heartbeat = Heartbeat()
        self.secure_metrics = self._secure_metrics(api_client)
        self._term: asyncio.Task[None] | None = None  # the workers, while leading

    def not_synced(self) -> list[str]:
        """Watchers that have not completed their first list (empty: ready).

        Readiness is about the first list only. A later relist (after 410 Gone or a broken
        watch) holds back the reconciles that read that kind (`store.sync`, see runtime.workers)
        but does not make the replica unready: that would pull every replica's webhook endpoint
        out of its Service at once, exactly while the API server recovers.
        """
        return [watcher.name for watcher in self.watchers if not watcher.synced.is_set()]

    async def run(self, stop: asyncio.Event) -> int:
        """Run until `stop` is set (exit code 0) or a root task ends (exit code 1)."""
        tasks = self._start_root_tasks()
        stopping = asyncio.create_task(stop.wait(), name="stop")
        try:
            done, _ = await asyncio.wait([*tasks, stopping], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        exit_code = 0
        for task in done - {stopping}:
            exit_code = 1
            error = None if task.cancelled() else task.exception()
            if isinstance(error, ListenerInUse):
                logger.error("%s", error.strerror)  # the fix is in the line; no traceback
                continue
            logger.error("root task %s ended; stopping everything", task.get_name(), exc_info=error)
        if exit_code == 0:
            logger.info("stop requested; finishing in-flight reconciles")
        await self._shut_down(tasks)
        return exit_code

    def _start_root_tasks(self) -> list[asyncio.Task[Any]]:
        roots: list[tuple[str, Coroutine[Any, Any, Any]]] = [
            *((watcher.name, watcher.run()) for watcher in self.watchers),
            ("heartbeat", self.heartbeat.run()),
            ("server", serve(self._sites())),
            *((("metrics", self.secure_metrics.run()),) if self.secure_metrics else ()),
            ("leader-election", self.leadership.run()),
            ("reconcilers", self._reconcile_while_leading()),
            ("resync", self._resync_periodically()),
            *((type(component).__name__.lower(), component.run()) for component in self.components),
        ]
        logger.info(
            "starting %s as %s (namespaces: %s)",
            ", ".join(name for name, _ in roots),
            self.settings.identity,
            ", ".join(self.settings.namespaces) or "all",
        )
        return [asyncio.create_task(coroutine, name=name) for name, coroutine in roots]

    async def _shut_down(self, tasks: list[asyncio.Task[Any]]) -> None:
        self.queue.shut_down()  # stop taking work; in-flight keys run to their end
        term = self._term
        if term is not None and not term.done():
            await asyncio.wait([term], timeout=self.settings.shutdown_timeout)
            if not term.done():
                logger.warning(
                    "in-flight reconciles did not finish within %.0fs; cancelling",
                    self.settings.shutdown_timeout,
                )
        # The reconciles' last Events, while the lease (which every write needs) is still held.
        await self.events.close(grace=EVENTS_GRACE_SECONDS)
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        # Only now, with no reconcile and no renewal left running, hand the Lease over.
        await self.leadership.release()
        logger.info("stopped")

    def _leadership(self, client: KubeClient) -> Leadership:
        settings = self.settings
        if not settings.leader_elect:
            return AlwaysLeader(metrics=self.metrics, lease_name=settings.lease_name)
        config = LeaseConfig(
            name=settings.lease_name,
            namespace=settings.lease_namespace,
            identity=settings.identity,
            lease_duration=settings.lease_duration,
            renew_deadline=settings.lease_renew_deadline,
            retry_period=settings.lease_retry_period,
        )
        return LeaderElector(client, config, metrics=self.metrics)

    def _secure_metrics(self, client: KubeClient) -> SecureMetricsServer | None:
        """/metrics over HTTPS to authorized callers (`--metrics-auth`), or None: plain."""
        if not metrics_need_authentication(self.settings):
            return None
        # Imported only here: an operator whose /metrics is plain loads no TLS machinery for it.
        from ray_operator.secure_metrics import SecureMetricsServer

        # The unguarded client: every replica reviews its scrapers' tokens, leader or not.
        return SecureMetricsServer(
            self.metrics,
            client=client,
            address=self.settings.metrics_addr,
            cert_dir=self.settings.metrics_cert_dir,
        )

    def _sites(self) -> list[tuple[str, list[Any], str]]:
        probes = (
            self.settings.health_addr,
            probe_routes(heartbeat=self.heartbeat, synced=self.not_synced),
            "--health-addr",
        )
        if self.secure_metrics is not None:
            return [probes]
        metrics = (self.settings.metrics_addr, metrics_routes(self.metrics), "--metrics-addr")
        return [probes, metrics]

    async def _reconcile_while_leading(self) -> NoReturn:
        while True:
            await self.leadership.leading.wait()
            # Like controller-runtime: no reconcile before every cache has listed once, or a
            # controller would take "not in the cache" for "does not exist".
            await asyncio.gather(*(watcher.synced.wait() for watcher in self.watchers))
            if not self.leadership.leading.is_set():
                continue
            self.workers.enqueue_all(self.store)
            logger.info(
                "leading: reconciling %d queued keys with %d workers",
                len(self.queue),
                self.settings.max_concurrent_reconciles,
            )
            await self._reconcile_until_following()

    async def _reconcile_until_following(self) -> None:
        self._term = asyncio.create_task(self.workers.run(), name="workers")
        following = asyncio.create_task(self.leadership.following.wait(), name="following")
        try:
            await asyncio.wait([self._term, following], return_when=asyncio.FIRST_COMPLETED)
        finally:
            following.cancel()
            self._term.cancel()
            await asyncio.wait([self._term, following])
        if not self._term.cancelled() and self._term.exception() is not None:
            raise RuntimeError("the reconcile workers crashed") from self._term.exception()
        if self.queue.shutting_down:
            # The workers ended because the queue shut down: this task's job is done.
            await asyncio.Event().wait()
        logger.warning("no longer leading: stopped the workers")

    async def _resync_periodically(self) -> NoReturn:
        while True:
            await asyncio.sleep(self.settings.resync_period)
            if self.leadership.leading.is_set():
                self.workers.enqueue_all(self.store)


__all__ = ["Operator", "run"]
