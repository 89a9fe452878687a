"""Batch schedulers, as KubeRay's `--batch-scheduler` integrations shape what they touch.

Pure: the scheduler's name and the parent object (a RayCluster or RayJob as cached) in, the
PodGroup to create or the metadata to put on a child out. Four schedulers, KubeRay's names:

- `volcano`: a `scheduling.volcano.sh/v1beta1` PodGroup `ray-<name>-pg` per RayCluster (one per
  RayJob for the cluster a RayJob creates, sized for the cluster plus the submitter), with the
  owner's `volcano.sh/queue-name` and `ray.io/priority-class-name` labels as queue and priority;
  Pods get `schedulerName: volcano`, the group-name and task-spec annotations.
- `yunikorn`: no object; Pods get `schedulerName: yunikorn`, `applicationId`/`queue` labels from
  the owner's `yunikorn.apache.org/app-id`/`queue` labels and, with
  `ray.io/gang-scheduling-enabled`, the task-groups annotations.
- `scheduler-plugins`: with `ray.io/gang-scheduling-enabled`, a `scheduling.x-k8s.io/v1alpha1`
  PodGroup named like the RayCluster and the `scheduling.x-k8s.io/pod-group` label on its Pods;
  `schedulerName: scheduler-plugins-scheduler` always.
- `kai-scheduler`: no object; Pods get `schedulerName: kai-scheduler` and the owner's
  `kai.scheduler/queue` label.

KubeRay adds this metadata after it built a Pod and stamped its hash annotations; those hashes
are of the RayCluster's spec, which the metadata never touches, so they stay KubeRay's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

from ray_operator.builders.rayjob import owner_reference, submitter_pod_spec
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.go_json import go_string, marshal
from ray_operator.spec.quantity import ZERO, InvalidQuantityError, Quantity
from ray_operator.spec.raycluster import (
    JSON,
    head_group,
    is_autoscaling_enabled,
    pod_spec,
    pod_spec_resources,
    worker_groups,
)
from ray_operator.spec.replicas import (
    clamp_int32,
    desired_group_pods,
    hosts_per_replica,
    is_group_suspended,
    min_group_pods,
)

VOLCANO: Final = "volcano"
YUNIKORN: Final = "yunikorn"
SCHEDULER_PLUGINS: Final = "scheduler-plugins"
KAI_SCHEDULER: Final = "kai-scheduler"
BATCH_SCHEDULERS: Final = (VOLCANO, YUNIKORN, SCHEDULER_PLUGINS, KAI_SCHEDULER)
"""`--batch-scheduler` values, KubeRay's."""

POD_SCHEDULER_NAMES: Final[Mapping[str, str]] = {
    VOLCANO: "volcano",
    YUNIKORN: "yunikorn",
    SCHEDULER_PLUGINS: "scheduler-plugins-scheduler",
    KAI_SCHEDULER: "kai-scheduler",
}
"""The `schedulerName` each integration puts on Pods (scheduler-plugins' is its second
scheduler's profile, not the plugin's name)."""

GANG_SCHEDULING_LABEL: Final = "ray.io/gang-scheduling-enabled"
PRIORITY_CLASS_LABEL: Final = "ray.io/priority-class-name"
VOLCANO_QUEUE_LABEL: Final = "volcano.sh/queue-name"
VOLCANO_NETWORK_TOPOLOGY_MODE_LABEL: Final = "volcano.sh/network-topology-mode"
VOLCANO_HIGHEST_TIER_LABEL: Final = "volcano.sh/network-topology-highest-tier-allowed"
VOLCANO_GROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
VOLCANO_TASK_SPEC_ANNOTATION: Final = "volcano.sh/task-spec"
YUNIKORN_APP_ID_LABEL: Final = "yunikorn.apache.org/app-id"
YUNIKORN_QUEUE_LABEL: Final = "yunikorn.apache.org/queue"
YUNIKORN_POD_APP_ID_LABEL: Final = "applicationId"
YUNIKORN_POD_QUEUE_LABEL: Final = "queue"
YUNIKORN_TASK_GROUPS_ANNOTATION: Final = "yunikorn.apache.org/task-groups"
YUNIKORN_TASK_GROUP_NAME_ANNOTATION: Final = "yunikorn.apache.org/task-group-name"
SCHEDULER_PLUGINS_POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
KAI_QUEUE_LABEL: Final = "kai.scheduler/queue"

