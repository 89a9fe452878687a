"""KubeRay's own `kubectl ray` plugin, at the pinned KubeRay version, driven against the operator.

One `ray-operator dev` with local Ray serves the module; the plugin runs as users run it,
`kubectl ray ...` with the plugin on PATH and the dev plane's kubeconfig as KUBECONFIG. One
RayCluster made by `create cluster` is read (`get cluster`, `get workergroups`, `get nodes`),
grown (`scale cluster`, `create workergroup`), reached (`session`'s port-forward to the
dashboard, `log`'s exec of `tar` in each Pod) and deleted; `job submit` then runs a real Ray job
through its own port-forward. `version` finds the operator's Deployment as config/ installs it.

The plugin is built once from the Go module proxy (`ensure_kubectl_ray`); where the proxy does not
serve KubeRay's root module the whole module is skipped, saying so.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray_operator.localcluster.binaries import (
    KUBECTL_RAY_VERSION,
    BinaryBuildError,
    ensure_kubectl_ray,
)

from tests.conftest import Kubectl
from tests.deploy.manifests import CONFIG, WEBHOOK_CONFIGURATIONS, apply_server_side, build
from tests.localray.dev_operator import DevOperator, running_dev
from tests.runtime.processes import wait_until

pytestmark = pytest.mark.timeout(900)

NAMESPACE = "kubectl-ray"
CLUSTER = "demo"
# Small Ray nodes: each is a real `ray start` on this machine.
SMALL_HEAD = ("--head-cpu", "1", "--head-memory", "2Gi")
SMALL_WORKER = ("--worker-cpu", "1", "--worker-memory", "1Gi")
DASHBOARD = "http://localhost:8265"


class KubectlRay:
    """`kubectl ray ...` with the pinned plugin first on PATH (and `ray`, which `job submit`
    runs), against one kubeconfig given as KUBECONFIG (`session` passes it on to kubectl)."""

    def __init__(self, plugin: Path, kubeconfig: Path) -> None:
        path = os.pathsep.join([str(plugin.parent), str(Path(sys.executable).parent)])
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "PATH": path + os.pathsep + os.environ.get("PATH", ""),
        }

    def __call__(self, *args: str, cwd: Path | None = None, timeout: float = 300) -> str:
        result = subprocess.run(
            ["kubectl", "ray", *args],
            capture_output=True,
            text=True,
            env=self.env,
            cwd=cwd,
            timeout=timeout,
            check=False,
        )
        output = result.stdout + result.stderr
        assert result.returncode == 0, (
            f"kubectl ray {' '.join(args)} exited {result.returncode}:\n{output[-3000:]}"
        )
        return output

    def start(self, *args: str, log: Path) -> subprocess.Popen[bytes]:
        """A long-running command (its own process group, ended with `stop`)."""
        with log.open("wb") as out:
            return subprocess.Popen(
                ["kubectl", "ray", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )


def stop(process: subprocess.Popen[bytes]) -> None:
    """End a command `start` started, and the kubectl port-forward it runs."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="module")
def plugin() -> Path:
    try:
        return ensure_kubectl_ray()
    except BinaryBuildError as error:
        reason = " ".join(str(error).split())[:400]
        pytest.skip(f"KubeRay's kubectl-ray {KUBECTL_RAY_VERSION} cannot be built here: {reason}")


@pytest.fixture(scope="module")
def dev(plugin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevOperator]:
    directory = tmp_path_factory.mktemp("kubectl-ray") / "dev"
    with running_dev(directory, "--local-ray-max-clusters=2", "--local-ray-max-nodes=5") as dev:
        dev.kubectl("create", "namespace", NAMESPACE)
        yield dev


@pytest.fixture(scope="module")
def kubectl(dev: DevOperator) -> Kubectl:
    return dev.kubectl


@pytest.fixture(scope="module")
def ray(plugin: Path, dev: DevOperator) -> KubectlRay:
    return KubectlRay(plugin, dev.kubectl.kubeconfig)


@pytest.fixture(scope="module")
def cluster(ray: KubectlRay) -> str:
    """`kubectl ray create cluster demo --wait`: a head and one worker of the default group."""
    output = ray(
        "create", "cluster", CLUSTER, "-n", NAMESPACE, "--worker-replicas", "1",
        *SMALL_HEAD, *SMALL_WORKER, "--wait", "--timeout", "5m",
    )  # fmt: skip
    assert CLUSTER in output
    return CLUSTER


