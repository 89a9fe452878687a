"""Specification: config/operator-network-policy, the NetworkPolicy of the operator's own Pods
(issue 28, finding 5), is off in config/default. Turned on the documented way, with the API
server's address set, it selects exactly the operator's Pods and admits ingress from that address
to the webhook port and nothing else; its sub-components add Prometheus to the metrics port and
the Ingress controller to the event endpoint, and alone they change nothing (they can never
isolate the Pods and cut the API server off). The API server accepts the install; with the
address left unset it refuses the policy, naming the field.

The local plane has no CNI, so what the policy lets through is not exercised here: these tests
hold the policy to its text, and the API server to accepting it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import Kubectl, KubectlError
from tests.deploy.manager import manager_container, parse_run_arguments
from tests.deploy.manifests import (
    CONFIG,
    DEFAULT_NAMESPACE,
    Manifest,
    apply_server_side,
    build,
    default_with_component,
    of_kind,
    the,
)

COMPONENT = "operator-network-policy"
PROMETHEUS = f"{COMPONENT}/prometheus"
EVENTS = f"{COMPONENT}/serve-graph-events"
API_SERVER_CIDR = "10.0.0.0/28"
WEBHOOK_RULE = {
    "from": [{"ipBlock": {"cidr": API_SERVER_CIDR}}],
    "ports": [{"port": "webhook-server", "protocol": "TCP"}],
}
PROMETHEUS_RULE = {
    "from": [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ],
    "ports": [{"port": "metrics", "protocol": "TCP"}],
}
EVENTS_RULE = {
    "from": [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}
    ],
    "ports": [{"port": "graph-events", "protocol": "TCP"}],
}


def install(
    directory: Path, *components: str, cidr: str | None = API_SERVER_CIDR
) -> list[Manifest]:
    """config/default with `components` turned on and, with `cidr`, the API server's address set
    on the `cidr:` line of the policy, as config/README.md says."""
    default = default_with_component(directory, *components)
    if cidr is not None:
        policy = directory / "config" / COMPONENT / "network_policy.yaml"
        text, count = re.subn(
            r"cidr: SET-THE-API-SERVER-CIDR$", f"cidr: {cidr}", policy.read_text(), flags=re.M
        )
        assert count == 1, "the policy must have one placeholder `cidr:` line"
        policy.write_text(text)
    return build(default)


@pytest.fixture(scope="module")
def with_policy(tmp_path_factory: pytest.TempPathFactory) -> list[Manifest]:
    return install(tmp_path_factory.mktemp("policy"), COMPONENT)


@pytest.fixture(scope="module")
def with_everything(tmp_path_factory: pytest.TempPathFactory) -> list[Manifest]:
    return install(tmp_path_factory.mktemp("everything"), COMPONENT, PROMETHEUS, EVENTS)


def operator_policy(manifests: list[Manifest]) -> Manifest:
    return the(manifests, "NetworkPolicy", "ray-operator")


def test_the_default_install_has_no_network_policy() -> None:
    assert of_kind(build(CONFIG / "default"), "NetworkPolicy") == []


def test_the_policy_selects_exactly_the_operators_pods_for_ingress_only(
    with_policy: list[Manifest],
) -> None:
    policy = operator_policy(with_policy)
    template = the(with_policy, "Deployment", "ray-operator")["spec"]["template"]
    assert policy["metadata"]["namespace"] == DEFAULT_NAMESPACE
    assert policy["spec"]["podSelector"] == {"matchLabels": template["metadata"]["labels"]}
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # the operator's calls out are its own


def test_only_the_api_server_is_admitted_and_only_to_the_webhook_port(
    with_policy: list[Manifest],
) -> None:
    assert operator_policy(with_policy)["spec"]["ingress"] == [WEBHOOK_RULE]
    container = manager_container(with_policy)
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["webhook-server"] == parse_run_arguments(container["args"]).webhook_port


def test_prometheus_and_the_event_endpoint_are_admitted_with_their_components(
    with_everything: list[Manifest],
) -> None:
    ingress = operator_policy(with_everything)["spec"]["ingress"]
    assert ingress == [WEBHOOK_RULE, PROMETHEUS_RULE, EVENTS_RULE]
    container = manager_container(with_everything)
    assert "metrics" in {port["name"] for port in container["ports"]}


def test_the_sub_components_alone_change_nothing(tmp_path: Path) -> None:
    alone = install(tmp_path, PROMETHEUS, EVENTS, cidr=None)
    assert alone == build(CONFIG / "default")


def test_the_api_server_accepts_the_install_with_every_rule(
    with_everything: list[Manifest], kubectl: Kubectl
) -> None:
    apply_server_side(kubectl, of_kind(with_everything, "Namespace"), dry_run=False)
    output = apply_server_side(kubectl, with_everything, dry_run=True)
    assert output.count("(server dry run)") == len(with_everything)


@pytest.fixture
def policy_deleted_afterwards(kubectl: Kubectl) -> Iterator[None]:
    yield
    kubectl(
        "delete", "networkpolicy", "ray-operator", "-n", DEFAULT_NAMESPACE, "--ignore-not-found"
    )


@pytest.mark.usefixtures("policy_deleted_afterwards")
def test_the_api_server_stores_the_policy_as_built(
    with_everything: list[Manifest], kubectl: Kubectl
) -> None:
    policy = operator_policy(with_everything)
    apply_server_side(kubectl, of_kind(with_everything, "Namespace"), dry_run=False)
    apply_server_side(kubectl, [policy], dry_run=False)
    stored = kubectl("get", "networkpolicy", "ray-operator", "-n", DEFAULT_NAMESPACE, "-o", "yaml")
    assert yaml.safe_load(stored)["spec"] == policy["spec"]


def test_an_unset_api_server_address_is_refused_naming_the_field(
    tmp_path: Path, kubectl: Kubectl
) -> None:
    manifests = install(tmp_path, COMPONENT, cidr=None)
    apply_server_side(kubectl, of_kind(manifests, "Namespace"), dry_run=False)
    with pytest.raises(KubectlError) as refused:
        apply_server_side(kubectl, [operator_policy(manifests)], dry_run=True)
    assert "spec.ingress[0].from[0].ipBlock.cidr" in refused.value.stderr
    assert "SET-THE-API-SERVER-CIDR" in refused.value.stderr