HEAD_GROUP: Final = names.HEAD_GROUP_NAME
SUBMITTER_GROUP: Final = "submittergroup"
"""The group names KubeRay gives the head Pod and a RayJob's submitter (task groups, task-spec)."""

VOLCANO_POD_GROUP_API_VERSION: Final = "scheduling.volcano.sh/v1beta1"
SCHEDULER_PLUGINS_POD_GROUP_API_VERSION: Final = "scheduling.x-k8s.io/v1alpha1"

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster

Object = Mapping[str, Any]


class InvalidSchedulingLabelError(ValueError):
    """A scheduling label whose value KubeRay could not use (it fails the reconcile too)."""


def parse_batch_scheduler(name: str) -> str:
    """`name` when it is a known scheduler (or empty: none), else ValueError naming them all."""
    if name and name not in BATCH_SCHEDULERS:
        raise ValueError(
            f"unknown batch scheduler {name!r}; the known ones are {', '.join(BATCH_SCHEDULERS)}"
        )
    return name


def is_gang_scheduled(parent: Object) -> bool:
    """KubeRay checks the label's presence, whatever its value."""
    return GANG_SCHEDULING_LABEL in _labels(parent)


# --- PodGroup sizes -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GangSize:
    """What a PodGroup asks for: Pods that must start together and their summed resources."""

    min_member: int
    min_resources: dict[str, Quantity]

    def plus(self, resources: Mapping[str, Quantity]) -> GangSize:
        return GangSize(self.min_member, _summed(self.min_resources, resources))

    def resource_strings(self) -> dict[str, str]:
        return {name: str(quantity) for name, quantity in self.min_resources.items()}


def desired_gang(cluster_spec: Mapping[str, Any]) -> GangSize:
    """KubeRay's `CalculateDesiredReplicas` + 1 and `CalculateDesiredResources` (raw `replicas`
    for resources, as KubeRay)."""
    return _gang(cluster_spec, desired_group_pods, "replicas")


def min_gang(cluster_spec: Mapping[str, Any]) -> GangSize:
    """KubeRay's `CalculateMinReplicas` + 1 and `CalculateMinResources`."""
    return _gang(cluster_spec, min_group_pods, "minReplicas")


def _gang(cluster_spec: Mapping[str, Any], pods: Any, replicas_field: str) -> GangSize:
    members = 1 + sum(pods(group) for group in worker_groups(_as_cluster(cluster_spec)))
    resources = _cluster_resources(cluster_spec, lambda group: int(group.get(replicas_field) or 0))
    return GangSize(clamp_int32(members), resources)


def volcano_gang(cluster_spec: Mapping[str, Any]) -> GangSize:
    """The minimum with the autoscaler on, else the desired size (KubeRay's volcano plugin)."""
    if is_autoscaling_enabled(_as_cluster(cluster_spec)["spec"]):
        return min_gang(cluster_spec)
    return desired_gang(cluster_spec)


def _as_cluster(cluster_spec: Mapping[str, Any]) -> RayCluster:
    return cast("RayCluster", {"spec": cluster_spec})


def _cluster_resources(cluster_spec: Mapping[str, Any], replicas: Any) -> dict[str, Quantity]:
    cluster = _as_cluster(cluster_spec)
    totals = pod_spec_resources(pod_spec(head_group(cluster)))
    for group in worker_groups(cluster):
        if is_group_suspended(group):
            continue
        count = replicas(group) * hosts_per_replica(group)
        each = pod_spec_resources(pod_spec(group))
        totals = _summed(totals, {name: quantity.times(count) for name, quantity in each.items()})
    return totals


def _summed(left: Mapping[str, Quantity], right: Mapping[str, Quantity]) -> dict[str, Quantity]:
    totals = dict(left)
    for name, quantity in right.items():
        totals[name] = totals.get(name, ZERO) + quantity
    return totals


def same_resources(stored: Mapping[str, Any] | None, wanted: Mapping[str, Quantity]) -> bool:
    """Whether a PodGroup's `minResources` equals `wanted` by value (`quotav1.Equals`)."""
    if stored is None or set(stored) != set(wanted):
        return False
    try:
        return all(Quantity.parse(stored[k]).amount == q.amount for k, q in wanted.items())
    except InvalidQuantityError:
        return False


# --- PodGroups ------------------------------------------------------------------------------


