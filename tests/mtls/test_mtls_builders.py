"""Specification: with `tlsOptions.enabled`, the cert-manager objects and the Pod changes are
KubeRay's — the same names, labels, owners, SANs, durations, env vars, mount and init containers —
and the Pods keep KubeRay's hash annotation, which hashes the spec (tlsOptions included), never
the Pod built from it."""

from __future__ import annotations

import copy
from typing import Any

from ray_operator.builders.mtls import (
    build_certificates,
    build_issuers,
    is_certificate_ready,
    live_pod_ips,
    normalized_ips,
    sans_differ,
)
from ray_operator.builders.pods import build_head_pod, build_worker_pod
from ray_operator.builders.redis_cleanup import build_redis_cleanup_job
from ray_operator.spec.hashing import pod_template_hash

from tests.builders.samples import load_sample
from tests.mtls.samples import UID, mtls_cluster

OWNER = {
    "apiVersion": "ray.io/v1",
    "kind": "RayCluster",
    "name": "ray-mtls",
    "uid": UID,
    "controller": True,
    "blockOwnerDeletion": True,
}
TLS_ENV = [
    {"name": "RAY_USE_TLS", "value": "1"},
    {"name": "RAY_TLS_SERVER_CERT", "value": "/etc/ray/tls/tls.crt"},
    {"name": "RAY_TLS_SERVER_KEY", "value": "/etc/ray/tls/tls.key"},
    {"name": "RAY_TLS_CA_CERT", "value": "/etc/ray/tls/ca.crt"},
]
TLS_MOUNT = {"name": "ray-tls", "mountPath": "/etc/ray/tls", "readOnly": True}


def pod(node_type: str, ip: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"ray.io/node-type": node_type}},
        "status": {"podIP": ip, "phase": "Running", **status},
    }


def test_the_issuers_are_kuberays_self_signed_and_ca_issuers() -> None:
    selfsigned, ca = build_issuers(mtls_cluster())
    assert selfsigned == {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Issuer",
        "metadata": {
            "name": "ray-selfsigned-issuer-ray-mtls",
            "namespace": "team-a",
            "labels": {
                "ray.io/cluster": "ray-mtls",
                "app.kubernetes.io/name": "kuberay",
                "app.kubernetes.io/created-by": "ray-operator",
                "app.kubernetes.io/component": "selfsigned-issuer",
            },
            "ownerReferences": [OWNER],
        },
        "spec": {"selfSigned": {}},
    }
    assert ca["metadata"]["name"] == "ray-ca-issuer-ray-mtls"
    assert ca["metadata"]["labels"]["app.kubernetes.io/component"] == "ca-issuer"
    # The CA Secret carries the first 8 characters of the uid: a recreated cluster gets a new CA.
    assert ca["spec"] == {"ca": {"secretName": "ray-mtls-ca-secret-0123abcd"}}


def test_the_ca_certificate_is_kuberays() -> None:
    ca, _, _ = build_certificates(mtls_cluster(), pods=[], cluster_domain="cluster.local")
    assert ca["metadata"]["name"] == "ray-ca-certificate-ray-mtls"
    assert ca["metadata"]["labels"]["app.kubernetes.io/component"] == "ca-certificate"
    assert ca["metadata"]["ownerReferences"] == [OWNER]
    assert ca["spec"] == {
        "secretName": "ray-mtls-ca-secret-0123abcd",
        "isCA": True,
        "commonName": "ray-ca-ray-mtls",
        "privateKey": {"algorithm": "RSA", "size": 4096},
        "duration": "87600h0m0s",
        "renewBefore": "720h0m0s",
        "usages": ["cert sign", "crl sign"],
        "issuerRef": {
            "name": "ray-selfsigned-issuer-ray-mtls",
            "kind": "Issuer",
            "group": "cert-manager.io",
        },
    }


