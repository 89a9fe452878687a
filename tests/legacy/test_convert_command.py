"""`ray-operator convert` as a user runs it: files or stdin in, YAML or JSON out, warnings and
problems on stderr with the document's index, and exit code 2 with nothing on stdout whenever
any document cannot be converted."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from ray_operator.cli import main
from ray_operator.legacy.conversion import convert_legacy_cluster
from ray_operator.legacy.convert_command import MAX_INPUT_BYTES

from tests.legacy.legacy_clusters import (
    DELETE,
    EXAMPLES,
    LEGACY_FIXTURES,
    load_example,
    set_path,
    small_legacy_cluster,
)

CONFIG_MAP = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}}


def convert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *options: str
) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `ray-operator convert FILE` on a file holding `text`."""
    source = tmp_path / "input.yaml"
    source.write_text(text)
    code = main(["convert", str(source), *options])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def legacy_with(fields: dict[str, Any]) -> dict[str, Any]:
    legacy = small_legacy_cluster()
    for path, value in fields.items():
        set_path(legacy, path, value)
    return legacy


BAD_INPUT = [
    pytest.param(
        {"spec.headPodType": DELETE},
        ["document 1: spec.headPodType: is required"],
        id="no headPodType",
    ),
    pytest.param(
        {"spec": None, "metadata.name": None},
        ["document 1: metadata.name: is required", "document 1: spec: is required"],
        id="null name and spec",
    ),
    pytest.param(
        {"spec.headPodType": "gpu"},
        ['document 1: spec.headPodType: names no pod type of spec.podTypes: "gpu"'],
        id="headPodType names no pod type",
    ),
    pytest.param(
        {"spec.podTypes[2]": {"name": "cpu", "podConfig": {"spec": {"containers": [{}]}}}},
        ['document 1: spec.podTypes[2].name: duplicate pod type name "cpu"'],
        id="duplicate pod type names",
    ),
    pytest.param(
        {
            "spec.maxWorkers": -1,
            "spec.idleTimeoutMinutes": -1,
            "spec.upscalingSpeed": -0.5,
            "spec.podTypes[1].minWorkers": -1,
            "spec.podTypes[1].maxWorkers": -2,
        },
        [
            "document 1: spec.maxWorkers: must be a non-negative integer, got -1",
            "document 1: spec.podTypes[1].minWorkers: must be a non-negative integer, got -1",
            "document 1: spec.podTypes[1].maxWorkers: must be a non-negative integer, got -2",
            "document 1: spec.idleTimeoutMinutes: must be a non-negative integer, got -1",
            "document 1: spec.upscalingSpeed: must be a non-negative number, got -0.5",
        ],
        id="negative counts",
    ),
    pytest.param(
        {"spec.podTypes[1].minWorkers": 5},
        ["document 1: spec.podTypes[1].minWorkers: must not exceed maxWorkers (4), got 5"],
        id="minWorkers above maxWorkers",
    ),
    pytest.param(
        {"spec.podTypes[1].maxWorkers": 2**31, "spec.idleTimeoutMinutes": 2**31 - 1},
        [
            "document 1: spec.podTypes[1].maxWorkers: must be at most 2147483647, got 2147483648",
            "document 1: spec.idleTimeoutMinutes: must be at most 35791394 (idleTimeoutSeconds "
            "is a 32-bit integer), got 2147483647",
        ],
        id="counts ray.io/v1 cannot hold",
    ),
    pytest.param(
        {"spec.podTypes[1].podConfig": DELETE},
        ["document 1: spec.podTypes[1].podConfig: is required"],
        id="pod type without podConfig",
    ),
    pytest.param(
        {"spec.podTypes[1].podConfig.spec.containers": []},
        [
            "document 1: spec.podTypes[1].podConfig.spec.containers: must list at least one "
            "container"
        ],
        id="podConfig without containers",
    ),
    pytest.param(
        {"spec.podTypes[1].name": "cpu workers"},
        [
            'document 1: spec.podTypes[1].name: "cpu workers" is not a valid worker group name: '
            "at most 63 alphanumeric characters, '-', '_' or '.', starting and ending with an "
            "alphanumeric character"
        ],
        id="pod type name that is no group name",
    ),
    pytest.param(
        {
            "spec.podTypes[1].minWorkers": "3",
            "spec.podTypes[1].rayResources": {"CPU": "4", "spot": 0.5},
            "spec.headStartRayCommands": "ray start --head",
        },
        [
            'document 1: spec.podTypes[1].minWorkers: must be a non-negative integer, got "3"',
            'document 1: spec.podTypes[1].rayResources.CPU: must be a non-negative number, got "4"',
            "document 1: spec.podTypes[1].rayResources.spot: must be a whole number, got 0.5",
            'document 1: spec.headStartRayCommands: must be a list of strings, got "ray start '
            '--head"',
        ],
        id="wrong types",
    ),
    pytest.param(
        {"spec.podTypes[1].rayResources": {'a"b': 1, "tab\t": 1, "$ok`too": 1}},
        [
            'document 1: spec.podTypes[1].rayResources.a"b: a resource name must be printable '
            'text without \\ or "',
            "document 1: spec.podTypes[1].rayResources.tab\t: a resource name must be printable "
            'text without \\ or "',
        ],
        id="resource names KubeRay's resources form cannot carry",
    ),
    pytest.param(
        {
            "spec.podTypes[1].podConfig.spec.containers[0].args": [
                "python prepare.py; sleep infinity"
            ]
        },
        [
            "document 1: spec.podTypes[1].podConfig.spec.containers[0].command: runs `sleep "
            "infinity` besides other commands: KubeRay runs the container's command before `ray "
            "start`, so Ray would never start; keep only the other commands"
        ],
        id="a container command that sleeps forever after other work",
    ),
    pytest.param(
        {"metadata.labels": {"tier": 1}, "metadata.annotations": {"owner": None}},
        [
            "document 1: metadata.labels.tier: must be a string, got 1",
            "document 1: metadata.annotations.owner: must be a string, got null",
        ],
        id="labels and annotations that are not strings",
    ),
    pytest.param(
        {"spec.headStartRayCommands": ["ray start --head --num-cpus=1", "ray start --num-cpus=2"]},
        [
            'document 1: spec.headStartRayCommands[1]: sets --num-cpus to "2", but '
            'spec.headStartRayCommands[0] sets it to "1"'
        ],
        id="a rayStartParams value given twice",
    ),
    pytest.param(
        {
            "spec.workerStartRayCommands": ["ray start --num-cpus=2"],
            "spec.podTypes[1].rayResources": {"CPU": 4},
        },
        [
            'document 1: spec.podTypes[1].rayResources: sets --num-cpus to "4", but '
            'spec.workerStartRayCommands[0] sets it to "2"'
        ],
        id="rayResources disagreeing with ray start",
    ),
    pytest.param(
        {"spec.headStartRayCommands": ["ray start --head > /tmp/ray.log 2>&1"]},
        [
            "document 1: spec.headStartRayCommands[0]: `ray start` with pipes or redirections "
            'cannot be converted: "ray start --head > /tmp/ray.log 2>&1"'
        ],
        id="ray start with a redirection",
    ),
    pytest.param(
        {"spec.headStartRayCommands": ["ray start --head --port='6379"]},
        [
            "document 1: spec.headStartRayCommands[0]: is not a shell command (unbalanced "
            'quotes): "ray start --head --port=\'6379"'
        ],
        id="unparseable start command",
    ),
]


