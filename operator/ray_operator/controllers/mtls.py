"""The mTLS step of the RayCluster controller (`spec.tlsOptions`, KubeRay's RayClusterMTLS gate).

KubeRay runs a second controller for this (`raycluster_mtls_controller.go`); here it is one step
of the RayCluster reconcile, in three parts:

- `ensure_pki`: the Issuers and Certificates of `builders.mtls`, created, kept to their spec (a
  leaf whose Pod IPs changed is updated, with a Normal `MTLSCertificatesUpdated` Event as
  KubeRay's), and deleted — with the Secrets cert-manager issued for them — when `tlsOptions` is
  removed or disabled (KubeRay leaves them until the cluster goes);
- `hold_creates_until_issued`: no Pod is created before both leaf Certificates are Ready for their
  current generation and their Secrets hold `tls.crt`, `tls.key` and `ca.crt` (KubeRay's
  `checkMTLSSecretsReady`); each Secret found gets an ownerReference to its Certificate, as
  KubeRay gives it, so that a garbage collector removes it with the Certificate;
- `delete_issued_secrets`: the Secrets of a deleted cluster's Certificates, deleted explicitly
  (the Certificates and Issuers go with the cluster's other dependents; no GC is assumed).

Secrets are read by name only (never watched or listed) and only their key names are looked at:
no value ever reaches a log line, an Event or the status. A Secret is deleted only when cert-manager
issued it for one of our Certificates (its `cert-manager.io/certificate-name` annotation or our
ownerReference says so), with its uid as a precondition.

Without cert-manager's CRDs the cluster is reported (an Event and the InvalidSpec condition, as
KubeRay's "tlsOptions requires cert-manager") and looked at again every `CERT_MANAGER_RECHECK_S`:
never a crash, never a hot loop.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

from ray_operator.builders.mtls import (
    CERTIFICATE_NAME_ANNOTATION,
    SECRET_KEYS,
    build_certificates,
    build_issuers,
    ca_certificate_name,
    is_certificate_ready,
    is_tls_enabled,
    leaf_certificate_names,
    sans_differ,
)
from ray_operator.runtime.errors import Conflict, Forbidden, NotFound
from ray_operator.spec.kinds import CERTIFICATE, ISSUER, SECRET, Kind, ObjectKey
from ray_operator.spec.raycluster import cluster_name, spec

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster

    from ray_operator.controllers.owned_objects import OwnedObjects
    from ray_operator.planning.scaling import ScalingPlan
    from ray_operator.runtime.client import KubeClient
    from ray_operator.runtime.events import EventRecorder
    from ray_operator.runtime.store import StoreView

logger = logging.getLogger(__name__)

Object = Mapping[str, Any]

CERT_MANAGER_RECHECK_S: Final = 60.0
"""How often a cluster waiting for cert-manager's CRDs looks again (one request)."""
ISSUANCE_RECHECK_S: Final = 5.0
"""How often Pod creation waiting for issued Secrets looks again (Secrets are not watched; the
Certificates are, so their Ready condition brings the cluster back at once)."""


@dataclass
class _Probe:
    served: bool | None = None
    checked_at: float = 0.0


