"""`serve_config_deployed` on answers no real head gives: hostile, partial or in transition.

How a real head reports configs is covered in tests/dashboard/test_deployed_serve_config.py.
"""

from __future__ import annotations

import datetime
import time
from typing import Any

import pytest
from ray_operator.spec.dashboard_errors import DashboardBadResponse
from ray_operator.spec.dashboard_models import (
    ServeApplicationStatus,
    ServeDetails,
    parse_serve_details,
)
from ray_operator.status.deployed_serve_config import same_json, serve_config_deployed

APP = {"name": "a", "import_path": "m:app", "deployments": [{"name": "D", "user_config": {}}]}


def running(config: dict[str, Any] | None, status: str = "RUNNING") -> ServeApplicationStatus:
    return ServeApplicationStatus(status, deployed_config=config)


def test_numbers_compare_by_value_but_never_equal_a_bool() -> None:
    assert same_json({"a": [1, 2.0]}, {"a": [1.0, 2]})
    assert not same_json({"a": 1}, {"a": True})
    assert not same_json({"a": 0}, {"a": False})
    assert not same_json({"a": 1}, {"a": "1"})
    assert not same_json({"a": None}, {})
    assert not same_json([1, 2], [2, 1])


def test_an_application_being_deleted_counts_only_if_the_config_still_names_it() -> None:
    leaving = ServeDetails({"a": running(APP), "old": running(None, "DELETING")})
    assert serve_config_deployed({"applications": [APP]}, leaving)[0]
    back = ServeDetails({"a": running(APP, "DELETING")})
    assert serve_config_deployed({"applications": [APP]}, back) == (
        False,
        "application a has no deployed config",
    )


def test_an_application_without_a_deployed_config_is_not_taken_as_deployed() -> None:
    details = ServeDetails({"a": running(None, "DEPLOYING")})
    assert not serve_config_deployed({"applications": [APP]}, details)[0]


def test_an_application_the_config_does_not_name_means_a_difference() -> None:
    details = ServeDetails({"a": running(APP), "extra": running({"import_path": "m:x"})})
    assert serve_config_deployed({"applications": [APP]}, details) == (
        False,
        "the set of applications differs",
    )


def test_what_serve_does_not_report_is_never_taken_as_deployed() -> None:
    details = ServeDetails({"a": running(APP)})
    traced = {"tracing_config": {"exporter_import_path": "m:f"}, "applications": [APP]}
    assert serve_config_deployed(traced, details)[1] == "Serve does not report tracing_config"
    overridden = {
        "logging_config": {"log_level": "INFO"},
        "applications": [{**APP, "logging_config": {"log_level": "DEBUG"}}],
    }
    shown = ServeDetails({"a": running({**APP, "logging_config": {"log_level": "DEBUG"}})})
    assert not serve_config_deployed(overridden, shown)[0]


def test_target_capacity_must_match_the_instances() -> None:
    config = {"target_capacity": 50, "applications": [APP]}
    assert serve_config_deployed(config, ServeDetails({"a": running(APP)}, 50.0))[0]
    assert not serve_config_deployed(config, ServeDetails({"a": running(APP)}, None))[0]
    assert not serve_config_deployed({"applications": [APP]}, ServeDetails({"a": running(APP)}, 0))[
        0
    ]


@pytest.mark.parametrize(
    "config",
    [
        {"applications": "not a list"},
        {"applications": ["not a mapping"]},
        {"applications": [APP, APP]},
        {"applications": [{**APP, "name": 7}]},
        {"applications": [{**APP, "user_config": datetime.date(2026, 1, 1)}]},
    ],
    ids=["applications", "application", "duplicate", "name", "not-json"],
)
def test_a_config_of_the_wrong_shape_is_not_taken_as_deployed(config: dict[str, Any]) -> None:
    assert not serve_config_deployed(config, ServeDetails({"a": running(APP)}))[0]


def test_a_deeply_nested_config_costs_no_stack() -> None:
    deep: Any = "leaf"
    for _ in range(100_000):
        deep = [deep]
    started = time.monotonic()
    assert same_json(deep, deep)
    assert not same_json(deep, [[["other"]]])
    assert time.monotonic() - started < 2


def test_serve_details_parse_hostile_shapes_into_bad_responses() -> None:
    answers: tuple[Any, ...] = (
        [],
        {"applications": [1]},
        {"applications": {"a": "x"}},
        {"applications": {"a": {"deployments": [1]}}},
        {"applications": {}, "target_capacity": "50"},
        {"applications": {}, "target_capacity": True},
    )
    for answer in answers:
        with pytest.raises(DashboardBadResponse):
            parse_serve_details(answer)
    details = parse_serve_details(
        {
            "target_capacity": 20,
            "applications": {
                "a": {"status": "RUNNING", "deployed_app_config": "not an object"},
                "b": {"status": "RUNNING", "deployments": {"D": "not an object"}},
            },
        }
    )
    assert details.target_capacity == 20.0
    assert details.applications["a"].deployed_config is None
    assert details.applications["b"].deployments["D"].status == ""


def test_the_deployed_config_never_shows_in_a_repr() -> None:
    app = running({"runtime_env": {"env_vars": {"TOKEN": "s3cr3t"}}})
    assert "s3cr3t" not in repr(app)
    assert "s3cr3t" not in repr(ServeDetails({"a": app}))
