"""Names of things: the API kinds the operator touches, object keys, and the labels it relies on.

This module owns identities only — no I/O, no state — so builders, controllers and the runtime can
all import it. A `Kind` says where a resource lives in the API (group/version/plural) and what it is
called; an `ObjectKey` names one object of one kind (`namespace/name` when printed, the prefix of
every log line about it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Generic

from typing_extensions import TypeVar

from ray_operator.spec.kuberay_names import (
    CREATED_BY,
    CREATED_BY_LABEL,
    CREATED_BY_SELECTOR,
    HEADLESS_WORKER_SERVICE_LABEL,
    KUBERAY_CREATED_BY,
    NODE_TYPE_LABEL,
    RAY_POD_SELECTOR,
    SERVE_LABEL,
)
from ray_operator.spec.serve_graph_names import GRAPH_LABEL, SERVE_GRAPH_GROUP, SERVE_GRAPH_VERSION

if TYPE_CHECKING:
    # Types only: the views cost nothing at run time, and the operator never imports them.
    from ray_io.v1_views import Pod, RayCluster, RayCronJob, RayJob, RayService, Service

JSON = dict[str, Any]
"""The objects of a kind without a generated view: plain JSON dicts."""

ObjectT = TypeVar("ObjectT", covariant=True, default=Any)
"""What a kind's objects are to mypy: its TypedDict view (`ray_io.v1_views`) where one is
generated, else a plain JSON dict."""

Viewed = TypeVar("Viewed", bound=Mapping[str, Any])
"""The view of the kind a function is given (`Kind[Viewed]`) and hands objects of back: the
store's reads, the API client's answers, a controller's lookups of its dependents."""

OPERATOR_NAME = CREATED_BY
"""This operator's value for `app.kubernetes.io/created-by` (KubeRay uses `kuberay-operator`)."""

OWNED_SELECTOR = CREATED_BY_SELECTOR
"""Label selector of what this operator labelled as its own (`created-by=ray-operator`); the
cache is filled through `watch_selectors`, which also admit what KubeRay made."""

POD_SELECTOR = RAY_POD_SELECTOR
"""Server-side label selector of Pods: every Pod labelled `ray.io/cluster` (ours, KubeRay's, or
ours with `created-by` removed), so a tampered worker is still counted; unrelated Pods are never
cached. Ownership is still decided by ownerReferences."""


@dataclass(frozen=True, slots=True)
class Kind(Generic[ObjectT]):
    """One API resource type: where it is served and what it is called; typed by its objects'
    view, so that the cache hands out a `RayCluster` for `RAY_CLUSTER` (the same dict, checked)."""

    group: str
    """API group; empty for the core group ("" → `/api/v1`)."""
    version: str
    """API version within the group, e.g. `v1`."""
    plural: str
    """Resource name in URLs, e.g. `rayclusters`."""
    kind: str
    """The `kind` field of its objects, e.g. `RayCluster`."""
    namespaced: bool = True
    """Whether its objects live in a namespace."""
    qualified: bool = False
    """Whether its keys name it with its group (`RayCluster.cluster.ray.io`): another group has
    a kind of the same name."""

    @property
    def key_kind(self) -> str:
        """What names this kind in an `ObjectKey` (and so routes keys to its controller)."""
        return f"{self.kind}.{self.group}" if self.qualified else self.kind

    def key(self, obj: Mapping[str, Any]) -> ObjectKey:
        """The key of one of its objects as the API returns it (a plain dict)."""
        metadata = obj["metadata"]
        return ObjectKey(self.key_kind, metadata.get("namespace", ""), metadata["name"])

    @property
    def api_version(self) -> str:
        """The `apiVersion` field of its objects (`v1`, `ray.io/v1`)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def with_type_meta(self, obj: dict[str, Any]) -> dict[str, Any]:
        """`obj`, its `kind` and `apiVersion` filled in where missing (in place): list items of
        built-in types come without them, and the cache wants them."""
        obj.setdefault("kind", self.kind)
        obj.setdefault("apiVersion", self.api_version)
        return obj

    def path(self, *, namespace: str | None = None, name: str | None = None) -> str:
        """The URL path of the collection (or of one object when `name` is given)."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace is not None and self.namespaced:
            root = f"{root}/namespaces/{namespace}"
        root = f"{root}/{self.plural}"
        return root if name is None else f"{root}/{name}"

    def __str__(self) -> str:
        return self.key_kind