def test_the_head_certificate_names_the_head_service_and_only_head_pod_ips() -> None:
    pods = [pod("head", "10.0.0.9"), pod("worker", "10.0.0.20")]
    _, head, _ = build_certificates(mtls_cluster(), pods=pods, cluster_domain="example.org")
    assert head["metadata"]["name"] == "ray-head-cert-ray-mtls"
    assert head["metadata"]["labels"]["app.kubernetes.io/component"] == "head-certificate"
    assert head["spec"] == {
        "secretName": "ray-head-secret-ray-mtls",
        "duration": "2160h0m0s",
        "renewBefore": "360h0m0s",
        "dnsNames": ["localhost", "ray-mtls-head-svc.team-a.svc.example.org"],
        "ipAddresses": ["10.0.0.9", "127.0.0.1"],
        "usages": ["digital signature", "key encipherment", "server auth", "client auth"],
        "issuerRef": {
            "name": "ray-ca-issuer-ray-mtls",
            "kind": "Issuer",
            "group": "cert-manager.io",
        },
    }


def test_the_worker_certificate_names_only_live_worker_ips() -> None:
    pods = [
        pod("head", "10.0.0.9"),
        pod("worker", "10.0.0.21"),
        pod("worker", "10.0.0.20"),
        pod("worker", "10.0.0.30", phase="Failed"),
        {
            **pod("worker", "10.0.0.31"),
            "metadata": {
                "labels": {"ray.io/node-type": "worker"},
                "deletionTimestamp": "2026-01-01T00:00:00Z",
            },
        },
        pod("worker", ""),
    ]
    _, _, worker = build_certificates(mtls_cluster(), pods=pods, cluster_domain="cluster.local")
    assert worker["metadata"]["name"] == "ray-worker-cert-ray-mtls"
    assert worker["spec"]["secretName"] == "ray-worker-secret-ray-mtls"
    assert worker["spec"]["dnsNames"] == ["localhost"]
    assert worker["spec"]["ipAddresses"] == ["10.0.0.20", "10.0.0.21", "127.0.0.1"]


def test_a_pod_ip_that_is_no_ip_address_never_reaches_a_certificate() -> None:
    assert normalized_ips(["10.0.0.1", "evil.example.com", "10.0.0.1", "fd00::1"]) == [
        "10.0.0.1",
        "127.0.0.1",
        "fd00::1",
    ]
    assert live_pod_ips([pod("worker", "x" * 10_000)], "worker") == ["x" * 10_000]
    assert normalized_ips(live_pod_ips([pod("worker", "x" * 10_000)], "worker")) == ["127.0.0.1"]


def test_sans_are_compared_as_sets_and_readiness_needs_the_current_generation() -> None:
    _, head, _ = build_certificates(mtls_cluster(), pods=[], cluster_domain="cluster.local")
    reordered = copy.deepcopy(head)
    reordered["spec"]["dnsNames"].reverse()
    assert not sans_differ(reordered, head)
    _, moved, _ = build_certificates(
        mtls_cluster(), pods=[pod("head", "10.0.0.9")], cluster_domain="cluster.local"
    )
    assert sans_differ(head, moved)
    ready = {"type": "Ready", "status": "True", "observedGeneration": 2}
    assert is_certificate_ready({"metadata": {"generation": 2}, "status": {"conditions": [ready]}})
    assert not is_certificate_ready(
        {"metadata": {"generation": 3}, "status": {"conditions": [ready]}}
    )
    assert not is_certificate_ready({"metadata": {"generation": 1}})


def test_the_head_pod_mounts_the_head_secret_and_points_ray_at_it() -> None:
    head = build_head_pod(mtls_cluster(), suffix="abcde")
    spec = head["spec"]
    assert {"name": "ray-tls", "secret": {"secretName": "ray-head-secret-ray-mtls"}} in spec[
        "volumes"
    ]
    ray = spec["containers"][0]
    assert [e for e in ray["env"] if e["name"].startswith("RAY_") and "TLS" in e["name"]] == TLS_ENV
    assert TLS_MOUNT in ray["volumeMounts"]
    (wait,) = spec["initContainers"]
    assert wait["name"] == "wait-for-tls-ip-san"
    assert wait["image"] == ray["image"]
    assert wait["command"] == ["sh", "-c"]
    assert wait["volumeMounts"] == [TLS_MOUNT]
    assert wait["env"][0] == {
        "name": "POD_IP",
        "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
    }
    assert wait["resources"]["limits"] == {"cpu": "50m", "memory": "64Mi"}
    assert "openssl x509" in wait["args"][0]


