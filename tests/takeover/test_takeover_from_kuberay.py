"""Acceptance (issue 13): KubeRay ran here, our operator starts — and takes over without a trace.

Every sample KubeRay publishes, as KubeRay's own operator left it (`kuberay-created/`, 31 files:
RayClusters, RayJobs, RayServices with their status, and the Pods, Services, Jobs, RBAC and
Secrets they own), is staged on a control plane of its own; then `ray-operator run` starts and
is given until it settles (see conftest). Nothing may be created, deleted or resubmitted, and every
status KubeRay wrote stays as it was.

Status fields that may legitimately change (`REFRESHABLE`): `lastUpdateTime` (a timestamp each
status write refreshes, KubeRay's too) and the copies of a RayCluster's status inside a RayJob
(`rayClusterStatus`) or a RayService (`rayClusterStatus` of `activeServiceStatus` and
`pendingServiceStatus`): KubeRay refreshes those copies on its next status write as well (the
fixtures' copies were taken before their clusters were provisioned). Nothing else: state,
replica counts, endpoints, head address, conditions, `jobDeploymentStatus`, `jobId`,
`rayClusterName`, `dashboardURL`, times.

One thing is added, because it is true here: every dashboard is a `DeadDashboard`, so a RayJob
or RayService whose dashboard the operator asked gets the condition `DashboardReachable=False`
naming that dashboard (ours alone; KubeRay writes no such condition) and one Warning Event
`DashboardUnreachable`. And a RayCluster whose Pods KubeRay left waiting (a worker no node can
take) gets the condition `PodsWaiting=True` with the scheduler's words and one Warning Event
`PodsWaiting` (ours alone too; `status/waiting.py`), as does a RayJob or RayService above it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.takeover.conftest import TakeoverRun
from tests.takeover.staging import CUSTOM_KINDS, fixture_files, load_fixture, namespace_for

REFRESHABLE = frozenset({"lastUpdateTime", "rayClusterStatus"})
DASHBOARD_REACHABLE = "DashboardReachable"
PODS_WAITING = "PodsWaiting"
CREATED_BY = "app.kubernetes.io/created-by"


def custom_resources(*, with_status: bool) -> list[tuple[str, str, str]]:
    """(kind, namespace, name) of the RayClusters, RayJobs and RayServices staged whose fixture
    has a status (`with_status`) or has none."""
    return [
        (obj["kind"], namespace_for(file_name), obj["metadata"]["name"])
        for file_name in fixture_files()
        for obj in load_fixture(file_name)
        if obj["kind"] in CUSTOM_KINDS and bool(obj.get("status")) == with_status
    ]


NEVER_STARTED = {
    namespace for kind, namespace, _ in custom_resources(with_status=False) if kind == "RayCluster"
}
"""Namespaces of RayClusters KubeRay never started: with its default flags it refuses the
embedded GCS fault tolerance sample (`backend: rocksdb` needs its alpha feature gate), so it made
nothing and wrote no status. Not a takeover: we start them as new clusters."""


def _taken_over(names: list[str]) -> list[str]:
    """`namespace/name`s outside the namespaces of clusters KubeRay never started."""
    return [name for name in names if name.split("/", 1)[0] not in NEVER_STARTED]


def test_every_kuberay_sample_is_staged(takeover: TakeoverRun) -> None:
    assert len(takeover.staged) == 31
    assert {kind for kind, _, _ in custom_resources(with_status=True)} == set(CUSTOM_KINDS)
    assert len(NEVER_STARTED) == 1


def test_the_operator_settles_after_one_pass(takeover: TakeoverRun) -> None:
    """Every custom resource reconciled, then no API write at all (Events included) for a while:
    a takeover converges at once, it does not keep rewriting what it found."""
    settled = takeover.settled
    written = {kind: Counter(events) for kind, events in takeover.events.items()}
    assert settled.quiet, f"still writing: {settled}; watched: {written}"


def test_no_pod_is_created_or_deleted(takeover: TakeoverRun) -> None:
    assert _taken_over(takeover.events_of("Pod", "ADDED", "DELETED")) == []


def test_no_cluster_gets_a_second_head(takeover: TakeoverRun) -> None:
    duplicated = {key: heads for key, heads in takeover.head_pods_after.items() if len(heads) > 1}
    assert duplicated == {}


def test_a_cluster_kuberay_never_started_is_started_as_a_new_one(takeover: TakeoverRun) -> None:
    heads = {
        (namespace, name): takeover.head_pods_after[(namespace, name)]
        for kind, namespace, name in custom_resources(with_status=False)
        if kind == "RayCluster"
    }
    assert [len(names) for names in heads.values()] == [1]


def test_no_job_is_created_or_deleted(takeover: TakeoverRun) -> None:
    assert takeover.events_of("Job", "ADDED", "DELETED") == []


def test_no_service_is_created_or_deleted(takeover: TakeoverRun) -> None:
    assert _taken_over(takeover.events_of("Service", "ADDED", "DELETED")) == []


def test_no_raycluster_is_created_or_deleted(takeover: TakeoverRun) -> None:
    # A RayService that does not recognise its cluster makes a whole new one.
    assert takeover.events_of("RayCluster", "ADDED", "DELETED") == []


def test_kuberays_pods_and_jobs_are_not_written(takeover: TakeoverRun) -> None:
    assert _taken_over(takeover.events_of("Pod", "MODIFIED")) == []
    assert takeover.events_of("Job", "MODIFIED") == []


def test_kuberays_services_change_only_by_the_head_selector_widening(
    takeover: TakeoverRun,
) -> None:
    """The one write allowed: KubeRay's head Services also select `created-by=kuberay-operator`;
    ours do not (a head Pod we make later must be selected), so that key goes from a RayCluster's
    head Service (and may go from a RayJob's or RayService's, whose controllers widen it on
    their own terms); the same Pod stays selected. Anything else KubeRay made is left as it was."""
    changed = {}
    for staged in takeover.staged:
        for service in staged.of_kind("Service"):
            name = service["metadata"]["name"]
            after = _compared(takeover.services_after[(staged.namespace, name)])
            allowed = [_compared(s) for s in _allowed_after_takeover(service)]
            if after not in allowed:
                changed[f"{staged.namespace}/{name}"] = (allowed, after)
    assert changed == {}


@pytest.mark.parametrize(("kind", "namespace", "name"), custom_resources(with_status=True))
def test_status_is_kept(takeover: TakeoverRun, kind: str, namespace: str, name: str) -> None:
    before = takeover.statuses_before[(kind, namespace, name)]
    after = dict(takeover.statuses_after[(kind, namespace, name)])
    added = [c for c in after.get("conditions") or () if c["type"] == DASHBOARD_REACHABLE]
    for condition in added:
        assert condition["status"] == "False", condition
        assert takeover.dashboard_url in condition["message"], condition
    waiting = [c for c in after.get("conditions") or () if c["type"] == PODS_WAITING]
    for condition in waiting:
        assert (condition["status"], condition["reason"]) == ("True", "Unschedulable"), condition
        assert "nodes are available" in condition["message"], condition
    added += waiting
    kept_conditions = [c for c in after.get("conditions") or () if c not in added]
    if kept_conditions or "conditions" in before:
        after["conditions"] = kept_conditions
    else:
        after.pop("conditions", None)
    assert _kept(after) == _kept(before)


def test_nothing_is_submitted_to_a_dashboard(takeover: TakeoverRun) -> None:
    assert takeover.dashboard_writes == []


def _kept(status: dict[str, Any]) -> dict[str, Any]:
    """The status without the fields that may be refreshed (see the module docstring)."""
    kept: dict[str, Any] = {}
    for key, value in status.items():
        if key in REFRESHABLE:
            continue
        kept[key] = _kept(value) if isinstance(value, dict) else value
    return kept


def _allowed_after_takeover(service: dict[str, Any]) -> list[dict[str, Any]]:
    """What a Service KubeRay made may look like after the takeover (see the test above)."""
    selector = dict(service["spec"].get("selector") or {})
    if selector.get("ray.io/node-type") != "head" or CREATED_BY not in selector:
        return [service]
    selector.pop(CREATED_BY)
    widened = {**service, "spec": {**service["spec"], "selector": selector}}
    owners = {ref["kind"] for ref in service["metadata"].get("ownerReferences") or ()}
    return [widened] if owners == {"RayCluster"} else [service, widened]


def _compared(service: dict[str, Any]) -> dict[str, Any]:
    """What a Service's maker chose (labels, annotations, spec), not what the server allocated."""
    spec = {
        key: value
        for key, value in service["spec"].items()
        if key not in ("clusterIP", "clusterIPs")
    }
    spec["ports"] = [
        {key: value for key, value in port.items() if key != "nodePort"}
        for port in spec.get("ports") or ()
    ]
    metadata = service["metadata"]
    return {
        "labels": metadata.get("labels") or {},
        "annotations": metadata.get("annotations") or {},
        "spec": spec,
    }


