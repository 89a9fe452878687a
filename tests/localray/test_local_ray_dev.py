"""`ray-operator dev` with its local Ray agent: real Ray behind the fake kubelet.

One `ray-operator dev` (its own control plane, with the controller-manager, and the agent) serves
the module. RayJobs in both submission modes reach SUCCEEDED on real Ray processes, the RayService
sample answers through its local Serve proxy, a two-group cluster shows its shape in the Ray
dashboard, a Pod over the cluster cap is told so, and every deletion ends its processes and
frees its ports. One test stops a run of its own and finds nothing left behind; that run starts
with the module, so its control plane comes up while the other tests wait on Ray.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import textwrap
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from ray_operator.localray.plan import cluster_address

from tests.conftest import SAMPLES, Kubectl
from tests.localray.dev_operator import (
    DevOperator,
    events_of,
    get_json,
    get_text,
    head_pod,
    local_head_addresses,
    processes_on,
    ray_nodes_ray,
    wait_for_event,
    watch_object,
)
from tests.runtime.processes import wait_until

pytestmark = pytest.mark.timeout(600)

MAX_CLUSTERS = 2
READY_CONDITION = '{.status.conditions[?(@.type=="Ready")].status}'


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevOperator]:
    operator = DevOperator(
        tmp_path_factory.mktemp("local-ray") / "dev",
        f"--local-ray-max-clusters={MAX_CLUSTERS}",
        "--local-ray-max-nodes=6",
    )
    try:
        operator.wait_ready()
        yield operator
    finally:
        operator.stop()


@pytest.fixture(scope="module", autouse=True)
def dev_to_stop(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevOperator]:
    """The run `test_stopping_dev_ends_every_local_ray_process` stops, started with the module:
    its control plane comes up while the other tests wait on Ray (stopped here if that test did
    not stop it)."""
    operator = DevOperator(tmp_path_factory.mktemp("stopped-dev") / "dev")
    try:
        yield operator
    finally:
        operator.stop()


@pytest.fixture
def kubectl(dev: DevOperator) -> Kubectl:
    return dev.kubectl


@pytest.fixture
def namespace(kubectl: Kubectl, request: pytest.FixtureRequest) -> str:
    name = request.node.name.lower().replace("_", "-")[:50].strip("-")
    kubectl("create", "namespace", name)
    return name


def apply(kubectl: Kubectl, namespace: str, manifest: str) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input_text=textwrap.dedent(manifest))


def field(kubectl: Kubectl, namespace: str, kind_name: str, path: str) -> str:
    return kubectl("get", "-n", namespace, kind_name, "-o", f"jsonpath={path}")


def wait_for_job(kubectl: Kubectl, namespace: str, name: str) -> None:
    def finished(job: dict[str, Any]) -> bool:
        status = job_status(job)
        if "Failed" in status or "FAILED" in status:
            pytest.fail(kubectl("get", "-n", namespace, f"rayjob/{name}", "-o", "yaml"))
        return status == "SUCCEEDED/Complete"

    watch_object(
        kubectl,
        namespace,
        f"rayjob/{name}",
        until=finished,
        timeout=240,
        what=f"RayJob {name} SUCCEEDED/Complete",
    )


def job_status(job: dict[str, Any]) -> str:
    """`jobStatus/jobDeploymentStatus` ("/" before the first status)."""
    status = job.get("status", {})
    return f"{status.get('jobStatus', '')}/{status.get('jobDeploymentStatus', '')}"


def condition_status(obj: dict[str, Any], condition: str) -> str:
    """The status of the object's condition of that type ("" without one)."""
    conditions = obj.get("status", {}).get("conditions", [])
    return "".join(str(c.get("status", "")) for c in conditions if c.get("type") == condition)


def uid_of(kubectl: Kubectl, namespace: str, kind_name: str) -> str:
    return field(kubectl, namespace, kind_name, "{.metadata.uid}")


def answers(url: str) -> bool:
    try:
        get_text(f"{url}/api/version", timeout=2)
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class LocalHead:
    """Where a cluster's local head listens: its URLs (from its Event) and its node address."""

    dashboard: str
    serve: str
    address: str


def local_head(kubectl: Kubectl, namespace: str, cluster: str) -> LocalHead:
    dashboard, serve = local_head_addresses(kubectl, namespace, cluster)
    address = cluster_address(uid_of(kubectl, namespace, f"raycluster/{cluster}"))
    return LocalHead(dashboard=dashboard, serve=serve, address=address)


