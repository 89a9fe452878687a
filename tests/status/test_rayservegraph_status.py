"""Specification: a RayServeGraph's status as `status/rayservegraph` computes it — conditions a
user can act on, a phase for people, Ready only when fetched, parsed and deployed, and nothing to
write when nothing changed."""

from __future__ import annotations

import datetime
from typing import Any

from ray_operator.status.rayservegraph import (
    MAX_MESSAGE_LENGTH,
    ConditionState,
    Deployment,
    Observed,
    compute_status,
    condition,
    deployed_condition,
    status_changed,
)

NOW = datetime.datetime(2026, 11, 23, 21, 0, tzinfo=datetime.UTC)
LATER = NOW + datetime.timedelta(minutes=5)
FETCHED = ConditionState("True", "Fetched", "fetched revision 0123456789ab (10 bytes)")
NOT_MODIFIED = ConditionState("True", "NotModified", "the document is unchanged")
PARSED = ConditionState("True", "Parsed", "a graph of 3 deployments, ingress 'pre'")
DEPLOYED = ConditionState("True", "RayServiceReady", "RayService pipeline is ready")
DEPLOYMENT = Deployment(
    artifact={
        "url": "https://registry.example.com/g.pb",
        "digest": "sha256:" + "0123456789ab" + "f" * 52,
        "etag": '"v1"',
        "fetchedAt": "2026-11-23T21:00:00Z",
        "sizeBytes": 10,
    },
    graph={"ingress": "pre", "deployments": ["pre"], "edges": []},
    serve_config_digest="sha256:" + "e" * 64,
)


def ready_status() -> dict[str, Any]:
    observed = Observed(
        generation=1,
        fetched=FETCHED,
        parsed=PARSED,
        deployed=DEPLOYED,
        deployment=DEPLOYMENT,
        rayservice_name="pipeline",
    )
    return compute_status({}, observed, now=NOW)


def rayservice(**status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "pipeline", "generation": 2}, "status": status}


READY_CONDITIONS = [
    {"type": "Ready", "status": "True", "reason": "NonZeroServeEndpoints", "message": "ok"}
]


def test_fetched_parsed_and_deployed_make_it_ready() -> None:
    status = ready_status()
    assert status["phase"] == "Ready"
    assert condition(status, "Ready")["status"] == "True"
    assert status["revision"] == "0123456789ab"
    assert status["artifact"] == DEPLOYMENT.artifact
    assert status["serveConfigDigest"] == DEPLOYMENT.serve_config_digest
    assert {c["observedGeneration"] for c in status["conditions"]} == {1}


def test_an_unchanged_document_computes_the_same_status() -> None:
    """A 304 (or the same digest) later on: nothing to write, not even the Fetched reason."""
    old = ready_status()
    again = Observed(
        generation=1, fetched=NOT_MODIFIED, deployed=DEPLOYED, rayservice_name="pipeline"
    )
    new = compute_status(old, again, now=LATER)
    assert not status_changed(old, new)
    assert condition(new, "Fetched")["reason"] == "Fetched"


def test_a_document_that_is_unchanged_after_a_failure_is_fetched_again() -> None:
    old = compute_status(
        ready_status(),
        Observed(generation=1, fetched=ConditionState("False", "Timeout", "took too long")),
        now=NOW,
    )
    assert old["phase"] == "Failed"
    new = compute_status(old, Observed(generation=1, fetched=NOT_MODIFIED), now=LATER)
    assert condition(new, "Fetched")["reason"] == "NotModified"
    assert condition(new, "Fetched")["lastTransitionTime"] == "2026-11-23T21:05:00Z"
    assert new["phase"] == "Ready"


def test_a_failed_fetch_keeps_what_is_deployed_and_says_why_it_is_not_ready() -> None:
    failed = ConditionState("False", "Unauthorized", "the token was refused (401)")
    new = compute_status(ready_status(), Observed(generation=1, fetched=failed), now=LATER)
    assert new["phase"] == "Failed"
    assert condition(new, "Ready") | {"lastTransitionTime": None} == {
        "type": "Ready",
        "status": "False",
        "reason": "Unauthorized",
        "message": "Fetched: the token was refused (401)",
        "lastTransitionTime": None,
        "observedGeneration": 1,
    }
    for kept in ("artifact", "graph", "revision", "serveConfigDigest"):
        assert new[kept] == ready_status()[kept]
    assert condition(new, "Deployed")["status"] == "True"


