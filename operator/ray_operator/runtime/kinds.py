"""Names of things: the API kinds the operator touches, object keys, and the labels it relies on.

This module owns identities only — no I/O, no state — so builders, controllers and the runtime can
all import it. A `Kind` says where a resource lives in the API (group/version/plural) and what it is
called; an `ObjectKey` names one object of one kind (`namespace/name` when printed, the prefix of
every log line about it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ray_operator.labels import CREATED_BY, CREATED_BY_SELECTOR, RAY_POD_SELECTOR

OPERATOR_NAME = CREATED_BY
"""This operator's value for `app.kubernetes.io/created-by` (KubeRay uses `kuberay-operator`)."""

OWNED_SELECTOR = CREATED_BY_SELECTOR
"""Server-side label selector of owned Services, Jobs and RBAC objects: others are never cached."""

POD_SELECTOR = RAY_POD_SELECTOR
"""Server-side label selector of Pods: every Pod labelled `ray.io/cluster` (ours, KubeRay's, or
ours with `created-by` removed), so a tampered worker is still counted; unrelated Pods are never
cached. Ownership is still decided by ownerReferences."""


@dataclass(frozen=True, slots=True)
class Kind:
    """One API resource type: where it is served and what it is called."""

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

    @property
    def api_version(self) -> str:
        """The `apiVersion` field of its objects (`v1`, `ray.io/v1`)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, *, namespace: str | None = None, name: str | None = None) -> str:
        """The URL path of the collection (or of one object when `name` is given)."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace is not None and self.namespaced:
            root = f"{root}/namespaces/{namespace}"
        root = f"{root}/{self.plural}"
        return root if name is None else f"{root}/{name}"

    def __str__(self) -> str:
        return self.kind


RAY_CLUSTER = Kind("ray.io", "v1", "rayclusters", "RayCluster")
RAY_JOB = Kind("ray.io", "v1", "rayjobs", "RayJob")
RAY_SERVICE = Kind("ray.io", "v1", "rayservices", "RayService")
POD = Kind("", "v1", "pods", "Pod")
SERVICE = Kind("", "v1", "services", "Service")
JOB = Kind("batch", "v1", "jobs", "Job")
EVENT = Kind("", "v1", "events", "Event")
LEASE = Kind("coordination.k8s.io", "v1", "leases", "Lease")
NAMESPACE = Kind("", "v1", "namespaces", "Namespace", namespaced=False)
SERVICE_ACCOUNT = Kind("", "v1", "serviceaccounts", "ServiceAccount")
SECRET = Kind("", "v1", "secrets", "Secret")
"""Never watched: only created (Ray auth tokens) and read by name where RBAC allows."""
ROLE = Kind("rbac.authorization.k8s.io", "v1", "roles", "Role")
ROLE_BINDING = Kind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")

AUTOSCALER_RBAC_KINDS: tuple[Kind, ...] = (SERVICE_ACCOUNT, ROLE, ROLE_BINDING)
"""What each autoscaled RayCluster gets so Ray's autoscaler may patch its Pods and cluster."""

OWNED_KINDS: tuple[Kind, ...] = (POD, SERVICE, JOB, *AUTOSCALER_RBAC_KINDS)
"""Kinds we create and therefore watch only through a label selector (`watch_selector`): Pods
must carry `ray.io/cluster`, the others `app.kubernetes.io/created-by=ray-operator`, or the cache
never sees them."""

WATCHED_KINDS: tuple[Kind, ...] = (RAY_CLUSTER, RAY_JOB, RAY_SERVICE, *OWNED_KINDS)
"""Kinds the operator caches by default."""


def watch_selector(kind: Kind) -> str | None:
    """The server-side label selector the cache of `kind` is filled through (None: everything)."""
    if kind == POD:
        return POD_SELECTOR
    return OWNED_SELECTOR if kind in OWNED_KINDS else None


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
