"""Any legacy RayCluster the legacy schema allows (within sane sizes) converts into a RayCluster
that our CRD's schema (the generated models) and our webhook's validation accept, keeps its
pod types' bounds, and never keeps the keep-alive command that would stop Ray from starting."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ray_io import v1
from ray_operator.legacy.conversion import convert_legacy_cluster
from ray_operator.validation.raycluster import raycluster_warnings, validate_raycluster

from tests.legacy.legacy_clusters import KEEP_ALIVE

names = st.from_regex(r"[a-z0-9]([-a-z0-9_.]{0,20}[a-z0-9])?", fullmatch=True)
custom_resource_names = st.from_regex(r"[A-Za-z][A-Za-z0-9_:./-]{0,15}", fullmatch=True)
whole_amounts = st.one_of(st.integers(0, 10**6), st.integers(0, 10**6).map(float))
ray_resources = st.dictionaries(
    st.one_of(
        st.sampled_from(["CPU", "GPU", "memory", "object_store_memory"]), custom_resource_names
    ),
    whole_amounts,
    max_size=5,
)
shell_commands = st.lists(
    st.sampled_from(["pip install -U pandas", "echo 'a; b' && true", "export A=1", "mkdir -p /x"]),
    max_size=3,
)
# Each flag has one value here: a flag given twice with two values is a problem, tested apart.
head_start_commands = st.lists(
    st.sampled_from(
        [
            "ray stop",
            "ulimit -n 65536; ray start --head --no-monitor --dashboard-host 0.0.0.0",
            "ulimit -n 4096",
            "ray start --head --include-dashboard --metrics-export-port=8080",
            "ray start --head --block --autoscaling-config=~/ray_bootstrap_config.yaml",
            "pip install -U requests",
        ]
    ),
    max_size=4,
)
worker_start_commands = st.lists(
    st.sampled_from(
        [
            "ray stop",
            "ulimit -n 65536; ray start --address=$RAY_HEAD_IP:6379",
            "ray start --address=$RAY_HEAD_IP:6379 --object-manager-port=8076",
            "ray start --node-ip-address=$MY_POD_IP",
        ]
    ),
    max_size=3,
)


@st.composite
def pod_configs(draw: st.DrawFn) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "ray-node", "image": "rayproject/ray:2.9.0"}
    if draw(st.booleans()):
        container.update(KEEP_ALIVE)
    spec: dict[str, Any] = {"containers": [container]}
    policy = draw(st.sampled_from([None, "Never", "Always", "OnFailure"]))
    if policy:
        spec["restartPolicy"] = policy
    metadata: dict[str, Any] = {"generateName": "legacy-"}
    if draw(st.booleans()):
        metadata["labels"] = {"team": draw(names)}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@st.composite
def pod_types(draw: st.DrawFn, name: str) -> dict[str, Any]:
    pod_type: dict[str, Any] = {"name": name, "podConfig": draw(pod_configs())}
    high = draw(st.integers(0, 20))
    if draw(st.booleans()):
        pod_type["maxWorkers"] = high
        pod_type["minWorkers"] = draw(st.integers(0, high))
    resources = draw(ray_resources)
    if resources:
        pod_type["rayResources"] = resources
    setup = draw(shell_commands)
    if setup:
        pod_type["setupCommands"] = setup
    return pod_type


@st.composite
def legacy_clusters(draw: st.DrawFn) -> dict[str, Any]:
    type_names = draw(st.lists(names, min_size=1, max_size=4, unique=True))
    spec: dict[str, Any] = {
        "headPodType": draw(st.sampled_from(type_names)),
        "podTypes": [draw(pod_types(name)) for name in type_names],
        # Large enough that a pod type without maxWorkers still fits above minWorkers 0.
        "maxWorkers": draw(st.integers(0, 100)),
    }
    optional = {
        "upscalingSpeed": st.floats(0, 1000, allow_nan=False),
        "idleTimeoutMinutes": st.integers(0, 10**6),
        "headStartRayCommands": head_start_commands,
        "workerStartRayCommands": worker_start_commands,
        "headSetupCommands": shell_commands,
        "workerSetupCommands": shell_commands,
        "headServicePorts": st.lists(
            st.tuples(st.sampled_from(["serve", "grpc", "custom-port"]), st.integers(1024, 65535)),
            max_size=3,
            unique_by=(lambda p: p[0], lambda p: p[1]),
        ).map(lambda ports: [{"name": n, "port": p, "targetPort": p} for n, p in ports]),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            spec[key] = draw(strategy)
    return {
        "apiVersion": "cluster.ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "legacy-" + draw(st.from_regex(r"[a-z0-9]{1,10}", fullmatch=True))},
        "spec": spec,
    }


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(legacy=legacy_clusters())
def test_every_legacy_cluster_converts_into_one_our_crd_and_webhook_accept(
    legacy: dict[str, Any],
) -> None:
    cluster = convert_legacy_cluster(legacy).cluster

    model = v1.RayCluster.model_validate(cluster)
    assert validate_raycluster(model.model_dump(by_alias=True, exclude_none=True)) == []
    assert raycluster_warnings(cluster) == []
    head_type = legacy["spec"]["headPodType"]
    groups = {group["groupName"]: group for group in cluster["spec"]["workerGroupSpecs"]}
    for pod_type in legacy["spec"]["podTypes"]:
        group = groups.get(pod_type["name"])
        if group is None:
            assert pod_type["name"] == head_type
            continue
        assert group["minReplicas"] == group["replicas"] == pod_type.get("minWorkers", 0)
        if "maxWorkers" in pod_type:
            assert group["maxReplicas"] == pod_type["maxWorkers"]
    templates = [
        cluster["spec"]["headGroupSpec"]["template"],
        *(g["template"] for g in groups.values()),
    ]
    for template in templates:
        ray_container = template["spec"]["containers"][0]
        assert "sleep infinity" not in str(ray_container.get("command"))
        assert "sleep infinity" not in str(ray_container.get("args"))
        assert template["spec"].get("restartPolicy") in (None, "Never")