def delete_and_expect_freed(
    kubectl: Kubectl, namespace: str, kind_name: str, head: LocalHead
) -> None:
    """Delete the object; then no process of its cluster is left, and the dashboard port takes
    no connection."""
    kubectl("delete", "-n", namespace, kind_name, "--wait=true", "--timeout=120s")
    wait_until(
        lambda: not processes_on(head.address),
        timeout=60,
        interval=0.2,
        what=f"the processes on {head.address} to end",
    )
    port = urllib.parse.urlsplit(head.dashboard).port
    assert port is not None
    with socket.socket() as probe:
        probe.settimeout(2)
        assert probe.connect_ex((head.address, port)) != 0, f"{head.dashboard} still answers"


def test_an_http_mode_ray_job_succeeds_on_the_ray_nodes_python_and_its_deletion_frees_its_processes(
    kubectl: Kubectl, namespace: str
) -> None:
    apply(
        kubectl,
        namespace,
        """
        apiVersion: ray.io/v1
        kind: RayJob
        metadata: {name: http-job}
        spec:
          submissionMode: HTTPMode
          entrypoint: >-
            python -c "import os, sys, ray; ray.init();
            print('cpus', ray.cluster_resources()['CPU']);
            print('python', os.path.realpath(sys.prefix))"
          rayClusterSpec:
            headGroupSpec:
              rayStartParams: {num-cpus: "1"}
              template:
                spec:
                  containers: [{name: ray-head, image: rayproject/ray:2.52.0}]
            workerGroupSpecs:
              - groupName: workers
                replicas: 1
                rayStartParams: {num-cpus: "1"}
                template:
                  spec:
                    containers: [{name: ray-worker, image: rayproject/ray:2.52.0}]
        """,
    )
    wait_for_job(kubectl, namespace, "http-job")
    cluster = field(kubectl, namespace, "rayjob/http-job", "{.status.rayClusterName}")
    head = local_head(kubectl, namespace, cluster)
    job_id = field(kubectl, namespace, "rayjob/http-job", "{.status.jobId}")
    logs = get_text(f"{head.dashboard}/api/jobs/{job_id}/logs")
    assert "cpus 2.0" in logs
    # The `ray` the nodes run (as make test sets it: a Python a Ray image ships) also runs the
    # entrypoint, not the operator's own Python.
    assert f"python {ray_nodes_ray().parent.parent.resolve()}" in logs

    delete_and_expect_freed(kubectl, namespace, "rayjob/http-job", head)


def test_rays_autoscaler_adds_a_worker_for_real_demand(kubectl: Kubectl, namespace: str) -> None:
    apply(
        kubectl,
        namespace,
        """
        apiVersion: ray.io/v1
        kind: RayJob
        metadata: {name: needs-a-worker}
        spec:
          submissionMode: HTTPMode
          entrypoint: >-
            python -c "import ray; ray.init();
            print(ray.get(ray.remote(num_cpus=1)(lambda: 'ran on a new worker').remote()))"
          rayClusterSpec:
            enableInTreeAutoscaling: true
            autoscalerOptions: {idleTimeoutSeconds: 600}
            headGroupSpec:
              rayStartParams: {num-cpus: "0"}
              template:
                spec:
                  containers: [{name: ray-head, image: rayproject/ray:2.52.0}]
            workerGroupSpecs:
              - groupName: on-demand
                replicas: 0
                minReplicas: 0
                maxReplicas: 2
                rayStartParams: {num-cpus: "1"}
                template:
                  spec:
                    containers: [{name: ray-worker, image: rayproject/ray:2.52.0}]
        """,
    )
    wait_for_job(kubectl, namespace, "needs-a-worker")
    cluster = field(kubectl, namespace, "rayjob/needs-a-worker", "{.status.rayClusterName}")
    replicas = field(
        kubectl, namespace, f"raycluster/{cluster}", "{.spec.workerGroupSpecs[0].replicas}"
    )
    assert replicas == "1"
    head = local_head(kubectl, namespace, cluster)
    job_id = field(kubectl, namespace, "rayjob/needs-a-worker", "{.status.jobId}")
    assert "ran on a new worker" in get_text(f"{head.dashboard}/api/jobs/{job_id}/logs")

    delete_and_expect_freed(kubectl, namespace, "rayjob/needs-a-worker", head)


def test_the_ray_job_sample_succeeds_through_its_submitter_pod(
    dev: DevOperator, kubectl: Kubectl, namespace: str
) -> None:
    kubectl("apply", "-n", namespace, "-f", str(SAMPLES / "ray-job.sample.yaml"))
    wait_for_job(kubectl, namespace, "ray-job-sample")

    submitter = kubectl(
        "get", "pods", "-n", namespace, "-l", "job-name=ray-job-sample",
        "-o", "jsonpath={.items[0].metadata.name}",
    )  # fmt: skip
    assert field(kubectl, namespace, f"pod/{submitter}", "{.status.phase}") == "Succeeded"
    output = dev.directory / "local-ray" / "logs" / f"{namespace}_{submitter}.log"
    assert "17984 primes below 200000" in output.read_text()
    assert events_of(kubectl, namespace, submitter, "LocalRayStarted")

    cluster = field(kubectl, namespace, "rayjob/ray-job-sample", "{.status.rayClusterName}")
    head = local_head(kubectl, namespace, cluster)
    delete_and_expect_freed(kubectl, namespace, "rayjob/ray-job-sample", head)


