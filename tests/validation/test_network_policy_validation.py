"""Specification: `spec.networkPolicy` is checked with KubeRay's rules and with what the API server
would refuse in the NetworkPolicies built from it, every problem at its field path; a field too
large is refused in one error; with the gate off only the gate's message is given."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from ray_operator.features import parse_feature_gates
from ray_operator.validation import validate_raycluster
from ray_operator.validation.limits import ClusterLimits
from ray_operator.validation.network_policy import (
    MAX_BUILT_ITEMS,
    MAX_ERRORS,
    MAX_NETWORK_POLICY_ITEMS,
)

from tests.conftest import REPO_ROOT

SAMPLE = REPO_ROOT / "samples" / "network-policy" / "ray-cluster.network-policy.yaml"
GATE_ON = ClusterLimits(feature_gates=parse_feature_gates("RayClusterNetworkPolicy=true"))
NP = "spec.networkPolicy"


def cluster(**network_policy: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    manifest["spec"]["networkPolicy"].update(network_policy)
    return manifest


def problems(manifest: dict[str, Any]) -> list[str]:
    return [str(error) for error in validate_raycluster(manifest, limits=GATE_ON)]


def fields(manifest: dict[str, Any]) -> list[str]:
    return [error.field for error in validate_raycluster(manifest, limits=GATE_ON)]


def ingress(*rules: dict[str, Any]) -> dict[str, Any]:
    return {"ingressRules": list(rules)}


def test_the_sample_is_valid_with_the_gate_on() -> None:
    assert problems(cluster()) == []


def test_with_the_gate_off_only_the_gates_message_is_given() -> None:
    bad = cluster(mode="DenyAllEgress", workerGroups=[{"groupName": "nope"}])
    assert [str(error) for error in validate_raycluster(bad)] == [
        "spec.networkPolicy: Forbidden: the RayClusterNetworkPolicy feature gate is off in this "
        "operator (--feature-gates=RayClusterNetworkPolicy=true turns it on)"
    ]


@pytest.mark.parametrize(
    ("mode", "part", "field", "direction"),
    [
        ("DenyAllEgress", "head", "ingressRules", "ingress"),
        ("DenyAllIngress", "head", "egressRules", "egress"),
        ("DenyAllEgress", "worker", "ingressRules", "ingress"),
        ("DenyAllIngress", "worker", "egressRules", "egress"),
    ],
)
def test_rules_are_refused_for_a_direction_the_mode_does_not_restrict(
    mode: str, part: str, field: str, direction: str
) -> None:
    rules: dict[str, Any] = {field: [{}]}
    manifest = cluster(mode=mode, **{"head": {}, "worker": {}, part: rules})
    assert problems(manifest) == [
        f'{NP}.{part}.{field}: Forbidden: cannot be set when mode is "{mode}" '
        f"({direction} is not restricted)"
    ]


def test_a_worker_groups_entry_must_name_a_group_once_and_obey_the_mode() -> None:
    manifest = cluster(
        mode="DenyAllIngress",
        head={},
        worker={},
        workerGroups=[
            {"groupName": "workergroup", "egressRules": [{}]},
            {"groupName": "workergroup"},
            {"groupName": "missing"},
        ],
    )
    assert problems(manifest) == [
        f'{NP}.workerGroups[0].egressRules: Forbidden: cannot be set when mode is "DenyAllIngress" '
        "(egress is not restricted)",
        f'{NP}.workerGroups[1].groupName: Duplicate value: "workergroup"',
        f'{NP}.workerGroups[2].groupName: Invalid value: "missing": does not match any group '
        "name in workerGroupSpecs",
    ]


def test_worker_group_names_must_be_dns_labels_with_network_policy() -> None:
    manifest = cluster()
    manifest["spec"]["workerGroupSpecs"][0]["groupName"] = "Workers_1"
    assert "spec.workerGroupSpecs[0].groupName" in fields(manifest)


def test_bad_ports_are_refused_as_the_api_server_would() -> None:
    ports = [
        {"port": 0},
        {"port": 70000},
        {"port": "Not_A_Name"},
        {"port": "https", "endPort": 500},
        {"endPort": 80},
        {"port": 80, "endPort": 79},
        {"port": 80, "protocol": "ICMP"},
        {"port": 80, "endPort": 90, "protocol": "SCTP"},
    ]
    manifest = cluster(head=ingress({"ports": ports}))
    path = f"{NP}.head.ingressRules[0].ports"
    assert fields(manifest) == [
        f"{path}[0].port",
        f"{path}[1].port",
        f"{path}[2].port",
        f"{path}[3].endPort",
        f"{path}[4].port",
        f"{path}[5].endPort",
        f"{path}[6].protocol",
    ]


def test_bad_peers_selectors_and_cidrs_are_refused_with_their_paths() -> None:
    peers = [
        {},
        {"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}},
        {"ipBlock": {"cidr": "10.0.0.300/8"}},
        {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["11.0.0.0/16", "10.0.0.0/8", "x"]}},
        {"ipBlock": {"cidr": "10.1.2.3"}},
        {"ipBlock": {"cidr": "fd00::/8", "except": ["fd00:1::/32"]}},
        {"podSelector": {"matchLabels": {"bad key": "v", "ok": "bad value!"}}},
        {
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": "a", "operator": "In"},
                    {"key": "a", "operator": "Exists", "values": ["x"]},
                    {"key": "a", "operator": "Near", "values": ["x"]},
                    {"key": "-a", "operator": "In", "values": ["x", "no way"]},
                ]
            }
        },
    ]
    manifest = cluster(head=ingress({"from": peers}))
    path = f"{NP}.head.ingressRules[0].from"
    selector = f"{path}[7].namespaceSelector.matchExpressions"
    assert fields(manifest) == [
        f"{path}[0]",
        f"{path}[1]",
        f"{path}[2].ipBlock.cidr",
        f"{path}[3].ipBlock.except[0]",
        f"{path}[3].ipBlock.except[1]",
        f"{path}[3].ipBlock.except[2]",
        f"{path}[4].ipBlock.cidr",
        f"{path}[6].podSelector.matchLabels",
        f"{path}[6].podSelector.matchLabels",
        f"{selector}[0].values",
        f"{selector}[1].values",
        f"{selector}[2].operator",
        f"{selector}[3].key",
        f"{selector}[3].values[1]",
    ]


def test_a_dashboard_port_out_of_range_is_refused_while_ingress_is_restricted() -> None:
    manifest = cluster()
    manifest["spec"]["headGroupSpec"]["rayStartParams"]["dashboard-port"] = "70000"
    assert fields(manifest) == ["spec.headGroupSpec.rayStartParams.dashboard-port"]


def test_a_huge_field_is_refused_in_one_error_without_reading_it_all() -> None:
    rule = {"from": [{"podSelector": {"matchLabels": {"a": "b"}}}], "ports": [{"port": 1}]}
    rules = [copy.deepcopy(rule) for _ in range(MAX_NETWORK_POLICY_ITEMS)]
    (problem,) = problems(cluster(head=ingress(*rules)))
    assert problem.startswith(f"{NP}: Invalid value: ")
    assert "items: must have at most 1000 rules, peers, ports" in problem.replace('"', "")


def test_worker_rules_copied_into_too_many_groups_are_refused_in_one_error() -> None:
    # 100 items of worker rules, well under the field's bound, copied into 100 groups.
    rule = {"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}], "ports": [{"port": 1}] * 97}
    manifest = cluster(worker={"egressRules": [rule]})
    group = manifest["spec"]["workerGroupSpecs"][0]
    manifest["spec"]["workerGroupSpecs"] = [
        {**copy.deepcopy(group), "groupName": f"g{index}"} for index in range(100)
    ]
    (problem,) = problems(manifest)
    assert problem.startswith(f"{NP}: Invalid value: ")
    assert f"must hold at most {MAX_BUILT_ITEMS} policies, rules" in problem
    manifest["spec"]["workerGroupSpecs"] = manifest["spec"]["workerGroupSpecs"][:90]
    assert problems(manifest) == []


def test_errors_are_capped() -> None:
    ports = [{"port": 0} for _ in range(MAX_ERRORS * 2)]
    assert len(problems(cluster(head=ingress({"ports": ports})))) == MAX_ERRORS