def test_a_rejected_document_is_invalid_and_keeps_what_is_deployed() -> None:
    rejected = ConditionState("False", "InvalidGraph", 'edges[0].callee: unknown "modle"')
    new = compute_status(
        ready_status(), Observed(generation=1, fetched=FETCHED, parsed=rejected), now=LATER
    )
    assert new["phase"] == "Invalid"
    assert condition(new, "Ready")["reason"] == "InvalidGraph"
    assert condition(new, "Ready")["message"].startswith("Parsed: edges[0].callee")
    assert new["artifact"] == DEPLOYMENT.artifact


def test_an_invalid_spec_is_invalid_and_changes_nothing_else() -> None:
    problem = "spec.source.url: Invalid value: must be https"
    new = compute_status(ready_status(), Observed(generation=2, spec_problem=problem), now=LATER)
    assert new["phase"] == "Invalid"
    assert condition(new, "Ready")["reason"] == "InvalidSpec"
    assert condition(new, "Ready")["message"] == problem
    assert new["observedGeneration"] == 2
    assert condition(new, "Deployed")["status"] == "True"


def test_a_new_object_is_fetching_until_a_document_arrives() -> None:
    new = compute_status({}, Observed(generation=1, rayservice_name="pipeline"), now=NOW)
    assert new["phase"] == "Fetching"
    assert condition(new, "Fetched")["status"] == "Unknown"
    assert condition(new, "Ready")["status"] == "False"


def test_deploying_until_the_rayservice_is_ready() -> None:
    waiting = ConditionState("False", "Initializing", "RayService pipeline: initializing")
    new = compute_status(
        {}, Observed(generation=1, fetched=FETCHED, parsed=PARSED, deployed=waiting), now=NOW
    )
    assert new["phase"] == "Deploying"
    assert condition(new, "Ready")["reason"] == "Initializing"


def test_messages_are_bounded() -> None:
    failed = ConditionState("False", "ServerError", "x" * 100_000)
    new = compute_status({}, Observed(generation=1, fetched=failed), now=NOW)
    assert all(len(c["message"]) <= MAX_MESSAGE_LENGTH for c in new["conditions"])


def test_lasttransitiontime_alone_is_no_change() -> None:
    old = ready_status()
    new = ready_status()
    for c in new["conditions"]:
        c["lastTransitionTime"] = "2030-01-01T00:00:00Z"
    assert not status_changed(old, new)
    new["phase"] = "Deploying"
    assert status_changed(old, new)


# --- Deployed mirrors the RayService --------------------------------------------------------------


def test_no_rayservice_is_not_deployed() -> None:
    assert deployed_condition(None, name="pipeline", owned=True).reason == "NoRayService"


def test_a_rayservice_of_someone_else_is_a_conflict_that_names_the_fix() -> None:
    state = deployed_condition(rayservice(), name="pipeline", owned=False)
    assert (state.status, state.reason) == ("False", "RayServiceConflict")
    assert "spec.serviceName" in state.message


def test_a_rayservice_that_is_not_ready_lends_its_reason() -> None:
    conditions = [{"type": "Ready", "status": "False", "reason": "Initializing", "message": "x"}]
    state = deployed_condition(
        rayservice(conditions=conditions, observedGeneration=2), name="pipeline", owned=True
    )
    assert (state.status, state.reason, state.message) == (
        "False",
        "Initializing",
        "RayService pipeline: x",
    )


def test_a_rayservice_that_has_not_taken_up_its_new_spec_is_not_deployed_yet() -> None:
    state = deployed_condition(
        rayservice(conditions=READY_CONDITIONS, observedGeneration=1), name="pipeline", owned=True
    )
    assert (state.status, state.reason) == ("False", "RayServiceUpdating")


def test_applications_still_deploying_are_not_deployed_yet() -> None:
    active = {"applicationStatuses": {"pipeline": {"status": "DEPLOYING"}}}
    state = deployed_condition(
        rayservice(conditions=READY_CONDITIONS, observedGeneration=2, activeServiceStatus=active),
        name="pipeline",
        owned=True,
    )
    assert (state.status, state.reason) == ("False", "ServeApplicationsNotRunning")
    assert "pipeline (DEPLOYING)" in state.message


def test_a_ready_rayservice_running_its_current_spec_is_deployed() -> None:
    active = {"applicationStatuses": {"pipeline": {"status": "RUNNING"}}}
    state = deployed_condition(
        rayservice(conditions=READY_CONDITIONS, observedGeneration=2, activeServiceStatus=active),
        name="pipeline",
        owned=True,
    )
    assert (state.status, state.reason) == ("True", "RayServiceReady")