def table(output: str) -> list[dict[str, str]]:
    """The rows of a table the plugin prints, by column (columns are 2+ spaces apart)."""
    lines = [line for line in output.splitlines() if line.strip()]
    header_at = next(i for i, line in enumerate(lines) if line.startswith("NAME"))
    header = lines[header_at]
    starts = [0] + [
        i for i in range(1, len(header)) if header[i] != " " and header[i - 2 : i] == "  "
    ]
    names = [header[s:e].strip() for s, e in zip(starts, [*starts[1:], None], strict=True)]
    return [
        {
            name: line[s:e].strip()
            for name, s, e in zip(names, starts, [*starts[1:], None], strict=True)
        }
        for line in lines[header_at + 1 :]
    ]


def worker_groups(ray: KubectlRay) -> dict[str, str]:
    """`get workergroups`: each group's READY/DESIRED replicas."""
    rows = table(ray("get", "workergroups", "-n", NAMESPACE, "-c", CLUSTER))
    return {row["NAME"]: row["REPLICAS"] for row in rows}


def wait_for_ready_workers(ray: KubectlRay, group: str, replicas: str) -> None:
    """Until `get workergroups` shows `group` with `replicas` (READY/DESIRED): real Ray nodes."""
    wait_until(
        lambda: worker_groups(ray).get(group) == replicas,
        timeout=240, interval=2, what=f"{group} {replicas} in `kubectl ray get workergroups`",
    )  # fmt: skip


def field(kubectl: Kubectl, kind_name: str, path: str) -> str:
    return kubectl("get", kind_name, "-n", NAMESPACE, "-o", f"jsonpath={path}")


def pods_of(kubectl: Kubectl, cluster: str) -> dict[str, str]:
    """The cluster's Pods: name -> node type (head/worker), as the API server has them."""
    listed = json.loads(
        kubectl("get", "pods", "-n", NAMESPACE, "-l", f"ray.io/cluster={cluster}", "-o", "json")
    )
    return {
        pod["metadata"]["name"]: pod["metadata"]["labels"]["ray.io/node-type"]
        for pod in listed["items"]
        if not pod["metadata"].get("deletionTimestamp")
    }


def test_version_finds_the_operator_installed_from_config_and_prints_its_image_tag(
    ray: KubectlRay, kubectl: Kubectl
) -> None:
    manifests = build(CONFIG / "default")
    not_applied = {"CustomResourceDefinition", *WEBHOOK_CONFIGURATIONS}
    apply_server_side(
        kubectl, [m for m in manifests if m["kind"] not in not_applied], dry_run=False
    )

    lines = ray("version").splitlines()

    assert f"kubectl ray plugin version: {KUBECTL_RAY_VERSION}" in lines
    assert f"KubeRay operator version: {importlib.metadata.version('ray-operator')}" in lines