def test_the_only_warnings_are_the_head_selector_repairs_and_a_missing_cluster(
    takeover: TakeoverRun,
) -> None:
    """`kubectl describe` after a takeover: one RepairedService per RayCluster KubeRay ran (the
    head selector widening), and the RayJob whose `clusterSelector` names a cluster that does
    not exist here says so, as KubeRay did. Nothing else to worry a user."""
    warnings = {
        event.split(" ", 1)[1]
        for event in takeover.kube_events
        if " Warning " in event and event.split("/")[1] not in NEVER_STARTED
    }
    expected_repairs = {
        f"Warning RepairedService RayCluster/{namespace}/{name}"
        for kind, namespace, name in custom_resources(with_status=True)
        if kind == "RayCluster"
    }
    missing_cluster = {
        f"Warning RayClusterNotFound RayJob/{namespace}/{name}"
        for kind, namespace, name in custom_resources(with_status=True)
        if kind == "RayJob" and name == "rayjob-use-existing-raycluster"
    }
    # The dead dashboards, said once per RayJob or RayService that asked one (module docstring).
    unreachable = {w for w in warnings if w.startswith("Warning DashboardUnreachable ")}
    assert {w.split(" ")[2].split("/")[0] for w in unreachable} <= {"RayJob", "RayService"}
    # Pods KubeRay left unschedulable, said once per object (module docstring).
    waiting = {w for w in warnings if w.startswith("Warning PodsWaiting ")}
    assert {w.split(" ")[2] for w in waiting} >= {
        f"RayCluster/{namespace}/{name}"
        for kind, namespace, name in custom_resources(with_status=True)
        if kind == "RayCluster" and name == "ray-label-cluster"
    }
    assert warnings - unreachable - waiting == expected_repairs | missing_cluster