def volcano_pod_group_name(parent: Object) -> str:
    """`ray-<name>-pg`; a RayJob's cluster uses its RayJob's name (one group for both)."""
    labels = _labels(parent)
    name = str(parent["metadata"]["name"])
    if labels.get(names.ORIGINATED_FROM_CRD_LABEL) == "RayJob":
        name = labels.get(names.ORIGINATED_FROM_CR_NAME_LABEL) or name
    return f"ray-{name}-pg"


def build_volcano_pod_group(owner: Object, gang: GangSize) -> JSON:
    """The Volcano PodGroup of a RayCluster or RayJob (KubeRay's `createPodGroup`): the owner's
    annotations, its queue and priority labels, its network topology labels."""
    labels = _labels(owner)
    spec: JSON = {"minMember": gang.min_member, "minResources": gang.resource_strings()}
    mode = labels.get(VOLCANO_NETWORK_TOPOLOGY_MODE_LABEL)
    if mode is not None:
        spec["networkTopology"] = {"mode": mode}
        tier = labels.get(VOLCANO_HIGHEST_TIER_LABEL)
        if tier is not None:
            spec["networkTopology"]["highestTierAllowed"] = _go_atoi(tier)
    if VOLCANO_QUEUE_LABEL in labels:
        spec["queue"] = labels[VOLCANO_QUEUE_LABEL]
    if PRIORITY_CLASS_LABEL in labels:
        spec["priorityClassName"] = labels[PRIORITY_CLASS_LABEL]
    return {
        "apiVersion": VOLCANO_POD_GROUP_API_VERSION,
        "kind": "PodGroup",
        "metadata": {
            "name": volcano_pod_group_name(owner),
            "namespace": owner["metadata"]["namespace"],
            "annotations": dict(owner["metadata"].get("annotations") or {}),
            "ownerReferences": [owner_reference(owner)],
        },
        "spec": spec,
        "status": {"phase": "Pending"},
    }


def build_scheduler_plugins_pod_group(cluster: Object) -> JSON:
    """scheduler-plugins' PodGroup, named like the RayCluster, sized for its desired Pods.

    KubeRay's ownerReference here is not a controller reference (no `controller`,
    `blockOwnerDeletion`); ours is the same, so the garbage collector treats both alike."""
    metadata = cluster["metadata"]
    gang = desired_gang(cluster.get("spec") or {})
    return {
        "apiVersion": SCHEDULER_PLUGINS_POD_GROUP_API_VERSION,
        "kind": "PodGroup",
        "metadata": {
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "ownerReferences": [
                {
                    "apiVersion": cluster.get("apiVersion", "ray.io/v1"),
                    "kind": cluster.get("kind", "RayCluster"),
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                }
            ],
        },
        "spec": {"minMember": gang.min_member, "minResources": gang.resource_strings()},
    }


def _go_atoi(text: str) -> int:
    """Go's `strconv.Atoi` on a label value (at most 63 characters), int32-bounded for the CRD."""
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit():
        raise InvalidSchedulingLabelError(
            f"label {VOLCANO_HIGHEST_TIER_LABEL}: {text!r} is not an integer"
        )
    value = int(text)
    if not -(2**31) <= value < 2**31:
        raise InvalidSchedulingLabelError(
            f"label {VOLCANO_HIGHEST_TIER_LABEL}: {text!r} is out of range"
        )
    return value


# --- metadata on children -------------------------------------------------------------------


