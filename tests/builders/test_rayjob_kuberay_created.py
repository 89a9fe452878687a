"""What we build for a RayJob equals what KubeRay built for it (../shared/fixtures/kuberay-created).

For every RayJob sample KubeRay ran, the fixture holds the RayJob with the status KubeRay wrote
(its `jobId`, `rayClusterName`, `dashboardURL`), the RayCluster it created and, in K8sJobMode,
the submitter Job. Built from the same RayJob and the same ids, our RayCluster (SidecarMode's
submitter container included) and our submitter Job must be KubeRay's, apart from the one
intended difference: `app.kubernetes.io/created-by` names this operator.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from ray_operator.builders import rayjob as build
from ray_operator.builders.pods import build_head_pod

from tests.builders.kuberay_created import CREATED_DIR, created, rayjob_with_uid

# What the API server fills into every container of a Pod; not ours to build.
POD_DEFAULTS = ("imagePullPolicy", "terminationMessagePath", "terminationMessagePolicy")
# What the Job controller adds to a Job's Pod template labels.
JOB_CONTROLLER_LABELS = (
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
)
CREATED_BY = "app.kubernetes.io/created-by"


def samples_with(kind: str) -> list[str]:
    """Fixture files of RayJob samples where KubeRay created a `kind` for the RayJob."""
    return [
        path.name
        for path in sorted(CREATED_DIR.glob("ray-job.*.yaml"))
        if created(path.name, "RayJob") and created(path.name, kind)
    ]


@pytest.mark.parametrize("file_name", samples_with("RayCluster"))
def test_the_cluster_of_a_rayjob_is_the_one_kuberay_created(file_name: str) -> None:
    (cluster,) = created(file_name, "RayCluster")
    rayjob = rayjob_with_uid(file_name, cluster)
    built = build.build_cluster_for_job(
        rayjob, name=cluster["metadata"]["name"], submission_id=rayjob["status"].get("jobId", "")
    )
    assert built["spec"] == cluster["spec"]
    assert built["metadata"]["labels"] == cluster["metadata"].get("labels", {})
    assert built["metadata"]["annotations"] == cluster["metadata"].get("annotations", {})
    assert built["metadata"]["ownerReferences"] == cluster["metadata"]["ownerReferences"]


@pytest.mark.parametrize("file_name", samples_with("Job"))
def test_the_submitter_job_is_the_one_kuberay_created(file_name: str) -> None:
    (cluster,) = created(file_name, "RayCluster")
    (job,) = created(file_name, "Job")
    rayjob = rayjob_with_uid(file_name, job)
    status = rayjob["status"]
    built = build.build_submitter_job(
        rayjob, cluster, dashboard_address=status["dashboardURL"], submission_id=status["jobId"]
    )
    theirs, ours = job["spec"]["template"], built["spec"]["template"]
    (their_container,) = theirs["spec"]["containers"]
    (our_container,) = ours["spec"]["containers"]
    assert our_container == _without(their_container, POD_DEFAULTS)
    assert ours["spec"]["restartPolicy"] == theirs["spec"]["restartPolicy"]
    assert built["spec"]["backoffLimit"] == job["spec"]["backoffLimit"]
    their_labels = _without(theirs["metadata"]["labels"], JOB_CONTROLLER_LABELS)
    assert ours["metadata"]["labels"] == {**their_labels, CREATED_BY: "ray-operator"}
    assert built["metadata"]["labels"] == {**job["metadata"]["labels"], CREATED_BY: "ray-operator"}
    assert built["metadata"]["ownerReferences"] == job["metadata"]["ownerReferences"]


def test_sidecar_mode_puts_kuberays_submitter_into_the_head_pod() -> None:
    file_name = "ray-job.sidecar-mode.yaml"
    (cluster,) = created(file_name, "RayCluster")
    rayjob = rayjob_with_uid(file_name, cluster)
    (their_head,) = [
        pod
        for pod in created(file_name, "Pod")
        if pod["metadata"]["labels"]["ray.io/node-type"] == "head"
    ]
    built = build.build_cluster_for_job(
        rayjob, name=cluster["metadata"]["name"], submission_id=rayjob["status"].get("jobId", "")
    )
    our_head = build_head_pod(built, suffix="2xmcp")
    # Same template, so the same hash: a taken-over SidecarMode head is never recreated.
    hash_key = "ray.io/upgrade-strategy-recreate-hash"
    assert (
        our_head["metadata"]["annotations"][hash_key]
        == their_head["metadata"]["annotations"][hash_key]
    )
    assert our_head["spec"]["restartPolicy"] == "Never" == their_head["spec"]["restartPolicy"]
    assert [c["name"] for c in our_head["spec"]["containers"]] == ["ray-head", "ray-job-submitter"]
    assert our_head["spec"]["containers"][1] == _without(
        their_head["spec"]["containers"][1], POD_DEFAULTS
    )


def test_sidecar_submits_once_to_the_dashboard_port_of_its_own_pod() -> None:
    (rayjob,) = created("ray-job.sidecar-mode.yaml", "RayJob")
    head = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["ports"] = [{"name": "dashboard", "containerPort": 9999}]
    line = " ".join(build.sidecar_submit_command(rayjob, submission_id="once-abcde"))
    assert "http://localhost:9999/api/gcs_healthz" in line
    assert "ray job submit --address http://127.0.0.1:9999 --runtime-env-json" in line
    # Never restarted, so no `ray job status` check; `submit` without --no-wait follows the job
    # and its exit code is the job's outcome.
    assert "ray job status" not in line
    assert "--no-wait" not in line
    assert "ray job logs" not in line
    assert line.endswith("--submission-id once-abcde -- python /home/ray/samples/sample_code.py ;")


def test_json_options_reach_ray_unchanged_through_bash() -> None:
    # KubeRay's quoting (Go's strconv.Quote) lets bash expand `$(...)` and backquotes inside
    # the JSON; ours gives the same word for JSON without them and literal text with them.
    (rayjob,) = created("ray-job.sidecar-mode.yaml", "RayJob")
    env = {"env_vars": {"B": '$(echo no) `echo no` \\ " !x'}, "pip": ["a"]}
    rayjob["spec"]["runtimeEnvYAML"] = json.dumps(env)
    words = build.sidecar_submit_command(rayjob, submission_id="s")
    quoted = words[words.index("--runtime-env-json") + 1]
    echoed = subprocess.run(
        ["bash", "-ce", f"printf %s {quoted}"], capture_output=True, check=True, text=True
    ).stdout
    assert json.loads(echoed) == env


def _without(mapping: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {key: value for key, value in mapping.items() if key not in keys}
