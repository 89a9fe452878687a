"""Mutual TLS of a RayCluster through cert-manager (`spec.tlsOptions`, KubeRay's RayClusterMTLS).

Pure, as KubeRay's `raycluster_mtls_controller.go` and `configureTLS` in `common/pod.go` build
them: a per-cluster PKI of five cert-manager objects — a self-signed Issuer, a CA Certificate it
signs, a CA Issuer backed by that CA's Secret, and two leaf Certificates (head, workers) the CA
Issuer signs — with KubeRay's names, labels and durations; and the Pod changes that mount a leaf's
Secret and point Ray at it (`RAY_USE_TLS` and the `RAY_TLS_*` paths), plus the init container that
waits until the leaf lists the Pod's own IP.

The Pod changes sit outside KubeRay's hash annotations, as in KubeRay: its hashes are of the
RayCluster spec (which does include `tlsOptions`), never of the Pod built from it.

The leaf Certificates list the IPs of the cluster's live Pods of their node type (KubeRay's
`getPodIPs`): GCS on the head dials each worker's raylet at its Pod IP, so a worker's certificate
must name it; the head's names the head Service FQDN for the workers.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from ray_operator.builders.metadata import dependent_metadata
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.object_names import head_service_fqdn
from ray_operator.spec.raycluster import JSON, cluster_name, metadata, ray_container, spec

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster, RayClusterSpec

CERT_MANAGER_GROUP: Final = "cert-manager.io"
CERT_MANAGER_API_VERSION: Final = f"{CERT_MANAGER_GROUP}/v1"

# KubeRay's constants (utils/constant.go), so either operator finds the other's objects.
ENV_RAY_USE_TLS: Final = "RAY_USE_TLS"
ENV_RAY_TLS_SERVER_CERT: Final = "RAY_TLS_SERVER_CERT"
ENV_RAY_TLS_SERVER_KEY: Final = "RAY_TLS_SERVER_KEY"
ENV_RAY_TLS_CA_CERT: Final = "RAY_TLS_CA_CERT"
TLS_ENV_VARS: Final = (
    ENV_RAY_USE_TLS,
    ENV_RAY_TLS_SERVER_CERT,
    ENV_RAY_TLS_SERVER_KEY,
    ENV_RAY_TLS_CA_CERT,
)
"""The env vars the operator owns on a TLS cluster's Ray containers (users may not set them)."""
TLS_VOLUME_NAME: Final = "ray-tls"
TLS_MOUNT_PATH: Final = "/etc/ray/tls"
WAIT_FOR_IP_SAN_CONTAINER: Final = "wait-for-tls-ip-san"
SECRET_KEYS: Final = ("tls.crt", "tls.key", "ca.crt")
"""What a leaf Secret must hold before Pods may mount it (KubeRay's `checkMTLSSecretsReady`)."""
CERTIFICATE_NAME_ANNOTATION: Final = "cert-manager.io/certificate-name"
"""Set by cert-manager on each Secret it issues: which Certificate the Secret belongs to."""
COMPONENT_LABEL: Final = "app.kubernetes.io/component"

# Go's time.Duration String() of KubeRay's values, the form cert-manager stores.
CA_DURATION: Final = "87600h0m0s"  # ~10 years
CA_RENEW_BEFORE: Final = "720h0m0s"  # 30 days
LEAF_DURATION: Final = "2160h0m0s"  # 90 days
LEAF_RENEW_BEFORE: Final = "360h0m0s"  # 15 days
CA_KEY_SIZE: Final = 4096
LEAF_USAGES: Final = ("digital signature", "key encipherment", "server auth", "client auth")
CA_USAGES: Final = ("cert sign", "crl sign")
LOOPBACK_IP: Final = "127.0.0.1"

# The init container's fixed resources (KubeRay's): it only runs openssl in a loop.
_WAIT_RESOURCES: Final = {"cpu": "50m", "memory": "64Mi"}


def is_tls_enabled(cluster_spec: RayClusterSpec | Mapping[str, Any]) -> bool:
    """`tlsOptions.enabled` is true (the gate is checked by validation before anything runs)."""
    options = cluster_spec.get("tlsOptions")
    return isinstance(options, Mapping) and options.get("enabled") is True


# --- names (KubeRay's `utils.Get*Name`) ------------------------------------------------------


def self_signed_issuer_name(cluster: str) -> str:
    return f"ray-selfsigned-issuer-{cluster}"


def ca_certificate_name(cluster: str) -> str:
    return f"ray-ca-certificate-{cluster}"


def ca_issuer_name(cluster: str) -> str:
    return f"ray-ca-issuer-{cluster}"


def ca_secret_name(cluster: str, uid: str) -> str:
    """`<cluster>-ca-secret-<first 8 of uid>`: a recreated cluster never reuses an old CA."""
    return f"{cluster}-ca-secret-{uid[:8]}"


def leaf_certificate_name(cluster: str, node_type: str) -> str:
    role = "head" if node_type == names.HEAD_NODE else "worker"
    return f"ray-{role}-cert-{cluster}"


