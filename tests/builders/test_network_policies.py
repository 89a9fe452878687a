"""Specification of the NetworkPolicies built from `spec.networkPolicy`, compared with what
KubeRay's NetworkPolicy controller builds (`buildHeadNetworkPolicy`,
`buildWorkerGroupNetworkPolicy`): names, labels, selectors, rules per mode, the RayJob submitter
rule, and the user's rules written as the API server stores them."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from ray_operator.builders.network_policies import build_network_policies, network_policy_drifted
from ray_operator.builders.rayjob import build_cluster_for_job, build_submitter_job

from tests.conftest import REPO_ROOT
from tests.controllers.network_policies import DNS_EGRESS, cluster_peer

SAMPLE = REPO_ROOT / "samples" / "network-policy" / "ray-cluster.network-policy.yaml"


def cluster(**network_policy: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    manifest["metadata"].update(namespace="ns", uid="uid-1")
    if network_policy:
        manifest["spec"]["networkPolicy"] = network_policy
    return manifest


def by_name(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {policy["metadata"]["name"]: policy for policy in build_network_policies(manifest)}


def test_no_field_no_policies() -> None:
    manifest = cluster()
    del manifest["spec"]["networkPolicy"]
    assert build_network_policies(manifest) == []


def test_one_policy_for_the_head_and_one_per_worker_group_in_spec_order() -> None:
    manifest = cluster()
    groups = manifest["spec"]["workerGroupSpecs"]
    groups.insert(0, {**copy.deepcopy(groups[0]), "groupName": "gpu"})
    names = [policy["metadata"]["name"] for policy in build_network_policies(manifest)]
    assert names == ["ray-fenced-head", "ray-fenced-workers-gpu", "ray-fenced-workers-workergroup"]


def test_the_head_policy_is_kuberays() -> None:
    head = by_name(cluster())["ray-fenced-head"]
    assert head["metadata"] == {
        "name": "ray-fenced-head",
        "namespace": "ns",
        "labels": {
            "ray.io/cluster": "ray-fenced",
            "ray.io/group": "headgroup",
            "app.kubernetes.io/name": "kuberay",
            "app.kubernetes.io/created-by": "ray-operator",
        },
        "ownerReferences": [
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "name": "ray-fenced",
                "uid": "uid-1",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    prometheus = {
        "from": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        ],
        "ports": [{"port": 8080, "protocol": "TCP"}],
    }
    assert head["spec"] == {
        "podSelector": {
            "matchLabels": {"ray.io/cluster": "ray-fenced", "ray.io/node-type": "head"}
        },
        "policyTypes": ["Ingress", "Egress"],
        "ingress": [{"from": cluster_peer("ray-fenced")}, prometheus],
        "egress": [{"to": cluster_peer("ray-fenced")}, DNS_EGRESS],
    }


@pytest.mark.parametrize(
    ("mode", "types"),
    [
        ("DenyAll", ["Ingress", "Egress"]),
        ("DenyAllIngress", ["Ingress"]),
        ("DenyAllEgress", ["Egress"]),
        (None, ["Ingress", "Egress"]),
    ],
)
def test_the_mode_says_which_directions_are_restricted(mode: str | None, types: list[str]) -> None:
    for policy in build_network_policies(cluster(**({"mode": mode} if mode else {}))):
        assert policy["spec"]["policyTypes"] == types
        assert ("ingress" in policy["spec"]) == ("Ingress" in types)
        assert ("egress" in policy["spec"]) == ("Egress" in types)


def test_a_worker_groups_entry_replaces_worker_for_its_group() -> None:
    manifest = cluster(
        worker={"egressRules": [DNS_EGRESS]},
        workerGroups=[{"groupName": "gpu", "ingressRules": [{"from": cluster_peer("other")}]}],
    )
    groups = manifest["spec"]["workerGroupSpecs"]
    groups.append({**copy.deepcopy(groups[0]), "groupName": "gpu"})
    found = by_name(manifest)
    gpu, default = found["ray-fenced-workers-gpu"], found["ray-fenced-workers-workergroup"]
    assert gpu["spec"]["podSelector"]["matchLabels"] == {
        "ray.io/cluster": "ray-fenced",
        "ray.io/node-type": "worker",
        "ray.io/group": "gpu",
    }
    assert gpu["metadata"]["labels"]["ray.io/group"] == "gpu"
    assert gpu["spec"]["ingress"] == [
        {"from": cluster_peer("ray-fenced")},
        {"from": cluster_peer("other")},
    ]
    assert gpu["spec"]["egress"] == [{"to": cluster_peer("ray-fenced")}]
    assert default["spec"]["ingress"] == [{"from": cluster_peer("ray-fenced")}]
    assert default["spec"]["egress"] == [{"to": cluster_peer("ray-fenced")}, DNS_EGRESS]


def rayjob_cluster(mode: str = "K8sJobMode", **head_params: str) -> dict[str, Any]:
    manifest = cluster()
    manifest["metadata"]["labels"] = {"ray.io/job-submission-mode": mode}
    manifest["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "name": "nightly",
            "uid": "j",
            "controller": True,
        }
    ]
    manifest["spec"]["headGroupSpec"]["rayStartParams"] = head_params
    return manifest


def submitter_rules(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    ingress: list[dict[str, Any]] = by_name(manifest)["ray-fenced-head"]["spec"]["ingress"]
    return [rule for rule in ingress if rule.get("ports") and rule["ports"][0]["port"] != 8080]


def test_a_k8s_job_mode_rayjobs_submitter_may_reach_the_dashboard_port() -> None:
    (rule,) = submitter_rules(rayjob_cluster(**{"dashboard-port": "9000"}))
    assert rule == {
        "from": [
            {
                "podSelector": {
                    "matchLabels": {
                        "ray.io/originated-from-cr-name": "nightly",
                        "ray.io/originated-from-crd": "RayJob",
                    }
                }
            }
        ],
        "ports": [{"protocol": "TCP", "port": 9000}],
    }
    (default,) = submitter_rules(rayjob_cluster(**{"dashboard-port": "not-a-port"}))
    assert default["ports"] == [{"protocol": "TCP", "port": 8265}]


def test_no_submitter_rule_in_other_modes_or_without_a_rayjob_owner() -> None:
    assert submitter_rules(rayjob_cluster("SidecarMode")) == []
    unowned = rayjob_cluster()
    unowned["metadata"]["ownerReferences"][0]["controller"] = False
    assert submitter_rules(unowned) == []


def test_user_rules_are_written_as_the_api_server_stores_them() -> None:
    rule = {
        "to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": []}, "podSelector": None}],
        "ports": [{"port": 443}, {"port": "https", "protocol": "UDP"}],
    }
    manifest = cluster(mode="DenyAllEgress", worker={"egressRules": [rule, {"to": []}]})
    egress = by_name(manifest)["ray-fenced-workers-workergroup"]["spec"]["egress"]
    assert egress[1:] == [
        {
            "to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}],
            "ports": [{"port": 443, "protocol": "TCP"}, {"port": "https", "protocol": "UDP"}],
        },
        {},
    ]


def test_drift_is_any_spec_difference_or_a_changed_label_of_ours() -> None:
    desired = by_name(cluster())["ray-fenced-head"]
    same = copy.deepcopy(desired)
    same["metadata"]["labels"]["app.kubernetes.io/created-by"] = "kuberay-operator"
    same["metadata"]["labels"]["team"] = "a"
    assert not network_policy_drifted(desired, same)
    widened = copy.deepcopy(desired)
    widened["spec"]["podSelector"]["matchExpressions"] = [{"key": "x", "operator": "Exists"}]
    assert network_policy_drifted(desired, widened)
    relabelled = copy.deepcopy(desired)
    relabelled["metadata"]["labels"]["ray.io/group"] = "other"
    assert network_policy_drifted(desired, relabelled)


def test_a_rayjobs_own_cluster_lets_its_own_submitter_pod_in() -> None:
    """Across our builders: the cluster a K8sJobMode RayJob gets, and its submitter Job's Pods."""
    rayjob: dict[str, Any] = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "nightly", "namespace": "ns", "uid": "job-uid"},
        "spec": {"entrypoint": "python -V", "rayClusterSpec": cluster()["spec"]},
    }
    job_cluster = build_cluster_for_job(rayjob, name="nightly-abcde")
    job_cluster["metadata"]["uid"] = "cluster-uid"
    submitter = build_submitter_job(rayjob, job_cluster, dashboard_address="", submission_id="s")
    pod_labels = submitter["spec"]["template"]["metadata"]["labels"]
    head = by_name(job_cluster)["nightly-abcde-head"]
    (rule,) = [
        r for r in head["spec"]["ingress"] if r.get("ports") == [{"protocol": "TCP", "port": 8265}]
    ]
    selector = rule["from"][0]["podSelector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