def test_workers_wait_for_their_ip_san_before_gcs_and_wait_gcs_ready_speaks_tls() -> None:
    worker = build_worker_pod(mtls_cluster(), "workers", suffix="abcde", replica_index=0)
    spec = worker["spec"]
    assert {"name": "ray-tls", "secret": {"secretName": "ray-worker-secret-ray-mtls"}} in spec[
        "volumes"
    ]
    assert [c["name"] for c in spec["initContainers"]] == ["wait-for-tls-ip-san", "wait-gcs-ready"]
    gcs_wait = spec["initContainers"][1]
    for entry in TLS_ENV:
        assert entry in gcs_wait["env"]
    assert TLS_MOUNT in gcs_wait["volumeMounts"]


def test_the_autoscaler_gets_tls_before_the_users_own_env() -> None:
    cluster = mtls_cluster()
    cluster["spec"]["enableInTreeAutoscaling"] = True
    cluster["spec"]["autoscalerOptions"] = {"env": [{"name": "MINE", "value": "1"}]}
    head = build_head_pod(cluster, suffix="abcde")
    (sidecar,) = [c for c in head["spec"]["containers"] if c["name"] == "autoscaler"]
    names = [e["name"] for e in sidecar["env"]]
    assert names[-5:] == [e["name"] for e in TLS_ENV] + ["MINE"]
    assert TLS_MOUNT in sidecar["volumeMounts"]


def test_the_pod_hash_is_of_the_spec_so_tls_options_count_and_the_tls_pod_changes_do_not() -> None:
    cluster = mtls_cluster()
    plain = copy.deepcopy(cluster)
    del plain["spec"]["tlsOptions"]
    head = build_head_pod(cluster, suffix="abcde")
    annotation = head["metadata"]["annotations"]["ray.io/upgrade-strategy-recreate-hash"]
    assert annotation == pod_template_hash(cluster)
    assert annotation != pod_template_hash(plain)


def test_the_redis_cleanup_job_does_not_wait_for_an_ip_san() -> None:
    cluster = mtls_cluster()
    cluster["metadata"]["annotations"] = {"ray.io/ft-enabled": "true"}
    cluster["spec"]["gcsFaultToleranceOptions"] = {"redisAddress": "redis:6379"}
    job = build_redis_cleanup_job(cluster)
    init = job["spec"]["template"]["spec"].get("initContainers") or []
    assert "wait-for-tls-ip-san" not in [c["name"] for c in init]


def test_the_hand_made_tls_sample_is_built_as_before_without_any_managed_tls() -> None:
    # KubeRay's ray-cluster.tls.yaml makes its own certificates in an init container, in its own
    # emptyDir volume named ray-tls, and sets RAY_USE_TLS itself: no tlsOptions, so nothing of
    # the managed mTLS is added (and none of its rules apply).
    cluster = load_sample("ray-cluster.tls.yaml")
    cluster["metadata"].update(namespace="team-a", uid=UID)
    group = cluster["spec"]["workerGroupSpecs"][0]["groupName"]
    pods = [
        build_head_pod(cluster, suffix="abcde"),
        build_worker_pod(cluster, group, suffix="abcde", replica_index=0),
    ]
    for built in pods:
        (volume,) = [v for v in built["spec"]["volumes"] if v["name"] == "ray-tls"]
        assert volume == {"name": "ray-tls", "emptyDir": {}}
        init = [c["name"] for c in built["spec"].get("initContainers") or []]
        assert "wait-for-tls-ip-san" not in init
        ray = built["spec"]["containers"][0]
        tls_env = [e for e in ray["env"] if e["name"] == "RAY_TLS_CA_CERT"]
        assert tls_env == [{"name": "RAY_TLS_CA_CERT", "value": "/etc/ca/tls/ca.crt"}]
