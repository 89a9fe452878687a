"""The `ray start` command line: KubeRay's defaults, ordering, booleans and resource derivation."""

from __future__ import annotations

from typing import Any

from ray_operator.builders.ray_start import (
    complete_params,
    format_flags,
    head_port,
    ray_start_command,
)


def _params(
    group: dict[str, Any] | None = None,
    *,
    node_type: str = "worker",
    limits: dict[str, Any] | None = None,
    requests: dict[str, Any] | None = None,
) -> dict[str, str]:
    resources = {"limits": limits or {}, "requests": requests or {}}
    address = "demo-head-svc.ns1.svc.cluster.local:6379" if node_type == "worker" else None
    return complete_params(
        group or {}, node_type=node_type, head_address=address, container_resources=resources
    )


def test_worker_joins_head_service_fqdn() -> None:
    assert _params()["address"] == "demo-head-svc.ns1.svc.cluster.local:6379"


def test_user_address_is_kept() -> None:
    assert _params({"rayStartParams": {"address": "elsewhere:1234"}})["address"] == "elsewhere:1234"


def test_head_listens_for_dashboard_on_all_interfaces() -> None:
    params = _params(node_type="head")
    assert params["dashboard-host"] == "0.0.0.0"
    assert "address" not in params


def test_block_is_always_added_even_when_user_disables_it() -> None:
    assert _params({"rayStartParams": {"block": "false"}})["block"] == "true"


def test_metrics_and_agent_ports_default_but_user_values_win() -> None:
    params = _params({"rayStartParams": {"metrics-export-port": "9999"}})
    assert params["metrics-export-port"] == "9999"
    assert params["dashboard-agent-listen-port"] == "52365"


def test_num_cpus_rounds_up_the_cpu_limit() -> None:
    assert _params(limits={"cpu": "500m"})["num-cpus"] == "1"
    assert _params(limits={"cpu": "2500m"})["num-cpus"] == "3"


def test_num_cpus_falls_back_to_the_request_when_no_limit() -> None:
    assert _params(requests={"cpu": "2"})["num-cpus"] == "2"


def test_memory_comes_from_the_limit_only_as_in_kuberay() -> None:
    assert _params(limits={"memory": "1Gi"})["memory"] == "1073741824"
    assert "memory" not in _params(requests={"memory": "1Gi"})


def test_explicit_params_are_not_overridden_by_container_resources() -> None:
    params = _params(
        {"rayStartParams": {"num-cpus": "7", "memory": "5"}}, limits={"cpu": "2", "memory": "1Gi"}
    )
    assert (params["num-cpus"], params["memory"]) == ("7", "5")


def test_gpu_limit_sets_num_gpus() -> None:
    assert _params(limits={"nvidia.com/gpu": "2"})["num-gpus"] == "2"
    assert _params(limits={"nvidia.com/mig-1g.5gb": "1"})["num-gpus"] == "1"


def test_zero_gpu_limit_is_ignored() -> None:
    assert "num-gpus" not in _params(limits={"nvidia.com/gpu": "0"})


def test_tpu_limit_becomes_a_custom_resource() -> None:
    assert _params(limits={"google.com/tpu": "4"})["resources"] == "'{\"TPU\":4}'"


def test_neuron_cores_merge_with_existing_custom_resources() -> None:
    params = _params(
        {"rayStartParams": {"resources": '"{"custom_resource":2}"'}},
        limits={"aws.amazon.com/neuroncore": "4"},
    )
    assert params["resources"] == '\'{"custom_resource":2,"neuron_cores":4}\''


def test_user_accelerator_resource_is_not_overridden() -> None:
    params = _params(
        {"rayStartParams": {"resources": "'{\"TPU\":4}'"}}, limits={"google.com/tpu": "8"}
    )
    assert params["resources"] == "'{\"TPU\":4}'"


def test_malformed_resources_param_is_left_alone() -> None:
    assert (
        _params({"rayStartParams": {"resources": "{"}}, limits={"google.com/tpu": "8"})["resources"]
        == "{"
    )


def test_a_resources_param_nested_beyond_json_decoding_is_left_alone() -> None:
    deep = "[" * 5000 + "]" * 5000  # Python's json gives up near 1000 levels (RecursionError)
    params = _params({"rayStartParams": {"resources": deep}}, limits={"google.com/tpu": "8"})
    assert params["resources"] == deep


def test_group_resources_field_overrides_ray_start_params() -> None:
    group = {
        "rayStartParams": {"num-cpus": "9"},
        "resources": {"CPU": "2", "memory": "1Gi", "GPU": "1", "custom": "0.5"},
    }
    params = _params(group)
    assert params["num-cpus"] == "2"
    assert params["memory"] == "1073741824"
    assert params["num-gpus"] == "1"
    assert params["resources"] == "'{\"custom\":0.5}'"


def test_group_labels_become_sorted_labels_param() -> None:
    assert _params({"labels": {"zone": "b", "arch": "arm"}})["labels"] == "arch=arm,zone=b"


def test_flags_are_sorted_and_true_becomes_a_bare_flag() -> None:
    flags = format_flags(
        {"num-cpus": "1", "block": "true", "disable-usage-stats": "True", "verbose": "false"}
    )
    assert flags == " --block  --disable-usage-stats  --num-cpus=1 "


def test_flags_that_take_explicit_booleans_keep_false() -> None:
    assert format_flags({"include-dashboard": "false"}) == " --include-dashboard=false "


def test_head_command_starts_with_head_flag() -> None:
    assert ray_start_command({"block": "true"}, node_type="head") == "ray start --head  --block "
    assert ray_start_command({"block": "true"}, node_type="worker") == "ray start  --block "


def test_head_port_defaults_to_gcs_port() -> None:
    assert head_port({}) == "6379"
    assert head_port({"port": "6380"}) == "6380"
