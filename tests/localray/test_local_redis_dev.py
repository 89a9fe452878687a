"""GCS fault tolerance under `ray-operator dev`: KubeRay's Redis samples get a real Redis.

One `ray-operator dev` serves the module. KubeRay's `ray-cluster.external-redis.yaml`, applied
unchanged, reaches ready with its GCS in a real local `redis-server` (the sample's Deployment's
Pod); `kubectl exec`, `logs` and `port-forward` reach that Redis Pod's server as a Pod's own;
a new head after the old one is deleted still lists the job submitted before; a Redis config
that names another directory and a module makes Redis neither write nor load there; deleting the
cluster runs its Redis cleanup Job, which empties the Redis of its keys.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import textwrap
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from ray_operator.localray.redis_plan import redis_address

from tests.conftest import KUBERAY_FIXTURES, Kubectl
from tests.localray.dev_operator import (
    DevOperator,
    get_json,
    head_pod,
    local_head_addresses,
    wait_for_event,
    watch_object,
)
from tests.runtime.processes import wait_until

pytestmark = pytest.mark.timeout(600)

SAMPLE = KUBERAY_FIXTURES / "ray-cluster.external-redis.yaml"
CLUSTER = "raycluster-external-redis"
SAMPLE_PASSWORD = "5241590000000000"  # the sample's Secret and redis.conf


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevOperator]:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.fail("redis-server and redis-cli must be on PATH (.ci/run installs them)")
    operator = DevOperator(
        tmp_path_factory.mktemp("local-redis") / "dev",
        # At the cap on purpose: a new head of a cluster whose worker still runs is no new cluster.
        "--local-ray-max-clusters=1",
        "--local-ray-max-nodes=3",
    )
    try:
        operator.wait_ready()
        yield operator
    finally:
        operator.stop()


@pytest.fixture(scope="module")
def kubectl(dev: DevOperator) -> Kubectl:
    return dev.kubectl


@dataclass(frozen=True)
class SampleCluster:
    namespace: str
    uid: str
    redis: str
    """`host:port` of the sample's local Redis."""


@pytest.fixture(scope="module")
def sample(kubectl: Kubectl) -> SampleCluster:
    """KubeRay's external-redis sample, applied unchanged, once ready."""
    namespace = "external-redis"
    kubectl("create", "namespace", namespace)
    kubectl("apply", "-n", namespace, "-f", str(SAMPLE))

    watch_object(
        kubectl,
        namespace,
        f"raycluster/{CLUSTER}",
        until=lambda cluster: cluster.get("status", {}).get("state") == "ready",
        timeout=240,
        what=f"RayCluster {CLUSTER} ready",
    )
    uid = kubectl("get", "-n", namespace, f"raycluster/{CLUSTER}", "-o", "jsonpath={.metadata.uid}")
    redis_uid = kubectl(
        "get", "pods", "-n", namespace, "-l", "app=redis", "-o", "jsonpath={.items[0].metadata.uid}"
    )  # fmt: skip
    return SampleCluster(namespace, uid, f"{redis_address(redis_uid)}:6379")


