"""The NetworkPolicies of a RayCluster's `spec.networkPolicy` (KubeRay's NetworkPolicy controller,
behind its RayClusterNetworkPolicy feature gate).

One policy for the head Pod, `<cluster>-head`, and one per worker group,
`<cluster>-workers-<group>`, each selecting its Pods by `ray.io/cluster` and `ray.io/node-type`
(and `ray.io/group`). `mode` says which directions are restricted — `DenyAll` (the default) both,
`DenyAllIngress` or `DenyAllEgress` one — and in each restricted direction the base rule allows
all traffic from/to the cluster's own Pods; the user's rules are appended to it: `head` for the
head, and for a worker group its `workerGroups` entry when there is one (it replaces `worker`,
it is not merged with it), else `worker`. A cluster a RayJob owns and submits to with a
Kubernetes Job (`ray.io/job-submission-mode: K8sJobMode`) also lets that RayJob's submitter Pods
reach the head's dashboard port. DNS is never added: under DenyAll a user must allow it, as
KubeRay's sample does.

The user's rules are written as the API server stores them — empty lists and maps dropped as
Go's `omitempty` drops them, a port's protocol defaulted to TCP — so that the built policy equals
the stored one field for field, and drift is a plain comparison (`network_policy_drifted`).

Pure: no I/O. The size of what is built is bounded by validation
(`validation/network_policy.py`), which runs before any build.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from ray_operator.builders.metadata import dependent_metadata
from ray_operator.builders.rayjob import JOB_SUBMISSION_MODE_LABEL
from ray_operator.spec import go_json
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.raycluster import (
    JSON,
    ClusterLike,
    as_cluster_manifest,
    cluster_name,
    head_group,
    metadata,
    spec,
    worker_groups,
)

if TYPE_CHECKING:
    from ray_io.v1_views import NetworkPolicyConfig, NetworkPolicyRules, RayCluster

DENY_ALL: Final = "DenyAll"
DENY_ALL_INGRESS: Final = "DenyAllIngress"
DENY_ALL_EGRESS: Final = "DenyAllEgress"
MODES: Final = (DENY_ALL, DENY_ALL_INGRESS, DENY_ALL_EGRESS)

K8S_JOB_MODE: Final = "K8sJobMode"
DASHBOARD_PORT_PARAM: Final = "dashboard-port"

_INT32 = re.compile(r"[+-]?[0-9]{1,10}")


def network_policy_config(cluster: RayCluster) -> NetworkPolicyConfig | None:
    """`spec.networkPolicy`, or None when the cluster asks for no isolation."""
    return spec(cluster).get("networkPolicy")


def restricts_ingress(mode: str) -> bool:
    return mode in (DENY_ALL, DENY_ALL_INGRESS)


def restricts_egress(mode: str) -> bool:
    return mode in (DENY_ALL, DENY_ALL_EGRESS)


def mode_of(config: Mapping[str, Any]) -> str:
    """The config's `mode`; `DenyAll` when unset (the CRD's default)."""
    return str(config.get("mode") or DENY_ALL)


def head_network_policy_name(name: str) -> str:
    return f"{name}-head"


def worker_group_network_policy_name(name: str, group_name: str) -> str:
    return f"{name}-workers-{group_name}"


def build_network_policies(cluster: ClusterLike) -> list[JSON]:
    """The head's policy, then one per worker group in spec order; none without `networkPolicy`."""
    manifest = as_cluster_manifest(cluster)
    config = network_policy_config(manifest)
    if config is None:
        return []
    policies = [build_head_network_policy(manifest, config)]
    policies.extend(
        build_worker_group_network_policy(manifest, config, str(group.get("groupName", "")))
        for group in worker_groups(manifest)
    )
    return policies


def build_head_network_policy(cluster: RayCluster, config: NetworkPolicyConfig) -> JSON:
    """`<cluster>-head`: the head Pod's isolation, the RayJob submitter let in when it has one."""
    name = cluster_name(cluster)
    base_ingress = [*_intra_cluster_ingress(name), *_submitter_ingress(cluster)]
    return _network_policy(
        cluster,
        policy_name=head_network_policy_name(name),
        group_label=names.HEAD_GROUP_NAME,
        pod_selector={names.CLUSTER_LABEL: name, names.NODE_TYPE_LABEL: names.HEAD_NODE},
        mode=mode_of(config),
        base_ingress=base_ingress,
        custom=config.get("head"),
    )


def build_worker_group_network_policy(
    cluster: RayCluster, config: NetworkPolicyConfig, group_name: str
) -> JSON:
    """`<cluster>-workers-<group>`: one worker group's isolation."""
    name = cluster_name(cluster)
    return _network_policy(
        cluster,
        policy_name=worker_group_network_policy_name(name, group_name),
        group_label=group_name,
        pod_selector={
            names.CLUSTER_LABEL: name,
            names.NODE_TYPE_LABEL: names.WORKER_NODE,
            names.GROUP_LABEL: group_name,
        },
        mode=mode_of(config),
        base_ingress=_intra_cluster_ingress(name),
        custom=worker_group_rules(config, group_name),
    )


