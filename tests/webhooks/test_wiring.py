"""How the operator takes the webhooks: a component factory, and flags with env twins."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio.client import ApiClient
from ray_operator.app import Operator
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.runtime.client import load_api_client
from ray_operator.settings import Settings
from ray_operator.webhooks import (
    WebhookOptions,
    Webhooks,
    add_webhook_arguments,
    webhook_component,
    webhook_options_from_args,
)


@pytest.fixture
async def api(control_plane: LocalControlPlane) -> AsyncIterator[ApiClient]:
    client = await load_api_client(control_plane.kubeconfig)
    yield client
    await client.close()


async def test_the_operator_runs_the_webhooks_as_a_component_named_webhooks(api: ApiClient) -> None:
    options = WebhookOptions(enabled=True, url_base="https://127.0.0.1:9443")
    operator = Operator(
        Settings(leader_elect=False), api=api, components=[webhook_component(options)]
    )
    [component] = operator.components
    assert isinstance(component, Webhooks)
    assert type(component).__name__.lower() == "webhooks"
    assert component.options is options


def _parse(*argv: str) -> WebhookOptions:
    parser = argparse.ArgumentParser()
    add_webhook_arguments(parser)
    return webhook_options_from_args(
        parser.parse_args(argv), port=9443, default_namespace="ray-system"
    )


def test_out_of_a_cluster_webhooks_are_off_unless_told_how_to_be_reached(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert not _parse().enabled
    local = _parse("--webhook-url-base", "https://127.0.0.1:9443")
    assert local.enabled
    assert local.listen_host == "127.0.0.1"
    assert local.ip_addresses() == ["127.0.0.1"]
    assert _parse("--webhook-cert-dir", "/certs").enabled
    assert not _parse("--no-webhooks", "--webhook-url-base", "https://127.0.0.1:1").enabled


def test_in_a_cluster_webhooks_are_on_and_served_to_the_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    options = _parse()
    assert options.enabled
    assert options.namespace == "ray-system"
    assert options.listen_host == "0.0.0.0"
    assert options.dns_names() == [
        "ray-operator-webhook.ray-system.svc",
        "ray-operator-webhook.ray-system.svc.cluster.local",
    ]


def test_flags_have_env_twins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_OPERATOR_WEBHOOKS", "false")
    monkeypatch.setenv("RAY_OPERATOR_WEBHOOK_CERT_DIR", "/etc/ray-operator/webhook-certs")
    options = _parse()
    assert not options.enabled
    assert str(options.cert_dir) == "/etc/ray-operator/webhook-certs"