def test_the_ray_service_sample_answers_on_its_local_serve_url(
    kubectl: Kubectl, namespace: str
) -> None:
    kubectl("apply", "-n", namespace, "-f", str(SAMPLES / "ray-service.sample.yaml"))
    watch_object(
        kubectl,
        namespace,
        "rayservice/ray-service-sample",
        until=lambda service: condition_status(service, "Ready") == "True",
        timeout=240,
        what="the RayService to be Ready",
    )
    cluster = field(
        kubectl,
        namespace,
        "rayservice/ray-service-sample",
        "{.status.activeServiceStatus.rayClusterName}",
    )
    head = local_head(kubectl, namespace, cluster)
    assert get_text(f"{head.serve}/greet?name=Ray") == "Hello, Ray!"

    delete_and_expect_freed(kubectl, namespace, "rayservice/ray-service-sample", head)


def test_a_two_group_cluster_shows_its_nodes_and_resources_in_the_dashboard(
    kubectl: Kubectl, namespace: str
) -> None:
    apply(
        kubectl,
        namespace,
        """
        apiVersion: ray.io/v1
        kind: RayCluster
        metadata: {name: shaped}
        spec:
          headGroupSpec:
            rayStartParams: {num-cpus: "0"}
            template:
              spec:
                containers: [{name: ray-head, image: rayproject/ray:2.52.0}]
          workerGroupSpecs:
            - groupName: small
              replicas: 2
              rayStartParams: {}
              template:
                spec:
                  containers:
                    - name: ray-worker
                      image: rayproject/ray:2.52.0
                      resources: {limits: {cpu: "1", memory: 1Gi}}
            - groupName: large
              replicas: 1
              rayStartParams: {resources: '"{\\"highmem\\": 2}"'}
              template:
                spec:
                  containers:
                    - name: ray-worker
                      image: rayproject/ray:2.52.0
                      resources: {limits: {cpu: "2", memory: 2Gi}}
        """,
    )
    head = local_head(kubectl, namespace, "shaped")
    alive: list[dict[str, object]] = []

    def four_alive() -> bool:
        try:
            summary = get_json(f"{head.dashboard}/nodes?view=summary")["data"]["summary"]
        except OSError:  # the dashboard starts a few seconds after the head's Event
            return False
        alive[:] = [node for node in summary if node["raylet"]["state"] == "ALIVE"]
        return len(alive) == 4

    wait_until(four_alive, timeout=120, interval=0.5, what="4 alive Ray nodes")
    shapes = sorted(
        (
            node["raylet"]["resourcesTotal"].get("CPU", 0.0),  # type: ignore[index]
            node["raylet"]["resourcesTotal"].get("highmem", 0.0),  # type: ignore[index]
            node["raylet"]["resourcesTotal"].get("memory", 0.0),  # type: ignore[index]
        )
        for node in alive
    )
    gib = 1024.0**3
    assert [shape[:2] for shape in shapes] == [(0.0, 0.0), (1.0, 0.0), (1.0, 0.0), (2.0, 2.0)]
    assert [shape[2] for shape in shapes[1:]] == [gib, gib, 2 * gib]

    delete_and_expect_freed(kubectl, namespace, "raycluster/shaped", head)


HEAD_ONLY_CLUSTER = """
    apiVersion: ray.io/v1
    kind: RayCluster
    metadata: {{name: {name}}}
    spec:
      headGroupSpec:
        rayStartParams: {{num-cpus: "0"}}
        template:
          spec:
            containers: [{{name: ray-head, image: rayproject/ray:2.52.0}}]
"""


def test_a_head_over_the_cluster_cap_is_told_and_starts_once_room_is_made(
    kubectl: Kubectl, namespace: str
) -> None:
    names = [f"capped-{index}" for index in range(MAX_CLUSTERS + 1)]
    for name in names[:MAX_CLUSTERS]:
        apply(kubectl, namespace, HEAD_ONLY_CLUSTER.format(name=name))
        local_head_addresses(kubectl, namespace, name)
    apply(kubectl, namespace, HEAD_ONLY_CLUSTER.format(name=names[-1]))

    told = wait_for_event(
        kubectl,
        namespace,
        "LocalRayCapReached",
        about=lambda: head_pod(kubectl, namespace, names[-1]),
        timeout=60,
        what="a LocalRayCapReached Event",
    )
    assert "--local-ray-max-clusters=2" in told[0]
    pod = head_pod(kubectl, namespace, names[-1])
    assert not events_of(kubectl, namespace, pod, "LocalRayStarted")

    kubectl("delete", "-n", namespace, f"raycluster/{names[0]}", "--wait=true")
    local_head_addresses(kubectl, namespace, names[-1])
    for name in names[1:]:
        kubectl("delete", "-n", namespace, f"raycluster/{name}", "--wait=true")