def worker_group_rules(config: NetworkPolicyConfig, group_name: str) -> NetworkPolicyRules | None:
    """The group's `workerGroups` entry when it has one (it replaces `worker`), else `worker`."""
    for entry in config.get("workerGroups") or ():
        if entry.get("groupName") == group_name:
            return entry
    return config.get("worker")


def _network_policy(
    cluster: RayCluster,
    *,
    policy_name: str,
    group_label: str,
    pod_selector: dict[str, str],
    mode: str,
    base_ingress: list[JSON],
    custom: Mapping[str, Any] | None,
) -> JSON:
    custom = custom or {}
    policy_types: list[str] = []
    policy_spec: JSON = {"podSelector": {"matchLabels": pod_selector}}
    if restricts_ingress(mode):
        policy_types.append("Ingress")
        user_rules = _as_stored(custom.get("ingressRules"), "NetworkPolicyIngressRule")
        policy_spec["ingress"] = [*base_ingress, *user_rules]
    if restricts_egress(mode):
        policy_types.append("Egress")
        user_rules = _as_stored(custom.get("egressRules"), "NetworkPolicyEgressRule")
        policy_spec["egress"] = [*_intra_cluster_egress(cluster_name(cluster)), *user_rules]
    policy_spec["policyTypes"] = policy_types
    meta = dependent_metadata(cluster, name=policy_name)
    meta["labels"][names.GROUP_LABEL] = group_label
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta,
        "spec": policy_spec,
    }


def _cluster_peer(name: str) -> list[JSON]:
    return [{"podSelector": {"matchLabels": {names.CLUSTER_LABEL: name}}}]


def _intra_cluster_ingress(name: str) -> list[JSON]:
    """Every port, from the cluster's own Pods (no `ports`: all of them)."""
    return [{"from": _cluster_peer(name)}]


def _intra_cluster_egress(name: str) -> list[JSON]:
    return [{"to": _cluster_peer(name)}]


def _submitter_ingress(cluster: RayCluster) -> list[JSON]:
    """The dashboard port, from the submitter Pods of the RayJob that owns the cluster and
    submits with a Kubernetes Job (its other modes have no Pod outside the cluster)."""
    labels = metadata(cluster).get("labels") or {}
    if labels.get(JOB_SUBMISSION_MODE_LABEL) != K8S_JOB_MODE:
        return []
    for owner in metadata(cluster).get("ownerReferences") or ():
        if (
            owner.get("kind") == "RayJob"
            and owner.get("controller") is True
            and str(owner.get("apiVersion", "")).startswith("ray.io/")
        ):
            submitter = {
                names.ORIGINATED_FROM_CR_NAME_LABEL: owner["name"],
                names.ORIGINATED_FROM_CRD_LABEL: "RayJob",
            }
            port = {"protocol": "TCP", "port": dashboard_port(cluster)}
            return [{"from": [{"podSelector": {"matchLabels": submitter}}], "ports": [port]}]
    return []


def dashboard_port(cluster: RayCluster) -> int:
    """The head's `dashboard-port` when it is a 32-bit integer (as Go's ParseInt reads it),
    else Ray's default."""
    raw = str((head_group(cluster).get("rayStartParams") or {}).get(DASHBOARD_PORT_PARAM, ""))
    if _INT32.fullmatch(raw) and -(2**31) <= int(raw) < 2**31:
        return int(raw)
    return names.DASHBOARD_PORT


def _as_stored(rules: Sequence[Mapping[str, Any]] | None, type_name: str) -> list[JSON]:
    """The rules as the API server will store them: decoded into the Go type and encoded again
    (unknown fields, empty lists and maps dropped), a port's protocol defaulted to TCP."""
    stored: list[JSON] = [json.loads(go_json.marshal(rule, type_name)) for rule in rules or ()]
    for rule in stored:
        for port in rule.get("ports") or ():
            port.setdefault("protocol", "TCP")
    return stored


def network_policy_drifted(desired: Mapping[str, Any], existing: Mapping[str, Any]) -> bool:
    """Whether `existing` differs from `desired` in its spec or in a label we set (KubeRay
    compares both and updates the policy). `created-by` names whichever operator made it."""
    if desired["spec"] != existing.get("spec"):
        return True
    found = (existing.get("metadata") or {}).get("labels") or {}
    return any(
        found.get(key) != value
        for key, value in desired["metadata"]["labels"].items()
        if key != names.CREATED_BY_LABEL
    )
