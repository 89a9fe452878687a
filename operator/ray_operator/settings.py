"""`ray-operator run`'s settings: the frozen `Settings` and `RUN_FLAGS`, the table of its flags.

Each entry of `RUN_FLAGS` (a `flags.Flag`) fills the `Settings` field of its name, so a flag is
declared once: its type, help and default there (the default, unless the flag says otherwise, is
the field's), its env twin derived. Every flag `--some-flag` can also come from
`RAY_OPERATOR_SOME_FLAG` (a flag on the command line wins, and replaces the variable's value).
Repeatable flags take a comma-separated list from the environment (`RAY_OPERATOR_NAMESPACE=a,b`);
booleans take true/false/1/0/yes/no/on/off; a value the flag would refuse is refused at start.

`cli.py` calls `add_run_arguments(parser)` and `settings_from_args(args)`; the app takes `Settings`.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray_operator.builders.batch_scheduling import (
    BATCH_SCHEDULERS,
    VOLCANO,
    parse_batch_scheduler,
)
from ray_operator.features import FeatureGates, InvalidFeatureGatesError, parse_feature_gates
from ray_operator.flags import (
    Flag,
    add_flags,
    comma_list,
    earlier_value,
    flag_fields,
    optional_path,
    port_number,
    positive_int,
)
from ray_operator.spec.fetch_origins import malformed_entries
from ray_operator.validation.identity import OperatorIdentity
from ray_operator.validation.limits import ClusterLimits

METRICS_AUTH_MODES = ("auto", "kubernetes", "none")
IN_CLUSTER_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
POD_SERVICE_ACCOUNT_ENV = "POD_SERVICE_ACCOUNT"
"""The operator's ServiceAccount (Downward API `spec.serviceAccountName`, config/manager)."""
POD_NAMESPACE_ENV = "POD_NAMESPACE"
"""The operator's namespace, from the Downward API (`metadata.namespace`, config/manager)."""


