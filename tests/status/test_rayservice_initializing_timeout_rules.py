"""Specification: `ray.io/initializing-timeout` as pure rules (KubeRay's
`markFailedOnInitializingTimeout`): a RayService still Ready=False/Initializing after the timeout
gets Ready=False/InitializingTimeout and no cluster names; one that served once never does."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from ray_operator.status import rayservice as rules

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)


def annotated(value: str | None) -> dict[str, Any]:
    annotations = {} if value is None else {"ray.io/initializing-timeout": value}
    return {"metadata": {"name": "svc", "annotations": annotations}}


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("2s", 2.0), ("5m", 300.0), ("1h30m", 5400.0), ("90", 90.0), ("", None), (None, None)],
)
def test_the_timeout_reads_go_durations_and_whole_seconds(
    value: str | None, seconds: float | None
) -> None:
    assert rules.initializing_timeout(annotated(value)) == seconds


@pytest.mark.parametrize(
    "value",
    ["9" * 19, "9" * 5000, "1" + "0" * 400 + "h", "2562048h"],
    ids=["beyond-int64", "5000-digits", "400-digit-hours", "beyond-292-years"],
)
def test_a_timeout_go_cannot_read_is_none_never_an_overflow(value: str) -> None:
    # int() of 5000 digits raised ValueError, float() of 400 digits OverflowError: on every
    # reconcile and in the webhook (a 500), for an annotation any editor may set.
    assert rules.initializing_timeout(annotated(value)) is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(2, "2s"), (2.5, "2.5s"), (90, "1m30s"), (3600, "1h0m0s"), (0.25, "250ms"), (0, "0s")],
)
def test_durations_are_written_as_go_writes_them(seconds: float, text: str) -> None:
    assert rules.go_duration(seconds) == text


def initializing(since: datetime.datetime) -> dict[str, Any]:
    return {
        "observedGeneration": 1,
        "activeServiceStatus": {},
        "pendingServiceStatus": {"rayClusterName": "svc-abc12"},
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "Initializing",
                "message": "RayService is initializing",
                "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "observedGeneration": 1,
            },
            {
                "type": "UpgradeInProgress",
                "status": "False",
                "reason": "Initializing",
                "message": "RayService is initializing",
                "lastTransitionTime": since.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "observedGeneration": 1,
            },
        ],
    }


def observed(timeout: float | None, *, endpoints: int = 0) -> rules.Observed:
    return rules.Observed(
        generation=1,
        active=None,
        pending=None,
        active_apps=None,
        pending_apps=None,
        services_point_to=None,
        serve_endpoints=endpoints,
        new_pending_name=None,
        initializing_timeout=timeout,
    )


def ready(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Ready")


def test_within_the_timeout_it_keeps_initializing() -> None:
    old = initializing(NOW - datetime.timedelta(seconds=59))
    new = rules.compute_status(old, observed(60), now=NOW)
    assert ready(new)["reason"] == "Initializing"
    assert new["pendingServiceStatus"]["rayClusterName"] == "svc-abc12"
    assert not rules.initializing_timed_out(new)


def test_past_the_timeout_it_fails_and_names_no_cluster() -> None:
    old = initializing(NOW - datetime.timedelta(seconds=61))
    new = rules.compute_status(old, observed(60), now=NOW)
    condition = ready(new)
    assert (condition["status"], condition["reason"]) == ("False", "InitializingTimeout")
    assert condition["message"] == (
        "RayService failed to become ready within the configured timeout of 1m0s. "
        "Time spent initializing: 1m1s"
    )
    assert "rayClusterName" not in new["pendingServiceStatus"]
    assert rules.initializing_timed_out(new)
    # UpgradeInProgress keeps its Initializing reason, as in KubeRay.
    upgrade = next(c for c in new["conditions"] if c["type"] == "UpgradeInProgress")
    assert upgrade["reason"] == "Initializing"


def test_without_the_annotation_it_initializes_forever() -> None:
    old = initializing(NOW - datetime.timedelta(days=3))
    assert ready(rules.compute_status(old, observed(None), now=NOW))["reason"] == "Initializing"


def test_serve_endpoints_win_over_a_timeout() -> None:
    old = initializing(NOW - datetime.timedelta(hours=1))
    new = rules.compute_status(old, observed(60, endpoints=1), now=NOW)
    assert ready(new)["status"] == "True"


def test_a_service_that_served_once_does_not_time_out() -> None:
    old = initializing(NOW - datetime.timedelta(hours=1))
    old["conditions"][0].update(status="False", reason="ZeroServeEndpoints")
    new = rules.compute_status(old, observed(60), now=NOW)
    assert ready(new)["reason"] == "ZeroServeEndpoints"