@pytest.mark.parametrize(("fields", "problems"), BAD_INPUT)
def test_bad_legacy_cluster_exits_2_naming_every_problem(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    fields: dict[str, Any],
    problems: list[str],
) -> None:
    code, out, err = convert(tmp_path, capsys, yaml.safe_dump(legacy_with(fields)))
    assert (code, out) == (2, "")
    assert err.splitlines() == problems


def test_every_problem_of_every_document_is_reported_before_exiting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    documents = [
        legacy_with({"spec.podTypes[1].minWorkers": -1}),
        CONFIG_MAP,
        small_legacy_cluster(),
        legacy_with({"spec.headPodType": DELETE, "spec.podTypes[1].maxWorkers": "4"}),
    ]
    code, out, err = convert(tmp_path, capsys, yaml.safe_dump_all(documents))
    assert (code, out) == (2, "")
    assert err.splitlines() == [
        "document 1: spec.podTypes[1].minWorkers: must be a non-negative integer, got -1",
        "document 4: spec.headPodType: is required",
        'document 4: spec.podTypes[1].maxWorkers: must be a non-negative integer, got "4"',
    ]


def test_a_document_that_is_not_yaml_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = convert(tmp_path, capsys, "spec: [unclosed\n")
    assert (code, out) == (2, "")
    assert err.startswith("ray-operator convert: not valid YAML: ")
    assert len(err.splitlines()) == 1


