"""What the cache is filled through: every object either operator makes, nothing else (pure).

Checked against what KubeRay's own operator created for each of its samples
(`../shared/fixtures/kuberay-created/`) and against what our builders make.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from ray_operator.builders.rayjob import build_head_service_for_owner, build_submitter_job
from ray_operator.builders.rayservice import build_serve_service_for_service
from ray_operator.builders.services import build_head_service, build_headless_service
from ray_operator.runtime.store import Store
from ray_operator.spec.kinds import (
    JOB,
    POD,
    RAY_CLUSTER,
    ROLE,
    ROLE_BINDING,
    SERVICE,
    SERVICE_ACCOUNT,
    SERVICE_SELECTORS,
    Kind,
    LabelSelector,
    watch_selectors,
)

from tests.takeover.staging import fixture_files, load_fixture

KINDS = {k.kind: k for k in (POD, SERVICE, JOB, SERVICE_ACCOUNT, ROLE, ROLE_BINDING)}


def kuberay_made() -> list[tuple[str, dict[str, Any]]]:
    """(file, object) of everything KubeRay's operator made for its samples (it owns them)."""
    return [
        (file_name, obj)
        for file_name in fixture_files()
        for obj in load_fixture(file_name)
        if obj["kind"] in KINDS and obj["metadata"].get("ownerReferences")
    ]


def selected(kind: Kind, labels: dict[str, str] | None) -> list[LabelSelector]:
    return [s for s in watch_selectors(kind) if s is not None and s.matches(labels)]


def test_every_object_kuberay_made_is_in_exactly_one_watch() -> None:
    missed = {
        f"{file_name}: {obj['kind']} {obj['metadata']['name']}": len(found)
        for file_name, obj in kuberay_made()
        if len(found := selected(KINDS[obj["kind"]], obj["metadata"].get("labels"))) != 1
    }
    assert missed == {}
    # Among them, Services with neither `created-by` nor `ray.io/cluster` (headless, RayJob's).
    assert any(
        not {"app.kubernetes.io/created-by", "ray.io/cluster"} & set(obj["metadata"]["labels"])
        for _, obj in kuberay_made()
    )


def _made_by_kuberay(file_name: str, kind: str) -> dict[str, Any]:
    """The one object of `kind` in a fixture, with a uid (our builders reference it)."""
    [found] = [obj for obj in load_fixture(file_name) if obj["kind"] == kind]
    return {**found, "metadata": {**found["metadata"], "uid": f"uid-of-{kind}"}}


def test_every_service_and_job_we_make_is_in_exactly_one_watch() -> None:
    cluster = _made_by_kuberay("ray-job.sample.yaml", "RayCluster")
    rayjob = _made_by_kuberay("ray-job.sample.yaml", "RayJob")
    rayservice = _made_by_kuberay("ray-service.sample.yaml", "RayService")
    serving = _made_by_kuberay("ray-service.sample.yaml", "RayCluster")
    services = [
        build_head_service(cluster),
        build_headless_service(cluster),
        build_head_service_for_owner(rayjob, cluster),
        build_head_service_for_owner(rayservice, serving),
        build_serve_service_for_service(rayservice, serving),
    ]
    for service in services:
        assert len(selected(SERVICE, service["metadata"]["labels"])) == 1, service["metadata"]
    job = build_submitter_job(rayjob, cluster, dashboard_address="h:8265", submission_id="s")
    assert len(selected(JOB, job["metadata"]["labels"])) == 1


def test_unrelated_objects_are_not_watched() -> None:
    for kind in (POD, SERVICE, JOB, ROLE):
        assert selected(kind, {"app": "web"}) == []
        assert selected(kind, None) == []
    assert selected(JOB, {"app.kubernetes.io/created-by": "someone-else"}) == []
    assert watch_selectors(RAY_CLUSTER) == (None,)


@pytest.mark.parametrize(
    ("selector", "text"),
    [
        (LabelSelector(present=("a",)), "a"),
        (LabelSelector(present=("a",), absent=("b", "c")), "a,!b,!c"),
        (LabelSelector(one_of=(("k", ("x", "y")),)), "k in (x,y)"),
    ],
)
def test_a_selector_reads_as_the_api_server_expects_it(selector: LabelSelector, text: str) -> None:
    assert str(selector) == text


def test_the_service_selectors_exclude_each_other() -> None:
    keys = ("ray.io/node-type", "ray.io/serve", "ray.io/headless-worker-svc")
    for subset in itertools.product((False, True), repeat=len(keys)):
        labels = {key: "x" for key, present in zip(keys, subset, strict=True) if present}
        assert sum(s.matches(labels) for s in SERVICE_SELECTORS) <= 1, labels


def _service(name: str, labels: dict[str, str], version: str = "1") -> dict[str, Any]:
    return {
        "kind": "Service",
        "metadata": {"name": name, "namespace": "ns", "labels": labels, "resourceVersion": version},
    }


def test_a_relist_of_one_service_selector_keeps_the_services_of_the_others() -> None:
    store = Store()
    head, serve = SERVICE_SELECTORS[0], SERVICE_SELECTORS[1]
    store.upsert(SERVICE, _service("c-head-svc", {"ray.io/node-type": "head"}))
    store.upsert(SERVICE, _service("s-serve-svc", {"ray.io/serve": "s-serve"}))
    changes = store.replace(SERVICE, [], namespace="ns", part=_matches(serve))
    assert [c.old["metadata"]["name"] for c in changes if c.old] == ["s-serve-svc"]
    assert store.get(SERVICE, "ns", "c-head-svc") is not None
    store.replace(SERVICE, [], namespace="ns", part=_matches(head))
    assert store.get(SERVICE, "ns", "c-head-svc") is None


def _matches(selector: LabelSelector) -> Any:
    return lambda obj: selector.matches(obj["metadata"].get("labels"))
