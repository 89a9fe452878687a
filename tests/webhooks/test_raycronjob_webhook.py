"""Specification: RayCronJobs are admitted with KubeRay's rules (name length, schedule without TZ,
a time zone that exists, a valid RayJob template), every problem named with its field path; with
the RayCronJob feature gate off they are refused by name, with the flag that turns it on."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from ray_operator.webhooks.review import (
    ADMISSION_KINDS,
    AdmissionKind,
    refuse_gated_review,
    validate_review,
)

from tests.conftest import KUBERAY_FIXTURES, REPO_ROOT, Kubectl

SAMPLE = yaml.safe_load((REPO_ROOT / "samples" / "ray-cronjob.sample.yaml").read_text())


def cron_kind() -> AdmissionKind:
    (kind,) = [kind for kind in ADMISSION_KINDS if kind.kind == "RayCronJob"]
    return kind


def review_of(obj: dict[str, Any], *, operation: str = "CREATE") -> dict[str, Any]:
    request = {
        "uid": "u-1",
        "kind": {"group": "ray.io", "version": "v1", "kind": "RayCronJob"},
        "resource": {"group": "ray.io", "version": "v1", "resource": "raycronjobs"},
        "operation": operation,
        "name": obj["metadata"]["name"],
        "namespace": "ns1",
        "object": obj,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def cron(**spec: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = copy.deepcopy(SAMPLE)
    manifest["spec"].update(spec)
    return manifest


def test_the_sample_is_allowed() -> None:
    answer = validate_review(review_of(cron()), cron_kind())
    assert answer["response"] == {"uid": "u-1", "allowed": True}


def test_a_bad_cron_job_is_refused_with_every_problem_and_its_field() -> None:
    bad = cron(schedule="TZ=UTC 0 * * * *", timeZone="Mars/Olympus")
    bad["metadata"]["name"] = "a-name-far-too-long-for-its-rayjob-names"
    bad["spec"]["jobTemplate"]["backoffLimit"] = -1
    answer = validate_review(review_of(bad), cron_kind())["response"]
    assert answer["allowed"] is False
    status = answer["status"]
    assert status["code"] == 422
    assert [cause["field"] for cause in status["details"]["causes"]] == [
        "metadata.name",
        "spec.schedule",
        "spec.timeZone",
        "spec.jobTemplate.backoffLimit",
    ]
    messages = [cause["message"] for cause in status["details"]["causes"]]
    assert "36" in messages[0]
    assert "use the timeZone field instead" in messages[1]


def test_an_unparseable_schedule_is_refused_at_its_field() -> None:
    answer = validate_review(review_of(cron(schedule="61 * * * *")), cron_kind())["response"]
    (cause,) = answer["status"]["details"]["causes"]
    assert cause["field"] == "spec.schedule"


def test_with_the_gate_off_a_cron_job_is_refused_by_name_and_a_delete_is_not() -> None:
    answer = refuse_gated_review(review_of(cron()), cron_kind())["response"]
    assert answer["allowed"] is False
    assert answer["status"]["message"] == (
        'RayCronJob.ray.io "nightly-sum" is refused: the RayCronJob feature gate is off in this '
        "operator (--feature-gates=RayCronJob=true turns it on)"
    )
    deleting = refuse_gated_review(review_of(cron(), operation="DELETE"), cron_kind())
    assert deleting["response"]["allowed"] is True


def test_kubectl_apply_of_a_bad_schedule_is_refused_with_its_field(
    kubectl: Kubectl, webhook_namespace: str
) -> None:
    result = kubectl.run(
        "apply",
        "-n",
        webhook_namespace,
        "-f",
        "-",
        input_text=yaml.safe_dump(cron(schedule="0 25 * * *")),
    )
    assert result.returncode != 0
    assert "spec.schedule" in result.stderr


def kuberay_rayjob_specs() -> list[tuple[str, dict[str, Any]]]:
    """The spec of every RayJob in KubeRay's samples, by file."""
    specs = []
    for path in sorted(KUBERAY_FIXTURES.glob("ray-job.*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") == "RayJob":
                specs.append((path.name, document["spec"]))
    return specs


def test_every_kuberay_rayjob_sample_is_admitted_as_a_job_template() -> None:
    specs = kuberay_rayjob_specs()
    assert len(specs) >= 5
    for name, spec in specs:
        manifest = cron(schedule="* * * * *", jobTemplate=copy.deepcopy(spec))
        manifest["spec"].pop("timeZone")
        answer = validate_review(review_of(manifest), cron_kind())["response"]
        assert answer.get("allowed") is True, (name, answer.get("status", {}).get("message"))
