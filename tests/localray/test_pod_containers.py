"""A Ray node Pod's containers besides the Ray one, as a kubelet runs them: its init containers
of a Ray image first, in order, each to completion in the Pod's own view (so what one writes to an
emptyDir is what the Ray node reads), and one that fails holds the Ray node back and runs again
after the restart backoff; a SidecarMode RayJob's submitter beside the head, its loopback pointed
at the head's ports, its end written into the Pod's status (against a real API server: the
RayJob controller reads it there)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ray_operator.builders.pods import build_head_pod
from ray_operator.localray.agent import LocalRayRegistry
from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.store import Store
from ray_operator.spec.kinds import POD, RAY_CLUSTER

from tests.builders.clusters import raycluster
from tests.localray.agents import (
    RecordedEvents,
    agent_without_ray,
    running_head_pod,
    sync_until,
)

PROGRAMS = Path(__file__).parent / "programs"


def _head_pod_with_init(script: str) -> tuple[Store, LocalRayRegistry, dict[str, Any]]:
    """The operator's head Pod whose init container (of the Ray image) runs `script` with an
    emptyDir at /etc/made that the Ray container mounts too."""
    cluster = raycluster()
    store = Store()
    store.upsert(RAY_CLUSTER, cluster)
    pod = running_head_pod(cluster)
    spec = pod["spec"]
    ray = spec["containers"][0]
    made = {"name": "made", "mountPath": "/etc/made"}
    ray.setdefault("volumeMounts", []).append(made)
    spec.setdefault("volumes", []).append({"name": "made", "emptyDir": {}})
    spec["initContainers"] = [
        {
            "name": "make-it",
            "image": ray["image"],
            "command": ["/bin/sh", "-c", script],
            "env": [{"name": "MADE_BY", "value": "the-init-container"}],
            "volumeMounts": [made],
        }
    ]
    registry = LocalRayRegistry()
    registry.created.record("Pod", pod)
    return store, registry, pod


def _read(path: Path | None) -> str:
    return path.read_text() if path is not None and path.exists() else ""


async def test_an_init_container_fills_an_empty_dir_before_the_ray_node_starts(
    tmp_path: Path,
) -> None:
    store, registry, pod = _head_pod_with_init(
        "echo init-ran; echo made-by-$MADE_BY > /etc/made/it"
    )
    events = RecordedEvents()
    ray = PROGRAMS / "ray-that-tells-what-init-made"
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    async with agent_without_ray(
        tmp_path, store=store, registry=registry, events=events, ray=ray
    ) as agent:

        def told() -> bool:
            found = agent.container(namespace, name, None)
            return found is not None and "END-OF-FILE" in _read(found.log_path)

        await sync_until(agent, pod, told)
        ray_node = agent.container(namespace, name, None)
        init = agent.container(namespace, name, "make-it")
        assert ray_node is not None
        assert init is not None
        assert "made-by-the-init-container" in _read(ray_node.log_path).splitlines()
        assert _read(init.log_path) == "init-ran\n"  # `kubectl logs -c make-it`
        assert not init.running

    assert "LocalRayStarted" in events.reasons()
    assert "LocalRayInitContainerFailed" not in events.reasons()


async def test_a_failing_init_container_holds_the_ray_node_back_and_runs_again_after_a_backoff(
    tmp_path: Path,
) -> None:
    store, registry, pod = _head_pod_with_init("echo no-certificate-made; exit 3")
    events = RecordedEvents()
    async with agent_without_ray(
        tmp_path, store=store, registry=registry, events=events, restart_backoff=0.2
    ) as agent:
        await sync_until(
            agent, pod, lambda: events.reasons().count("LocalRayInitContainerFailed") >= 2
        )

    assert "LocalRayStarted" not in events.reasons()
    failures = [m for reason, m in events.recorded if reason == "LocalRayInitContainerFailed"]
    assert "init container make-it ended with exit code 3" in failures[0]
    assert "again in 0.2s (restart 1)" in failures[0]
    assert "again in 0.4s (restart 2)" in failures[1]  # the backoff doubles
    assert failures[0].endswith("no-certificate-made")  # its last lines


async def test_an_init_container_of_a_pod_that_never_restarts_fails_it_once(
    tmp_path: Path,
) -> None:
    store, registry, pod = _head_pod_with_init("exit 1")
    pod["spec"]["restartPolicy"] = "Never"
    events = RecordedEvents()
    async with agent_without_ray(
        tmp_path, store=store, registry=registry, events=events, restart_backoff=0.01
    ) as agent:
        await sync_until(agent, pod, lambda: "LocalRayInitContainerFailed" in events.reasons())
        for _ in range(10):
            await agent.sync([pod])
            await asyncio.sleep(0.05)

    assert events.reasons() == ["LocalRayInitContainerFailed"]
    assert "the Pod fails, as a kubelet fails it (restartPolicy Never)" in events.recorded[0][1]


async def test_a_sidecar_mode_submitter_runs_beside_its_head_and_its_exit_code_is_written(
    tmp_path: Path, namespace: str, observed_client: KubeClient
) -> None:
    client = observed_client
    manifest = raycluster(namespace=namespace)
    del manifest["metadata"]["uid"]
    cluster = await client.create(RAY_CLUSTER, manifest)
    pod = build_head_pod(cluster, suffix="abcde")
    ray = pod["spec"]["containers"][0]
    submit = "echo submitting to http://127.0.0.1:8265; exit 3"
    sidecar = {"name": "ray-job-submitter", "image": ray["image"], "command": ["/bin/sh", "-c"]}
    pod["spec"]["containers"].append({**sidecar, "args": [submit]})
    pod["spec"]["nodeName"] = "no-kubelet-here"  # its status is the test's and the agent's
    created = await client.create(POD, pod)
    running = {"running": {"startedAt": "2026-11-28T00:00:00Z"}}
    statuses = [
        {"name": c["name"], "image": c["image"], "imageID": "", "ready": False}
        | {"restartCount": 0, "state": running}
        for c in pod["spec"]["containers"]
    ]
    name = created["metadata"]["name"]
    status = {"phase": "Running", "podIP": "10.244.0.9", "containerStatuses": statuses}
    await client.patch_status(POD, name, {"status": status}, namespace=namespace)
    store = Store()
    store.upsert(RAY_CLUSTER, cluster)
    registry = LocalRayRegistry()
    registry.created.record("Pod", created)
    head = PROGRAMS / "ray-that-listens-as-a-head"
    async with agent_without_ray(
        tmp_path, store=store, registry=registry, events=RecordedEvents(), client=client, ray=head
    ) as agent:
        for _ in range(300):
            seen = await client.get(POD, name, namespace=namespace)
            await agent.sync([seen])
            ended = _state(seen, "ray-job-submitter").get("terminated")
            if ended:
                break
            await asyncio.sleep(0.05)
        submitter = agent.container(namespace, name, "ray-job-submitter")
        local = registry.get(namespace, cluster["metadata"]["name"])
        assert submitter is not None
        assert local is not None
        said = _read(submitter.log_path)

    assert ended is not None
    assert (ended["exitCode"], ended["reason"]) == (3, "Error")
    assert "running" in _state(seen, ray["name"])  # the head runs on
    # Its loopback is the head's in a cluster: the Pod's dashboard port, pointed at the local one.
    assert said == f"submitting to {local.dashboard_url}\n"


def _state(pod: Any, container: str) -> dict[str, Any]:
    for entry in (pod.get("status") or {}).get("containerStatuses") or ():
        if entry["name"] == container:
            return dict(entry["state"])
    return {}