def test_a_pod_ray_could_not_start_is_told_why_and_gets_no_process(
    kubectl: Kubectl, namespace: str
) -> None:
    apply(
        kubectl,
        namespace,
        """
        apiVersion: ray.io/v1
        kind: RayCluster
        metadata: {name: unreadable}
        spec:
          headGroupSpec:
            rayStartParams: {object-store-memory: "lots"}
            template:
              spec:
                containers: [{name: ray-head, image: rayproject/ray:2.52.0}]
        """,
    )

    told = wait_for_event(
        kubectl,
        namespace,
        "LocalRayUnplannable",
        about=lambda: head_pod(kubectl, namespace, "unreadable"),
        timeout=60,
        what="a LocalRayUnplannable Event",
    )
    assert "object-store-memory 'lots' is not a number of bytes" in told[0]
    uid = uid_of(kubectl, namespace, "raycluster/unreadable")
    assert not processes_on(cluster_address(uid))
    pod = head_pod(kubectl, namespace, "unreadable")
    assert field(kubectl, namespace, f"pod/{pod}", READY_CONDITION) == "False"


def test_local_processes_outlive_an_api_server_that_stops_answering(
    dev: DevOperator, kubectl: Kubectl, namespace: str
) -> None:
    apply(kubectl, namespace, HEAD_ONLY_CLUSTER.format(name="steady"))
    steady = local_head(kubectl, namespace, "steady")
    wait_until(lambda: answers(steady.dashboard), timeout=60, interval=0.2, what="the dashboard")
    address = steady.address
    head_group = {int(pid) for pid in dev.recorded_process_groups} & set(processes_on(address))
    assert len(head_group) == 1

    apiserver = dev.component_pid("kube-apiserver")
    os.kill(apiserver, signal.SIGSTOP)
    try:
        time.sleep(15)  # the agent's lists time out meanwhile; nothing may be stopped for it
        assert head_group <= set(processes_on(address))
        assert answers(steady.dashboard)
    finally:
        os.kill(apiserver, signal.SIGCONT)

    apply(kubectl, namespace, HEAD_ONLY_CLUSTER.format(name="after"))
    local_head_addresses(kubectl, namespace, "after")
    assert head_group <= set(processes_on(address))
    assert head_group <= {int(pid) for pid in dev.recorded_process_groups}
    for name in ("steady", "after"):
        kubectl("delete", "-n", namespace, f"raycluster/{name}", "--wait=true")


def test_a_plain_job_pod_still_completes_at_once(kubectl: Kubectl, namespace: str) -> None:
    """Only RayJob submitters are left to the agent; KWOK completes every other Job's Pod."""
    kubectl(
        "create", "job", "plain", "-n", namespace, "--image=busybox", "--", "true"
    )  # fmt: skip
    watch_object(
        kubectl,
        namespace,
        "job/plain",
        until=lambda job: job.get("status", {}).get("succeeded") == 1,
        timeout=60,
        what="the plain Job to succeed",
    )


def test_stopping_dev_ends_every_local_ray_process(dev_to_stop: DevOperator) -> None:
    operator = dev_to_stop
    try:
        operator.wait_ready()
        apply(operator.kubectl, "default", HEAD_ONLY_CLUSTER.format(name="left-running"))
        local_head_addresses(operator.kubectl, "default", "left-running")
        uid = uid_of(operator.kubectl, "default", "raycluster/left-running")
        assert processes_on(cluster_address(uid))
        assert operator.recorded_process_groups
    finally:
        code = operator.stop()
    assert code == 0, operator.log_tail()
    wait_until(
        lambda: not processes_on(cluster_address(uid)),
        timeout=30,
        interval=0.2,
        what="no process left on the stopped cluster's address",
    )
    assert operator.recorded_process_groups == {}
    leftovers = subprocess.run(
        ["pgrep", "-f", str(operator.directory.parent)], capture_output=True, text=True, check=False
    ).stdout
    assert leftovers == "", f"processes of the stopped run remain: {leftovers}"
    assert json.loads((operator.directory / "local-ray" / "processes.json").read_text()) == {}
