"""Specification: with `--batch-scheduler`, RayClusters and RayJobs get what KubeRay's scheduler
integration gives them on the real API server: Volcano and scheduler-plugins PodGroups (names,
sizes, queue, owner), Pods with the scheduler's name, labels and annotations, a RayJob's
RayCluster and submitter Job marked for its PodGroup, and a suspended RayJob's PodGroup shrunk
to nothing. Without the flag, none of it. A PodGroup CRD the API server lacks is told as a
Warning Event (tests/runtime/test_batch_scheduler_without_crd.py).

The PodGroup CRDs are minimal ones written for these tests (tests/fixtures/podgroup-crds/),
installed on this package's plane (no garbage collector) only.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from ray_operator.localcluster.controlplane import FAKE_NODE_NAME, LocalControlPlane

from tests.conftest import REPO_ROOT, Kubectl
from tests.controllers.batch_scheduling_fixtures import StartOperator, cluster, start_operator
from tests.controllers.conftest import Harness

__all__ = ["start_operator"]  # fixture, used by name

CRDS = REPO_ROOT / "tests" / "fixtures" / "podgroup-crds"
VOLCANO_PG = "podgroups.scheduling.volcano.sh"
PLUGINS_PG = "podgroups.scheduling.x-k8s.io"


@pytest.fixture(scope="module")
def podgroup_crds(control_plane: LocalControlPlane) -> None:
    kubectl = Kubectl(control_plane.kubeconfig)
    kubectl("apply", "--server-side", "-f", str(CRDS / "volcano.yaml"))
    kubectl("apply", "--server-side", "-f", str(CRDS / "scheduler-plugins.yaml"))
    for crd in (VOLCANO_PG, PLUGINS_PG):
        kubectl("wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")


def rayjob(name: str, *, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "entrypoint": "python -c 'print(1)'",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": cluster("unused")["spec"],
            **spec,
        },
    }


async def pod_group(harness: Harness, crd: str, name: str) -> dict[str, Any] | None:
    text = await harness.kubectl("get", crd, name, "-o", "json", "--ignore-not-found")
    return json.loads(text) if text.strip() else None


async def settled_pods(harness: Harness, name: str, count: int) -> list[dict[str, Any]]:
    async def check() -> list[dict[str, Any]] | None:
        pods = await harness.pods(name)
        return pods if len(pods) == count else None

    result: list[dict[str, Any]] = await harness.eventually(check, what=f"{count} Pods of {name}")
    return result


async def existing(harness: Harness, crd: str, name: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        return await pod_group(harness, crd, name)

    found: dict[str, Any] = await harness.eventually(check, what=f"{crd} {name}")
    return found


async def volcano_group_of(harness: Harness, name: str, *, members: int) -> dict[str, Any]:
    """The Volcano PodGroup `name` once its `minMember` is `members`."""

    async def check() -> dict[str, Any] | None:
        group = await pod_group(harness, VOLCANO_PG, name)
        return group if group and group["spec"]["minMember"] == members else None

    found: dict[str, Any] = await harness.eventually(
        check, within=90, what=f"PodGroup {name} of {members}"
    )
    return found


def by_group(pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {pod["metadata"]["labels"]["ray.io/group"]: pod for pod in pods}


# --- Volcano ----------------------------------------------------------------------------------


@pytest.mark.usefixtures("podgroup_crds")
async def test_volcano_gives_a_raycluster_its_podgroup_and_marks_its_pods(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator("volcano")
    labels = {"volcano.sh/queue-name": "kuberay-test-queue", "ray.io/priority-class-name": "high"}
    await harness.apply(cluster("gang", labels=labels))
    group = await existing(harness, VOLCANO_PG, "ray-gang-pg")
    owner = await harness.cluster("gang")
    assert group["spec"] == {
        "minMember": 3,
        "minResources": {"cpu": "3", "memory": "4Gi"},
        "queue": "kuberay-test-queue",
        "priorityClassName": "high",
    }
    assert group["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "name": "gang",
            "uid": owner["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    pods = by_group(await settled_pods(harness, "gang", 3))
    for group_name, pod in pods.items():
        assert pod["spec"]["schedulerName"] == "volcano"
        assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "ray-gang-pg"
        assert pod["metadata"]["annotations"]["volcano.sh/task-spec"] == group_name
        assert pod["metadata"]["labels"]["volcano.sh/queue-name"] == "kuberay-test-queue"
        assert pod["metadata"]["labels"]["ray.io/priority-class-name"] == "high"
    assert set(pods) == {"headgroup", "worker"}


@pytest.mark.usefixtures("podgroup_crds")
async def test_volcano_resizes_the_podgroup_when_the_cluster_grows(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator("volcano")
    await harness.apply(cluster("grows", replicas=1))
    await existing(harness, VOLCANO_PG, "ray-grows-pg")
    await harness.apply(cluster("grows", replicas=3))

    group = await volcano_group_of(harness, "ray-grows-pg", members=4)
    assert group["spec"]["minResources"] == {"cpu": "4", "memory": "5Gi"}


@pytest.mark.usefixtures("podgroup_crds")
async def test_volcano_sizes_a_rayjobs_podgroup_for_cluster_and_submitter(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator("volcano")
    await harness.apply(rayjob("sized", labels={"volcano.sh/queue-name": "q"}))
    group = await existing(harness, VOLCANO_PG, "ray-sized-pg")
    job = await harness.get_json("rayjob/sized")
    # The cluster's 3 Pods; the default submitter's requests (500m, 200Mi) on top.
    assert group["spec"] == {
        "minMember": 3,
        "minResources": {"cpu": "3500m", "memory": "4296Mi"},
        "queue": "q",
    }
    assert group["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]

    async def cluster_name() -> str | None:
        status = (await harness.get_json("rayjob/sized")).get("status") or {}
        return status.get("rayClusterName")

    name = await harness.eventually(cluster_name, what="the RayJob's cluster")
    made = await harness.eventually(lambda: harness.cluster(name), what="its RayCluster")
    assert made["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "ray-sized-pg"
    assert made["metadata"]["annotations"]["volcano.sh/task-spec"] == ""
    assert made["metadata"]["labels"]["volcano.sh/queue-name"] == "q"
    pods = await settled_pods(harness, name, 3)
    assert {p["metadata"]["annotations"]["scheduling.k8s.io/group-name"] for p in pods} == {
        "ray-sized-pg"
    }
    # One PodGroup for the RayJob and its cluster: none of the cluster's own.
    assert await pod_group(harness, VOLCANO_PG, f"ray-{name}-pg") is None


@pytest.mark.usefixtures("podgroup_crds")
async def test_volcano_marks_the_submitter_job_of_a_rayjob(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator("volcano")
    spec = cluster("unused", replicas=0)["spec"]
    await harness.apply(rayjob("submits", labels={}, rayClusterSpec=spec))

    async def head_pod() -> list[dict[str, Any]] | None:
        job = await harness.get_json("rayjob/submits")
        name = (job.get("status") or {}).get("rayClusterName")
        return (await harness.pods(name)) if name else None

    # No Volcano runs here: bind the head to the fake node as Volcano would, so the cluster
    # becomes ready and the RayJob goes on to its submitter.
    pod = (await harness.eventually(head_pod, what="the head Pod"))[0]
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod["metadata"]["name"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": FAKE_NODE_NAME},
    }
    await harness.kubectl("create", "-f", "-", input_text=json.dumps(binding))

    async def submitter() -> dict[str, Any] | None:
        text = await harness.kubectl("get", "job", "submits", "-o", "json", "--ignore-not-found")
        return json.loads(text) if text.strip() else None

    job = await harness.eventually(submitter, within=90, what="the submitter Job")
    template = job["spec"]["template"]
    assert template["spec"]["schedulerName"] == "volcano"
    assert template["metadata"]["annotations"] == {
        "scheduling.k8s.io/group-name": "ray-submits-pg",
        "volcano.sh/task-spec": "submittergroup",
    }


@pytest.mark.usefixtures("podgroup_crds")
async def test_a_suspended_rayjob_shrinks_its_volcano_podgroup_to_nothing(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator("volcano")
    await harness.apply(rayjob("pauses", labels={}))
    await existing(harness, VOLCANO_PG, "ray-pauses-pg")
    await harness.kubectl(
        "patch", "rayjob", "pauses", "--type=merge", "-p", '{"spec": {"suspend": true}}'
    )

    group = await volcano_group_of(harness, "ray-pauses-pg", members=0)
    assert group["spec"].get("minResources") in (None, {})
    events = await harness.get_json(
        "events", "--field-selector", "reason=BatchSchedulerCleanedUp,involvedObject.name=pauses"
    )
    assert events["items"]
    await harness.kubectl(
        "patch", "rayjob", "pauses", "--type=merge", "-p", '{"spec": {"suspend": false}}'
    )

    await volcano_group_of(harness, "ray-pauses-pg", members=3)


# --- the other schedulers ---------------------------------------------------------------------


@pytest.mark.usefixtures("podgroup_crds")
async def test_scheduler_plugins_gang_label_brings_a_podgroup_named_like_the_cluster(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator("scheduler-plugins")
    await harness.apply(cluster("plugged", labels={"ray.io/gang-scheduling-enabled": "true"}))
    group = await existing(harness, PLUGINS_PG, "plugged")
    owner = await harness.cluster("plugged")
    assert group["spec"] == {"minMember": 3, "minResources": {"cpu": "3", "memory": "4Gi"}}
    assert group["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "name": "plugged",
            "uid": owner["metadata"]["uid"],
        }
    ]
    for pod in await settled_pods(harness, "plugged", 3):
        assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "plugged"


@pytest.mark.usefixtures("podgroup_crds")
async def test_scheduler_plugins_without_the_gang_label_only_names_the_scheduler(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator("scheduler-plugins")
    await harness.apply(cluster("loose"))
    for pod in await settled_pods(harness, "loose", 3):
        assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        assert "scheduling.x-k8s.io/pod-group" not in pod["metadata"]["labels"]
    assert await pod_group(harness, PLUGINS_PG, "loose") is None


async def test_yunikorn_labels_pods_with_application_queue_and_task_groups(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator("yunikorn")
    labels = {
        "ray.io/gang-scheduling-enabled": "true",
        "yunikorn.apache.org/app-id": "test-yunikorn-0",
        "yunikorn.apache.org/queue": "root.test",
    }
    await harness.apply(cluster("yk", labels=labels))
    pods = by_group(await settled_pods(harness, "yk", 3))
    groups = [
        {"minResource": {"cpu": "1", "memory": "2Gi"}, "name": "headgroup", "minMember": 1},
        {"minResource": {"cpu": "1", "memory": "1Gi"}, "name": "worker", "minMember": 2},
    ]
    for group_name, pod in pods.items():
        meta = pod["metadata"]
        assert pod["spec"]["schedulerName"] == "yunikorn"
        assert meta["labels"]["applicationId"] == "test-yunikorn-0"
        assert meta["labels"]["queue"] == "root.test"
        assert json.loads(meta["annotations"]["yunikorn.apache.org/task-groups"]) == groups
        assert meta["annotations"]["yunikorn.apache.org/task-group-name"] == group_name


async def test_yunikorn_gives_a_rayjobs_pods_the_jobs_task_groups_submitter_included(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator("yunikorn")
    labels = {
        "ray.io/gang-scheduling-enabled": "true",
        "yunikorn.apache.org/app-id": "rayjob-yunikorn-0",
        "yunikorn.apache.org/queue": "root.test",
    }
    await harness.apply(rayjob("ykjob", labels=labels))

    async def cluster_name() -> str | None:
        status = (await harness.get_json("rayjob/ykjob")).get("status") or {}
        return status.get("rayClusterName")

    name = await harness.eventually(cluster_name, what="the RayJob's cluster")
    pods = by_group(await settled_pods(harness, name, 3))
    for group_name, pod in pods.items():
        meta = pod["metadata"]
        assert pod["spec"]["schedulerName"] == "yunikorn"
        assert meta["labels"]["applicationId"] == "rayjob-yunikorn-0"
        groups = json.loads(meta["annotations"]["yunikorn.apache.org/task-groups"])
        assert [group["name"] for group in groups] == ["headgroup", "worker", "submittergroup"]
        assert meta["annotations"]["yunikorn.apache.org/task-group-name"] == group_name


async def test_kai_scheduler_names_itself_and_passes_the_queue_on(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator("kai-scheduler")
    await harness.apply(cluster("kai", labels={"kai.scheduler/queue": "team-a"}))
    for pod in await settled_pods(harness, "kai", 3):
        assert pod["spec"]["schedulerName"] == "kai-scheduler"
        assert pod["metadata"]["labels"]["kai.scheduler/queue"] == "team-a"


async def test_kai_scheduler_refuses_a_k8s_job_mode_rayjob_with_a_warning(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator("kai-scheduler")
    await harness.apply(rayjob("kaijob", labels={"kai.scheduler/queue": "team-a"}))

    async def refused() -> list[Any] | None:
        events = await harness.get_json(
            "events", "--field-selector", "reason=BatchSchedulingRefused,involvedObject.name=kaijob"
        )
        return events["items"] or None

    [event] = await harness.eventually(refused, what="the refusal")
    assert "K8sJobMode" in event["message"]
    assert not (await harness.get_json("rayclusters"))["items"]


# --- without the flag ---------------------------------------------------------------------


@pytest.mark.usefixtures("podgroup_crds")
async def test_without_a_batch_scheduler_nothing_of_theirs_appears(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator("")
    labels = {"volcano.sh/queue-name": "q", "ray.io/gang-scheduling-enabled": "true"}
    await harness.apply(cluster("plain", labels=labels))
    for pod in await settled_pods(harness, "plain", 3):
        assert pod["spec"]["schedulerName"] == "default-scheduler"
        assert "scheduling.k8s.io/group-name" not in (pod["metadata"].get("annotations") or {})
    assert not (await harness.get_json(VOLCANO_PG))["items"]
    assert not (await harness.get_json(PLUGINS_PG))["items"]


@pytest.mark.usefixtures("podgroup_crds")
async def test_the_volcano_sample_gets_its_queued_podgroup(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator("volcano")
    await harness.kubectl(
        "apply", "--server-side", "-f", str(REPO_ROOT / "samples" / "ray-cluster.volcano.yaml")
    )
    group = await existing(harness, VOLCANO_PG, "ray-ray-gang-pg")
    assert group["spec"] == {
        "minMember": 3,
        "minResources": {"cpu": "3", "memory": "5Gi"},
        "queue": "ml-team",
    }
