"""Specification: `spec.networkPolicy` for real, with the RayClusterNetworkPolicy feature gate on:
the NetworkPolicies KubeRay's NetworkPolicy controller makes (`<cluster>-head`,
`<cluster>-workers-<group>`), owned by the cluster; updated when the spec changes, put back when
edited by hand, deleted when the field (or a worker group) goes and when the cluster is deleted —
explicitly: this plane has no garbage collector. A cluster without the field gets none. With the
gate off the field is refused with the gate's message, and NetworkPolicies are not even watched.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from ray_operator.app import Operator
from ray_operator.builders.network_policies import build_network_policies
from ray_operator.features import parse_feature_gates
from ray_operator.spec.kinds import NETWORK_POLICY

from tests.conftest import REPO_ROOT
from tests.controllers.clusters import scalable_cluster
from tests.controllers.conftest import Harness, StartClusterOperator
from tests.controllers.network_policies import DNS_EGRESS, cluster_peer

GATE_ON = parse_feature_gates("RayClusterNetworkPolicy=true")
SAMPLE = REPO_ROOT / "samples" / "network-policy" / "ray-cluster.network-policy.yaml"


async def start_gated(start_cluster_operator: StartClusterOperator) -> Operator:
    """The RayCluster controller with the RayClusterNetworkPolicy gate on, as the flag sets it
    (what the operator caches and what validation allows)."""
    return await start_cluster_operator(feature_gates=GATE_ON)


@pytest.fixture
async def gated_operator(start_cluster_operator: StartClusterOperator) -> Operator:
    return await start_gated(start_cluster_operator)


def isolated_cluster(name: str = "iso", **network_policy: Any) -> dict[str, Any]:
    cluster = scalable_cluster(name)
    cluster["spec"]["networkPolicy"] = network_policy or {
        "mode": "DenyAll",
        "head": {"egressRules": [copy.deepcopy(DNS_EGRESS)]},
        "worker": {"egressRules": [copy.deepcopy(DNS_EGRESS)]},
    }
    return cluster


async def policies(harness: Harness) -> dict[str, dict[str, Any]]:
    """The namespace's NetworkPolicies not being deleted, by name."""
    listed = await harness.get_json("networkpolicies")
    return {
        item["metadata"]["name"]: item
        for item in listed["items"]
        if not item["metadata"].get("deletionTimestamp")
    }


async def policies_named(harness: Harness, *names: str) -> dict[str, dict[str, Any]]:
    # Wrapped in a tuple: no policies at all is a valid answer, but falsy.
    async def check() -> tuple[dict[str, dict[str, Any]]] | None:
        found = await policies(harness)
        return (found,) if set(found) == set(names) else None

    result: tuple[dict[str, dict[str, Any]]] = await harness.eventually(
        check, what=f"exactly the NetworkPolicies {sorted(names)}"
    )
    return result[0]


async def events(harness: Harness, reason: str) -> list[dict[str, Any]]:
    listed = await harness.get_json("events", "--field-selector", f"reason={reason}")
    items: list[dict[str, Any]] = listed["items"]
    return items