def leaf_secret_name(cluster: str, node_type: str) -> str:
    role = "head" if node_type == names.HEAD_NODE else "worker"
    return f"ray-{role}-secret-{cluster}"


# --- cert-manager objects --------------------------------------------------------------------


def build_issuers(cluster: RayCluster) -> list[JSON]:
    """The self-signed Issuer (bootstraps the CA) and the CA Issuer (signs the leaves)."""
    name = cluster_name(cluster)
    ca_secret = ca_secret_name(name, str(metadata(cluster).get("uid", "")))
    return [
        _issuer(cluster, self_signed_issuer_name(name), "selfsigned-issuer", {"selfSigned": {}}),
        _issuer(cluster, ca_issuer_name(name), "ca-issuer", {"ca": {"secretName": ca_secret}}),
    ]


def build_ca_certificate(cluster: RayCluster) -> JSON:
    """The cluster's root CA, signed by its self-signed Issuer."""
    name = cluster_name(cluster)
    return _certificate(
        cluster,
        ca_certificate_name(name),
        "ca-certificate",
        {
            "secretName": ca_secret_name(name, str(metadata(cluster).get("uid", ""))),
            "isCA": True,
            "commonName": f"ray-ca-{name}",
            "privateKey": {"algorithm": "RSA", "size": CA_KEY_SIZE},
            "duration": CA_DURATION,
            "renewBefore": CA_RENEW_BEFORE,
            "usages": list(CA_USAGES),
            "issuerRef": _issuer_ref(self_signed_issuer_name(name)),
        },
    )


def build_leaf_certificate(
    cluster: RayCluster, node_type: str, *, pod_ips: Iterable[str], cluster_domain: str
) -> JSON:
    """The head's or the workers' Certificate, naming `pod_ips` (see `live_pod_ips`)."""
    name = cluster_name(cluster)
    is_head = node_type == names.HEAD_NODE
    dns_names = ["localhost"]
    if is_head:
        # Workers and clients reach the head through its Service.
        dns_names.append(head_service_fqdn(cluster, cluster_domain=cluster_domain))
    return _certificate(
        cluster,
        leaf_certificate_name(name, node_type),
        "head-certificate" if is_head else "worker-certificate",
        {
            "secretName": leaf_secret_name(name, node_type),
            "duration": LEAF_DURATION,
            "renewBefore": LEAF_RENEW_BEFORE,
            "dnsNames": sorted(set(dns_names)),
            "ipAddresses": normalized_ips(pod_ips),
            "usages": list(LEAF_USAGES),
            "issuerRef": _issuer_ref(ca_issuer_name(name)),
        },
    )


def build_certificates(
    cluster: RayCluster, *, pods: Iterable[Mapping[str, Any]], cluster_domain: str
) -> list[JSON]:
    """The CA, then the head and worker leaves with the IPs of `pods` (the cluster's Pods)."""
    pod_list = list(pods)
    return [
        build_ca_certificate(cluster),
        *(
            build_leaf_certificate(
                cluster,
                node_type,
                pod_ips=live_pod_ips(pod_list, node_type),
                cluster_domain=cluster_domain,
            )
            for node_type in (names.HEAD_NODE, names.WORKER_NODE)
        ),
    ]


def live_pod_ips(pods: Iterable[Mapping[str, Any]], node_type: str) -> list[str]:
    """IPs of the Pods of `node_type` that are neither terminating nor finished."""
    ips = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        if (meta.get("labels") or {}).get(names.NODE_TYPE_LABEL) != node_type:
            continue
        if meta.get("deletionTimestamp") or status.get("phase") in ("Succeeded", "Failed"):
            continue
        if status.get("podIP"):
            ips.append(str(status["podIP"]))
    return ips


def normalized_ips(ips: Iterable[str]) -> list[str]:
    """Sorted, unique, with 127.0.0.1 always (KubeRay's `normalizeIPs`); a value that is not an
    IP address is dropped (a Pod's status is written by the kubelet, but never trusted)."""
    valid = {LOOPBACK_IP}
    for ip in ips:
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            continue
        valid.add(ip)
    return sorted(valid)


