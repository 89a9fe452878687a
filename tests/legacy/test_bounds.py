"""Bounds: a legacy object as large as the API server stores converts in linear time; counts
are taken up to what ray.io/v1 holds and refused beyond; hostile YAML is refused, not obeyed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from ray_operator.cli import main
from ray_operator.legacy.conversion import LegacyConversionError, convert_legacy_cluster
from ray_operator.legacy.findings import show
from ray_operator.validation.limits import ClusterLimits

from tests.legacy.legacy_clusters import legacy_pod, small_legacy_cluster

API_SERVER_OBJECT_BYTES = 1_500_000


def test_a_legacy_cluster_as_large_as_the_api_server_stores_converts_quickly() -> None:
    legacy = small_legacy_cluster()
    spec = legacy["spec"]
    spec["podTypes"] += [
        {"name": f"type-{i}", "maxWorkers": 1, "podConfig": legacy_pod("ray")} for i in range(2000)
    ]
    spec["headServicePorts"] = [
        {"name": f"p{i}", "port": 1024 + i, "targetPort": 1024 + i} for i in range(5000)
    ]
    spec["podTypes"][0]["podConfig"]["spec"]["containers"][0]["ports"] = [
        {"containerPort": 1024 + i} for i in range(5000)
    ]
    spec["headSetupCommands"] = ["echo a; echo 'b && c'"] * 20000
    spec["headStartRayCommands"] = [
        "ray start --head " + " ".join(f"--flag-{i}=v" for i in range(5000))
    ]
    assert len(json.dumps(legacy)) > API_SERVER_OBJECT_BYTES

    started = time.monotonic()
    cluster = convert_legacy_cluster(legacy).cluster

    assert time.monotonic() - started < 10
    assert len(cluster["spec"]["workerGroupSpecs"]) == 2001
    assert len(cluster["spec"]["headGroupSpec"]["rayStartParams"]) == 5000


def test_worker_commands_copied_into_too_many_groups_are_a_problem() -> None:
    legacy = small_legacy_cluster()
    spec = legacy["spec"]
    spec["podTypes"] += [
        {"name": f"type-{i}", "maxWorkers": 1, "podConfig": legacy_pod("ray")} for i in range(2000)
    ]
    spec["workerSetupCommands"] = ["echo " + "x" * 100] * 10000  # 1 MB, 2001 times

    started = time.monotonic()
    with pytest.raises(LegacyConversionError) as raised:
        convert_legacy_cluster(legacy)

    assert time.monotonic() - started < 10
    assert [str(problem) for problem in raised.value.problems] == [
        "spec.workerStartRayCommands: with the worker setup commands, copied into each of 2001 "
        "worker groups, they would make a RayCluster of more than 3145728 bytes"
    ]


def test_counts_up_to_int32_are_kept() -> None:
    legacy = small_legacy_cluster()
    legacy["spec"]["podTypes"][1]["maxWorkers"] = 2**31 - 1
    legacy["spec"]["maxWorkers"] = 2**31 - 1
    group = convert_legacy_cluster(legacy).cluster["spec"]["workerGroupSpecs"][0]
    assert group["maxReplicas"] == 2**31 - 1


def test_a_cluster_beyond_the_operators_pod_limit_is_a_problem() -> None:
    legacy = small_legacy_cluster()
    legacy["spec"]["podTypes"][1]["minWorkers"] = 4

    with pytest.raises(LegacyConversionError) as raised:
        convert_legacy_cluster(legacy, limits=ClusterLimits(max_pods_per_cluster=4))

    assert str(raised.value) == (
        "(converted RayCluster): ray-operator would refuse it: spec.workerGroupSpecs: Invalid "
        "value: 5: the head and every group's replicas x numOfHosts add up to this many Pods; at "
        "most 4 Pods per cluster (the operator's --max-pods-per-cluster)"
    )


def test_a_resources_flag_nested_beyond_json_decoding_is_a_problem() -> None:
    legacy = small_legacy_cluster()
    deep = "[" * 5000 + "]" * 5000  # Python's json gives up near 1000 levels (RecursionError)
    legacy["spec"]["workerStartRayCommands"] = [f"ray start --resources='{deep}'"]
    with pytest.raises(LegacyConversionError) as raised:
        convert_legacy_cluster(legacy)
    assert [str(problem) for problem in raised.value.problems] == [
        f"spec.workerStartRayCommands[0]: `ray start --resources` must be a JSON object, got "
        f"{show(deep)}"
    ]


def test_a_container_field_of_the_wrong_shape_is_a_problem() -> None:
    legacy = small_legacy_cluster()
    legacy["spec"]["podTypes"][1]["podConfig"]["spec"]["containers"][0]["env"] = "A=1"
    with pytest.raises(LegacyConversionError) as raised:
        convert_legacy_cluster(legacy)
    assert [str(problem) for problem in raised.value.problems] == [
        'spec.podTypes[1].podConfig.spec.containers[0].env: must be a list, got "A=1"'
    ]


@pytest.mark.parametrize(
    ("text", "options", "message"),
    [
        pytest.param(
            "a: " + "9" * 5000,
            [],
            "ray-operator convert: not valid YAML: Exceeds the limit (4300 digits) "
            "for integer string conversion: value has 5000 digits; use "
            "sys.set_int_max_str_digits() to increase the limit",
            id="an integer of 5000 digits",
        ),
        pytest.param(
            "a: !!python/object/apply:os.system ['true']",
            [],
            "ray-operator convert: not valid YAML: could not determine a constructor for the tag "
            "'tag:yaml.org,2002:python/object/apply:os.system' in {path}, line 1, column 4",
            id="a Python object tag",
        ),
        pytest.param(
            "a: !!set {x, y}",
            ["-o", "json"],
            "ray-operator convert: cannot write json: cannot write a set as JSON",
            id="a YAML set written as JSON",
        ),
        pytest.param(
            "a: .inf",
            ["-o", "json"],
            "ray-operator convert: cannot write json: Out of range float values are not JSON "
            "compliant: inf",
            id="infinity written as JSON",
        ),
    ],
)
def test_hostile_yaml_is_refused_with_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    text: str,
    options: list[str],
    message: str,
) -> None:
    source = tmp_path / "input.yaml"
    source.write_text(text + "\n")
    assert main(["convert", str(source), *options]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", message.format(path=source) + "\n")
