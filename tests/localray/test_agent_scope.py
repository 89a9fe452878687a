"""Specification: the local Ray agent runs only what the operator created (issue 28, finding 4).

A Pod on the fake node becomes a process on this machine only when the operator created it for
the RayCluster it names, or when it is a Pod of a submitter Job the operator created for its
RayJob and runs exactly that Job's template. Labels, owner references and the node name are
anyone's to write; the uid the API server gave an object the operator created is not.
`ray-operator dev` runs the agent on the control plane it started itself, and against any other
cluster only when asked (`local_ray_wanted`).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from ray_operator.localray.agent import LocalRayRegistry
from ray_operator.localray.scope import (
    FORGET_AFTER_SECONDS,
    CreatedObjects,
    external_cluster_warning,
    local_ray_wanted,
)
from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.store import Store
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.kinds import JOB, RAY_CLUSTER, RAY_JOB

from tests.builders.clusters import raycluster
from tests.conftest import Kubectl
from tests.localray.agents import RecordedEvents, agent_without_ray, running_head_pod

NOT_RUN = "LocalRayNotRun"
START_FAILED = "LocalRayStartFailed"  # the agent tried: its `ray` does not exist in these tests


# --- when `ray-operator dev` runs the agent ----------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "embedded", "runs"),
    [
        (None, True, True),  # make run: the plane it started itself
        (None, False, False),  # KUBECONFIG names another cluster: off unless asked
        (True, False, True),  # --local-ray: asked (and warned)
        (False, True, False),  # --no-local-ray
    ],
)
def test_the_agent_runs_on_the_embedded_plane_and_elsewhere_only_when_asked(
    requested: bool | None, embedded: bool, runs: bool
) -> None:
    assert local_ray_wanted(requested, embedded_control_plane=embedded) is runs


def test_the_warning_says_what_runs_where_and_as_whom() -> None:
    warning = external_cluster_warning(
        kubeconfig="/home/dev/.kube/config", node_name="kwok-node-0", namespaces=["team-a"]
    )
    for part in ("/home/dev/.kube/config", "kwok-node-0", "team-a", "as your user", "--no-local"):
        assert part in warning


# --- head and worker Pods ----------------------------------------------------------------------


async def sync_three_times(
    tmp_path: Path, pod: dict[str, Any], *, registry: LocalRayRegistry, store: Store
) -> RecordedEvents:
    events = RecordedEvents()
    async with agent_without_ray(tmp_path, store=store, registry=registry, events=events) as agent:
        for _ in range(3):
            await agent.sync([pod])
    return events


def store_with(*objects: tuple[Any, dict[str, Any]]) -> Store:
    store = Store()
    for kind, obj in objects:
        store.upsert(kind, obj)
    return store


async def test_a_head_pod_the_operator_did_not_create_never_becomes_a_process(
    tmp_path: Path,
) -> None:
    # Everything a tenant can write: the node, the labels, a controller reference to the cluster.
    cluster = raycluster()
    forged = running_head_pod(cluster, uid="forged")
    registry = LocalRayRegistry()

    events = await sync_three_times(
        tmp_path, forged, registry=registry, store=store_with((RAY_CLUSTER, cluster))
    )

    assert events.reasons() == [NOT_RUN]  # told once, never tried
    assert "did not create this Pod for RayCluster demo" in events.recorded[0][1]
    assert registry.get("ns1", "demo") is None


async def test_the_operators_own_head_pod_is_run(tmp_path: Path) -> None:
    cluster = raycluster()
    pod = running_head_pod(cluster)
    registry = LocalRayRegistry()
    registry.created.record("Pod", pod)

    events = await sync_three_times(
        tmp_path, pod, registry=registry, store=store_with((RAY_CLUSTER, cluster))
    )

    assert events.reasons() == [START_FAILED]


async def test_a_pod_the_operator_created_for_another_cluster_is_not_run_for_this_one(
    tmp_path: Path,
) -> None:
    # Labels are mutable: a Pod relabelled to another cluster keeps what it was created for.
    cluster = raycluster()
    pod = running_head_pod(cluster)
    registry = LocalRayRegistry()
    registry.created.record("Pod", pod)
    other = raycluster("other")
    other["metadata"]["uid"] = "uid-other"
    pod["metadata"]["labels"][names.CLUSTER_LABEL] = "other"

    events = await sync_three_times(
        tmp_path, pod, registry=registry, store=store_with((RAY_CLUSTER, other))
    )

    assert events.reasons() == [NOT_RUN]


# --- RayJob submitter Pods (against a real API server: the agent reads the Job) ----------------


def submitter_job(rayjob: dict[str, Any]) -> dict[str, Any]:
    """A suspended submitter Job as the RayJob controller makes it (suspended: no real Pods)."""
    metadata = rayjob["metadata"]
    labels = {
        names.ORIGINATED_FROM_CRD_LABEL: "RayJob",
        names.ORIGINATED_FROM_CR_NAME_LABEL: metadata["name"],
    }
    container = {
        "name": "ray-job-submitter",
        "image": "rayproject/ray:2.52.0",
        "command": ["ray", "job", "submit", "--address", "http://head-svc:8265", "--", "true"],
        "env": [{"name": "RAY_DASHBOARD_ADDRESS", "value": "http://head-svc:8265"}],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": metadata["name"],
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "ray.io/v1",
                    "kind": "RayJob",
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "suspend": True,
            "template": {
                "metadata": {"labels": labels},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            },
        },
    }


def pod_of(job: dict[str, Any], *, uid: str) -> dict[str, Any]:
    """The Pod the Job controller would make of `job`, bound to the fake node and Running."""
    spec = copy.deepcopy(job["spec"]["template"]["spec"])
    spec["nodeName"] = "kwok-node-0"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job['metadata']['name']}-x1y2z",
            "namespace": job["metadata"]["namespace"],
            "uid": uid,
            "labels": dict(job["spec"]["template"]["metadata"]["labels"]),
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job["metadata"]["name"],
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": spec,
        "status": {"phase": "Running"},
    }


def a_rayjob(kubectl: Kubectl, namespace: str, name: str) -> dict[str, Any]:
    """A real RayJob (no operator runs here: it stays as written), for its uid."""
    manifest = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"entrypoint": "true", "rayClusterSpec": raycluster()["spec"]},
    }
    kubectl("apply", "-f", "-", input_text=json.dumps(manifest))
    created: dict[str, Any] = json.loads(
        kubectl("get", "rayjob", name, "-n", namespace, "-o", "json")
    )
    return created


async def submitter_verdicts(
    tmp_path: Path, pods: list[dict[str, Any]], *, registry: LocalRayRegistry, store: Store,
    client: KubeClient,
) -> dict[str, list[str]]:  # fmt: skip
    """The reasons of the Events each Pod got over three passes of the agent."""
    events_by_pod: dict[str, list[str]] = {}
    for pod in pods:
        events = RecordedEvents()
        async with agent_without_ray(
            tmp_path, store=store, registry=registry, events=events, client=client
        ) as agent:
            for _ in range(3):
                await agent.sync([pod])
        events_by_pod[pod["metadata"]["uid"]] = events.reasons()
    return events_by_pod


async def test_only_pods_of_the_operators_submitter_jobs_holding_their_template_may_run(
    tmp_path: Path, kubectl: Kubectl, namespace: str, observed_client: KubeClient
) -> None:
    registry = LocalRayRegistry()
    rayjob = a_rayjob(kubectl, namespace, "job")
    operators = observed_client.with_create_observer(registry.created.record)
    job = await operators.create(JOB, submitter_job(rayjob), namespace=namespace)
    # A Job of the same shape that someone else created (the operator never recorded it).
    others = submitter_job(a_rayjob(kubectl, namespace, "other"))
    other_job = await observed_client.create(JOB, others, namespace=namespace)
    legit = pod_of(job, uid="legit")
    changed = pod_of(job, uid="changed-command")
    changed["spec"]["containers"][0]["command"] = ["sh", "-c", "touch /tmp/owned"]
    stranger = pod_of(other_job, uid="someone-elses-job")
    stranger["metadata"]["labels"] = dict(legit["metadata"]["labels"])  # claims to be "job"'s

    verdicts = await submitter_verdicts(
        tmp_path,
        [legit, changed, stranger],
        registry=registry,
        store=store_with((RAY_JOB, rayjob)),
        client=observed_client,
    )

    # The operator's own waits for its local cluster (none here): no verdict against it.
    assert verdicts == {"legit": [], "changed-command": [NOT_RUN], "someone-elses-job": [NOT_RUN]}


async def test_a_dry_run_create_is_not_recorded(
    kubectl: Kubectl, namespace: str, observed_client: KubeClient
) -> None:
    created = CreatedObjects()
    client = observed_client.with_create_observer(created.record)
    job = submitter_job(a_rayjob(kubectl, namespace, "dry"))
    await client.create(JOB, job, namespace=namespace, dry_run=True)
    assert len(created) == 0


# --- the record --------------------------------------------------------------------------------


def test_the_record_survives_a_restart_of_dev(tmp_path: Path) -> None:
    cluster = raycluster()
    CreatedObjects(tmp_path / "created.json").record("Pod", running_head_pod(cluster))
    assert CreatedObjects(tmp_path / "created.json").owner_of("Pod", "head-uid") == "uid-1"


def test_the_record_keeps_pods_and_jobs_only() -> None:
    created = CreatedObjects()
    created.record("Service", {"metadata": {"uid": "svc"}})
    created.record("Pod", {"metadata": {}})  # no uid: nothing to trust
    assert len(created) == 0


def test_the_record_forgets_what_is_long_gone_from_the_cache() -> None:
    now = [1000.0]
    created = CreatedObjects(clock=lambda: now[0])
    created.record("Pod", running_head_pod(raycluster(), uid="gone"))
    created.record("Pod", running_head_pod(raycluster(), uid="kept"))
    created.forget_missing({"kept"})
    assert created.owner_of("Pod", "gone") == "uid-1"  # the cache may not have seen it yet
    now[0] += FORGET_AFTER_SECONDS + 1
    created.forget_missing({"kept"})
    assert created.owner_of("Pod", "gone") is None
    assert created.owner_of("Pod", "kept") == "uid-1"
