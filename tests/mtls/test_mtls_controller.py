"""Specification: with the RayClusterMTLS gate on, our mTLS sample gets what KubeRay creates for
it — two Issuers and three Certificates owned by the cluster — and no Pod until cert-manager has
issued both leaves; the Pods then mount their Secrets, and a Pod's IP is added to its certificate.
Turning mTLS off, or deleting the cluster, deletes the Issuers, the Certificates and the Secrets
cert-manager issued for them, explicitly (this plane has no garbage collector). No Secret value
ever reaches a log line, an Event or the status.

No cert-manager runs here: `issue` plays it (the Secret, then Ready for the current generation).
"""

from __future__ import annotations

import base64
import json
import logging
import uuid
from typing import Any

import pytest
import yaml
from ray_operator.builders.mtls import build_certificates, build_issuers

from tests.controllers.conftest import Harness
from tests.mtls.conftest import StartOperator
from tests.mtls.samples import SAMPLE_PATH

NAME = "ray-mtls"
ISSUERS = ["ray-ca-issuer-ray-mtls", "ray-selfsigned-issuer-ray-mtls"]
CERTIFICATES = ["ray-ca-certificate-ray-mtls", "ray-head-cert-ray-mtls", "ray-worker-cert-ray-mtls"]
LEAF_SECRETS = ["ray-head-secret-ray-mtls", "ray-worker-secret-ray-mtls"]


def sample() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(SAMPLE_PATH.read_text())
    return loaded


async def names_of(harness: Harness, kind: str) -> list[str]:
    listed = await harness.get_json(kind, "-l", f"ray.io/cluster={NAME}")
    return sorted(item["metadata"]["name"] for item in listed["items"])


async def secret_names(harness: Harness) -> list[str]:
    listed = await harness.get_json("secrets")
    return sorted(item["metadata"]["name"] for item in listed["items"])


async def issue(harness: Harness, marker: str) -> None:
    """Play cert-manager for both leaves: the Secret it would write, then Ready at the current
    generation. `marker` is what the Secret holds: it must never show up anywhere else."""
    value = base64.b64encode(marker.encode()).decode()
    for role in ("head", "worker"):
        certificate = await harness.get_json(f"certificate/ray-{role}-cert-{NAME}")
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": certificate["spec"]["secretName"],
                "annotations": {
                    "cert-manager.io/certificate-name": certificate["metadata"]["name"]
                },
            },
            "data": {"tls.crt": value, "tls.key": value, "ca.crt": value},
        }
        await harness.apply(secret)
        await mark_ready(harness, certificate)


async def mark_ready(harness: Harness, certificate: dict[str, Any]) -> None:
    condition = {
        "type": "Ready",
        "status": "True",
        "reason": "Ready",
        "message": "Certificate is up to date and has not expired",
        "observedGeneration": certificate["metadata"]["generation"],
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    await harness.kubectl(
        "patch",
        f"certificate/{certificate['metadata']['name']}",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"conditions": [condition]}}),
    )


async def pki_created(harness: Harness) -> None:
    async def complete() -> bool:
        return (
            await names_of(harness, "issuers") == ISSUERS
            and await names_of(harness, "certificates") == CERTIFICATES
        )

    await harness.eventually(complete, what="the Issuers and Certificates")


async def running_issued_cluster(
    harness: Harness, start_operator: StartOperator, marker: str
) -> None:
    await start_operator()
    await harness.apply(sample())
    await pki_created(harness)
    await issue(harness, marker)

    async def both_pods() -> list[dict[str, Any]]:
        pods = await harness.pods(NAME)
        return pods if len(pods) == 2 else []

    await harness.eventually(both_pods, what="the head and worker Pods")


async def test_the_sample_gets_kuberays_issuers_and_certificates_and_no_pod_before_issuance(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator()
    await harness.apply(sample())
    await pki_created(harness)
    cluster = await harness.cluster(NAME)
    for kind in ("issuers", "certificates"):
        for item in (await harness.get_json(kind, "-l", f"ray.io/cluster={NAME}"))["items"]:
            (owner,) = item["metadata"]["ownerReferences"]
            assert owner["uid"] == cluster["metadata"]["uid"]
            assert owner["controller"] is True
            assert item["metadata"]["labels"]["app.kubernetes.io/name"] == "kuberay"
    ca_issuer = await harness.get_json("issuer/ray-ca-issuer-ray-mtls")
    uid8 = cluster["metadata"]["uid"][:8]
    assert ca_issuer["spec"] == {"ca": {"secretName": f"ray-mtls-ca-secret-{uid8}"}}
    head = await harness.get_json("certificate/ray-head-cert-ray-mtls")
    assert head["spec"]["dnsNames"] == [
        "localhost",
        f"ray-mtls-head-svc.{harness.namespace}.svc.cluster.local",
    ]

    async def waiting_event() -> bool:
        events = await harness.get_json("events", "--field-selector", "reason=MTLSCertsNotReady")
        return bool(events["items"])

    await harness.eventually(waiting_event, what="the MTLSCertsNotReady Event")
    assert await harness.pods(NAME) == []


async def test_once_issued_the_pods_mount_their_leaf_secrets_which_get_owned_by_certificates(
    harness: Harness, start_operator: StartOperator
) -> None:
    await running_issued_cluster(harness, start_operator, marker="pem")
    for pod in await harness.pods(NAME):
        role = pod["metadata"]["labels"]["ray.io/node-type"]
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "ray-tls"]
        assert volume["secret"]["secretName"] == f"ray-{role}-secret-{NAME}"
        assert pod["spec"]["initContainers"][0]["name"] == "wait-for-tls-ip-san"
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["RAY_USE_TLS"] == "1"
        assert env["RAY_TLS_CA_CERT"] == "/etc/ray/tls/ca.crt"
    for role in ("head", "worker"):
        certificate = await harness.get_json(f"certificate/ray-{role}-cert-{NAME}")

        async def owned(certificate: dict[str, Any] = certificate, role: str = role) -> bool:
            secret = await harness.get_json(f"secret/ray-{role}-secret-{NAME}")
            owners = secret["metadata"].get("ownerReferences") or []
            return any(o["uid"] == certificate["metadata"]["uid"] for o in owners)

        await harness.eventually(owned, what=f"the {role} Secret owned by its Certificate")