class ClusterMTLS:
    """The mTLS step; one per RayCluster controller."""

    def __init__(
        self,
        *,
        client: KubeClient,
        store: StoreView,
        events: EventRecorder,
        objects: OwnedObjects,
        ensure_object: Callable[[ObjectKey, RayCluster, Kind[Any], Object], Awaitable[None]],
        gate_on: bool,
        cluster_domain: str,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._store = store
        self._events = events
        self._objects = objects
        # The RayCluster controller's ensure: a name taken by an object the cluster does not own
        # stops its reconcile with a ReplicaFailure (its status writer's), as for its Services.
        self._ensure_object = ensure_object
        self._gate_on = gate_on
        self._cluster_domain = cluster_domain
        self._monotonic = monotonic
        self._probe = _Probe()
        # Per cluster, (uid, certificate name) -> the resourceVersion whose SANs we updated: until
        # the cache shows a newer one, the same update must not be sent (nor "repaired") again.
        self._updated_from: dict[ObjectKey, dict[tuple[str, str], str]] = {}
        self._announced: dict[ObjectKey, str] = {}  # the cluster uid told "mTLS PKI is ready"

    def wanted(self, cluster: RayCluster) -> bool:
        return self._gate_on and is_tls_enabled(spec(cluster))

    async def ensure_pki(self, key: ObjectKey, cluster: RayCluster) -> str | None:
        """Create or update the PKI (or delete it when mTLS is off); a message when cert-manager
        is missing (the caller reports it as an invalid spec and stops)."""
        if not self._gate_on:
            return None  # Nothing is cached or created: validation refuses the field.
        if not self.wanted(cluster):
            await self.delete_pki(key, cluster)
            return None
        missing = await self._cert_manager_missing(key.namespace)
        if missing is not None:
            return missing
        for issuer in build_issuers(cluster):
            await self._ensure_object(key, cluster, ISSUER, issuer)
        pods = self._objects.observed_pods(key, cluster)
        for certificate in build_certificates(
            cluster, pods=pods, cluster_domain=self._cluster_domain
        ):
            await self._ensure_certificate(key, cluster, certificate)
        return None

    async def delete_pki(self, key: ObjectKey, cluster: RayCluster) -> None:
        """mTLS turned off: the cluster's Certificates (their Secrets first) and Issuers go."""
        certificates = self._objects.observed(CERTIFICATE, key, cluster)
        issuers = self._objects.observed(ISSUER, key, cluster)
        if not certificates and not issuers:
            return
        for certificate in certificates:
            await self._delete_issued_secret(key, certificate)
        for kind, obj in [
            *((CERTIFICATE, c) for c in certificates),
            *((ISSUER, i) for i in issuers),
        ]:
            await self._objects.delete(key, kind, obj)
        self._announced.pop(key, None)
        self._events.record(
            cluster,
            reason="DeletedMTLSCertificates",
            message=f"Deleted {len(certificates)} Certificates and {len(issuers)} Issuers: "
            "spec.tlsOptions no longer enables mTLS",
        )

    async def hold_creates_until_issued(
        self, key: ObjectKey, cluster: RayCluster, plan: ScalingPlan
    ) -> tuple[ScalingPlan, float | None]:
        """`plan` as is when its Pods may be created; else without its creates, and when to look
        again. Secrets are read only when the plan creates a Pod."""
        if not self.wanted(cluster) or plan.missing_pods == 0:
            return plan, None
        waiting_for = await self._not_issued(key, cluster)
        if waiting_for is None:
            self._announce_ready(key, cluster)
            return plan, None
        logger.info("%s: holding Pod creation: %s", key, waiting_for)
        self._events.record(
            cluster,
            reason="MTLSCertsNotReady",
            message=f"Waiting for cert-manager to issue the mTLS certificates: {waiting_for}",
        )
        return without_creates(plan), ISSUANCE_RECHECK_S

    async def delete_issued_secrets(
        self, key: ObjectKey, owner_matches: Callable[[str], bool]
    ) -> None:
        """The issued Secrets of the cached Certificates of `key`'s cluster name whose owning
        RayCluster uid matches (a deleted cluster's, an earlier incarnation's)."""
        for certificate in self._store.list_for_cluster(CERTIFICATE, key.namespace, key.name):
            owner = _ray_cluster_owner(certificate)
            if owner is not None and owner_matches(owner):
                await self._delete_issued_secret(key, certificate)

    # --- parts -------------------------------------------------------------------------------

    async def _ensure_certificate(
        self, key: ObjectKey, cluster: RayCluster, desired: Object
    ) -> None:
        name = desired["metadata"]["name"]
        uid = str(cluster["metadata"].get("uid"))
        existing = next(
            (
                c
                for c in self._objects.observed(CERTIFICATE, key, cluster)
                if c["metadata"]["name"] == name
            ),
            None,
        )
        if existing is not None:
            version = str(existing["metadata"].get("resourceVersion", ""))
            updated_from = self._updated_from.setdefault(key, {})
            if updated_from.get((uid, name)) == version:
                return  # Our update is not cached yet.
            if sans_differ(existing, desired):
                await self._update_sans(key, cluster, existing, desired)
                updated_from[(uid, name)] = version
                return
        await self._ensure_object(key, cluster, CERTIFICATE, desired)

    async def _update_sans(
        self, key: ObjectKey, cluster: RayCluster, existing: Object, desired: Object
    ) -> None:
        name = existing["metadata"]["name"]
        # The SANs only: labels are the drift repair's, which leaves KubeRay's `created-by` alone.
        patch = {
            "spec": {
                "dnsNames": desired["spec"]["dnsNames"],
                "ipAddresses": desired["spec"]["ipAddresses"],
            },
        }
        with contextlib.suppress(NotFound):  # gone: its delete event brings us back
            await self._client.patch(CERTIFICATE, name, patch, namespace=key.namespace)
        ips = ", ".join(desired["spec"]["ipAddresses"])
        logger.info("%s: updated Certificate %s (IPs: %s)", key, name, ips)
        self._events.record(
            cluster,
            reason="MTLSCertificatesUpdated",
            message=f"Updated Certificate {key.namespace}/{name} SANs (IPs: {ips})",
        )

    async def _not_issued(self, key: ObjectKey, cluster: RayCluster) -> str | None:
        """What the Pods still wait for (None: both leaves Ready, their Secrets complete)."""
        certificates = {
            c["metadata"]["name"]: c for c in self._objects.observed(CERTIFICATE, key, cluster)
        }
        leaves = [certificates.get(name) for name in leaf_certificate_names(cluster_name(cluster))]
        for name, certificate in zip(
            leaf_certificate_names(cluster_name(cluster)), leaves, strict=True
        ):
            if certificate is None or not is_certificate_ready(certificate):
                return f"Certificate {name} is not Ready for its current generation"
        for certificate in leaves:
            assert certificate is not None
            problem = await self._check_secret(key, certificate)
            if problem is not None:
                return problem
        ca = certificates.get(ca_certificate_name(cluster_name(cluster)))
        if ca is not None:  # its Secret too gets an ownerReference, as KubeRay gives it
            await self._check_secret(key, ca)
        return None

    async def _check_secret(self, key: ObjectKey, certificate: Object) -> str | None:
        """A problem with the Certificate's Secret (missing, incomplete, unreadable), or None;
        gives a complete one its ownerReference to the Certificate."""
        secret_name = str((certificate.get("spec") or {}).get("secretName", ""))
        try:
            secret = await self._client.get(SECRET, secret_name, namespace=key.namespace)
        except NotFound:
            return f"Secret {secret_name} does not exist yet"
        except Forbidden:
            return (
                f"the operator may not read Secret {secret_name} "
                "(the RBAC of config/mtls grants it)"
            )
        data = secret.get("data") or {}
        missing = [k for k in SECRET_KEYS if k not in data]
        if missing:
            return f"Secret {secret_name} lacks {', '.join(missing)}"
        await self._own_secret(key, secret, certificate)
        return None

    async def _own_secret(self, key: ObjectKey, secret: Object, certificate: Object) -> None:
        owners = list(secret["metadata"].get("ownerReferences") or [])
        cert_uid = certificate["metadata"].get("uid")
        if not cert_uid or any(o.get("uid") == cert_uid for o in owners):
            return
        owners.append(
            {
                "apiVersion": certificate.get("apiVersion", "cert-manager.io/v1"),
                "kind": "Certificate",
                "name": certificate["metadata"]["name"],
                "uid": cert_uid,
            }
        )
        patch = {
            "metadata": {
                "ownerReferences": owners,
                "resourceVersion": secret["metadata"].get("resourceVersion"),
            }
        }
        # Conflict: changed meanwhile (cert-manager reissued it); the next check does it.
        with contextlib.suppress(NotFound, Conflict):
            await self._client.patch(
                SECRET, secret["metadata"]["name"], patch, namespace=key.namespace
            )

    async def _delete_issued_secret(self, key: ObjectKey, certificate: Object) -> None:
        secret_name = (certificate.get("spec") or {}).get("secretName")
        if not isinstance(secret_name, str) or not secret_name:
            return
        try:
            secret = await self._client.get(SECRET, secret_name, namespace=key.namespace)
        except (NotFound, Forbidden):
            return  # Gone, or not ours to see: the garbage collector follows our ownerReference.
        if not _issued_for(secret, certificate):
            return  # A Secret of that name cert-manager did not issue for this Certificate.
        with contextlib.suppress(NotFound, Conflict):
            await self._client.delete(
                SECRET, secret_name, namespace=key.namespace, uid=secret["metadata"].get("uid")
            )
        logger.info(
            "%s: deleted Secret %s issued for Certificate %s",
            key,
            secret_name,
            certificate["metadata"]["name"],
        )

    def _announce_ready(self, key: ObjectKey, cluster: RayCluster) -> None:
        uid = str(cluster["metadata"].get("uid"))
        if self._announced.get(key) == uid:
            return
        self._announced[key] = uid
        self._events.record(
            cluster,
            reason="MTLSPKIReady",
            message="mTLS PKI is ready: CA, head and worker certificates issued",
        )

    async def _cert_manager_missing(self, namespace: str) -> str | None:
        """Why cert-manager cannot be used (its CRDs not served, or not readable), or None.
        Asked once while served; when not, again at most every `CERT_MANAGER_RECHECK_S`."""
        probe = self._probe
        now = self._monotonic()
        if probe.served or (
            probe.served is False and now - probe.checked_at < CERT_MANAGER_RECHECK_S
        ):
            return None if probe.served else _CERT_MANAGER_MISSING
        probe.checked_at = now
        try:
            for kind in (ISSUER, CERTIFICATE):
                await self._client.list(
                    kind, namespace=namespace, field_selector="metadata.name=ray-operator-probe-"
                )
        except NotFound:
            probe.served = False
            logger.error("%s", _CERT_MANAGER_MISSING)
            return _CERT_MANAGER_MISSING
        except Forbidden:
            # Asked again at the next reconcile (a minute later): RBAC may be applied meanwhile.
            probe.served = None
            return _NOT_ALLOWED
        # Any other error (a timeout, a 5xx) propagates: the queue retries with backoff.
        probe.served = True
        return None

    def forget(self, key: ObjectKey) -> None:
        """Drop what is remembered about a deleted cluster."""
        self._announced.pop(key, None)
        self._updated_from.pop(key, None)


_NOT_ALLOWED: Final = (
    "spec.tlsOptions: the operator may not read cert-manager.io Issuers and Certificates: "
    "apply the RBAC of config/mtls (it comes with --feature-gates=RayClusterMTLS=true)"
)
_CERT_MANAGER_MISSING: Final = (
    "spec.tlsOptions: mTLS requires cert-manager, but its CustomResourceDefinitions "
    "(issuers.cert-manager.io, certificates.cert-manager.io) are not installed: install "
    "cert-manager, then restart the operator"
)


def without_creates(plan: ScalingPlan) -> ScalingPlan:
    """`plan` with its deletions only: nothing is created, nothing is left "for the next batch"."""
    groups = tuple(
        replace(group, create_replica_indices=(), missing_replicas=0) for group in plan.groups
    )
    return replace(plan, create_head=False, groups=groups)


def _issued_for(secret: Object, certificate: Object) -> bool:
    meta = secret.get("metadata") or {}
    certificate_meta = certificate["metadata"]
    if (meta.get("annotations") or {}).get(CERTIFICATE_NAME_ANNOTATION) == certificate_meta["name"]:
        return True
    return any(
        o.get("uid") == certificate_meta.get("uid") for o in meta.get("ownerReferences") or []
    )


def _ray_cluster_owner(obj: Object) -> str | None:
    for owner in obj["metadata"].get("ownerReferences") or ():
        if owner.get("kind") == "RayCluster" and str(owner.get("apiVersion", "")).startswith(
            "ray.io/"
        ):
            return str(owner.get("uid"))
    return None


def requeue_sooner(*delays: float | None) -> float | None:
    """The soonest of the requeue delays given (None: none wanted)."""
    wanted = [delay for delay in delays if delay is not None]
    return min(wanted) if wanted else None


__all__ = ["ClusterMTLS", "requeue_sooner", "without_creates"]