@dataclass(frozen=True, slots=True)
class Settings:
    """How one operator process runs."""

    kubeconfig: Path | None = None
    """Kubeconfig file; None: in-cluster credentials, else $KUBECONFIG or ~/.kube/config."""
    namespaces: tuple[str, ...] = ()
    """Namespaces to watch and reconcile; empty: all namespaces."""
    leader_elect: bool = True
    """Elect a leader through a Lease so that only one replica reconciles."""
    lease_name: str = "ray-operator-leader"
    """Name of the coordination.k8s.io/v1 Lease used for leader election."""
    lease_namespace: str = "default"
    """Namespace of the Lease (in a cluster: the operator's own namespace)."""
    lease_duration: float = 15.0
    """Seconds a standby waits after the leader's last renewal before taking over."""
    lease_renew_deadline: float = 10.0
    """Seconds the leader keeps failing to renew before it stops writing and steps down."""
    lease_retry_period: float = 2.0
    """Seconds between acquisition attempts and between renewals."""
    identity: str = field(default_factory=lambda: default_identity())
    """This replica's holderIdentity in the Lease (default: hostname + random suffix)."""
    health_addr: str = ":8082"
    """host:port of /healthz and /readyz (KubeRay's probe port); empty host: all interfaces."""
    metrics_addr: str = ":8080"
    """host:port of /metrics (KubeRay's metrics port); may equal `health_addr` when /metrics is
    served without authentication."""
    metrics_auth: str = "auto"
    """Who may read /metrics: `kubernetes` (HTTPS, a bearer token the API server authenticates
    and authorizes for `get` on /metrics), `none` (plain HTTP, anyone who reaches the port), or
    `auto`: `none` on a loopback `metrics_addr`, where only this host's processes reach it, else
    `kubernetes`. See `secure_metrics`."""
    metrics_cert_dir: Path | None = None
    """Directory of `tls.crt` and `tls.key` for /metrics with `metrics_auth` kubernetes (read
    again every 5 minutes); None: a self-signed certificate made at start."""
    webhook_port: int = 9443
    """Port of the admission webhooks (TLS), served on every replica; 0: no webhooks."""
    max_concurrent_reconciles: int = 4
    """How many objects are reconciled at once (one reconcile per object at a time, always)."""
    max_pods_per_cluster: int = 10_000
    """Pods one RayCluster may ask for (head + replicas x numOfHosts of every group), refused
    above it by the webhook and reported by the controller (see `validation/limits.py`)."""
    resync_period: float = 600.0
    """Seconds between re-enqueueing every object, to heal anything a missed event left behind."""
    shutdown_timeout: float = 20.0
    """Seconds in-flight reconciles get to finish after SIGTERM before they are cancelled."""
    watch_timeout: int = 300
    """Seconds after which the API server ends a watch (it is resumed at once); also bounds how
    long a silently stalled watch goes unnoticed (1.2 × this + 30s)."""
    log_format: str = "text"
    """`text`, `json`, or `plain`: the legacy Python operator's lines, `<cluster name>: ...`
    without a timestamp (`kubectl logs --timestamps` adds one), so `grep ^<cluster>:` works."""
    log_level: str = "INFO"
    """DEBUG, INFO, WARNING or ERROR."""
    dashboard_url_overrides: tuple[str, ...] = ()
    """`<namespace>/<cluster>=<url>` entries (the cluster part may be a glob, e.g. `ns/svc-*`):
    where the operator reaches those clusters' Ray dashboards instead of the head Pod's IP (for
    an operator running outside the cluster)."""
    serve_proxy_url_overrides: tuple[str, ...] = ()
    """`<namespace>/<cluster>=<url>` entries: where the operator reaches those clusters' head
    Serve proxy for its health check instead of the head Pod's IP."""
    serve_graph_allowed_hosts: tuple[str, ...] = ()
    """`[http://]host[:port]` entries a RayServeGraph may fetch its document from (lower case;
    without a scheme: https only; port omitted: the scheme's default, see `spec.fetch_origins`);
    empty: any host. When set, fetch failures say what happened (connection refused, timeout,
    ...); when empty they all read alike (no port scanner for tenants)."""
    serve_graph_allow_loopback: bool = False
    """Let RayServeGraphs fetch from loopback addresses (127.0.0.0/8, ::1): for `make run` and
    tests, where the artifact server runs beside the operator. Link-local and metadata
    addresses stay refused."""
    serve_graph_max_concurrent_fetches: int = 8
    """RayServeGraph documents fetched at once across the operator (name lookups likewise, on
    threads of their own); more wait their turn, served namespace by namespace."""
    serve_graph_max_concurrent_fetches_per_namespace: int = 2
    """Of those, how many one namespace may hold: its hung servers never take every slot."""
    serve_graph_events_port: int = 0
    """Port of the RayServeGraph event endpoint (refresh requests, CloudEvents); 0: off."""
    serve_graph_events_address: str = "127.0.0.1"
    """Address the event endpoint listens on (`0.0.0.0`: every interface, e.g. in a Pod)."""
    feature_gates: FeatureGates = field(default_factory=FeatureGates)
    """KubeRay's feature gates (`--feature-gates`), as this operator honours them (`features`)."""
    legacy_clusters: bool = False
    """Serve the legacy Python operator's `cluster.ray.io/v1` RayClusters (their CRD is in
    crd/legacy/): each is converted into a ray.io/v1 RayCluster it owns and kept in step."""
    batch_scheduler: str = ""
    """KubeRay's `--batch-scheduler` (`builders.batch_scheduling.BATCH_SCHEDULERS`): the
    PodGroups and Pod metadata of that scheduler; empty: none (the default scheduler)."""
    service_account: str = ""
    """The operator's own ServiceAccount: no Pod template in `service_account_namespace` may name
    it (`validation/identity.py`). In a Pod: `POD_SERVICE_ACCOUNT` from the Downward API; empty:
    not known (outside a cluster), nothing refused."""
    service_account_namespace: str = ""
    """That ServiceAccount's namespace: `POD_NAMESPACE`, else the in-cluster namespace file."""

    @property
    def operator_identity(self) -> OperatorIdentity | None:
        """The identity the operator never lends, when both halves are known."""
        if not (self.service_account and self.service_account_namespace):
            return None
        return OperatorIdentity(self.service_account, self.service_account_namespace)


