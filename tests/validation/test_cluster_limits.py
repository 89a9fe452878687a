"""The Pods one RayCluster may ask for are bounded (`--max-pods-per-cluster`), per group and in
total, counting `numOfHosts`; `maxReplicas` alone creates nothing and stays unbounded."""

from __future__ import annotations

import argparse

import pytest
from ray_operator.settings import Settings, add_run_arguments, settings_from_args
from ray_operator.validation import validate_raycluster
from ray_operator.validation.limits import DEFAULT_MAX_PODS_PER_CLUSTER, ClusterLimits
from ray_operator.validation.rayjob import validate_rayjob

from tests.builders.clusters import raycluster, worker_group

INT32_MAX = 2**31 - 1
RULE = "at most 10000 Pods per cluster (the operator's --max-pods-per-cluster)"


def _messages(cluster: dict[str, object], limits: ClusterLimits | None = None) -> list[str]:
    return [str(error) for error in validate_raycluster(cluster, limits=limits or ClusterLimits())]


def test_replicas_and_max_replicas_at_int32_max_are_refused_with_the_path() -> None:
    group = worker_group(replicas=INT32_MAX, max_replicas=INT32_MAX)
    assert _messages(raycluster(groups=[group])) == [
        f"spec.workerGroupSpecs[0].replicas: Invalid value: {INT32_MAX}: asks for {INT32_MAX} "
        f"Pods (x numOfHosts 1); {RULE}"
    ]


def test_the_schema_default_max_replicas_alone_is_accepted() -> None:
    # The CRD defaults maxReplicas to 2147483647 for the autoscaler: it creates nothing by itself.
    assert _messages(raycluster(groups=[worker_group(replicas=3, max_replicas=INT32_MAX)])) == []


def test_num_of_hosts_multiplies_the_pods_of_a_replica() -> None:
    group = worker_group(replicas=100, max_replicas=200, numOfHosts=101)
    assert _messages(raycluster(groups=[group])) == [
        "spec.workerGroupSpecs[0].replicas: Invalid value: 100: asks for 10100 Pods "
        f"(x numOfHosts 101); {RULE}"
    ]


def test_min_replicas_is_bounded_even_when_replicas_is_not_larger() -> None:
    group = worker_group(replicas=None, min_replicas=20_000, max_replicas=INT32_MAX)
    assert _messages(raycluster(groups=[group])) == [
        "spec.workerGroupSpecs[0].minReplicas: Invalid value: 20000: asks for 20000 Pods "
        f"(x numOfHosts 1); {RULE}"
    ]


def test_groups_within_the_bound_may_not_add_up_past_it() -> None:
    groups = [worker_group(f"g{i}", replicas=4_000, max_replicas=4_000) for i in range(3)]
    assert _messages(raycluster(groups=groups)) == [
        "spec.workerGroupSpecs: Invalid value: 12001: the head and every group's replicas x "
        f"numOfHosts add up to this many Pods; {RULE}"
    ]


def test_exactly_the_bound_is_accepted_head_included() -> None:
    group = worker_group(replicas=9_999, max_replicas=9_999)
    assert _messages(raycluster(groups=[group])) == []
    group["replicas"] = group["maxReplicas"] = 10_000
    assert len(_messages(raycluster(groups=[group]))) == 1


def test_a_suspended_group_asks_for_no_pods() -> None:
    group = worker_group(replicas=50_000, max_replicas=50_000, suspend=True)
    assert _messages(raycluster(groups=[group])) == []


def test_the_bound_is_configurable() -> None:
    group = worker_group(replicas=50_000, max_replicas=50_000)
    assert _messages(raycluster(groups=[group]), ClusterLimits(max_pods_per_cluster=100_000)) == []
    assert len(_messages(raycluster(groups=[group]), ClusterLimits(max_pods_per_cluster=5))) == 1


def test_embedded_clusters_are_bounded_under_the_owners_field() -> None:
    cluster_spec = raycluster(groups=[worker_group(replicas=INT32_MAX, max_replicas=INT32_MAX)])
    rayjob = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "job", "namespace": "ns1"},
        "spec": {"entrypoint": "python x.py", "rayClusterSpec": cluster_spec["spec"]},
    }
    assert [e.field for e in validate_rayjob(rayjob)] == [
        "spec.rayClusterSpec.workerGroupSpecs[0].replicas"
    ]


def test_the_settings_default_is_the_documented_one() -> None:
    assert Settings(identity="x").max_pods_per_cluster == DEFAULT_MAX_PODS_PER_CLUSTER == 10_000


def test_the_bound_comes_from_a_flag_or_its_environment_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def parsed(*argv: str) -> Settings:
        parser = argparse.ArgumentParser()
        add_run_arguments(parser)
        return settings_from_args(parser.parse_args(argv))

    assert parsed("--max-pods-per-cluster", "50000").max_pods_per_cluster == 50_000
    monkeypatch.setenv("RAY_OPERATOR_MAX_PODS_PER_CLUSTER", "123")
    assert parsed().max_pods_per_cluster == 123
    with pytest.raises(SystemExit):
        parsed("--max-pods-per-cluster", "0")
