"""Specification of `--feature-gates`: KubeRay's gate names and form, RayCronJob on by default,
and every gate this operator cannot honour refused by name rather than ignored."""

from __future__ import annotations

import argparse

import pytest
from ray_operator.app import watched_kinds
from ray_operator.features import (
    GATES,
    RAY_CRON_JOB,
    RAY_SERVICE_INCREMENTAL_UPGRADE,
    InvalidFeatureGatesError,
    gate_off_detail,
    parse_feature_gates,
)
from ray_operator.spec.kinds import RAY_CRON_JOB as RAY_CRON_JOB_KIND

from tests.runtime.run_flags import parse


def test_the_gate_names_are_kuberays() -> None:
    assert set(GATES) == {
        "RayClusterStatusConditions",
        "RayJobDeletionPolicy",
        "RayMultiHostIndexing",
        "RayServiceIncrementalUpgrade",
        "RayCronJob",
        "SidecarSubmitterRestart",
        "RayClusterNetworkPolicy",
        "GCSFaultToleranceEmbeddedStorage",
        "RayClusterMTLS",
        "RayClusterHistoryServer",
        "KubernetesWAS",
    }


def test_ray_cron_jobs_are_on_by_default_and_the_flag_turns_them_off() -> None:
    assert parse().feature_gates.enabled(RAY_CRON_JOB)
    assert RAY_CRON_JOB_KIND in watched_kinds(parse())
    off = parse("--feature-gates", "RayCronJob=false")
    assert not off.feature_gates.enabled(RAY_CRON_JOB)
    assert RAY_CRON_JOB_KIND not in watched_kinds(off)


def test_incremental_upgrades_are_on_by_default_as_in_kuberay_and_the_flag_turns_them_off() -> None:
    assert parse().feature_gates.enabled(RAY_SERVICE_INCREMENTAL_UPGRADE)
    off = parse("--feature-gates", "RayServiceIncrementalUpgrade=false")
    assert not off.feature_gates.enabled(RAY_SERVICE_INCREMENTAL_UPGRADE)


def test_kuberays_form_is_accepted_with_spaces_and_any_case_of_the_value() -> None:
    gates = parse_feature_gates(" RayCronJob=False , RayClusterStatusConditions=TRUE ,")
    assert not gates.enabled(RAY_CRON_JOB)
    assert gates.enabled("RayClusterStatusConditions")


def test_the_environment_stands_in_for_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_OPERATOR_FEATURE_GATES", "RayCronJob=false")
    assert not parse().feature_gates.enabled(RAY_CRON_JOB)


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("Foo=true", "unknown feature gate 'Foo' (known: RayClusterStatusConditions,"),
        ("RayCronJob", "'RayCronJob': expected <gate>=true or <gate>=false"),
        ("RayCronJob=maybe", "'RayCronJob=maybe': expected <gate>=true or <gate>=false"),
        ("KubernetesWAS=true", "KubernetesWAS=true: not implemented by this operator yet"),
        (
            "RayClusterStatusConditions=false",
            "RayClusterStatusConditions=false: this operator always behaves as KubeRay with the "
            "gate on",
        ),
    ],
)
def test_a_gate_this_operator_cannot_honour_is_refused_by_name(flag: str, message: str) -> None:
    with pytest.raises(InvalidFeatureGatesError) as raised:
        parse_feature_gates(flag)
    assert str(raised.value).startswith(message)
    with pytest.raises(argparse.ArgumentError):
        parse("--feature-gates", flag)


def test_every_problem_is_named_at_once() -> None:
    with pytest.raises(InvalidFeatureGatesError) as raised:
        parse_feature_gates("A=true,KubernetesWAS=true")
    assert "unknown feature gate 'A'" in str(raised.value)
    assert "KubernetesWAS=true: not implemented" in str(raised.value)


def test_a_huge_flag_is_refused_before_it_is_read() -> None:
    with pytest.raises(InvalidFeatureGatesError, match="longer than 4096"):
        parse_feature_gates("RayCronJob=true," * 1000)


def test_a_field_refused_for_its_gate_says_what_turns_it_on() -> None:
    assert gate_off_detail(RAY_CRON_JOB) == (
        "the RayCronJob feature gate is off in this operator "
        "(--feature-gates=RayCronJob=true turns it on)"
    )
    assert gate_off_detail("KubernetesWAS") == (
        "not implemented by this operator yet (KubeRay's KubernetesWAS feature gate)"
    )


def test_a_repeated_flag_adds_to_the_earlier_ones_and_the_later_value_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAY_OPERATOR_FEATURE_GATES", "KubernetesWAS=false")
    gates = parse(
        "--feature-gates=RayCronJob=false",
        "--feature-gates=RayCronJob=true,RayMultiHostIndexing=true",
    ).feature_gates
    assert gates.overrides == {
        "KubernetesWAS": False,
        "RayCronJob": True,
        "RayMultiHostIndexing": True,
    }