RAY_CLUSTER: Final[Kind[RayCluster]] = Kind("ray.io", "v1", "rayclusters", "RayCluster")
RAY_JOB: Final[Kind[RayJob]] = Kind("ray.io", "v1", "rayjobs", "RayJob")
RAY_SERVICE: Final[Kind[RayService]] = Kind("ray.io", "v1", "rayservices", "RayService")
RAY_CRON_JOB: Final[Kind[RayCronJob]] = Kind("ray.io", "v1", "raycronjobs", "RayCronJob")
"""KubeRay's alpha kind: RayJobs on a cron schedule (its RayJobs map back by owner)."""
POD: Final[Kind[Pod]] = Kind("", "v1", "pods", "Pod")
"""Cached as projections (`projection.POD_FIELDS`): the same paths, fewer of them."""
SERVICE: Final[Kind[Service]] = Kind("", "v1", "services", "Service")
JOB: Final[Kind[JSON]] = Kind("batch", "v1", "jobs", "Job")
EVENT: Final[Kind[JSON]] = Kind("", "v1", "events", "Event")
LEASE: Final[Kind[JSON]] = Kind("coordination.k8s.io", "v1", "leases", "Lease")
NAMESPACE: Final[Kind[JSON]] = Kind("", "v1", "namespaces", "Namespace", namespaced=False)
SERVICE_ACCOUNT: Final[Kind[JSON]] = Kind("", "v1", "serviceaccounts", "ServiceAccount")
SECRET: Final[Kind[JSON]] = Kind("", "v1", "secrets", "Secret")
"""Never watched: only created (Ray auth tokens) and read by name where RBAC allows."""
ROLE: Final[Kind[JSON]] = Kind("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDING: Final[Kind[JSON]] = Kind(
    "rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"
)
PERSISTENT_VOLUME_CLAIM: Final[Kind[JSON]] = Kind(
    "", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"
)
"""The `<cluster>-gcs-pvc` of embedded GCS fault tolerance; KubeRay labels it `ray.io/cluster`
only."""
INGRESS: Final[Kind[JSON]] = Kind("networking.k8s.io", "v1", "ingresses", "Ingress")
"""The head's `<cluster>-head-ingress` of `headGroupSpec.enableIngress`."""
NETWORK_POLICY: Final[Kind[JSON]] = Kind(
    "networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"
)
"""A RayCluster's `spec.networkPolicy` isolation; cached only with the RayClusterNetworkPolicy
feature gate on (`app.watched_kinds`): the operator has no rights on them otherwise."""
CONFIG_MAP: Final[Kind[JSON]] = Kind("", "v1", "configmaps", "ConfigMap")
PERSISTENT_VOLUME: Final[Kind[JSON]] = Kind(
    "", "v1", "persistentvolumes", "PersistentVolume", namespaced=False
)
"""The `<graph>-serve-graph-builder` module that a RayServeGraph's Ray containers import."""
RAY_SERVE_GRAPH: Final[Kind[JSON]] = Kind(
    SERVE_GRAPH_GROUP, SERVE_GRAPH_VERSION, "rayservegraphs", "RayServeGraph"
)
"""Our own kind (KubeRay owns `ray.io`): a Serve DAG fetched as protobuf, kept deployed."""
LEGACY_RAY_CLUSTER: Final[Kind[JSON]] = Kind(
    "cluster.ray.io", "v1", "rayclusters", "RayCluster", qualified=True
)
"""The RayCluster of Ray's legacy Python operator, served with `--legacy-clusters`: converted
into a ray.io RayCluster of the same name, which it owns."""