async def test_the_sample_gets_kuberays_head_and_worker_group_policies_owned_by_it(
    harness: Harness, gated_operator: Operator
) -> None:
    sample = yaml.safe_load(SAMPLE.read_text())
    await harness.kubectl("apply", "--server-side", "-f", str(SAMPLE))
    name = sample["metadata"]["name"]
    found = await policies_named(harness, f"{name}-head", f"{name}-workers-workergroup")
    uid = (await harness.cluster(name))["metadata"]["uid"]
    head, workers = found[f"{name}-head"], found[f"{name}-workers-workergroup"]
    for policy, group in ((head, "headgroup"), (workers, "workergroup")):
        assert policy["metadata"]["labels"] == {
            "ray.io/cluster": name,
            "ray.io/group": group,
            "app.kubernetes.io/name": "kuberay",
            "app.kubernetes.io/created-by": "ray-operator",
        }
        assert policy["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "ray.io/v1",
                "kind": "RayCluster",
                "name": name,
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        assert policy["spec"]["ingress"][0] == {"from": cluster_peer(name)}
        assert policy["spec"]["egress"] == [{"to": cluster_peer(name)}, DNS_EGRESS]
    assert head["spec"]["podSelector"] == {
        "matchLabels": {"ray.io/cluster": name, "ray.io/node-type": "head"}
    }
    assert head["spec"]["ingress"] == [
        {"from": cluster_peer(name)},
        *sample["spec"]["networkPolicy"]["head"]["ingressRules"],
    ]
    assert workers["spec"]["podSelector"] == {
        "matchLabels": {
            "ray.io/cluster": name,
            "ray.io/node-type": "worker",
            "ray.io/group": "workergroup",
        }
    }
    assert workers["spec"]["ingress"] == [{"from": cluster_peer(name)}]
    created = await events(harness, "CreatedNetworkPolicy")
    assert {event["message"] for event in created} == {
        f"Created NetworkPolicy {harness.namespace}/{name}-head",
        f"Created NetworkPolicy {harness.namespace}/{name}-workers-workergroup",
    }


async def test_a_worker_groups_entry_replaces_the_worker_rules_for_that_group_only(
    harness: Harness, gated_operator: Operator
) -> None:
    cluster = isolated_cluster()
    groups = cluster["spec"]["workerGroupSpecs"]
    groups.append({**copy.deepcopy(groups[0]), "groupName": "gpu"})
    https: dict[str, Any] = {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}]}
    https["ports"] = [{"port": 443}]  # no protocol: TCP, as the API server defaults it
    cluster["spec"]["networkPolicy"]["workerGroups"] = [
        {"groupName": "gpu", "egressRules": [DNS_EGRESS, https]}
    ]
    await harness.apply(cluster)
    found = await policies_named(harness, "iso-head", "iso-workers-small", "iso-workers-gpu")
    assert found["iso-workers-small"]["spec"]["egress"] == [
        {"to": cluster_peer("iso")},
        DNS_EGRESS,
    ]
    https["ports"] = [{"port": 443, "protocol": "TCP"}]
    assert found["iso-workers-gpu"]["spec"]["egress"] == [
        {"to": cluster_peer("iso")},
        DNS_EGRESS,
        https,
    ]
    # Nothing to write once converged: the built policies equal the stored ones.
    await harness.pods_settled("iso", head=1, workers=2)
    assert await events(harness, "UpdatedNetworkPolicy") == []


async def test_a_changed_mode_updates_the_policies_in_place(
    harness: Harness, gated_operator: Operator
) -> None:
    await harness.apply(isolated_cluster())
    before = await policies_named(harness, "iso-head", "iso-workers-small")
    await harness.apply(isolated_cluster(mode="DenyAllIngress"))

    async def updated() -> dict[str, Any] | None:
        found = (await policies(harness)).get("iso-head")
        return found if found and found["spec"]["policyTypes"] == ["Ingress"] else None

    head = await harness.eventually(updated, what="the head policy restricting ingress only")
    assert "egress" not in head["spec"]
    assert head["metadata"]["uid"] == before["iso-head"]["metadata"]["uid"]
    assert await events(harness, "UpdatedNetworkPolicy")


async def test_a_policy_edited_by_hand_is_put_back(
    harness: Harness, gated_operator: Operator
) -> None:
    await harness.apply(isolated_cluster())
    before = (await policies_named(harness, "iso-head", "iso-workers-small"))["iso-head"]
    # Widen the head's isolation: let everything in, and select no Pod at all.
    await harness.kubectl(
        "patch", "networkpolicy", "iso-head", "--type=json", "-p",
        '[{"op": "replace", "path": "/spec/ingress", "value": [{}]},'
        ' {"op": "add", "path": "/spec/podSelector/matchExpressions",'
        ' "value": [{"key": "nobody", "operator": "Exists"}]}]',
    )  # fmt: skip

    async def restored() -> bool:
        found = (await policies(harness)).get("iso-head")
        return found is not None and found["spec"] == before["spec"]

    await harness.eventually(restored, what="the head policy put back as built")


async def test_removing_the_field_deletes_the_policies_and_a_removed_group_loses_its_own(
    harness: Harness, gated_operator: Operator
) -> None:
    cluster = isolated_cluster()
    groups = cluster["spec"]["workerGroupSpecs"]
    groups.append({**copy.deepcopy(groups[0]), "groupName": "gpu"})
    await harness.apply(cluster)
    await policies_named(harness, "iso-head", "iso-workers-small", "iso-workers-gpu")
    del groups[1]
    await harness.apply(cluster)
    await policies_named(harness, "iso-head", "iso-workers-small")
    del cluster["spec"]["networkPolicy"]
    await harness.apply(cluster)
    await policies_named(harness)
    deleted = await events(harness, "DeletedNetworkPolicy")
    assert len(deleted) == 3


