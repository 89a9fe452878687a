"""What a Pod becomes on this machine: the local Ray agent's pure planning, on Pods built by the
operator's own builders."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ray_operator.builders.pods import build_head_pod, build_worker_pod
from ray_operator.localray.plan import (
    DEFAULT_OBJECT_STORE_BYTES,
    MAX_OBJECT_STORE_BYTES,
    KubeAccess,
    NodePorts,
    UnplannablePodError,
    autoscaler_argv,
    autoscaler_env,
    cluster_address,
    container_env,
    is_ray_job_submitter_pod,
    is_ray_node_pod,
    node_env,
    plan_init_containers,
    plan_node,
    plan_sidecar_submitter,
    plan_submitter,
    pod_port_targets,
    pointed_at_pod_ports,
    ray_start_argv,
    replace_address,
    rewrite_paths,
)

from tests.builders.clusters import ray_container, raycluster, worker_group

PORTS = NodePorts(
    node_manager=1001,
    object_manager=1002,
    runtime_env_agent=1003,
    dashboard_agent_grpc=1004,
    dashboard_agent_listen=1005,
    metrics_export=1006,
    gcs=1007,
    dashboard=1008,
    client_server=1009,
)


def with_pod_uid(pod: dict[str, Any], uid: str = "pod-uid") -> dict[str, Any]:
    pod["metadata"]["uid"] = uid
    return pod


def shaped_cluster() -> dict[str, Any]:
    large = worker_group("large", rayStartParams={"resources": '"{\\"highmem\\": 2}"'})
    large["template"]["spec"]["containers"] = [ray_container("ray-worker", cpu="2", memory="4Gi")]
    cluster = raycluster(groups=[worker_group("small"), large])
    cluster["spec"]["headGroupSpec"]["rayStartParams"] = {
        "num-cpus": "0",
        "dashboard-host": "0.0.0.0",
        "port": "6380",
        "temp-dir": "/somewhere/else",
    }
    return cluster


def test_a_head_keeps_its_shape_and_the_agent_chooses_addresses_and_ports() -> None:
    cluster = shaped_cluster()
    plan = plan_node(with_pod_uid(build_head_pod(cluster, suffix="a")), cluster)
    assert plan.is_head
    assert plan.params == {
        "num-cpus": "0",
        "memory": str(2 * 1024**3),
        "object-store-memory": str(DEFAULT_OBJECT_STORE_BYTES),
    }
    assert plan.dropped_params == ("dashboard-host", "port", "temp-dir")

    argv = ray_start_argv(plan, ray="ray", node_ip="127.1.2.3", ports=PORTS, temp_dir="/tmp/x")
    assert argv[:4] == ["ray", "start", "--block", "--disable-usage-stats"]
    assert argv[4] == "--node-ip-address=127.1.2.3"
    for flag in (
        "--head",
        "--port=1007",
        "--dashboard-host=127.1.2.3",
        "--dashboard-port=1008",
        "--temp-dir=/tmp/x",
        "--num-cpus=0",
    ):
        assert flag in argv
    assert not any(word.startswith("--temp-dir=/somewhere") for word in argv)


def test_a_worker_gets_its_groups_resources_as_the_shell_would_pass_them() -> None:
    cluster = shaped_cluster()
    pod = with_pod_uid(build_worker_pod(cluster, "large", suffix="b", replica_index=0))
    plan = plan_node(pod, cluster)
    assert plan.params["num-cpus"] == "2"
    assert plan.params["resources"] == '{"highmem": 2}'

    argv = ray_start_argv(
        plan, ray="ray", node_ip="127.1.2.3", ports=PORTS, temp_dir="/t", gcs_address="127.1.2.3:9"
    )
    assert "--address=127.1.2.3:9" in argv
    assert '--resources={"highmem": 2}' in argv
    assert "--head" not in argv


def test_a_worker_without_its_heads_address_is_refused() -> None:
    cluster = shaped_cluster()
    plan = plan_node(build_worker_pod(cluster, "small", suffix="c", replica_index=0), cluster)
    with pytest.raises(ValueError, match="GCS address"):
        ray_start_argv(plan, ray="ray", node_ip="127.1.2.3", ports=PORTS, temp_dir="/t")


@pytest.mark.parametrize(
    ("requested", "granted"),
    [
        ("100000000", 100_000_000),
        ("1e30", MAX_OBJECT_STORE_BYTES),
        ("1", 80 * 1024 * 1024),
    ],
)
def test_the_object_store_is_capped_on_both_sides(requested: str, granted: int) -> None:
    cluster = raycluster()
    cluster["spec"]["headGroupSpec"]["rayStartParams"] = {"object-store-memory": requested}
    plan = plan_node(build_head_pod(cluster, suffix="a"), cluster)
    assert plan.params["object-store-memory"] == str(granted)


@pytest.mark.parametrize(
    ("param", "value", "message"),
    [
        ("object-store-memory", "lots", "not a number of bytes"),
        ("object-store-memory", "9" * 5000, "not a number of bytes"),
        ("resources", '{"a": 1}', "2 words"),
        ("resources", '"unclosed', "No closing quotation"),
    ],
)
def test_a_param_ray_could_not_read_is_refused_with_its_name(
    param: str, value: str, message: str
) -> None:
    cluster = raycluster()
    cluster["spec"]["headGroupSpec"]["rayStartParams"] = {param: value}
    with pytest.raises(UnplannablePodError, match=message) as raised:
        plan_node(build_head_pod(cluster, suffix="a"), cluster)
    assert len(str(raised.value)) < 200


def test_a_pod_of_a_group_the_cluster_no_longer_has_is_refused() -> None:
    cluster = raycluster()
    pod = build_worker_pod(cluster, "workers", suffix="a", replica_index=0)
    renamed = copy.deepcopy(cluster)
    renamed["spec"]["workerGroupSpecs"][0]["groupName"] = "other"
    with pytest.raises(UnplannablePodError, match="'workers' is not in RayCluster demo"):
        plan_node(pod, renamed)


def test_only_literal_env_values_pass_and_the_agents_own_names_are_left_out() -> None:
    container = {
        "env": [
            {"name": "PYTHONPATH", "value": "/home/ray/apps"},
            {"name": "MY_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "RAY_ADDRESS", "value": "demo-head-svc:6379"},
            {"name": "PATH", "value": "/evil"},
            {"name": "bad name", "value": "x"},
            {"name": "EMPTY"},
        ]
    }
    assert container_env(container) == {"PYTHONPATH": "/home/ray/apps", "EMPTY": ""}


def test_serve_proxies_bind_the_clusters_address_and_workers_get_their_own_port() -> None:
    cluster = raycluster()
    worker = plan_node(build_worker_pod(cluster, "workers", suffix="a", replica_index=0), cluster)
    ports = NodePorts(1, 2, 3, 4, 5, 6, serve_worker_proxy=7)
    env = node_env(worker, base={"HOME": "/root"}, node_ip="127.9.9.9", ports=ports)
    assert env["RAY_SERVE_DEFAULT_HTTP_HOST"] == "127.9.9.9"
    assert env["RAY_SERVE_WORKER_PROXY_HTTP_PORT"] == "7"
    assert env["HOME"] == "/root"


def test_mount_paths_in_values_point_at_the_local_copies() -> None:
    local = {"/home/ray/apps": "/state/pods/u/volumes/apps", "/home/ray": "/state/home"}
    assert (
        rewrite_paths("/home/ray/apps:/home/ray/apps/lib:/home/ray", local)
        == "/state/pods/u/volumes/apps:/state/pods/u/volumes/apps/lib:/state/home"
    )
    apps_only = {"/home/ray/apps": "/local/apps"}
    assert rewrite_paths("/home/ray/appsX:/opt/home/ray/apps", apps_only) == (
        "/home/ray/appsX:/opt/home/ray/apps"
    )
    assert rewrite_paths("python /home/ray/apps/run.py", local) == (
        "python /state/pods/u/volumes/apps/run.py"
    )


def test_a_submitter_runs_its_command_against_the_local_dashboard() -> None:
    pod = {
        "metadata": {
            "name": "job-abc",
            "namespace": "ns1",
            "uid": "u",
            "labels": {
                "ray.io/originated-from-crd": "RayJob",
                "ray.io/originated-from-cr-name": "job",
            },
            "ownerReferences": [{"kind": "Job", "name": "job", "uid": "j"}],
        },
        "spec": {
            "containers": [
                {
                    "name": "ray-job-submitter",
                    "command": ["/bin/bash", "-ce", "--"],
                    "args": ["ray job submit --address http://job-head-svc.ns1.svc:8265 -- x"],
                    "env": [{"name": "PYTHONUNBUFFERED", "value": "1"}],
                }
            ]
        },
    }
    assert is_ray_job_submitter_pod(pod)
    assert not is_ray_node_pod(pod)
    plan = plan_submitter(pod)
    assert plan.rayjob == "job"
    command = replace_address(plan.argv[-1], old="job-head-svc.ns1.svc:8265", new="127.4.5.6:77")
    assert command == "ray job submit --address http://127.4.5.6:77 -- x"

    del pod["spec"]["containers"][0]["command"]
    with pytest.raises(UnplannablePodError, match="sets no command"):
        plan_submitter(pod)


def test_an_autoscaling_head_hands_scaling_to_its_sidecar_with_the_agents_credentials() -> None:
    cluster = raycluster(enableInTreeAutoscaling=True)
    plan = plan_node(build_head_pod(cluster, suffix="a"), cluster)
    assert plan.params["no-monitor"] == "true"
    assert plan.autoscaler_env is not None
    assert plan.autoscaler_env["KUBERAY_CRD_VER"] == "v1"

    access = KubeAccess(host="127.0.0.1", port=6443, ca_file="ca", cert_file="c", key_file="k")
    env = autoscaler_env(plan, base={"PATH": "/venv/bin"}, access=access)
    assert env["KUBERNETES_SERVICE_HOST"] == "127.0.0.1"
    assert env["KUBERNETES_SERVICE_PORT_HTTPS"] == "6443"
    assert env["RAY_KUBERAY_CLIENT_CERT_PATH"] == "c"
    assert (env["RAY_CLUSTER_NAME"], env["RAY_CLUSTER_NAMESPACE"]) == ("demo", "ns1")
    assert autoscaler_argv(plan, ray="ray", gcs_address="127.1.1.1:5") == [
        "ray",
        "kuberay-autoscaler",
        "--cluster-name=demo",
        "--cluster-namespace=ns1",
        "--gcs-address=127.1.1.1:5",
    ]


def test_a_head_without_autoscaling_keeps_rays_own_monitor() -> None:
    cluster = raycluster()
    plan = plan_node(build_head_pod(cluster, suffix="a"), cluster)
    assert "no-monitor" not in plan.params
    assert plan.autoscaler_env is None


def test_a_jobs_pod_with_the_heads_labels_is_not_a_ray_node() -> None:
    pod = build_head_pod(raycluster(), suffix="a")
    assert is_ray_node_pod(pod)
    pod["metadata"]["ownerReferences"] = [{"kind": "Job", "name": "redis-cleanup", "uid": "x"}]
    assert not is_ray_node_pod(pod)
    assert not is_ray_job_submitter_pod(pod)


@pytest.mark.parametrize("uid", ["", "a", "uid-1", "x" * 1000, "\u2603"])
def test_a_clusters_address_is_loopback_but_never_the_one_ray_rewrites(uid: str) -> None:
    address = cluster_address(uid)
    octets = [int(part) for part in address.split(".")]
    assert octets[0] == 127
    assert 2 <= octets[3] <= 253
    assert address != "127.0.0.1"
    assert cluster_address(uid) == address


def test_a_heads_pod_ports_follow_its_ray_start_params() -> None:
    cluster = shaped_cluster()  # the head sets port: "6380"
    head = plan_node(with_pod_uid(build_head_pod(cluster, suffix="a")), cluster)
    assert pod_port_targets(head) == {
        6380: "gcs",
        8265: "dashboard",
        10001: "client_server",
        8080: "metrics_export",
        52365: "dashboard_agent_listen",
        8000: "serve",
    }
    worker_pod = with_pod_uid(build_worker_pod(cluster, "small", suffix="b", replica_index=0))
    worker = plan_node(worker_pod, cluster)
    assert pod_port_targets(worker) == {
        8080: "metrics_export",
        52365: "dashboard_agent_listen",
        8000: "serve_worker_proxy",
    }


def test_init_containers_of_a_ray_image_run_in_order_and_the_rest_are_named_as_not_run() -> None:
    cluster = raycluster(groups=[worker_group()])
    pod = build_worker_pod(cluster, "workers", suffix="abcde", replica_index=0)
    make = ["/bin/sh", "-c"]
    pod["spec"]["initContainers"] += [
        {
            "name": "certs",
            "image": "docker.io/rayproject/ray:2.46.0",
            "command": make,
            "args": ["x"],
        },
        {"name": "fetch", "image": "busybox:1.36", "command": ["wget", "http://example.com"]},
        {"name": "again", "image": pod["spec"]["containers"][0]["image"], "command": ["true"]},
    ]

    plan = plan_init_containers(pod)

    assert [(init.name, init.argv) for init in plan.run] == [
        ("certs", ("/bin/sh", "-c", "x")),
        ("again", ("true",)),
    ]
    # The operator's own wait-gcs-ready is the agent's wait: left out without a word.
    assert [entry.split(" ")[0] for entry in plan.not_run] == ["fetch"]
    assert "only Ray-image containers run locally" in plan.not_run[0]


def test_an_init_container_of_a_ray_image_without_a_command_cannot_run() -> None:
    pod = build_head_pod(raycluster(), suffix="abcde")
    pod["spec"]["initContainers"] = [{"name": "entrypoint", "image": "rayproject/ray-ml:2.9.0"}]

    with pytest.raises(UnplannablePodError, match="init container entrypoint sets no command"):
        plan_init_containers(pod)


def test_a_sidecar_mode_head_pods_submitter_is_planned_with_its_command() -> None:
    pod = build_head_pod(raycluster(), suffix="abcde")
    image = pod["spec"]["containers"][0]["image"]
    submitter = {"name": "ray-job-submitter", "image": image, "command": ["/bin/bash", "-ce", "--"]}
    pod["spec"]["containers"].append({**submitter, "args": ["ray job submit"]})

    plan = plan_sidecar_submitter(pod)

    assert plan is not None
    assert plan.argv == ("/bin/bash", "-ce", "--", "ray job submit")
    pod["spec"]["containers"][-1]["image"] = "busybox:1.36"  # only a Ray image runs
    assert plan_sidecar_submitter(pod) is None


def test_a_containers_loopback_of_a_pod_port_is_pointed_at_where_that_port_listens() -> None:
    ports = {8265: ("127.1.2.3", 40001)}
    text = (
        "until curl localhost:8265/api; do :; done; ray job submit --address http://127.0.0.1:8265"
    )

    pointed = pointed_at_pod_ports(text, ports)

    assert pointed == (
        "until curl 127.1.2.3:40001/api; do :; done; "
        "ray job submit --address http://127.1.2.3:40001"
    )
    # Another port, or the same digits in a longer number or host, stays as written.
    kept = "127.0.0.1:82650 10.127.0.0.1:8265 localhost:6379"
    assert pointed_at_pod_ports(kept, ports) == kept