def add_scheduling_metadata(
    scheduler: str, *, parent: Object, child: JSON, group_name: str, pod: bool = True
) -> JSON:
    """KubeRay's `AddMetadataToChildResource`: `child` (a Pod, a Pod template, or with
    `pod=False` a RayCluster a RayJob creates) gets the scheduler's labels and annotations from
    `parent`, and `schedulerName` when it is a Pod or template. In place; returns `child`."""
    if not scheduler:
        return child
    meta = child.setdefault("metadata", {})
    labels = meta.setdefault("labels", {})
    annotations = meta.setdefault("annotations", {})
    parent_labels = _labels(parent)
    if scheduler == VOLCANO:
        _copy_label(parent_labels, labels, VOLCANO_QUEUE_LABEL, VOLCANO_QUEUE_LABEL)
        _copy_label(parent_labels, labels, PRIORITY_CLASS_LABEL, PRIORITY_CLASS_LABEL)
        annotations[VOLCANO_GROUP_ANNOTATION] = volcano_pod_group_name(parent)
        annotations[VOLCANO_TASK_SPEC_ANNOTATION] = group_name
    elif scheduler == YUNIKORN:
        _copy_label(parent_labels, labels, YUNIKORN_APP_ID_LABEL, YUNIKORN_POD_APP_ID_LABEL)
        _copy_label(parent_labels, labels, YUNIKORN_QUEUE_LABEL, YUNIKORN_POD_QUEUE_LABEL)
        if is_gang_scheduled(parent):
            given = (parent["metadata"].get("annotations") or {}).get(
                YUNIKORN_TASK_GROUPS_ANNOTATION
            )
            annotations[YUNIKORN_TASK_GROUPS_ANNOTATION] = given or task_groups(parent)
            if group_name:
                annotations[YUNIKORN_TASK_GROUP_NAME_ANNOTATION] = group_name
    elif scheduler == SCHEDULER_PLUGINS:
        if is_gang_scheduled(parent):
            labels[SCHEDULER_PLUGINS_POD_GROUP_LABEL] = parent["metadata"]["name"]
    elif scheduler == KAI_SCHEDULER:
        _copy_label(parent_labels, labels, KAI_QUEUE_LABEL, KAI_QUEUE_LABEL)
    if pod:
        child.setdefault("spec", {})["schedulerName"] = POD_SCHEDULER_NAMES[scheduler]
    return child


def _copy_label(source: Mapping[str, str], target: dict[str, str], key: str, to: str) -> None:
    value = source.get(key)
    if value:
        target[to] = value


def _labels(obj: Object) -> Mapping[str, str]:
    return obj["metadata"].get("labels") or {}


# --- YuniKorn task groups -------------------------------------------------------------------


def task_groups(parent: Object) -> str:
    """The `yunikorn.apache.org/task-groups` annotation of a RayCluster or RayJob: the JSON
    Go's `json.Marshal` writes for KubeRay's task groups (head, each worker group, and a RayJob's
    submitter)."""
    spec = parent.get("spec") or {}
    if parent.get("kind") == "RayJob":
        groups = _cluster_task_groups(spec.get("rayClusterSpec") or {})
        groups.append(_task_group(SUBMITTER_GROUP, 1, submitter_pod_spec(parent)))
    else:
        groups = _cluster_task_groups(spec)
    return "[" + ",".join(groups) + "]"


def _cluster_task_groups(cluster_spec: Mapping[str, Any]) -> list[str]:
    """A RayJob on a selected cluster has no cluster spec: KubeRay dereferences nil there (a
    panic); here its task groups are the submitter's alone."""
    if not cluster_spec:
        return []
    cluster = _as_cluster(cluster_spec)
    groups = [_task_group(HEAD_GROUP, 1, pod_spec(head_group(cluster)))]
    for group in worker_groups(cluster):
        # KubeRay: minReplicas x numOfHosts, suspended or not.
        members = int(group.get("minReplicas") or 0) * int(group.get("numOfHosts") or 1)
        groups.append(_task_group(str(group.get("groupName", "")), members, pod_spec(group)))
    return groups


def _task_group(name: str, min_member: int, pod: Mapping[str, Any]) -> str:
    """One TaskGroup, fields in KubeRay's struct order, `omitempty` ones left out when empty."""
    resources = {key: str(value) for key, value in pod_spec_resources(pod).items()}
    parts = ['"minResource":' + marshal(resources, "map[string]Quantity").decode()]
    if pod.get("nodeSelector"):
        parts.append('"nodeSelector":' + marshal(pod["nodeSelector"], "map[string]string").decode())
    if pod.get("affinity") is not None:
        parts.append('"affinity":' + marshal(pod["affinity"], "*Affinity").decode())
    parts.append('"name":' + go_string(name))
    if pod.get("tolerations"):
        parts.append('"tolerations":' + marshal(pod["tolerations"], "[]Toleration").decode())
    parts.append(f'"minMember":{clamp_int32(min_member)}')
    return "{" + ",".join(parts) + "}"


def submitter_resources(rayjob: Object) -> dict[str, Quantity]:
    """What KubeRay's volcano plugin adds to a RayJob's PodGroup for its submitter: the
    submitter Pod's resources (K8sJobMode), the sidecar container's (SidecarMode), else none."""
    mode = (rayjob.get("spec") or {}).get("submissionMode") or "K8sJobMode"
    if mode not in ("K8sJobMode", "SidecarMode"):
        return {}
    return pod_spec_resources(submitter_pod_spec(rayjob, default_only=mode == "SidecarMode"))