def sans_differ(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether a Certificate's DNS names or IPs differ as sets (KubeRay's
    `certificateNeedsUpdate`): a reissue is due."""
    old, new = existing.get("spec") or {}, desired["spec"]
    return any(
        set(old.get(field) or ()) != set(new.get(field) or ())
        for field in ("dnsNames", "ipAddresses")
    )


def is_certificate_ready(certificate: Mapping[str, Any]) -> bool:
    """Ready=True for the current generation (a stale Ready after a SAN change is not ready)."""
    generation = (certificate.get("metadata") or {}).get("generation")
    for condition in (certificate.get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return (
                condition.get("status") == "True"
                and condition.get("observedGeneration") == generation
            )
    return False


def leaf_certificate_names(cluster: str) -> tuple[str, str]:
    return (
        leaf_certificate_name(cluster, names.HEAD_NODE),
        leaf_certificate_name(cluster, names.WORKER_NODE),
    )


def _issuer(cluster: RayCluster, name: str, component: str, config: JSON) -> JSON:
    return _cert_manager_object("Issuer", cluster, name, component, config)


def _certificate(cluster: RayCluster, name: str, component: str, certificate_spec: JSON) -> JSON:
    return _cert_manager_object("Certificate", cluster, name, component, certificate_spec)


def _cert_manager_object(
    kind: str, cluster: RayCluster, name: str, component: str, object_spec: JSON
) -> JSON:
    return {
        "apiVersion": CERT_MANAGER_API_VERSION,
        "kind": kind,
        "metadata": _metadata(cluster, name, component),
        "spec": object_spec,
    }


def _metadata(cluster: RayCluster, name: str, component: str) -> JSON:
    meta = dependent_metadata(cluster, name=name)
    meta["labels"][COMPONENT_LABEL] = component
    return meta


def _issuer_ref(name: str) -> JSON:
    return {"name": name, "kind": "Issuer", "group": CERT_MANAGER_GROUP}


# --- Pods (KubeRay's `configureTLS` and `SetContainerTLSConfig`) ------------------------------


def configure_tls(cluster: RayCluster, pod_spec: JSON, *, node_type: str) -> None:
    """Mount the node type's leaf Secret, point the Ray container and `wait-gcs-ready` at it,
    and put the wait-for-IP-SAN init container first. No-op unless `tlsOptions.enabled`."""
    if not is_tls_enabled(spec(cluster)):
        return
    volumes = pod_spec.setdefault("volumes", [])
    if not any(v.get("name") == TLS_VOLUME_NAME for v in volumes):
        secret = leaf_secret_name(cluster_name(cluster), node_type)
        volumes.append({"name": TLS_VOLUME_NAME, "secret": {"secretName": secret}})
    ray = ray_container(pod_spec)
    set_container_tls(ray)
    init_containers = pod_spec.get("initContainers") or []
    for init in init_containers:
        if init.get("name") == names.WAIT_GCS_READY_CONTAINER_NAME:
            set_container_tls(init)
    if not any(c.get("name") == WAIT_FOR_IP_SAN_CONTAINER for c in init_containers):
        pod_spec["initContainers"] = [_wait_for_ip_san_container(ray), *init_containers]


def set_container_tls(container: JSON) -> None:
    """The four TLS env vars and the read-only mount, each only where not already present."""
    env = container.setdefault("env", [])
    present = {e.get("name") for e in env}
    wanted = {
        ENV_RAY_USE_TLS: "1",
        ENV_RAY_TLS_SERVER_CERT: f"{TLS_MOUNT_PATH}/tls.crt",
        ENV_RAY_TLS_SERVER_KEY: f"{TLS_MOUNT_PATH}/tls.key",
        ENV_RAY_TLS_CA_CERT: f"{TLS_MOUNT_PATH}/ca.crt",
    }
    env.extend({"name": n, "value": v} for n, v in wanted.items() if n not in present)
    mounts = container.setdefault("volumeMounts", [])
    if not any(
        m.get("name") == TLS_VOLUME_NAME or m.get("mountPath") == TLS_MOUNT_PATH for m in mounts
    ):
        mounts.append({"name": TLS_VOLUME_NAME, "mountPath": TLS_MOUNT_PATH, "readOnly": True})


def _wait_for_ip_san_container(ray: JSON) -> JSON:
    container: JSON = {
        "name": WAIT_FOR_IP_SAN_CONTAINER,
        "image": ray.get("image"),
        "command": ["sh", "-c"],
        "args": [_WAIT_FOR_IP_SAN_SCRIPT],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "resources": {"limits": dict(_WAIT_RESOURCES), "requests": dict(_WAIT_RESOURCES)},
        "volumeMounts": [{"name": TLS_VOLUME_NAME, "mountPath": TLS_MOUNT_PATH, "readOnly": True}],
    }
    if ray.get("imagePullPolicy"):
        container["imagePullPolicy"] = ray["imagePullPolicy"]
    if ray.get("securityContext") is not None:
        container["securityContext"] = ray["securityContext"]
    return container


# Ray reads its TLS files once, at start: a Pod must not start Ray before cert-manager has
# reissued its leaf with the Pod's IP (GCS would fail the handshake and mark the worker dead).
# The IP must be followed by a non-address character, so 10.0.0.1 does not match 10.0.0.12.
_WAIT_FOR_IP_SAN_SCRIPT: Final = f"""cert="{TLS_MOUNT_PATH}/tls.crt"
ip="${{POD_IP:-$(hostname -i 2>/dev/null | awk '{{print $1}}')}}"
if ! command -v openssl >/dev/null 2>&1; then
  echo "openssl is missing from the image: cannot read the IP addresses of ${{cert}}" >&2
  exit 1
fi
until openssl x509 -in "${{cert}}" -noout -text 2>/dev/null \\
    | grep -qE "IP Address:${{ip}}([^0-9.]|$)"; do
  echo "waiting for cert-manager to add ${{ip}} to ${{cert}}; checking again in 5s"
  sleep 5
done
echo "${{cert}} names ${{ip}}"
"""
