"""Specification: the pure side of `--batch-scheduler` (builders/batch_scheduling.py): PodGroup
sizes and fields as KubeRay computes them, the metadata each scheduler puts on a Pod, YuniKorn's
task groups in the bytes Go writes, and Pods whose hash annotations are KubeRay's whatever the
scheduler."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from ray_operator.builders import batch_scheduling as batch
from ray_operator.builders.pods import PodOptions, build_head_pod, build_worker_pod


def cluster(**labels: str) -> dict[str, Any]:
    head = {"name": "ray-head", "resources": {"requests": {"cpu": "1", "memory": "2Gi"}}}
    worker = {
        "name": "ray-worker",
        "resources": {"limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u-1", "labels": labels},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [head]}}},
            "workerGroupSpecs": [
                {
                    "groupName": "gpu",
                    "replicas": 3,
                    "minReplicas": 1,
                    "maxReplicas": 5,
                    "numOfHosts": 2,
                    "rayStartParams": {},
                    "template": {"spec": {"containers": [worker]}},
                }
            ],
        },
    }


def test_volcano_asks_for_every_desired_pod_without_the_autoscaler() -> None:
    gang = batch.volcano_gang(cluster()["spec"])
    assert gang.min_member == 1 + 3 * 2
    assert gang.resource_strings() == {"cpu": "13", "memory": "8Gi", "nvidia.com/gpu": "6"}


def test_volcano_asks_for_the_minimum_with_the_autoscaler() -> None:
    spec = {**cluster()["spec"], "enableInTreeAutoscaling": True}
    gang = batch.volcano_gang(spec)
    assert gang.min_member == 1 + 1 * 2
    assert gang.resource_strings() == {"cpu": "5", "memory": "4Gi", "nvidia.com/gpu": "2"}


def test_a_suspended_group_counts_for_nothing() -> None:
    spec = copy.deepcopy(cluster()["spec"])
    spec["workerGroupSpecs"][0]["suspend"] = True
    assert batch.volcano_gang(spec).min_member == 1


def test_volcano_podgroup_carries_queue_priority_and_network_topology() -> None:
    owner = cluster(
        **{
            "volcano.sh/queue-name": "q",
            "ray.io/priority-class-name": "urgent",
            "volcano.sh/network-topology-mode": "hard",
            "volcano.sh/network-topology-highest-tier-allowed": "2",
        }
    )
    group = batch.build_volcano_pod_group(owner, batch.volcano_gang(owner["spec"]))
    assert group["metadata"]["name"] == "ray-c-pg"
    assert group["spec"]["queue"] == "q"
    assert group["spec"]["priorityClassName"] == "urgent"
    assert group["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 2}


def test_a_tier_that_is_no_integer_is_refused_with_the_label_named() -> None:
    owner = cluster(
        **{
            "volcano.sh/network-topology-mode": "soft",
            "volcano.sh/network-topology-highest-tier-allowed": "two",
        }
    )
    with pytest.raises(batch.InvalidSchedulingLabelError, match="highest-tier-allowed"):
        batch.build_volcano_pod_group(owner, batch.volcano_gang(owner["spec"]))


def test_a_rayjobs_cluster_shares_its_rayjobs_podgroup() -> None:
    owner = cluster(
        **{"ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "j"}
    )
    assert batch.volcano_pod_group_name(owner) == "ray-j-pg"


@pytest.mark.parametrize("scheduler", [*batch.BATCH_SCHEDULERS, ""])
def test_scheduler_metadata_leaves_the_pods_hash_annotations_alone(scheduler: str) -> None:
    options = PodOptions(batch_scheduler=scheduler)
    plain = build_head_pod(cluster(), suffix="x")
    marked = build_head_pod(cluster(), suffix="x", options=options)
    for key, value in plain["metadata"]["annotations"].items():
        assert marked["metadata"]["annotations"][key] == value
    expected = batch.POD_SCHEDULER_NAMES.get(scheduler)
    assert marked["spec"].get("schedulerName") == expected


def test_yunikorn_task_groups_are_the_bytes_go_writes() -> None:
    owner = cluster(**{"ray.io/gang-scheduling-enabled": "true"})
    worker_spec = owner["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    worker_spec["tolerations"] = [{"operator": "Exists", "key": "gpu", "effect": "NoSchedule"}]
    worker_spec["nodeSelector"] = {"pool": "gpu", "a": "b"}
    options = PodOptions(batch_scheduler="yunikorn")
    pod = build_worker_pod(owner, "gpu", suffix="x", replica_index=0, options=options)
    annotations = pod["metadata"]["annotations"]
    assert annotations["yunikorn.apache.org/task-group-name"] == "gpu"
    assert annotations["yunikorn.apache.org/task-groups"] == (
        '[{"minResource":{"cpu":"1","memory":"2Gi"},"name":"headgroup","minMember":1},'
        '{"minResource":{"cpu":"2","memory":"1Gi","nvidia.com/gpu":"1"},'
        '"nodeSelector":{"a":"b","pool":"gpu"},"name":"gpu",'
        '"tolerations":[{"key":"gpu","operator":"Exists","effect":"NoSchedule"}],"minMember":2}]'
    )


def test_yunikorn_keeps_task_groups_its_parent_already_carries() -> None:
    owner = cluster(**{"ray.io/gang-scheduling-enabled": "true"})
    owner["metadata"]["annotations"] = {"yunikorn.apache.org/task-groups": "[given]"}
    pod = batch.add_scheduling_metadata(
        "yunikorn", parent=owner, child={"metadata": {}}, group_name="headgroup"
    )
    assert pod["metadata"]["annotations"]["yunikorn.apache.org/task-groups"] == "[given]"


def test_a_rayjobs_task_groups_end_with_its_submitter() -> None:
    job = {
        "kind": "RayJob",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"rayClusterSpec": cluster()["spec"]},
    }
    groups = json.loads(batch.task_groups(job))
    assert [g["name"] for g in groups] == ["headgroup", "gpu", "submittergroup"]
    assert groups[-1]["minResource"] == {"cpu": "500m", "memory": "200Mi"}


def test_a_rayjob_on_a_selected_cluster_has_only_its_submitters_task_group() -> None:
    # KubeRay dereferences the missing cluster spec here (a panic).
    job = {"kind": "RayJob", "metadata": {"name": "j"}, "spec": {"clusterSelector": {"a": "b"}}}
    assert [g["name"] for g in json.loads(batch.task_groups(job))] == ["submittergroup"]


def test_a_rayjobs_cluster_gets_labels_and_annotations_but_no_scheduler_name() -> None:
    job = {"kind": "RayJob", "metadata": {"name": "j", "labels": {"volcano.sh/queue-name": "q"}}}
    made: dict[str, Any] = {"metadata": {}, "spec": {}}
    batch.add_scheduling_metadata("volcano", parent=job, child=made, group_name="", pod=False)
    assert made["spec"] == {}
    assert made["metadata"]["annotations"] == {
        "scheduling.k8s.io/group-name": "ray-j-pg",
        "volcano.sh/task-spec": "",
    }
    assert made["metadata"]["labels"] == {"volcano.sh/queue-name": "q"}


def test_submitter_resources_follow_the_submission_mode() -> None:
    job: dict[str, Any] = {"kind": "RayJob", "metadata": {"name": "j"}, "spec": {}}
    default = {"cpu": "500m", "memory": "200Mi"}
    for mode, expected in (("K8sJobMode", default), ("SidecarMode", default), ("HTTPMode", {})):
        job["spec"]["submissionMode"] = mode
        resources = batch.submitter_resources(job)
        assert {k: str(v) for k, v in resources.items()} == expected
