"""The mapping, field by field: each row changes one legacy field of a small legacy cluster and
names where it lands in the RayCluster, and the exact warnings the change brings.

The table of docs/migrating-from-legacy.md lists the same fields.
"""

from __future__ import annotations

from typing import Any

import pytest
from ray_operator.legacy.conversion import convert_legacy_cluster, is_legacy_cluster

from tests.legacy.legacy_clusters import (
    DELETE,
    get_path,
    set_path,
    small_legacy_cluster,
)

HEAD = "spec.headGroupSpec"
HEAD_CONTAINER = "spec.headGroupSpec.template.spec.containers[0]"
WORKERS = "spec.workerGroupSpecs[0]"
WORKER_CONTAINER = "spec.workerGroupSpecs[0].template.spec.containers[0]"
ABSENT = object()


def row(
    field: str,
    legacy: dict[str, Any],
    expected: dict[str, Any],
    warnings: tuple[str, ...] = (),
) -> Any:
    """`legacy`: paths of the small legacy cluster to set; `expected`: paths of the result and
    their values (ABSENT: not there); `warnings`: all the conversion's warnings, in order."""
    return pytest.param(legacy, expected, warnings, id=field)


MAPPING = [
    row("metadata.name", {}, {"metadata.name": "legacy", "apiVersion": "ray.io/v1"}),
    row("metadata.namespace", {"metadata.namespace": "team-a"}, {"metadata.namespace": "team-a"}),
    row("metadata.labels", {"metadata.labels": {"team": "a"}}, {"metadata.labels": {"team": "a"}}),
    row(
        "metadata.annotations (without kubectl's last-applied-configuration)",
        {
            "metadata.annotations": {
                "owner": "me",
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
            }
        },
        {"metadata.annotations": {"owner": "me"}},
    ),
    row(
        "metadata.uid and other server-set metadata",
        {"metadata.uid": "1234", "metadata.resourceVersion": "5"},
        {"metadata": {"name": "legacy"}},
    ),
    row(
        "spec.maxWorkers: the maxWorkers of a pod type without one",
        {"spec.podTypes[1].maxWorkers": DELETE},
        {f"{WORKERS}.maxReplicas": 10},
    ),
    row(
        "spec.maxWorkers absent: Ray's default, 2",
        {"spec.maxWorkers": DELETE, "spec.podTypes[1].maxWorkers": DELETE},
        {f"{WORKERS}.maxReplicas": 2},
    ),
    row(
        "spec.maxWorkers below the worker groups' maxReplicas",
        {"spec.maxWorkers": 3},
        {f"{WORKERS}.maxReplicas": 4},
        (
            "spec.maxWorkers: not kept: ray.io/v1 has no cluster-wide worker limit, and the "
            "worker groups' maxReplicas add up to 4, above maxWorkers 3",
        ),
    ),
    row(
        "spec.upscalingSpeed 1: Conservative",
        {"spec.upscalingSpeed": 1},
        {"spec.autoscalerOptions.upscalingMode": "Conservative"},
    ),
    row(
        "spec.upscalingSpeed absent: 1, Conservative",
        {},
        {"spec.autoscalerOptions.upscalingMode": "Conservative"},
    ),
    row(
        "spec.upscalingSpeed below 1: Conservative",
        {"spec.upscalingSpeed": 0.5},
        {"spec.autoscalerOptions.upscalingMode": "Conservative"},
        (
            "spec.upscalingSpeed: 0.5 is not kept: upscalingMode Conservative is rate limited to "
            "the cluster size (speed 1)",
        ),
    ),
    row(
        "spec.upscalingSpeed above 1: Default",
        {"spec.upscalingSpeed": 2.5},
        {"spec.autoscalerOptions.upscalingMode": "Default"},
        ("spec.upscalingSpeed: 2.5 is not kept: upscalingMode Default does not limit scale-up",),
    ),
    row(
        "spec.idleTimeoutMinutes",
        {"spec.idleTimeoutMinutes": 10},
        {"spec.autoscalerOptions.idleTimeoutSeconds": 600},
    ),
    row(
        "spec.idleTimeoutMinutes absent: 5 minutes",
        {},
        {"spec.autoscalerOptions.idleTimeoutSeconds": 300},
    ),
    row(
        "spec.headServicePorts: a named port of the head's Ray container",
        {"spec.headServicePorts": [{"name": "serve", "port": 8000, "targetPort": 8000}]},
        {f"{HEAD_CONTAINER}.ports": [{"name": "serve", "containerPort": 8000}]},
    ),
    row(
        "spec.headServicePorts: an unnamed container port gets the name",
        {
            "spec.podTypes[0].podConfig.spec.containers[0].ports": [{"containerPort": 8000}],
            "spec.headServicePorts": [{"name": "serve", "port": 8000, "targetPort": 8000}],
        },
        {f"{HEAD_CONTAINER}.ports": [{"containerPort": 8000, "name": "serve"}]},
    ),
    row(
        "spec.headServicePorts[].targetPort other than port",
        {"spec.headServicePorts": [{"name": "serve", "port": 80, "targetPort": 8000}]},
        {f"{HEAD_CONTAINER}.ports": [{"name": "serve", "containerPort": 8000}]},
        (
            "spec.headServicePorts[0].port: dropped: KubeRay's head Service uses the container "
            "port, 8000, not 80",
        ),
    ),
    row(
        "spec.headServicePorts[].targetPort named",
        {"spec.headServicePorts": [{"name": "serve", "port": 8000, "targetPort": "http"}]},
        {f"{HEAD_CONTAINER}.ports": [{"name": "serve", "containerPort": 8000}]},
        (
            'spec.headServicePorts[0].targetPort: dropped the named target port "http": the head '
            "Service targets the container port 8000",
        ),
    ),
    row(
        "spec.headPodType: the head group",
        {},
        {f"{HEAD_CONTAINER}.name": "ray-head", "spec.workerGroupSpecs[1]": ABSENT},
    ),
    row(
        "spec.podTypes[].maxWorkers of the head type above 0: a worker group too",
        {"spec.podTypes[0].maxWorkers": 2},
        {
            f"{HEAD_CONTAINER}.name": "ray-head",
            f"{WORKERS}.groupName": "head",
            f"{WORKERS}.maxReplicas": 2,
            f"{WORKER_CONTAINER}.name": "ray-head",
            "spec.workerGroupSpecs[1].groupName": "cpu",
        },
        (
            "spec.podTypes[0].maxWorkers: the legacy autoscaler could also start workers of the "
            'head type: worker group "head" made from it',
        ),
    ),
    row("spec.podTypes[].name", {}, {f"{WORKERS}.groupName": "cpu"}),
    row(
        "spec.podTypes[].minWorkers: minReplicas and replicas",
        {"spec.podTypes[1].minWorkers": 3},
        {f"{WORKERS}.minReplicas": 3, f"{WORKERS}.replicas": 3},
    ),
    row(
        "spec.podTypes[].minWorkers absent: 0",
        {"spec.podTypes[1].minWorkers": DELETE},
        {f"{WORKERS}.minReplicas": 0, f"{WORKERS}.replicas": 0},
    ),
    row(
        "spec.podTypes[].minWorkers null: absent, as the API server reads null",
        {"spec.podTypes[1].minWorkers": None},
        {f"{WORKERS}.minReplicas": 0},
    ),
    row("spec.podTypes[].maxWorkers", {}, {f"{WORKERS}.maxReplicas": 4}),
    row(
        "spec.podTypes[].rayResources",
        {
            "spec.podTypes[1].rayResources": {
                "CPU": 4,
                "GPU": 1.0,
                "memory": 2_000_000_000,
                "object_store_memory": 500_000_000,
                "spot": 1,
                "accelerator_type:A100": 2,
            }
        },
        {
            f"{WORKERS}.rayStartParams": {
                "memory": "2000000000",
                "num-cpus": "4",
                "num-gpus": "1",
                "object-store-memory": "500000000",
                "resources": '"{\\"accelerator_type:A100\\": 2, \\"spot\\": 1}"',
            }
        },
    ),
    row(
        "spec.podTypes[].rayResources: characters bash expands are escaped",
        {"spec.podTypes[1].rayResources": {"$HOME`x`": 1}},
        {f"{WORKERS}.rayStartParams.resources": '"{\\"\\$HOME\\`x\\`\\": 1}"'},
    ),
    row(
        "spec.podTypes[].rayResources of the head type",
        {"spec.podTypes[0].rayResources": {"CPU": 0}},
        {f"{HEAD}.rayStartParams": {"num-cpus": "0"}},
    ),
    row(
        "spec.podTypes[].setupCommands: run before Ray on that type's workers",
        {"spec.podTypes[1].setupCommands": ["pip install a", "echo ready"]},
        {
            f"{WORKER_CONTAINER}.args": ["pip install a && echo ready"],
            f"{WORKER_CONTAINER}.command": ABSENT,
        },
    ),
    row(
        "spec.podTypes[].setupCommands of the head type: never run on the head",
        {"spec.podTypes[0].setupCommands": ["pip install a"]},
        {f"{HEAD_CONTAINER}.args": ABSENT},
        (
            "spec.podTypes[0].setupCommands: dropped: the legacy autoscaler ran a pod type's "
            "setup commands on its workers only",
        ),
    ),
    row(
        "spec.podTypes[].workerSetupCommands: replaces setupCommands",
        {
            "spec.podTypes[1].setupCommands": ["echo a"],
            "spec.podTypes[1].workerSetupCommands": ["echo b"],
        },
        {f"{WORKER_CONTAINER}.args": ["echo b"]},
        (
            "spec.podTypes[1].setupCommands: dropped: workerSetupCommands replaces it, as in the "
            "legacy operator",
        ),
    ),
    row(
        "spec.podTypes[].podConfig.metadata.labels and annotations",
        {
            "spec.podTypes[1].podConfig.metadata.labels": {"team": "a"},
            "spec.podTypes[1].podConfig.metadata.annotations": {"note": "x"},
        },
        {f"{WORKERS}.template.metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}}},
    ),
    row(
        "spec.podTypes[].podConfig.metadata.generateName: KubeRay names Pods itself",
        {},
        {f"{WORKERS}.template.metadata": ABSENT},
    ),
    row(
        "spec.podTypes[].podConfig.metadata.name, namespace, ownerReferences",
        {
            "spec.podTypes[1].podConfig.metadata.name": "w",
            "spec.podTypes[1].podConfig.metadata.namespace": "n",
            "spec.podTypes[1].podConfig.metadata.ownerReferences": [],
        },
        {f"{WORKERS}.template.metadata": ABSENT},
        (
            "spec.podTypes[1].podConfig.metadata.name: dropped: KubeRay names and owns the Pods "
            "it creates",
            "spec.podTypes[1].podConfig.metadata.namespace: dropped: KubeRay names and owns the "
            "Pods it creates",
            "spec.podTypes[1].podConfig.metadata.ownerReferences: dropped: KubeRay names and owns "
            "the Pods it creates",
        ),
    ),
    row(
        "spec.podTypes[].podConfig.spec: the template's spec",
        {"spec.podTypes[1].podConfig.spec.nodeSelector": {"pool": "cpu"}},
        {f"{WORKERS}.template.spec.nodeSelector": {"pool": "cpu"}},
    ),
    row(
        "spec.podTypes[].podConfig.spec.restartPolicy Never: kept",
        {"spec.podTypes[1].podConfig.spec.restartPolicy": "Never"},
        {f"{WORKERS}.template.spec.restartPolicy": "Never"},
    ),
    row(
        "spec.podTypes[].podConfig.spec.restartPolicy Always: dropped",
        {"spec.podTypes[1].podConfig.spec.restartPolicy": "Always"},
        {f"{WORKERS}.template.spec.restartPolicy": ABSENT},
        (
            "spec.podTypes[1].podConfig.spec.restartPolicy: dropped Always: KubeRay replaces "
            "failed Ray Pods itself",
        ),
    ),
    row(
        "spec.podTypes[].podConfig: the keep-alive command of the Ray container is removed",
        {},
        {f"{WORKER_CONTAINER}.command": ABSENT, f"{WORKER_CONTAINER}.args": ABSENT},
    ),
    row(
        "spec.podTypes[].podConfig: a keep-alive variant is removed too",
        {
            "spec.podTypes[1].podConfig.spec.containers[0].command": ["bash", "-c"],
            "spec.podTypes[1].podConfig.spec.containers[0].args": ["exec sleep infinity"],
        },
        {f"{WORKER_CONTAINER}.command": ABSENT, f"{WORKER_CONTAINER}.args": ABSENT},
    ),
    row(
        "spec.podTypes[].podConfig: a bare sleep infinity is removed",
        {
            "spec.podTypes[1].podConfig.spec.containers[0].command": ["sleep", "infinity"],
            "spec.podTypes[1].podConfig.spec.containers[0].args": DELETE,
        },
        {f"{WORKER_CONTAINER}.command": ABSENT, f"{WORKER_CONTAINER}.args": ABSENT},
    ),
    row(
        "spec.podTypes[].podConfig: another command of the Ray container is kept",
        {
            "spec.podTypes[1].podConfig.spec.containers[0].command": ["python", "prepare.py"],
            "spec.podTypes[1].podConfig.spec.containers[0].args": ["--fast"],
        },
        {
            f"{WORKER_CONTAINER}.command": ["python", "prepare.py"],
            f"{WORKER_CONTAINER}.args": ["--fast"],
        },
    ),
    row(
        "spec.podTypes[].podConfig: a kept command runs before the setup commands",
        {
            "spec.podTypes[1].podConfig.spec.containers[0].command": ["python", "prepare.py"],
            "spec.podTypes[1].podConfig.spec.containers[0].args": DELETE,
            "spec.podTypes[1].setupCommands": ["echo a"],
        },
        {
            f"{WORKER_CONTAINER}.command": ABSENT,
            f"{WORKER_CONTAINER}.args": ["python prepare.py && echo a"],
        },
    ),
    row(
        "spec.headStartRayCommands: the legacy defaults",
        {
            "spec.headStartRayCommands": [
                "ray stop",
                "ulimit -n 65536; ray start --head --no-monitor --dashboard-host 0.0.0.0",
            ]
        },
        {f"{HEAD}.rayStartParams": {"dashboard-host": "0.0.0.0"}, f"{HEAD_CONTAINER}.env": ABSENT},
    ),
    row(
        "spec.headStartRayCommands: flags as rayStartParams",
        {
            "spec.headStartRayCommands": [
                "ray start --head --port=6380 --num-cpus 0 --include-dashboard "
                "--redis-password=secret"
            ]
        },
        {
            f"{HEAD}.rayStartParams": {
                "include-dashboard": "true",
                "num-cpus": "0",
                "port": "6380",
                "redis-password": "secret",
            }
        },
    ),
    row(
        "spec.headStartRayCommands: --resources in KubeRay's form, values quoted for bash",
        {
            "spec.headStartRayCommands": [
                'ray start --head --resources=\'{"spot": 1, "CPU": 2}\' --temp-dir "/tmp/my ray" '
                '--system-config=\'{"a": "(b) | c"}\''
            ]
        },
        {
            f"{HEAD}.rayStartParams": {
                "num-cpus": "2",
                "resources": '"{\\"spot\\": 1}"',
                "system-config": '\'{"a": "(b) | c"}\'',
                "temp-dir": "'/tmp/my ray'",
            }
        },
    ),
    row(
        "spec.headStartRayCommands: flags KubeRay sets itself",
        {
            "spec.headStartRayCommands": [
                "ray start --head --block --autoscaling-config=~/ray_bootstrap_config.yaml"
            ]
        },
        {f"{HEAD}.rayStartParams": {}},
        (
            "spec.headStartRayCommands[0]: dropped `--block`: KubeRay sets it itself",
            "spec.headStartRayCommands[0]: dropped `--autoscaling-config`: KubeRay sets it itself",
        ),
    ),
    row(
        "spec.headStartRayCommands: a value from a shell variable",
        {"spec.headStartRayCommands": ["ray start --head --node-ip-address=$MY_POD_IP"]},
        {f"{HEAD}.rayStartParams": {}},
        (
            "spec.headStartRayCommands[0]: dropped `--node-ip-address=$MY_POD_IP`: it reads a "
            "shell variable of the legacy operator",
        ),
    ),
    row(
        "spec.headStartRayCommands: ulimit -n other than 65536",
        {"spec.headStartRayCommands": ["ulimit -n 1024 && ray start --head"]},
        {f"{HEAD_CONTAINER}.env": [{"name": "RAY_START_ULIMIT_OPEN_FILES", "value": "1024"}]},
    ),
    row(
        "spec.headStartRayCommands: ulimit -n in an entry of its own never reached ray start",
        {"spec.headStartRayCommands": ["ulimit -n 1024", "ray start --head"]},
        {f"{HEAD_CONTAINER}.env": ABSENT},
        (
            "spec.headStartRayCommands[0]: dropped `ulimit -n 1024`: no `ray start` follows it "
            "in its own shell",
        ),
    ),
    row(
        "spec.headStartRayCommands: other shell commands run before Ray",
        {"spec.headStartRayCommands": ["pip install x; ray start --head", "echo 'a; b'"]},
        {
            f"{HEAD_CONTAINER}.args": ["pip install x && echo 'a; b'"],
            f"{HEAD_CONTAINER}.command": ABSENT,
        },
    ),
    row(
        "spec.workerStartRayCommands: the legacy defaults",
        {
            "spec.workerStartRayCommands": [
                "ray stop",
                "ulimit -n 65536; ray start --address=$RAY_HEAD_IP:6379",
            ]
        },
        {f"{WORKERS}.rayStartParams": {}},
    ),
    row(
        "spec.workerStartRayCommands: flags of every worker group",
        {
            "spec.podTypes[0].maxWorkers": 1,
            "spec.workerStartRayCommands": ["ray start --address=$RAY_HEAD_IP:6379 --num-cpus=2"],
        },
        {
            f"{WORKERS}.rayStartParams": {"num-cpus": "2"},
            "spec.workerGroupSpecs[1].rayStartParams": {"num-cpus": "2"},
            f"{HEAD}.rayStartParams": {},
        },
        (
            "spec.podTypes[0].maxWorkers: the legacy autoscaler could also start workers of the "
            'head type: worker group "head" made from it',
        ),
    ),
    row(
        "spec.setupCommands and spec.headSetupCommands: before Ray on the head",
        {"spec.setupCommands": ["echo common"], "spec.headSetupCommands": ["echo head"]},
        {
            f"{HEAD_CONTAINER}.args": ["echo common && echo head"],
            f"{WORKER_CONTAINER}.args": ["echo common"],
        },
    ),
    row(
        "spec.SetupCommands (the legacy operator's spelling) and spec.workerSetupCommands",
        {"spec.SetupCommands": ["echo common"], "spec.workerSetupCommands": ["echo worker"]},
        {
            f"{HEAD_CONTAINER}.args": ["echo common"],
            f"{WORKER_CONTAINER}.args": ["echo common && echo worker"],
        },
    ),
    row(
        "a spec field the legacy schema does not have",
        {"spec.autoscalingMode": "fast"},
        {"spec.autoscalingMode": ABSENT},
        ("spec.autoscalingMode: dropped: not a field of the legacy RayCluster",),
    ),
    row(
        "a top-level field the legacy object does not have, and its status",
        {"extra\nline": 1, "status": {"phase": "Running"}},
        {"status": ABSENT},
        ("extra\\nline: dropped: not a field of the legacy RayCluster",),
    ),
    row(
        "(not a legacy field) upgradeStrategy Recreate and the in-tree autoscaler, always",
        {},
        {"spec.upgradeStrategy": {"type": "Recreate"}, "spec.enableInTreeAutoscaling": True},
    ),
]


@pytest.mark.parametrize(("legacy_fields", "expected", "warnings"), MAPPING)
def test_legacy_field_maps_to(
    legacy_fields: dict[str, Any], expected: dict[str, Any], warnings: tuple[str, ...]
) -> None:
    legacy = small_legacy_cluster()
    for path, value in legacy_fields.items():
        set_path(legacy, path, value)

    conversion = convert_legacy_cluster(legacy)

    for path, value in expected.items():
        if value is ABSENT:
            with pytest.raises((KeyError, IndexError)):
                get_path(conversion.cluster, path)
        else:
            assert get_path(conversion.cluster, path) == value, path
    assert [str(warning) for warning in conversion.warnings] == list(warnings)


def test_a_legacy_cluster_is_recognised_by_api_version_and_kind() -> None:
    assert is_legacy_cluster(small_legacy_cluster())
    assert not is_legacy_cluster({"apiVersion": "ray.io/v1", "kind": "RayCluster"})
    assert not is_legacy_cluster({"apiVersion": "cluster.ray.io/v1", "kind": "RayJob"})
    assert not is_legacy_cluster(["cluster.ray.io/v1"])


def test_the_same_legacy_cluster_converts_to_the_same_bytes() -> None:
    first = convert_legacy_cluster(small_legacy_cluster())
    second = convert_legacy_cluster(small_legacy_cluster())
    assert repr(first) == repr(second)


def test_conversion_leaves_the_legacy_object_unchanged() -> None:
    legacy = small_legacy_cluster()
    legacy["spec"]["podTypes"][1]["setupCommands"] = ["echo a"]
    before = repr(legacy)
    convert_legacy_cluster(legacy)
    assert repr(legacy) == before


def test_a_head_type_that_also_makes_workers_gets_separate_templates() -> None:
    legacy = small_legacy_cluster()
    legacy["spec"]["podTypes"][0]["maxWorkers"] = 1
    legacy["spec"]["headServicePorts"] = [{"name": "serve", "port": 8000, "targetPort": 8000}]
    spec = convert_legacy_cluster(legacy).cluster["spec"]
    assert spec["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"] == [
        {"name": "serve", "containerPort": 8000}
    ]
    assert "ports" not in spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
