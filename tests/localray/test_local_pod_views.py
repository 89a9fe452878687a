"""Local Pods see their volumes at their mount paths and their environment as a kubelet gives it,
in user and mount namespaces of their own, and the machine's filesystem stays as it was.

One `ray-operator dev` serves the module: KubeRay's own `ray-job.sample.yaml`, unchanged, runs its
script from its mounted ConfigMap; a worker whose Secret is missing is told so and starts once it
exists, then shows (to a command run in its namespaces, as `kubectl exec` runs one) its Secret,
downward API file, an emptyDir at two mount paths (one under `/` itself), a `subPath` file,
read-only mounts that refuse writes, its own `/etc/hosts` entry, and a `ray.init()` there joins its
cluster through Ray's default `/tmp/ray`.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_operator.localray.plan import cluster_address
from ray_operator.localray.sandbox import enter_argv

from tests.conftest import KUBERAY_FIXTURES, Kubectl
from tests.localray.dev_operator import (
    DevOperator,
    namespace_for,
    processes_on,
    ray_nodes_python,
    running_dev,
    wait_for_event,
    watch_object,
)
from tests.runtime.processes import wait_until

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        subprocess.run(["unshare", "--user", "--mount", "true"], check=False).returncode != 0,
        reason="this machine allows no unprivileged user namespaces",
    ),
]


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevOperator]:
    directory = tmp_path_factory.mktemp("local-pod-views") / "dev"
    with running_dev(directory, "--local-ray-max-clusters=1", "--local-ray-max-nodes=3") as dev:
        yield dev


@pytest.fixture
def namespace(dev: DevOperator, request: pytest.FixtureRequest) -> str:
    return namespace_for(dev.kubectl, request)


def field(kubectl: Kubectl, namespace: str, kind_name: str, path: str) -> str:
    return kubectl("get", "-n", namespace, kind_name, "-o", f"jsonpath={path}")


def test_kuberays_ray_job_sample_runs_unchanged_from_its_mounted_config_map(
    dev: DevOperator, namespace: str
) -> None:
    kubectl = dev.kubectl
    home_ray_existed = Path("/home/ray").exists()
    kubectl("apply", "-n", namespace, "-f", str(KUBERAY_FIXTURES / "ray-job.sample.yaml"))

    def finished(job: dict[str, Any]) -> bool:
        status = job.get("status", {})
        deployment = f"{status.get('jobStatus', '')}/{status.get('jobDeploymentStatus', '')}"
        if "FAILED" in deployment or "Failed" in deployment:
            pytest.fail(kubectl("get", "-n", namespace, "rayjob/rayjob-sample", "-o", "yaml"))
        return deployment == "SUCCEEDED/Complete"

    watch_object(
        kubectl,
        namespace,
        "rayjob/rayjob-sample",
        until=finished,
        timeout=300,
        what="rayjob-sample SUCCEEDED/Complete",
    )
    assert Path("/home/ray").exists() == home_ray_existed, "the host's /home/ray was touched"

    cluster = field(kubectl, namespace, "rayjob/rayjob-sample", "{.status.rayClusterName}")
    address = cluster_address(field(kubectl, namespace, f"raycluster/{cluster}", "{.metadata.uid}"))
    kubectl("delete", "-n", namespace, "rayjob/rayjob-sample", "--wait=true", "--timeout=120s")
    wait_until(lambda: not processes_on(address), timeout=60, interval=0.2, what="no processes")


WORKER_CLUSTER = """
apiVersion: ray.io/v1
kind: RayCluster
metadata: {{name: viewed}}
spec:
  headGroupSpec:
    rayStartParams: {{num-cpus: "0"}}
    template:
      spec:
        containers: [{{name: ray-head, image: rayproject/ray:2.52.0}}]
  workerGroupSpecs:
    - groupName: workers
      replicas: 1
      rayStartParams: {{num-cpus: "1"}}
      template:
        metadata: {{labels: {{team: blue}}}}
        spec:
          containers:
            - name: ray-worker
              image: rayproject/ray:2.52.0
              env:
                - name: REDIS_PASSWORD
                  valueFrom: {{secretKeyRef: {{name: redis-auth, key: password}}}}
                - name: MY_POD
                  valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
                - name: GREETING
                  valueFrom: {{configMapKeyRef: {{name: settings, key: greeting}}}}
              volumeMounts:
                - {{name: auth, mountPath: /etc/redis-auth}}
                - {{name: info, mountPath: {home}/podinfo}}
                - {{name: scratch, mountPath: {home}/scratch}}
                - {{name: scratch, mountPath: {top}/scratch}}
                - {{name: settings, mountPath: {home}/app/run.py, subPath: run.py}}
                - {{name: settings, mountPath: {home}/jobs}}
                - {{name: data, mountPath: {home}/data, readOnly: true}}
          volumes:
            - {{name: auth, secret: {{secretName: redis-auth}}}}
            - name: info
              downwardAPI:
                items:
                  - {{path: name, fieldRef: {{fieldPath: metadata.name}}}}
                  - {{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}
            - {{name: scratch, emptyDir: {{}}}}
            - {{name: settings, configMap: {{name: settings}}}}
            - {{name: data, hostPath: {{path: {data}}}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: settings}}
data: {{greeting: hello, run.py: "print('run')"}}
# As KubeRay's e2e support writes its job scripts: binary data, mounted as files all the same.
binaryData: {{counter.py: cHJpbnQoJ2NvdW50ZXInKQ==}}
"""


def worker_pid(address: str) -> int:
    """The worker's `ray start` process: the one process living in its Pod's namespaces (not a
    child it forked a moment ago, which shows the same command line until it execs)."""
    found = set()
    for pid in processes_on(address):
        try:
            words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"start" in words and any(word.startswith(b"--address=") for word in words):
            found.add(pid)
    return next((pid for pid in sorted(found) if parent_of(pid) not in found), 0)


def parent_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def in_pod(pid: int, script: str) -> subprocess.CompletedProcess[str]:
    """`script` run in the Pod's namespaces, as `kubectl exec` runs a command there."""
    return subprocess.run(
        enter_argv(pid, "/", ["sh", "-c", script]),
        capture_output=True,
        text=True,
        timeout=120,  # a driver joining a cluster on a loaded machine
        check=False,
        env={"PATH": os.environ["PATH"]},
    )


def test_a_worker_sees_its_secret_downward_api_empty_dir_and_sub_path_file_read_only_where_told(
    dev: DevOperator, namespace: str, tmp_path: Path
) -> None:
    kubectl = dev.kubectl
    # Absent on the host, made in the Pod's view only (the second under `/` itself).
    home, top = f"/home/local-pod-{uuid.uuid4().hex[:8]}", f"/local-pod-{uuid.uuid4().hex[:8]}"
    data = tmp_path / "data"
    data.mkdir()
    (data / "input.txt").write_text("from the host")
    manifest = textwrap.dedent(WORKER_CLUSTER).format(home=home, top=top, data=data)
    kubectl("apply", "-n", namespace, "-f", "-", input_text=manifest)
    worker = ""

    def the_worker() -> str:
        nonlocal worker
        worker = field(
            kubectl,
            namespace,
            "pods",
            "{.items[?(@.metadata.labels.ray\\.io/group=='workers')].metadata.name}",
        )
        return worker

    told = wait_for_event(
        kubectl,
        namespace,
        "CreateContainerConfigError",
        about=the_worker,
        timeout=120,
        what="a CreateContainerConfigError Event",
    )
    assert "secretKeyRef Secret 'redis-auth' not found" in told[0]
    address = cluster_address(field(kubectl, namespace, "raycluster/viewed", "{.metadata.uid}"))
    assert not worker_pid(address)

    kubectl(
        "create", "secret", "generic", "redis-auth", "-n", namespace,
        "--from-literal=password=5ecret-Value",
    )  # fmt: skip
    wait_until(lambda: worker_pid(address), timeout=120, interval=0.2, what="the worker's process")
    pid = worker_pid(address)

    environ = dict(
        entry.split("=", 1)
        for entry in Path(f"/proc/{pid}/environ").read_text().split("\0")
        if "=" in entry
    )
    assert environ["REDIS_PASSWORD"] == "5ecret-Value"
    assert (environ["MY_POD"], environ["GREETING"]) == (worker, "hello")

    seen = in_pod(
        pid,
        f"cat /etc/redis-auth/password; echo; cat {home}/podinfo/name; echo; "
        f"cat {home}/podinfo/labels; echo; cat {home}/jobs/counter.py; echo; "
        f"cat {home}/app/run.py; echo; cat {home}/data/input.txt; echo; "
        f"echo kept > {home}/scratch/note",
    )
    assert seen.returncode == 0, seen.stderr
    lines = seen.stdout.splitlines()
    assert lines[0] == "5ecret-Value"
    assert lines[1] == worker
    assert 'team="blue"' in lines[2:-3]
    assert lines[-3:] == ["print('counter')", "print('run')", "from the host"]
    assert in_pod(pid, f"cat {top}/scratch/note").stdout == "kept\n"
    assert in_pod(pid, f"grep -w {worker} /etc/hosts").stdout.split() == [address, worker]

    # Ray's default temp dir is the node's: a driver started there joins the Pod's cluster
    # (once the node has started: `ray start` writes the cluster's address last, even after the
    # Pod turned Ready).
    wait_until(
        lambda: in_pod(pid, "test -f /tmp/ray/ray_current_cluster").returncode == 0,
        timeout=120,
        interval=0.5,
        what="the worker's `ray start` to write the cluster's address",
    )
    # The address is read from the file by hand: were it missing, a bare `ray.init()` would start
    # a cluster of its own (and leave a token in ~/.ray that turns auth on for later heads).
    driver = (
        "import ray; ray.init(address=open('/tmp/ray/ray_current_cluster').read().strip()); "
        "print(ray.cluster_resources()['CPU'])"
    )
    joined = in_pod(pid, f'{ray_nodes_python()} -c "{driver}"')
    assert joined.stdout.splitlines()[-1:] == ["1.0"], joined.stderr[-2000:]

    for read_only in ("/etc/redis-auth/new", f"{home}/data/new", f"{home}/podinfo/new"):
        refused = in_pod(pid, f"touch {read_only}")
        assert "Read-only file system" in refused.stderr, read_only
    assert not (data / "new").exists()
    assert not Path(home).exists(), f"{home} was made on the host"
    assert not Path(top).exists(), f"{top} was made on the host"

    kubectl("delete", "-n", namespace, "raycluster/viewed", "--wait=true", "--timeout=120s")
    wait_until(lambda: not processes_on(address), timeout=60, interval=0.2, what="no processes")
