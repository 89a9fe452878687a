"""Specification: with the SidecarSubmitterRestart gate on, a SidecarMode RayJob's submitter
container restarts alone when it fails (its own `restartPolicy: OnFailure`, the head Pod's stays
Never) and its command checks for the submission before submitting, so a restart follows the
running job instead of submitting it again; the RayJob fails only once the submitter has
restarted twice. The command and the hash below are the ones KubeRay's own code
(`BuildJobSubmitCommand`, `GenerateHashWithoutReplicasAndWorkersToDelete`, kuberay feeaf72)
gives for KubeRay's SidecarMode sample: the sidecar is part of the RayCluster spec KubeRay
hashes, so the gate changes the hash of the clusters built while it is on, as in KubeRay.
"""

from __future__ import annotations

from typing import Any

import pytest
from ray_operator.builders import rayjob as build
from ray_operator.builders.pods import build_head_pod
from ray_operator.spec.hashing import pod_template_hash
from ray_operator.status import rayjob as rules

from tests.builders.kuberay_created import created, rayjob_with_uid

SAMPLE = "ray-job.sidecar-mode.yaml"
SUBMITTER = "ray-job-submitter"
KUBERAY_RESTARTABLE_COMMAND = (
    'until python -c "import urllib.request; r=urllib.request.urlopen('
    "'http://localhost:8265/api/gcs_healthz', timeout=10); exit(0 if b'success' in r.read() "
    'else 1)" >/dev/null 2>&1 ; do echo "Waiting for Ray Dashboard GCS to become healthy at '
    'http://127.0.0.1:8265 ..." ; sleep 2 ; done ; '
    "if ! ray job status --address http://127.0.0.1:8265 rayjob-sidecar-mode-vz5wm >/dev/null "
    "2>&1 ; then ray job submit --address http://127.0.0.1:8265 --no-wait --runtime-env-json "
    '"{\\"env_vars\\":{\\"counter_name\\":\\"test_counter\\"},\\"pip\\":[\\"requests==2.26.0\\",'
    '\\"pendulum==2.1.2\\"]}" --submission-id rayjob-sidecar-mode-vz5wm -- python '
    "/home/ray/samples/sample_code.py ; fi ; ray job logs --address http://127.0.0.1:8265 "
    "--follow rayjob-sidecar-mode-vz5wm"
)


def built_cluster(*, submitter_restart: bool) -> dict[str, Any]:
    (cluster,) = created(SAMPLE, "RayCluster")
    rayjob = rayjob_with_uid(SAMPLE, cluster)
    return build.build_cluster_for_job(
        rayjob,
        name=cluster["metadata"]["name"],
        submission_id=rayjob["status"]["jobId"],
        submitter_restart=submitter_restart,
    )


def submitter_of(cluster: dict[str, Any]) -> dict[str, Any]:
    containers = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"]
    (submitter,) = [c for c in containers if c["name"] == SUBMITTER]
    return submitter


def test_gate_on_the_submitter_alone_restarts_on_failure() -> None:
    cluster = built_cluster(submitter_restart=True)
    assert submitter_of(cluster)["restartPolicy"] == "OnFailure"
    assert cluster["spec"]["headGroupSpec"]["template"]["spec"]["restartPolicy"] == "Never"
    head = build_head_pod(cluster, suffix="abcde")
    assert head["spec"]["restartPolicy"] == "Never"
    assert [c.get("restartPolicy") for c in head["spec"]["containers"]] == [None, "OnFailure"]


def test_gate_on_the_command_checks_for_the_submission_first_as_kuberays() -> None:
    assert submitter_of(built_cluster(submitter_restart=True))["args"] == [
        KUBERAY_RESTARTABLE_COMMAND
    ]


def test_gate_off_the_submitter_is_unchanged() -> None:
    on, off = (
        submitter_of(built_cluster(submitter_restart=True)),
        submitter_of(built_cluster(submitter_restart=False)),
    )
    assert "restartPolicy" not in off
    assert "ray job status" not in off["args"][0]
    assert {k: v for k, v in on.items() if k not in ("restartPolicy", "args")} == {
        k: v for k, v in off.items() if k != "args"
    }


def test_the_hash_covers_the_submitter_as_kuberays() -> None:
    assert pod_template_hash(built_cluster(submitter_restart=True)) == (
        "4EBBO57USJFI9HMNE5K66HHMCDHSKR88"
    )
    assert pod_template_hash(built_cluster(submitter_restart=False)) == (
        "TMDNKJN5QSDMFQEP5I09B1H73MEE0V5I"
    )


def head_with_submitter(**container_status: Any) -> dict[str, Any]:
    return {
        "status": {
            "containerStatuses": [
                {"name": "ray-head", "state": {"running": {}}},
                {"name": SUBMITTER, **container_status},
            ]
        }
    }


ERROR = {"terminated": {"exitCode": 1, "reason": "Error"}}
RUNNING = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}


@pytest.mark.parametrize(
    ("container_status", "fails"),
    [
        pytest.param({"state": ERROR, "restartCount": 0}, False, id="ended-once-not-restarted-yet"),
        pytest.param({"state": RUNNING, "lastState": ERROR, "restartCount": 1}, False, id="once"),
        pytest.param({"state": RUNNING, "lastState": ERROR, "restartCount": 2}, True, id="twice"),
        pytest.param({"state": ERROR, "lastState": ERROR, "restartCount": 5}, True, id="crashing"),
        pytest.param(
            {
                "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
                "lastState": ERROR,
                "restartCount": 3,
            },
            False,
            id="succeeded-in-the-end",
        ),
    ],
)
def test_a_restartable_submitter_fails_the_job_after_two_restarts(
    container_status: dict[str, Any], fails: bool
) -> None:
    verdict = rules.sidecar_failed(
        {"jobStatus": "RUNNING"}, head_with_submitter(**container_status), restartable=True
    )
    if not fails:
        assert verdict is None
        return
    assert verdict is not None
    assert verdict["jobDeploymentStatus"] == "Failed"
    assert verdict["reason"] == "SubmissionFailed"
    assert verdict["message"] == (
        f"Ray head pod submitter container {SUBMITTER} terminated after exceeding the maximum "
        "restart count"
    )


def test_a_job_ray_saw_fail_is_an_application_failure() -> None:
    head = head_with_submitter(state=RUNNING, lastState=ERROR, restartCount=2)
    verdict = rules.sidecar_failed({"jobStatus": "FAILED"}, head, restartable=True)
    assert verdict is not None
    assert verdict["reason"] == "AppFailed"


def test_gate_off_one_failed_exit_fails_the_job() -> None:
    verdict = rules.sidecar_failed(
        {"jobStatus": "RUNNING"}, head_with_submitter(state=ERROR, restartCount=0)
    )
    assert verdict is not None
    assert verdict["reason"] == "SubmissionFailed"
