"""Specification: `spec.suspend` on a RayService follows KubeRay's state machine, as pure rules.

No suspension → (suspend: true) `Suspending` staged, nothing deleted yet → owned objects deleted →
`Suspended` → (suspend: false) resumed, initializing again. A stored `Suspending` completes even
when `suspend` is turned off meanwhile.
"""

from __future__ import annotations

import datetime
from typing import Any

from ray_operator.status import rayservice as rules
from ray_operator.status.rayservice import SuspendPhase

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
LATER = NOW + datetime.timedelta(minutes=5)


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


def serving() -> dict[str, Any]:
    """A RayService that serves from one cluster."""
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "NonZeroServeEndpoints",
        "message": "Number of serve endpoints is greater than 0",
        "lastTransitionTime": "2026-01-01T11:00:00Z",
        "observedGeneration": 1,
    }
    return {
        "observedGeneration": 1,
        "serviceStatus": "Running",
        "numServeEndpoints": 1,
        "activeServiceStatus": {"rayClusterName": "svc-abc12", "applicationStatuses": {}},
        "pendingServiceStatus": {"rayClusterName": "svc-def34"},
        "conditions": [ready],
    }


def test_without_suspend_nothing_changes() -> None:
    assert rules.suspend_phase(serving(), suspend=False) is SuspendPhase.NOT_SUSPENDED
    assert not rules.suspend_owns_reconcile(serving())


def test_suspend_first_stages_suspending_and_clears_what_is_served() -> None:
    assert rules.suspend_phase(serving(), suspend=True) is SuspendPhase.STAGE
    staged = rules.suspending_status(serving(), generation=2, now=NOW)
    assert staged["observedGeneration"] == 2
    assert staged["activeServiceStatus"] == {}
    assert staged["pendingServiceStatus"] == {}
    assert "numServeEndpoints" not in staged
    assert "serviceStatus" not in staged
    suspending = condition(staged, "Suspending")
    assert (suspending["status"], suspending["reason"]) == ("True", "SuspendRequested")
    assert suspending["observedGeneration"] == 2
    ready = condition(staged, "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "SuspendInProgress",
        "RayService is suspending.",
    )
    assert condition(staged, "UpgradeInProgress")["reason"] == "SuspendInProgress"
    assert condition(staged, "RollbackInProgress")["status"] == "False"
    assert rules.suspend_owns_reconcile(staged)


def test_a_stored_suspending_completes_even_when_suspend_is_turned_off() -> None:
    staged = rules.suspending_status(serving(), generation=2, now=NOW)
    assert rules.suspend_phase(staged, suspend=True) is SuspendPhase.DELETE
    assert rules.suspend_phase(staged, suspend=False) is SuspendPhase.DELETE


def test_suspending_waits_until_nothing_owned_is_left() -> None:
    staged = rules.suspending_status(serving(), generation=2, now=NOW)
    waiting = rules.suspension_progress_status(staged, all_deleted=False, now=LATER)
    suspending = condition(waiting, "Suspending")
    assert (suspending["status"], suspending["reason"]) == ("True", "SuspendInProgress")
    assert "Suspended" not in {c["type"] for c in waiting["conditions"]}
    # Still True: the transition time is the staging's.
    assert suspending["lastTransitionTime"] == "2026-01-01T12:00:00Z"


def test_suspended_once_all_deleted_and_stays_so_while_asked() -> None:
    staged = rules.suspending_status(serving(), generation=2, now=NOW)
    done = rules.suspension_progress_status(staged, all_deleted=True, now=LATER)
    assert condition(done, "Suspending")["status"] == "False"
    suspended = condition(done, "Suspended")
    assert (suspended["status"], suspended["reason"]) == ("True", "SuspendComplete")
    assert suspended["message"] == "All owned resources have been deleted."
    assert condition(done, "Ready")["message"] == "RayService is suspended."
    assert rules.suspend_phase(done, suspend=True) is SuspendPhase.SUSPENDED
    assert rules.suspend_owns_reconcile(done)
    assert not rules.status_changed(
        done, rules.suspension_progress_status(done, all_deleted=True, now=LATER)
    )


def test_resume_initializes_again_with_a_fresh_transition_time() -> None:
    staged = rules.suspending_status(serving(), generation=2, now=NOW)
    done = rules.suspension_progress_status(staged, all_deleted=True, now=NOW)
    assert rules.suspend_phase(done, suspend=False) is SuspendPhase.RESUME
    resumed = rules.resumed_status(done, generation=3, now=LATER)
    assert not rules.suspend_owns_reconcile(resumed)
    assert rules.suspend_phase(resumed, suspend=False) is SuspendPhase.NOT_SUSPENDED
    suspended = condition(resumed, "Suspended")
    assert (suspended["status"], suspended["reason"]) == ("False", "RayServiceResumed")
    ready = condition(resumed, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Initializing")
    # Ready was False already: a plain update would keep the old time and the timeout would fire.
    assert ready["lastTransitionTime"] == "2026-01-01T12:05:00Z"
    assert condition(resumed, "UpgradeInProgress")["reason"] == "Initializing"
    assert resumed["observedGeneration"] == 3