def test_a_billion_laughs_document_is_refused_quickly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 10):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 9)}]")
    started = time.monotonic()
    code, out, err = convert(tmp_path, capsys, "\n".join(lines) + "\n")
    assert (code, out) == (2, "")
    assert err == "ray-operator convert: yaml: document contains excessive aliasing\n"
    assert time.monotonic() - started < 5


def test_a_few_aliases_are_fine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = "data: &shared {a: 1}\ncopy: *shared\n"
    code, out, _ = convert(tmp_path, capsys, text)
    assert (code, yaml.safe_load(out)) == (0, {"data": {"a": 1}, "copy": {"a": 1}})
    assert "&" not in out  # written out in full, no anchors


def test_input_beyond_16_mib_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = convert(tmp_path, capsys, "# " + "x" * MAX_INPUT_BYTES)
    assert (code, out) == (2, "")
    assert err.endswith("input.yaml is larger than 16 MiB\n")


def test_other_documents_pass_through_and_empty_ones_are_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        "---\n" + yaml.safe_dump(CONFIG_MAP) + "---\n---\n" + yaml.safe_dump(small_legacy_cluster())
    )
    code, out, err = convert(tmp_path, capsys, text)
    documents = list(yaml.safe_load_all(out))
    assert (code, err) == (0, "")
    assert documents[0] == CONFIG_MAP
    assert [d["apiVersion"] for d in documents] == ["v1", "ray.io/v1"]
    assert out.count("\n---\n") == 1


def test_warnings_go_to_stderr_with_the_document_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    documents = [CONFIG_MAP, legacy_with({"spec.upscalingSpeed": 3})]
    code, out, err = convert(tmp_path, capsys, yaml.safe_dump_all(documents))
    assert code == 0
    assert err == (
        "document 2: spec.upscalingSpeed: 3 is not kept: upscalingMode Default does not limit "
        "scale-up\n"
    )
    assert yaml.safe_load_all(out)


def test_json_output_is_one_object_or_a_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, single, _ = convert(tmp_path, capsys, yaml.safe_dump(small_legacy_cluster()), "-o", "json")
    assert json.loads(single)["apiVersion"] == "ray.io/v1"
    documents = yaml.safe_dump_all([CONFIG_MAP, small_legacy_cluster()])
    _, several, _ = convert(tmp_path, capsys, documents, "-o", "json")
    listed = json.loads(several)
    assert (listed["apiVersion"], listed["kind"]) == ("v1", "List")
    assert [item["kind"] for item in listed["items"]] == ["ConfigMap", "RayCluster"]


def test_output_bytes_are_the_same_every_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = yaml.safe_dump_all([CONFIG_MAP, legacy_with({"spec.setupCommands": ["echo a"]})])
    assert convert(tmp_path, capsys, text) == convert(tmp_path, capsys, text)
    assert convert(tmp_path, capsys, text, "-o", "json") == convert(
        tmp_path, capsys, text, "-o", "json"
    )


def test_output_bytes_do_not_depend_on_the_hash_seed(tmp_path: Path) -> None:
    """A YAML set iterates in an order that changes with Python's hash seed."""
    source = tmp_path / "input.yaml"
    sets = "names: !!set {" + ", ".join(f"n{i}" for i in range(50)) + "}\n"
    source.write_text(yaml.safe_dump(small_legacy_cluster()) + "---\n" + sets)
    outputs = {
        subprocess.run(
            [sys.executable, "-m", "ray_operator.cli", "convert", str(source)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1


def test_dash_reads_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = yaml.safe_dump(small_legacy_cluster()).encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text)))
    code = main(["convert", "-"])
    assert code == 0
    assert yaml.safe_load(capsys.readouterr().out)["kind"] == "RayCluster"


@pytest.mark.parametrize("file_name", EXAMPLES)
@pytest.mark.parametrize("output", ["yaml", "json"])
def test_the_written_cluster_reads_back_as_the_conversion(
    capsys: pytest.CaptureFixture[str], file_name: str, output: str
) -> None:
    code = main(["convert", str(LEGACY_FIXTURES / file_name), "-o", output])
    written = capsys.readouterr().out
    expected = convert_legacy_cluster(load_example(file_name)).cluster
    assert code == 0
    assert (yaml.safe_load(written) if output == "yaml" else json.loads(written)) == expected
