"""The operator learns its own ServiceAccount (`--service-account`, else the Downward API's
`POD_SERVICE_ACCOUNT` and `POD_NAMESPACE`), and the webhook and the controllers hold every
template to it through the same `ClusterLimits`."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from ray_operator.settings import Settings, add_run_arguments, cluster_limits, settings_from_args
from ray_operator.validation.identity import OperatorIdentity


def parse(*argv: str) -> Settings:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return settings_from_args(parser.parse_args(argv))


@pytest.fixture(autouse=True)
def no_identity_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "POD_SERVICE_ACCOUNT",
        "POD_NAMESPACE",
        "RAY_OPERATOR_SERVICE_ACCOUNT",
        "RAY_OPERATOR_SERVICE_ACCOUNT_NAMESPACE",
    ):
        monkeypatch.delenv(name, raising=False)


def test_the_downward_api_variables_name_the_operators_identity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_SERVICE_ACCOUNT", "ray-operator")
    monkeypatch.setenv("POD_NAMESPACE", "ray-system")
    settings = parse()
    assert settings.operator_identity == OperatorIdentity("ray-operator", "ray-system")
    assert cluster_limits(settings).operator_identity == settings.operator_identity


def test_flags_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_SERVICE_ACCOUNT", "ray-operator")
    monkeypatch.setenv("POD_NAMESPACE", "ray-system")
    settings = parse("--service-account=op", "--service-account-namespace=ops")
    assert settings.operator_identity == OperatorIdentity("op", "ops")


def test_outside_a_cluster_the_identity_is_unknown_and_nothing_is_refused() -> None:
    settings = parse()
    assert settings.operator_identity is None
    assert cluster_limits(settings).operator_identity is None


def test_a_service_account_without_a_known_namespace_is_no_identity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        "ray_operator.settings.IN_CLUSTER_NAMESPACE_FILE",
        Path("/nonexistent"),
    )
    assert parse("--service-account=ray-operator").operator_identity is None
