"""The serving certificate: reloaded without a restart, renewed before expiry, shared by replicas,
and replaced under a running webhook while the API server keeps admitting (and refusing)."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from aiohttp import web
from cryptography import x509
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.metrics import Metrics
from ray_operator.pki import KeyPair, create_ca, issue_certificate
from ray_operator.runtime.client import KubeClient, load_api_client
from ray_operator.webhooks.certificates import (
    SECRET,
    CertificateBundle,
    DirectoryCertificates,
    SelfManagedCertificates,
    issue_bundle,
    needs_renewal,
    renewal_time,
)
from ray_operator.webhooks.options import WebhookOptions
from ray_operator.webhooks.tls import ServingCertificate

from tests.conftest import Kubectl
from tests.webhooks.conftest import load_sample
from tests.webhooks.server import WebhookThread, free_port

DAY = datetime.timedelta(days=1)


def _pair(ca: KeyPair, *, valid_for: datetime.timedelta = DAY) -> KeyPair:
    return issue_certificate(
        ca, "localhost", valid_for=valid_for, ip_addresses=["127.0.0.1"], server=True
    )


async def _served_serial(port: int, ca: KeyPair) -> int:
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der).serial_number
    finally:
        writer.close()
        await writer.wait_closed()


async def test_a_new_certificate_is_served_from_the_next_handshake_without_a_restart() -> None:
    ca = create_ca("test-ca", valid_for=DAY)
    first, second = _pair(ca), _pair(ca)
    serving = ServingCertificate()
    serving.load(first)
    runner = web.AppRunner(web.Application())
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=serving.context).start()
    try:
        assert await _served_serial(port, ca) == first.certificate.serial_number
        serving.load(second)
        assert await _served_serial(port, ca) == second.certificate.serial_number
        assert serving.serial_number == second.certificate.serial_number
    finally:
        await runner.cleanup()


def test_a_mismatched_key_is_refused_and_the_old_certificate_kept() -> None:
    ca = create_ca("test-ca", valid_for=DAY)
    good, other = _pair(ca), _pair(ca)
    serving = ServingCertificate()
    serving.load(good)
    with pytest.raises(ssl.SSLError):
        serving.load(KeyPair(good.cert_pem, other.key_pem))
    assert serving.serial_number == good.certificate.serial_number


def test_renewal_is_due_at_two_thirds_of_the_validity() -> None:
    bundle = issue_bundle(
        None,
        dns_names=["svc.ns.svc"],
        ip_addresses=[],
        validity=3 * DAY,
        ca_validity=30 * DAY,
        now=datetime.datetime.now(datetime.UTC),
    )
    due = renewal_time(bundle.serving)
    issued = bundle.serving.certificate.not_valid_after_utc - 3 * DAY
    assert abs((due - issued) - 2 * DAY) < datetime.timedelta(seconds=5)
    names = {"dns_names": ["svc.ns.svc"], "ip_addresses": []}
    assert not needs_renewal(bundle, now=due - datetime.timedelta(minutes=1), **names)
    assert needs_renewal(bundle, now=due + datetime.timedelta(minutes=1), **names)
    # Names the certificate does not carry make it due at once.
    assert needs_renewal(bundle, now=issued, dns_names=["other.ns.svc"], ip_addresses=[])


def test_a_rotated_ca_stays_trusted_until_it_expires() -> None:
    now = datetime.datetime.now(datetime.UTC)
    first = issue_bundle(
        None, dns_names=["a"], ip_addresses=[], validity=DAY, ca_validity=3 * DAY, now=now
    )
    later = now + 2 * DAY + datetime.timedelta(hours=1)  # the CA is past 2/3 of its life
    second = issue_bundle(
        first, dns_names=["a"], ip_addresses=[], validity=DAY, ca_validity=3 * DAY, now=later
    )
    assert second.ca.cert_pem != first.ca.cert_pem
    trusted = x509.load_pem_x509_certificates(second.ca_bundle)
    assert [c.serial_number for c in trusted] == [
        second.ca.certificate.serial_number,
        first.ca.certificate.serial_number,
    ]


async def test_directory_certificates_follow_the_files(tmp_path: Path) -> None:
    ca = create_ca("test-ca", valid_for=DAY)
    source = DirectoryCertificates(tmp_path, publish_ca=True)
    for pair in (_pair(ca), _pair(ca)):
        (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
        (tmp_path / "tls.key").write_bytes(pair.key_pem)
        (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
        material = await source.load()
        assert material.serving == pair
        assert material.ca_bundle == ca.cert_pem


@pytest.fixture
async def client(control_plane: LocalControlPlane) -> AsyncIterator[KubeClient]:
    api = await load_api_client(control_plane.kubeconfig)
    yield KubeClient(api, metrics=Metrics())
    await api.close()


def _self_managed(
    client: KubeClient, namespace: str, **overrides: object
) -> SelfManagedCertificates:
    options: dict[str, object] = {
        "namespace": namespace,
        "secret_name": "webhook-cert",
        "dns_names": ["ray-operator-webhook.x.svc"],
        "ip_addresses": ["127.0.0.1"],
        "validity": DAY,
        "ca_validity": 10 * DAY,
    }
    options.update(overrides)
    return SelfManagedCertificates(client, **options)  # type: ignore[arg-type]


async def test_replicas_starting_together_share_one_certificate(
    client: KubeClient, namespace: str
) -> None:
    replicas = [_self_managed(client, namespace) for _ in range(4)]

    materials = await asyncio.gather(*(replica.load() for replica in replicas))

    assert len({material.serving.cert_pem for material in materials}) == 1
    secret = await client.get(SECRET, "webhook-cert", namespace=namespace)
    assert CertificateBundle.from_secret(secret) is not None
    assert secret["type"] == "kubernetes.io/tls"


async def test_a_certificate_past_two_thirds_of_its_life_is_renewed_in_the_secret(
    client: KubeClient, namespace: str
) -> None:
    source = _self_managed(client, namespace, validity=datetime.timedelta(seconds=3))
    first = await source.load()
    assert first.renew_at is not None
    await asyncio.sleep(
        max(0.0, (first.renew_at - datetime.datetime.now(datetime.UTC)).total_seconds()) + 0.2
    )

    renewed = await source.load()

    assert renewed.serving.cert_pem != first.serving.cert_pem
    assert renewed.ca_bundle == first.ca_bundle  # same CA: nothing to re-publish
    secret = await client.get(SECRET, "webhook-cert", namespace=namespace)
    assert base64.b64decode(secret["data"]["tls.crt"]) == renewed.serving.cert_pem


def test_the_api_server_keeps_admitting_after_the_serving_certificate_is_replaced(
    kubectl: Kubectl, webhook_namespace: str, webhook_server: WebhookThread
) -> None:
    options = webhook_server.options
    assert webhook_server.webhooks is not None
    before = webhook_server.webhooks.serving.serial_number
    # Another replica rotates everything, CA included, in the shared Secret.
    bundle = issue_bundle(
        None,
        dns_names=options.dns_names(),
        ip_addresses=["127.0.0.1"],
        validity=DAY,
        ca_validity=10 * DAY,
        now=datetime.datetime.now(datetime.UTC),
    )
    patch = {"data": bundle.secret_data()}
    kubectl(
        "patch",
        "secret",
        options.secret_name,
        "-n",
        options.namespace,
        "--type=merge",
        "-p",
        json.dumps(patch),
    )

    deadline = time.monotonic() + 15
    while webhook_server.webhooks.serving.serial_number != bundle.serving.certificate.serial_number:
        assert time.monotonic() < deadline, "the new certificate was never served"
        time.sleep(0.1)
    assert webhook_server.webhooks.serving.serial_number != before

    configuration = json.loads(
        kubectl(
            "get", "validatingwebhookconfiguration", options.validating_configuration, "-o", "json"
        )
    )
    assert {base64.b64decode(w["clientConfig"]["caBundle"]) for w in configuration["webhooks"]} == {
        bundle.ca_bundle
    }
    cluster = load_sample("ray-cluster.mini.yaml")
    kubectl("apply", "-n", webhook_namespace, "-f", "-", input_text=yaml.safe_dump(cluster))
    cluster["spec"]["workerGroupSpecs"][0]["minReplicas"] = 9
    refused = kubectl.run(
        "apply", "-n", webhook_namespace, "-f", "-", input_text=yaml.safe_dump(cluster)
    )
    assert (
        "minReplicas: Invalid value: 9: must be less than or equal to maxReplicas" in refused.stderr
    )


def test_stopping_the_url_mode_deletes_its_configurations(
    control_plane: LocalControlPlane, kubectl: Kubectl, namespace: str
) -> None:
    port = free_port()
    options = WebhookOptions(
        enabled=True,
        port=port,
        namespace=namespace,
        url_base=f"https://127.0.0.1:{port}",
        validating_configuration=f"ray-operator-stop-{port}-validating",
        mutating_configuration=f"ray-operator-stop-{port}-mutating",
        namespace_selector={"matchLabels": {"ray-operator.io/nothing": "matches"}},
    )
    server = WebhookThread(control_plane.kubeconfig, options).start()
    listed = kubectl(
        "get", "validatingwebhookconfigurations,mutatingwebhookconfigurations", "-o", "name"
    )
    assert f"/{options.validating_configuration}" in listed
    assert f"/{options.mutating_configuration}" in listed

    server.stop()

    listed = kubectl(
        "get", "validatingwebhookconfigurations,mutatingwebhookconfigurations", "-o", "name"
    )
    assert f"/{options.validating_configuration}" not in listed
    assert f"/{options.mutating_configuration}" not in listed