async def test_deleting_the_cluster_deletes_its_policies_without_a_garbage_collector(
    harness: Harness, gated_operator: Operator
) -> None:
    await harness.apply(isolated_cluster())
    await policies_named(harness, "iso-head", "iso-workers-small")
    await harness.kubectl("delete", "raycluster", "iso", "--wait=false")
    await policies_named(harness)


async def test_a_cluster_without_network_policy_gets_none(
    harness: Harness, gated_operator: Operator
) -> None:
    await harness.apply(scalable_cluster("open"))
    await harness.pods_settled("open", head=1, workers=1)
    assert await policies(harness) == {}


async def test_a_foreign_policy_of_that_name_is_left_alone_and_the_cluster_goes_on(
    harness: Harness, gated_operator: Operator
) -> None:
    foreign = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "iso-head"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }
    await harness.apply(foreign)
    before = (await policies(harness))["iso-head"]
    await harness.apply(isolated_cluster())
    await harness.pods_settled("iso", head=1, workers=1)

    async def warned() -> list[dict[str, Any]]:
        return await events(harness, "NetworkPolicyNameCollision")

    [warning] = await harness.eventually(warned, what="a Warning about the foreign policy")
    assert "is not owned by any object, not this RayCluster" in warning["message"]
    after = await policies_named(harness, "iso-head", "iso-workers-small")
    assert after["iso-head"]["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_a_rayjob_clusters_head_lets_its_submitter_reach_the_dashboard(
    harness: Harness, gated_operator: Operator
) -> None:
    cluster = isolated_cluster("job-cluster")
    cluster["spec"]["headGroupSpec"]["rayStartParams"]["dashboard-port"] = "8266"
    cluster["metadata"]["labels"] = {"ray.io/job-submission-mode": "K8sJobMode"}
    # A RayJob's cluster is owned by it; any object will do as owner on a plane without GC.
    owner = await harness.get_json("namespace", harness.namespace)
    cluster["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "name": "nightly",
            "uid": owner["metadata"]["uid"],
            "controller": True,
        }
    ]
    await harness.apply(cluster)
    found = await policies_named(harness, "job-cluster-head", "job-cluster-workers-small")
    assert found["job-cluster-head"]["spec"]["ingress"] == [
        {"from": cluster_peer("job-cluster")},
        {
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
            "ports": [{"port": 8266, "protocol": "TCP"}],
        },
    ]


async def test_with_the_gate_off_the_field_is_refused_and_policies_are_not_watched(
    harness: Harness, operator: Operator
) -> None:
    await harness.apply(isolated_cluster())
    [warning] = await harness.eventually(
        lambda: events(harness, "InvalidRayClusterSpec"), what="the invalid spec reported"
    )
    assert warning["message"] == (
        "spec.networkPolicy: Forbidden: the RayClusterNetworkPolicy feature gate is off in this "
        "operator (--feature-gates=RayClusterNetworkPolicy=true turns it on)"
    )
    assert await policies(harness) == {}
    assert await harness.pods("iso") == []
    assert operator.store.list(NETWORK_POLICY) == []


async def test_kuberays_policies_are_taken_over_without_a_write(
    harness: Harness, start_cluster_operator: StartClusterOperator
) -> None:
    await harness.apply(isolated_cluster())
    uid = (await harness.cluster("iso"))["metadata"]["uid"]
    # As KubeRay's controller made them: its created-by, the rest as ours.
    ours = build_network_policies({**await harness.cluster("iso"), "kind": "RayCluster"})
    for policy in ours:
        policy["metadata"]["labels"]["app.kubernetes.io/created-by"] = "kuberay-operator"
        assert policy["metadata"]["ownerReferences"][0]["uid"] == uid
        await harness.apply(policy)
    before = await policies_named(harness, "iso-head", "iso-workers-small")
    await start_gated(start_cluster_operator)
    await harness.pods_settled("iso", head=1, workers=1)
    after = await policies(harness)
    assert {name: p["metadata"]["resourceVersion"] for name, p in after.items()} == {
        name: p["metadata"]["resourceVersion"] for name, p in before.items()
    }
    assert await events(harness, "CreatedNetworkPolicy") == []
    assert await events(harness, "UpdatedNetworkPolicy") == []