TOKEN_REVIEW: Final[Kind[JSON]] = Kind(
    "authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False
)
SUBJECT_ACCESS_REVIEW: Final[Kind[JSON]] = Kind(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)
"""Who a bearer token is, and whether it may `get` /metrics (`--metrics-auth=kubernetes`):
created, answered in the response, never stored."""

ISSUER: Final[Kind[JSON]] = Kind("cert-manager.io", "v1", "issuers", "Issuer")
CERTIFICATE: Final[Kind[JSON]] = Kind("cert-manager.io", "v1", "certificates", "Certificate")
CERT_MANAGER_KINDS: tuple[Kind, ...] = (ISSUER, CERTIFICATE)
"""The PKI of an mTLS RayCluster (`spec.tlsOptions`): cached only with the RayClusterMTLS gate on,
through `ray.io/cluster`, and only where cert-manager's CRDs are installed."""

VOLCANO_POD_GROUP: Final[Kind[JSON]] = Kind(
    "scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", qualified=True
)
SCHEDULER_PLUGINS_POD_GROUP: Final[Kind[JSON]] = Kind(
    "scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup", qualified=True
)
"""The PodGroups of `--batch-scheduler=volcano` / `scheduler-plugins`, cached only then (all of
the namespace's: KubeRay's carry no label to select them by)."""
POD_GROUP_KINDS: Mapping[str, Kind[JSON]] = {
    "volcano": VOLCANO_POD_GROUP,
    "scheduler-plugins": SCHEDULER_PLUGINS_POD_GROUP,
}
"""The PodGroup kind each `--batch-scheduler` creates (the others create none)."""

AUTOSCALER_RBAC_KINDS: tuple[Kind, ...] = (SERVICE_ACCOUNT, ROLE, ROLE_BINDING)
"""What each autoscaled RayCluster gets so Ray's autoscaler may patch its Pods and cluster."""

OWNED_KINDS: tuple[Kind, ...] = (
    POD,
    SERVICE,
    JOB,
    *AUTOSCALER_RBAC_KINDS,
    PERSISTENT_VOLUME_CLAIM,
    INGRESS,
)
"""Kinds we create and therefore watch only through label selectors (`watch_selectors`): an
object without the labels Ray's operators put on what they make is never cached."""

WATCHED_KINDS: tuple[Kind, ...] = (
    RAY_CLUSTER,
    RAY_JOB,
    RAY_SERVICE,
    RAY_CRON_JOB,
    RAY_SERVE_GRAPH,
    *OWNED_KINDS,
    CONFIG_MAP,
)
"""Kinds the operator caches by default. ConfigMaps only through `BUILDER_CONFIGMAP_SELECTOR`:
the cache holds the RayServeGraphs' builder modules, never the namespace's other ConfigMaps."""

