"""Specification: Kueue drives ray.io objects as it drives KubeRay's, by `spec.suspend` and
`spec.managedBy` (there is no Kueue here; the tests do what Kueue does). A RayJob labelled with a
Kueue queue and created suspended creates nothing until admitted (`suspend: false`), then runs;
a running RayJob that Kueue suspends (preemption) gives its Pods back; a RayJob or RayCluster
that MultiKueue manages (`managedBy: kueue.x-k8s.io/multikueue`) is left alone, as KubeRay
leaves it, for the worker cluster's operator to run.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.conftest import REPO_ROOT
from tests.controllers.batch_scheduling_fixtures import StartOperator, cluster, start_operator
from tests.controllers.conftest import Harness

__all__ = ["start_operator"]  # fixture, used by name

QUEUE_LABEL = {"kueue.x-k8s.io/queue-name": "user-queue"}
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
SAMPLE = REPO_ROOT / "samples" / "ray-job.kueue.yaml"


def queued_rayjob(name: str, **spec: Any) -> dict[str, Any]:
    """KubeRay's Kueue sample in short: a job that gives its cluster back when done."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "labels": dict(QUEUE_LABEL)},
        "spec": {
            "entrypoint": "python -c 'import time; time.sleep(600)'",
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 10,
            "rayClusterSpec": cluster("unused", replicas=1)["spec"],
            **spec,
        },
    }


async def state_of(harness: Harness, name: str) -> str | None:
    status = (await harness.get_json(f"rayjob/{name}")).get("status") or {}
    return status.get("jobDeploymentStatus")


async def reaches(harness: Harness, name: str, state: str) -> None:
    async def check() -> bool:
        return await state_of(harness, name) == state

    await harness.eventually(check, within=90, what=f"RayJob {name} {state}")


async def nothing_made(harness: Harness) -> bool:
    for kind in ("rayclusters", "jobs", "pods"):
        if (await harness.get_json(kind))["items"]:
            return False
    return True


async def test_the_queued_sample_creates_nothing_until_admitted_then_runs(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator("")
    await harness.kubectl("apply", "--server-side", "-f", str(SAMPLE))
    await reaches(harness, "ray-job-queued", "Suspended")
    assert await nothing_made(harness)
    await harness.kubectl(
        "patch", "rayjob", "ray-job-queued", "--type=merge", "-p", '{"spec": {"suspend": false}}'
    )
    await reaches(harness, "ray-job-queued", "Running")
    status = (await harness.get_json("rayjob/ray-job-queued"))["status"]
    assert len(await harness.pods(status["rayClusterName"])) == 2
    assert (await harness.get_json("job/ray-job-queued"))["metadata"]["name"] == "ray-job-queued"


async def test_a_running_rayjob_suspended_by_kueue_gives_its_pods_back(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator("")
    await harness.apply(queued_rayjob("preempted"))
    await reaches(harness, "preempted", "Running")
    await harness.kubectl(
        "patch", "rayjob", "preempted", "--type=merge", "-p", '{"spec": {"suspend": true}}'
    )
    await reaches(harness, "preempted", "Suspended")
    assert await harness.eventually(lambda: nothing_made(harness), what="everything given back")


async def test_a_rayjob_managed_by_multikueue_is_left_alone(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator("")
    await harness.apply(queued_rayjob("remote", managedBy=MULTIKUEUE))
    # Another RayJob after it, run as usual: once it has its cluster, the first one was seen.
    # (Its state is not waited for: Initializing may pass between two polls.)
    await harness.apply(queued_rayjob("local"))

    async def local_has_its_cluster() -> bool:
        status = (await harness.get_json("rayjob/local")).get("status") or {}
        return bool(status.get("rayClusterName"))

    await harness.eventually(local_has_its_cluster, within=90, what="RayJob local's cluster")
    remote = await harness.get_json("rayjob/remote")
    assert "status" not in remote
    assert "finalizers" not in remote["metadata"]
    names = [c["metadata"]["name"] for c in (await harness.get_json("rayclusters"))["items"]]
    assert all(name.startswith("local-") for name in names)


async def test_a_raycluster_managed_by_multikueue_is_left_alone(
    harness: Harness, start_operator: StartOperator
) -> None:
    await start_operator("")
    remote = copy.deepcopy(cluster("remote"))
    remote["spec"]["managedBy"] = MULTIKUEUE
    await harness.apply(remote)
    await harness.apply(cluster("local", replicas=0))
    await harness.eventually(lambda: harness.pods("local"), what="the local cluster's head")
    assert not await harness.pods("remote")
    assert "status" not in await harness.cluster("remote")
    services = (await harness.get_json("services", "-l", "ray.io/cluster=remote"))["items"]
    assert not services