def cluster_limits(settings: Settings) -> ClusterLimits:
    """What the webhook and the controllers hold every RayCluster (embedded ones too) to."""
    return ClusterLimits(
        max_pods_per_cluster=settings.max_pods_per_cluster,
        feature_gates=settings.feature_gates,
        operator_identity=settings.operator_identity,
    )


def default_identity() -> str:
    """`<hostname>_<8 hex digits>`: unique per process even for replicas on one host."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def default_lease_namespace() -> str:
    """The namespace of our service account when in a cluster, else `default`."""
    return _in_cluster_namespace() or "default"


def _in_cluster_namespace() -> str:
    try:
        return IN_CLUSTER_NAMESPACE_FILE.read_text().strip()
    except OSError:
        return ""


def _metrics_auth(raw: str) -> str:
    value = raw.strip().lower()
    if value not in METRICS_AUTH_MODES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(METRICS_AUTH_MODES)}")
    return value


def _batch_scheduler(raw: str) -> str:
    try:
        return parse_batch_scheduler(raw.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _feature_gates(raw: str) -> FeatureGates:
    try:
        return parse_feature_gates(raw)
    except InvalidFeatureGatesError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


class _MergeFeatureGates(argparse.Action):
    """Each `--feature-gates` adds to the ones before it (and to the environment's), as
    Kubernetes' own `--feature-gates` does."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        earlier: FeatureGates = earlier_value(self, namespace)
        setattr(namespace, self.dest, earlier.merged(values))


def allowed_hosts(entries: Sequence[str]) -> tuple[str, ...]:
    """`--serve-graph-allowed-hosts` values (each may be a comma list), lower case, unique;
    ValueError naming an entry that names no origin (it would silently allow nothing)."""
    hosts = tuple(dict.fromkeys(host.lower() for entry in entries for host in comma_list(entry)))
    malformed = malformed_entries(hosts)
    if malformed:
        raise ValueError(
            f"--serve-graph-allowed-hosts: {malformed[0]!r} is not [http://|https://]host[:port]"
        )
    return hosts


def _unique(values: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(values))


def _as_tuple(values: Sequence[str] | None) -> tuple[str, ...]:
    return tuple(values or ())


def _or_default_identity(value: str | None) -> str:
    return value or default_identity()


def _or_default_lease_namespace(value: str | None) -> str:
    return value or default_lease_namespace()


def _or_pod_namespace(value: str | None) -> str:
    if value is not None:
        return value
    return os.environ.get(POD_NAMESPACE_ENV) or _in_cluster_namespace()


RUN_FLAGS = (
    Flag(
        "kubeconfig",
        finish=optional_path,
        help="kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config)",
    ),
    Flag(
        "namespace",
        dest="namespaces",
        repeatable=True,
        finish=_unique,
        help="watch only this namespace (repeatable; default: all namespaces)",
    ),
    Flag(
        "leader-elect",
        switch=True,
        help="elect a leader through a Lease (default: %(default)s)",
    ),
    Flag("lease-name", help="Lease name (default: %(default)s)"),
    Flag(
        "lease-namespace",
        default=None,
        finish=_or_default_lease_namespace,
        help="Lease namespace (default: the pod's namespace in a cluster, else `default`)",
    ),
    Flag(
        "lease-duration",
        convert=float,
        help="seconds before a standby takes over a silent leader (default: %(default)s)",
    ),
    Flag(
        "lease-renew-deadline",
        convert=float,
        help="seconds a leader may fail to renew before it steps down (default: %(default)s)",
    ),
    Flag(
        "lease-retry-period",
        convert=float,
        help="seconds between lease attempts and renewals (default: %(default)s)",
    ),
    Flag(
        "identity",
        default=None,
        finish=_or_default_identity,
        help="holderIdentity in the Lease; set it to the pod name (default: hostname + random)",
    ),
    Flag("health-addr", help="host:port for /healthz and /readyz (default: %(default)s)"),
    Flag("metrics-addr", help="host:port for /metrics (default: %(default)s)"),
    Flag(
        "metrics-auth",
        convert=_metrics_auth,
        choices=METRICS_AUTH_MODES,
        help="who may read /metrics: kubernetes (HTTPS; a bearer token allowed `get` on /metrics "
        "by the API server), none (plain HTTP, anyone), auto (none on a loopback "
        "--metrics-addr, else kubernetes) (default: %(default)s)",
    ),
    Flag(
        "metrics-cert-dir",
        finish=optional_path,
        help="directory of tls.crt and tls.key for /metrics over HTTPS (default: a "
        "self-signed certificate made at start)",
    ),
    Flag(
        "webhook-port",
        convert=int,
        help="admission webhook port; 0: serve no webhooks, as --no-webhooks (default: "
        "%(default)s)",
    ),
    Flag(
        "max-concurrent-reconciles",
        convert=positive_int,
        help="objects reconciled at once (default: %(default)s)",
    ),
    Flag(
        "max-pods-per-cluster",
        convert=positive_int,
        help="Pods one RayCluster may ask for; more is refused (default: %(default)s)",
    ),
    Flag(
        "resync-period",
        convert=float,
        help="seconds between full re-enqueues (default: %(default)s)",
    ),
    Flag(
        "shutdown-timeout",
        convert=float,
        help="seconds for in-flight reconciles after SIGTERM (default: %(default)s)",
    ),
    Flag(
        "watch-timeout",
        convert=int,
        help="seconds after which watches are renewed (default: %(default)s)",
    ),
    Flag(
        "log-format",
        choices=("text", "json", "plain"),
        help="log line format; plain: `<cluster name>: ...` without a timestamp, as the legacy "
        "Python operator wrote (default: %(default)s)",
    ),
    Flag(
        "log-level",
        convert=str.upper,
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="log level (default: %(default)s)",
    ),
    Flag(
        "dashboard-url-override",
        dest="dashboard_url_overrides",
        repeatable=True,
        default=None,
        finish=_as_tuple,
        help="<namespace>/<cluster glob>=<url>: reach those clusters' Ray dashboards there "
        "(repeatable; default: the head Pod's IP)",
    ),
    Flag(
        "serve-proxy-url-override",
        dest="serve_proxy_url_overrides",
        repeatable=True,
        default=None,
        finish=_as_tuple,
        help="<namespace>/<cluster glob>=<url>: reach those clusters' head Serve proxies there "
        "(repeatable; default: the head Pod's IP)",
    ),
    Flag(
        "serve-graph-allowed-hosts",
        repeatable=True,
        finish=allowed_hosts,
        help="[http://]host[:port] list (comma-separated, repeatable) RayServeGraphs may fetch "
        "from; without a scheme, https only (default: any host; failures then say nothing of "
        "their cause)",
    ),
    Flag(
        "serve-graph-allow-loopback",
        switch=True,
        help="let RayServeGraphs fetch from loopback addresses, for local trials "
        "(default: %(default)s)",
    ),
    Flag(
        "serve-graph-max-concurrent-fetches",
        convert=positive_int,
        help="RayServeGraph documents fetched at once (default: %(default)s)",
    ),
    Flag(
        "serve-graph-max-concurrent-fetches-per-namespace",
        convert=positive_int,
        help="of those, how many one namespace may hold (default: %(default)s)",
    ),
    Flag(
        "serve-graph-events-port",
        convert=port_number,
        help="port of the RayServeGraph event endpoint; 0: off (default: %(default)s)",
    ),
    Flag(
        "serve-graph-events-address",
        help="address the RayServeGraph event endpoint listens on (default: %(default)s)",
    ),
    Flag(
        "feature-gates",
        convert=_feature_gates,
        action=_MergeFeatureGates,
        help="KubeRay's feature gates, <gate>=true|false,... (RayCronJob is on by default; "
        "gates this operator cannot honour are refused by name); may be repeated, later "
        "values win, so each kustomize component can add its own",
    ),
    Flag(
        "legacy-clusters",
        switch=True,
        help="serve the legacy Python operator's cluster.ray.io/v1 RayClusters (apply "
        "crd/legacy first; config/legacy does) (default: %(default)s)",
    ),
    Flag(
        "service-account",
        default_env=POD_SERVICE_ACCOUNT_ENV,
        help="the operator's own ServiceAccount: Pod templates in its namespace naming it are "
        f"refused (default: ${POD_SERVICE_ACCOUNT_ENV}, which config/manager sets; empty: none)",
    ),
    Flag(
        "service-account-namespace",
        default=None,
        finish=_or_pod_namespace,
        help=f"the namespace of --service-account (default: ${POD_NAMESPACE_ENV}, else the "
        "in-cluster namespace)",
    ),
    Flag(
        "batch-scheduler",
        convert=_batch_scheduler,
        help=f"batch scheduler integration: {', '.join(BATCH_SCHEDULERS)} (default: none)",
    ),
    Flag(
        "enable-batch-scheduler",
        switch=True,
        default=False,
        field=None,  # folded into `batch_scheduler` by chosen_batch_scheduler
        help="deprecated (KubeRay's): --batch-scheduler=volcano (default: %(default)s)",
    ),
)
"""`ray-operator run`'s flags, each filling the `Settings` field of its name (see `flags`)."""


def add_run_arguments(
    parser: argparse.ArgumentParser, *, environ: Mapping[str, str] | None = None
) -> None:
    """Add `ray-operator run`'s flags (defaults from RAY_OPERATOR_* env vars) to `parser`."""
    add_flags(parser, RUN_FLAGS, options=Settings, environ=environ)


def chosen_batch_scheduler(args: argparse.Namespace) -> str:
    """The scheduler `--batch-scheduler`/`--enable-batch-scheduler` choose; both at once is
    refused, as KubeRay refuses it."""
    if args.enable_batch_scheduler and args.batch_scheduler:
        raise ValueError(
            "--enable-batch-scheduler (deprecated) and --batch-scheduler are both set; "
            "use --batch-scheduler only"
        )
    return VOLCANO if args.enable_batch_scheduler else str(args.batch_scheduler)


def settings_from_args(args: argparse.Namespace) -> Settings:
    """The `Settings` described by parsed `run` arguments (`ValueError` if they contradict)."""
    fields = flag_fields(args, RUN_FLAGS)
    fields["batch_scheduler"] = chosen_batch_scheduler(args)
    settings = Settings(**fields)
    if metrics_need_authentication(settings) and _same_listener(
        settings.metrics_addr, settings.health_addr
    ):
        raise ValueError(
            "/metrics with authentication (--metrics-auth) is served over HTTPS on a listener of "
            "its own, and the probes stay plain: give --metrics-addr another port than "
            "--health-addr, or serve /metrics plainly with --metrics-auth=none"
        )
    return settings


def _same_listener(address: str, other: str) -> bool:
    here, there = parse_address(address), parse_address(other)
    return here == there and here[1] != 0


def metrics_need_authentication(settings: Settings) -> bool:
    """Whether /metrics is served over HTTPS to authorized callers only (`metrics_auth`)."""
    if settings.metrics_auth != "auto":
        return settings.metrics_auth == "kubernetes"
    host, _ = parse_address(settings.metrics_addr)
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True  # a name: whatever it resolves to, assume others can reach it


def listen_on_loopback(address: str) -> str:
    """`address` with an empty host (`:8082`, all interfaces: what a Pod needs) bound to
    127.0.0.1 instead: `ray-operator dev` on a laptop serves no one else. An explicit host
    (`0.0.0.0:8082`) is kept."""
    host, _, port = address.rpartition(":")
    return f"127.0.0.1:{port}" if not host else address


def parse_address(address: str) -> tuple[str, int]:
    """`host:port` (or `:port`, all interfaces) as a (host, port) pair."""
    host, separator, port = address.rpartition(":")
    if not separator or not port.isdigit():
        raise ValueError(f"address must be host:port, got {address!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


__all__: Sequence[str] = ("Settings", "add_run_arguments", "parse_address", "settings_from_args")