OPTIONAL_KINDS: Mapping[Kind, tuple[Kind, ...]] = {
    RAY_CRON_JOB: (),
    RAY_SERVE_GRAPH: (CONFIG_MAP,),
    LEGACY_RAY_CLUSTER: (),
    ISSUER: (),
    CERTIFICATE: (),
    VOLCANO_POD_GROUP: (),
    SCHEDULER_PLUGINS_POD_GROUP: (),
    NETWORK_POLICY: (),
}
"""Our own kinds an install may lack (the operator was upgraded, its new CRD not applied), and
others' (cert-manager's, the batch schedulers' PodGroups: not installed; NetworkPolicies: a gate
turned on without the grants of its component), each with the kinds cached only for it. Without
the CRD or the grant the operator runs without that controller (or those objects) instead of
waiting forever for a cache that can never list (which would stop every kind)."""


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A label selector the API server applies (`str()`) and that we can evaluate (`matches`).

    Needed where one kind is watched through several selectors: each watcher must know which
    cached objects are its own (a relist removes only those; a DELETED sent because an object's
    labels moved it into another watcher's selector must not remove the newer copy).
    """

    present: tuple[str, ...] = ()
    """Keys that must be set (any value)."""
    absent: tuple[str, ...] = ()
    """Keys that must not be set."""
    one_of: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(key, values): the key must be set to one of the values."""

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Whether an object with these labels is selected."""
        labels = labels or {}
        return (
            all(key in labels for key in self.present)
            and not any(key in labels for key in self.absent)
            and all(labels.get(key) in values for key, values in self.one_of)
        )

    def __str__(self) -> str:
        requirements = [
            *self.present,
            *(f"!{key}" for key in self.absent),
            *(f"{key} in ({','.join(values)})" for key, values in self.one_of),
        ]
        return ",".join(requirements)


CREATED_BY_EITHER_OPERATOR = LabelSelector(
    one_of=((CREATED_BY_LABEL, (CREATED_BY, KUBERAY_CREATED_BY)),)
)
"""Jobs and autoscaler RBAC objects: both operators put `app.kubernetes.io/created-by` on every
one they make (KubeRay's redis-cleanup Job too: it copies the head Pod's labels)."""

SERVICE_SELECTORS: tuple[LabelSelector, ...] = (
    LabelSelector(present=(NODE_TYPE_LABEL,)),
    LabelSelector(present=(SERVE_LABEL,), absent=(NODE_TYPE_LABEL,)),
    LabelSelector(present=(HEADLESS_WORKER_SERVICE_LABEL,), absent=(NODE_TYPE_LABEL, SERVE_LABEL)),
)
"""Services, by the `ray.io/*` labels KubeRay relies on — no single label is on all of them:
head Services (a RayCluster's, a RayJob's, a RayService's; either operator's) carry
`ray.io/node-type`; serve Services `ray.io/serve` only; the multi-host headless worker Service
`ray.io/headless-worker-svc` only (KubeRay puts no `created-by` on the last two, nor on a RayJob's
or RayService's head Service). Label selectors cannot say "or", so these are three watches; each
excludes the keys of the ones before, so no Service is in two and each watcher owns its part."""


BUILDER_CONFIGMAP_SELECTOR = LabelSelector(present=(GRAPH_LABEL,))
"""ConfigMaps: only the `<graph>-serve-graph-builder` ones a RayServeGraph made (one watch; a
few KiB each, one per graph)."""


def watch_selectors(kind: Kind) -> tuple[LabelSelector | None, ...]:
    """The label selectors the cache of `kind` is filled through, one watch each (None: all).

    What either operator created is recognised: ownership is then decided by ownerReferences
    (the owner's uid), never by who created it, so a cluster KubeRay ran is taken over as is.
    """
    if kind in (POD, PERSISTENT_VOLUME_CLAIM, INGRESS, NETWORK_POLICY, *CERT_MANAGER_KINDS):
        # Pods: every Pod labelled `ray.io/cluster` (ours, KubeRay's, or ours with `created-by`
        # removed). PVCs and Ingresses too: KubeRay's carry `ray.io/cluster` (its PVC no other
        # label), so a taken-over cluster's are seen.
        return (LabelSelector(present=(POD_SELECTOR,)),)
    if kind == SERVICE:
        return SERVICE_SELECTORS
    if kind == CONFIG_MAP:
        return (BUILDER_CONFIGMAP_SELECTOR,)
    return (CREATED_BY_EITHER_OPERATOR,) if kind in OWNED_KINDS else (None,)


@dataclass(frozen=True, slots=True, order=True)
class ObjectKey:
    """One object of one kind; what the queue holds and what a controller reconciles."""

    kind: str
    """The `kind` of the object, e.g. `RayCluster` (selects the controller)."""
    namespace: str
    """Its namespace (empty for cluster-scoped objects)."""
    name: str
    """Its name."""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> ObjectKey:
        """The key of an object as the API returns it (a plain dict)."""
        metadata = obj["metadata"]
        return cls(obj["kind"], metadata.get("namespace", ""), metadata["name"])