async def test_a_pods_ip_is_added_to_its_certificate(
    harness: Harness, start_operator: StartOperator
) -> None:
    await running_issued_cluster(harness, start_operator, marker="pem")

    async def head_ip() -> str | None:
        (head,) = [
            p
            for p in await harness.pods(NAME)
            if p["metadata"]["labels"]["ray.io/node-type"] == "head"
        ]
        ip: str | None = (head.get("status") or {}).get("podIP")
        return ip

    ip = await harness.eventually(head_ip, what="the head Pod's IP")

    async def named() -> bool:
        certificate = await harness.get_json(f"certificate/ray-head-cert-{NAME}")
        return sorted(certificate["spec"]["ipAddresses"]) == sorted({ip, "127.0.0.1"})

    await harness.eventually(named, what="the head Pod's IP in the head certificate")
    events = await harness.get_json("events", "--field-selector", "reason=MTLSCertificatesUpdated")
    assert any(ip in event["message"] for event in events["items"])


async def test_turning_mtls_off_deletes_the_pki_and_the_issued_secrets(
    harness: Harness, start_operator: StartOperator
) -> None:
    await running_issued_cluster(harness, start_operator, marker="pem")
    assert set(LEAF_SECRETS) <= set(await secret_names(harness))
    await harness.kubectl(
        "patch",
        f"raycluster/{NAME}",
        "--type=json",
        "-p",
        json.dumps([{"op": "remove", "path": "/spec/tlsOptions"}]),
    )

    async def all_gone() -> bool:
        return (
            await names_of(harness, "issuers") == []
            and await names_of(harness, "certificates") == []
            and not set(LEAF_SECRETS) & set(await secret_names(harness))
        )

    await harness.eventually(all_gone, what="no Issuer, Certificate or issued Secret left")


async def test_deleting_the_cluster_deletes_the_pki_and_the_issued_secrets_without_a_gc(
    harness: Harness, start_operator: StartOperator
) -> None:
    await running_issued_cluster(harness, start_operator, marker="pem")
    await harness.kubectl("delete", f"raycluster/{NAME}", "--wait=false")

    async def all_gone() -> bool:
        return (
            await names_of(harness, "issuers") == []
            and await names_of(harness, "certificates") == []
            and not set(LEAF_SECRETS) & set(await secret_names(harness))
            and await harness.pods(NAME) == []
        )

    await harness.eventually(all_gone, what="nothing of the cluster left")


async def test_a_secret_of_a_leaf_name_that_cert_manager_did_not_issue_is_never_deleted(
    harness: Harness, start_operator: StartOperator
) -> None:
    await harness.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"ray-head-secret-{NAME}"},
            "stringData": {"note": "the user's own"},
        }
    )
    await start_operator()
    await harness.apply(sample())
    await pki_created(harness)
    await harness.kubectl("delete", f"raycluster/{NAME}", "--wait=false")

    async def pki_gone() -> bool:
        return await names_of(harness, "certificates") == []

    await harness.eventually(pki_gone, what="the Certificates deleted")
    assert f"ray-head-secret-{NAME}" in await secret_names(harness)


async def test_no_secret_value_reaches_a_log_line_an_event_or_the_status(
    harness: Harness, start_operator: StartOperator, caplog: pytest.LogCaptureFixture
) -> None:
    marker = f"SECRET-{uuid.uuid4().hex}"
    caplog.set_level(logging.DEBUG)
    await running_issued_cluster(harness, start_operator, marker=marker)
    status = json.dumps((await harness.cluster(NAME)).get("status"))
    await harness.kubectl("delete", f"raycluster/{NAME}", "--wait=false")

    async def secrets_gone() -> bool:
        return not set(LEAF_SECRETS) & set(await secret_names(harness))

    await harness.eventually(secrets_gone, what="the issued Secrets deleted")
    encoded = base64.b64encode(marker.encode()).decode()
    events = json.dumps(await harness.get_json("events"))
    for text in (caplog.text, events, status):
        assert marker not in text
        assert encoded not in text


async def test_the_pki_kuberay_made_is_taken_over_without_a_write(
    harness: Harness, start_operator: StartOperator
) -> None:
    await harness.apply(sample())
    cluster = await harness.cluster(NAME)
    cluster["metadata"]["namespace"] = harness.namespace
    made = [
        *build_issuers(cluster),
        *build_certificates(cluster, pods=[], cluster_domain="cluster.local"),
    ]
    for obj in made:
        obj["metadata"]["labels"]["app.kubernetes.io/created-by"] = "kuberay-operator"
        await harness.apply(obj)
    before = {
        (kind, item["metadata"]["name"]): item["metadata"]["resourceVersion"]
        for kind in ("issuers", "certificates")
        for item in (await harness.get_json(kind))["items"]
    }
    await start_operator()

    async def waiting_event() -> bool:
        events = await harness.get_json("events", "--field-selector", "reason=MTLSCertsNotReady")
        return bool(events["items"])

    await harness.eventually(waiting_event, what="the operator reconciling the cluster")
    after = {
        (kind, item["metadata"]["name"]): item["metadata"]["resourceVersion"]
        for kind in ("issuers", "certificates")
        for item in (await harness.get_json(kind))["items"]
    }
    assert after == before