def test_create_cluster_makes_a_raycluster_of_the_asked_shape_that_becomes_ready(
    cluster: str, kubectl: Kubectl
) -> None:
    spec = json.loads(kubectl("get", "raycluster", cluster, "-n", NAMESPACE, "-o", "json"))
    head = spec["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["resources"]
    (group,) = spec["spec"]["workerGroupSpecs"]

    assert head["requests"]["cpu"] == "1"
    assert head["limits"]["memory"] == "2Gi"
    assert group["groupName"] == "default-group"
    assert group["replicas"] == 1
    assert spec["status"]["state"] == "ready"
    assert sorted(pods_of(kubectl, cluster).values()) == ["head", "worker"]


def test_get_cluster_lists_it_with_its_desired_and_available_workers(
    cluster: str, ray: KubectlRay
) -> None:
    rows = {row["NAME"]: row for row in table(ray("get", "cluster", "-n", NAMESPACE))}

    assert rows[cluster]["NAMESPACE"] == NAMESPACE
    assert rows[cluster]["DESIRED WORKERS"] == "1"
    assert rows[cluster]["AVAILABLE WORKERS"] == "1"
    assert rows[cluster]["STATUS"] == "ready"


def test_get_nodes_lists_every_ray_pod_of_the_cluster_with_its_type(
    cluster: str, ray: KubectlRay, kubectl: Kubectl
) -> None:
    rows = table(ray("get", "nodes", "-n", NAMESPACE, "-c", cluster))

    assert {row["NAME"]: row["TYPE"] for row in rows} == pods_of(kubectl, cluster)
    assert {row["CLUSTER"] for row in rows} == {cluster}


def test_scale_cluster_sets_a_worker_groups_replicas_and_the_new_worker_runs(
    cluster: str, ray: KubectlRay, kubectl: Kubectl
) -> None:
    ray(
        "scale",
        "cluster",
        cluster,
        "-n",
        NAMESPACE,
        "--worker-group",
        "default-group",
        "--replicas",
        "2",
    )

    assert field(kubectl, f"raycluster/{cluster}", "{.spec.workerGroupSpecs[0].replicas}") == "2"
    wait_for_ready_workers(ray, "default-group", "2/2")


def test_create_workergroup_adds_a_group_whose_worker_runs(
    cluster: str, ray: KubectlRay, kubectl: Kubectl
) -> None:
    ray(
        "create", "workergroup", "extra", "-n", NAMESPACE, "--ray-cluster", cluster,
        "--worker-replicas", "1", "--worker-min-replicas", "0", "--worker-max-replicas", "2",
        *SMALL_WORKER,
    )  # fmt: skip

    groups = field(kubectl, f"raycluster/{cluster}", "{.spec.workerGroupSpecs[*].groupName}")
    assert groups.split() == ["default-group", "extra"]
    wait_for_ready_workers(ray, "extra", "1/1")


def test_session_forwards_the_heads_dashboard_to_localhost(
    cluster: str, ray: KubectlRay, tmp_path: Path
) -> None:
    session = ray.start("session", cluster, "-n", NAMESPACE, log=tmp_path / "session.log")
    try:
        version: dict[str, str] = {}

        def answered() -> bool:
            try:
                with urllib.request.urlopen(f"{DASHBOARD}/api/version", timeout=5) as response:
                    version.update(json.loads(response.read()))
                    return True
            except (urllib.error.URLError, OSError):
                assert session.poll() is None, (tmp_path / "session.log").read_text()
                return False

        wait_until(answered, timeout=60, interval=1, what=f"the dashboard at {DASHBOARD}")
    finally:
        stop(session)

    # The answer came through the plugin's port-forward to the head Service, from real Ray.
    told = (tmp_path / "session.log").read_text()
    assert f"Forwarding ports to service {cluster}-head-svc" in told
    assert "Handling connection for 8265" in told
    assert version["ray_version"] == importlib.metadata.version("ray")


def test_log_downloads_each_ray_pods_stdout_and_ray_log_files(
    cluster: str, ray: KubectlRay, kubectl: Kubectl, tmp_path: Path
) -> None:
    (tmp_path / "logs").mkdir()  # the plugin refuses an --out-dir that does not exist
    ray("log", cluster, "-n", NAMESPACE, "--node-type", "all", "--out-dir", str(tmp_path / "logs"))

    pods = pods_of(kubectl, cluster)
    assert {path.name for path in (tmp_path / "logs").iterdir()} == set(pods)
    head = next(name for name, kind in pods.items() if kind == "head")
    head_logs = tmp_path / "logs" / head
    assert (head_logs / "stdout.log").is_file()
    assert (head_logs / "gcs_server.out").stat().st_size > 0
    assert (head_logs / "raylet.out").stat().st_size > 0
    for worker in (name for name, kind in pods.items() if kind == "worker"):
        assert (tmp_path / "logs" / worker / "raylet.out").stat().st_size > 0


def test_delete_removes_the_cluster_and_its_pods(
    cluster: str, ray: KubectlRay, kubectl: Kubectl
) -> None:
    ray("delete", cluster, "-n", NAMESPACE, "--yes")

    assert kubectl("get", "raycluster", "-n", NAMESPACE, "-o", "name") == ""
    wait_until(lambda: not pods_of(kubectl, cluster), timeout=120, interval=1, what="no Pods left")


def test_job_submit_runs_a_ray_job_through_a_port_forward_and_reports_its_success(
    ray: KubectlRay, kubectl: Kubectl, tmp_path: Path
) -> None:
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "squares.py").write_text(
        textwrap.dedent(
            """
            import ray

            @ray.remote
            def square(x):
                return x * x

            print("sum of squares:", sum(ray.get([square.remote(i) for i in range(10)])))
            """
        )
    )

    output = ray(
        "job", "submit", "--name", "squares", "-n", NAMESPACE,
        "--working-dir", str(tmp_path / "job"),
        *SMALL_HEAD, "--worker-replicas", "0", *SMALL_WORKER,
        "--", "python", "squares.py",
        timeout=600,
    )  # fmt: skip

    assert "sum of squares: 285" in output
    assert "succeeded" in output.lower()
    wait_until(
        lambda: field(kubectl, "rayjob/squares", "{.status.jobStatus}/{.spec.submissionMode}")
        == "SUCCEEDED/InteractiveMode",
        timeout=60, interval=1, what="RayJob squares SUCCEEDED (InteractiveMode)",
    )  # fmt: skip

    ray("delete", "rayjob/squares", "-n", NAMESPACE, "--yes")
    wait_until(
        lambda: kubectl("get", "rayjobs,rayclusters", "-n", NAMESPACE, "-o", "name") == "",
        timeout=120, interval=1, what="the RayJob and its RayCluster deleted",
    )  # fmt: skip