def redis_cli(address: str, password: str, *command: str) -> str:
    host, port = address.rsplit(":", 1)
    result = subprocess.run(
        ["redis-cli", "-h", host, "-p", port, "-a", password, "--no-auth-warning", *command],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return result.stdout.strip()


def test_the_external_redis_sample_reaches_ready_with_its_gcs_in_the_local_redis(
    sample: SampleCluster,
) -> None:
    keys = redis_cli(sample.redis, SAMPLE_PASSWORD, "--scan", "--pattern", f"RAY{sample.uid}@*")
    assert keys, f"no GCS keys of cluster {sample.uid} in the sample's Redis at {sample.redis}"


def test_kubectl_exec_logs_and_port_forward_reach_the_redis_pods_own_server(
    kubectl: Kubectl, sample: SampleCluster
) -> None:
    redis_pod = kubectl(
        "get", "pods", "-n", sample.namespace, "-l", "app=redis", "-o",
        "jsonpath={.items[0].metadata.name}",
    )  # fmt: skip
    # No -h: redis-cli's 127.0.0.1:6379 is the Pod's own Redis, as in a Pod's network namespace.
    dbsize = kubectl(
        "exec", "-n", sample.namespace, redis_pod, "--",
        "redis-cli", "--no-auth-warning", "-a", SAMPLE_PASSWORD, "DBSIZE",
    )  # fmt: skip
    keys = redis_cli(sample.redis, SAMPLE_PASSWORD, "DBSIZE")
    assert dbsize.strip() == keys != "0"
    assert "Ready to accept connections" in kubectl("logs", "-n", sample.namespace, redis_pod)
    forward = subprocess.Popen(
        [*kubectl_argv(kubectl), "port-forward", "-n", sample.namespace, redis_pod, ":6379"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert forward.stdout is not None
        line = forward.stdout.readline()
        local_port = re.search(r"127\.0\.0\.1:(\d+)", line)
        assert local_port, line
        assert redis_cli(f"127.0.0.1:{local_port[1]}", SAMPLE_PASSWORD, "DBSIZE") == keys
    finally:
        forward.terminate()
        forward.wait()


def kubectl_argv(kubectl: Kubectl) -> list[str]:
    return ["kubectl", "--kubeconfig", str(kubectl.kubeconfig)]


def test_a_new_head_still_lists_the_job_submitted_before_the_old_one_was_deleted(
    kubectl: Kubectl, sample: SampleCluster
) -> None:
    dashboard, _ = local_head_addresses(kubectl, sample.namespace, CLUSTER)
    submitted = submit_job(dashboard, "python -c 'print(1)'")
    wait_until(
        lambda: job_status(dashboard, submitted) == "SUCCEEDED",
        timeout=120,
        interval=0.5,
        what=f"job {submitted} SUCCEEDED",
    )
    old_head = head_pod(kubectl, sample.namespace, CLUSTER)
    kubectl("delete", "pod", "-n", sample.namespace, old_head, "--wait=false")

    def new_head_started() -> bool:
        pod = head_pod(kubectl, sample.namespace, CLUSTER)
        return bool(pod and pod != old_head)

    wait_until(new_head_started, timeout=60, interval=0.5, what="a new head Pod")
    new_dashboard, _ = local_head_addresses(kubectl, sample.namespace, CLUSTER)
    assert new_dashboard != dashboard  # a new GCS and dashboard, on ports of their own
    wait_until(
        lambda: job_status(new_dashboard, submitted) == "SUCCEEDED",
        timeout=180,
        interval=0.5,
        what=f"job {submitted} listed by the new head",
    )


def submit_job(dashboard: str, entrypoint: str) -> str:
    request = urllib.request.Request(
        f"{dashboard}/api/jobs/",
        data=json.dumps({"entrypoint": entrypoint}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(json.loads(response.read())["submission_id"])


def job_status(dashboard: str, submission_id: str) -> str:
    try:
        jobs = get_json(f"{dashboard}/api/jobs/", timeout=5)
    except OSError:
        return ""  # the new head's dashboard is not up yet
    return next((str(j["status"]) for j in jobs if j["submission_id"] == submission_id), "")


def test_a_redis_config_naming_another_directory_and_a_module_neither_writes_nor_loads_there(
    kubectl: Kubectl, dev: DevOperator, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    module = tmp_path / "module.so"
    module.write_text("not a module: a Redis that loaded it would not start\n")
    namespace = "hostile-redis-config"
    kubectl("create", "namespace", namespace)
    manifest = f"""
        apiVersion: v1
        kind: ConfigMap
        metadata: {{name: hostile}}
        data:
          redis.conf: |
            dir {elsewhere}
            dbfilename stolen.rdb
            logfile {elsewhere}/redis.log
            loadmodule {module}
            include {module}
            requirepass pw
        ---
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: hostile}}
        spec:
          selector: {{matchLabels: {{app: hostile}}}}
          template:
            metadata: {{labels: {{app: hostile}}}}
            spec:
              containers:
              - name: redis
                image: redis:7.4.0
                command: ["redis-server", "/etc/redis/redis.conf"]
                volumeMounts: [{{name: config, mountPath: /etc/redis}}]
              volumes: [{{name: config, configMap: {{name: hostile}}}}]
    """
    kubectl("apply", "-n", namespace, "-f", "-", input_text=textwrap.dedent(manifest))

    pod: list[str] = []

    def the_pod() -> str:
        pod[:] = kubectl(
            "get", "pods", "-n", namespace, "-l", "app=hostile", "-o",
            "jsonpath={.items[0].metadata.name} {.items[0].metadata.uid}",
        ).split()  # fmt: skip
        return pod[0] if len(pod) == 2 else ""

    wait_for_event(
        kubectl,
        namespace,
        "LocalRedisStarted",
        about=the_pod,
        timeout=60,
        what="the local Redis started",
    )
    address = f"{redis_address(pod[1])}:6379"
    wait_until(lambda: answers(address, "pw"), timeout=30, interval=0.2, what=f"Redis at {address}")
    assert redis_cli(address, "pw", "SET", "key", "value") == "OK"
    assert redis_cli(address, "pw", "SAVE") == "OK"
    assert redis_cli(address, "pw", "MODULE", "LIST") == ""
    directory = redis_cli(address, "pw", "CONFIG", "GET", "dir").splitlines()[1]
    assert Path(directory).is_relative_to(dev.directory / "local-ray" / "redis")
    assert (Path(directory) / "dump.rdb").is_file()
    assert list(elsewhere.iterdir()) == []


def answers(address: str, password: str) -> bool:
    try:
        return redis_cli(address, password, "PING") == "PONG"
    except subprocess.CalledProcessError:
        return False


def test_deleting_the_cluster_runs_its_redis_cleanup_which_empties_the_redis(
    kubectl: Kubectl, sample: SampleCluster
) -> None:
    """Last in the module: it deletes the sample's RayCluster (its Redis stays)."""
    assert redis_cli(sample.redis, SAMPLE_PASSWORD, "DBSIZE") != "0"
    kubectl("delete", "-n", sample.namespace, f"raycluster/{CLUSTER}", "--wait=false")
    kubectl(
        "wait", "-n", sample.namespace, f"raycluster/{CLUSTER}", "--for=delete", "--timeout=120s"
    )  # RayCluster gone after its Redis cleanup
    # Only the cleanup Job's command removes the cluster's keys (its Job is gone with the cluster).
    assert redis_cli(sample.redis, SAMPLE_PASSWORD, "DBSIZE") == "0"
