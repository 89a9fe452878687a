"""What a RayJob creates, built purely: its RayCluster, its submitter Job, its head Service, and
the body of an HTTP-mode submission.

Mirrors KubeRay's `rayjob_controller.go` (`constructRayClusterForRayJob`, `getSubmitterTemplate`,
`createNewK8sJob`) and `common/job.go` (`BuildJobSubmitCommand`, `GetDefaultSubmitterContainer`,
`BuildHeadServiceForRayJob`). Everything we create carries our `app.kubernetes.io/created-by`
label, because the runtime watches owned Jobs and Services through it.
"""

from __future__ import annotations

import copy
import json
import shlex
from collections.abc import Mapping
from typing import Any

import yaml

from ray_operator import labels as names
from ray_operator.builders.containers import token_auth_env
from ray_operator.builders.manifest import JSON
from ray_operator.builders.naming import check_label, head_service_name
from ray_operator.builders.services import build_head_service
from ray_operator.dashboard.models import JobSubmission

Object = Mapping[str, Any]

JOB_SUBMISSION_MODE_LABEL = "ray.io/job-submission-mode"
SUBMITTER_CONTAINER_NAME = "ray-job-submitter"
ENV_RAY_DASHBOARD_ADDRESS = "RAY_DASHBOARD_ADDRESS"
ENV_RAY_JOB_SUBMISSION_ID = "RAY_JOB_SUBMISSION_ID"
# KubeRay's submitter retries `ray job submit` at most 3 times: enough for a dashboard hiccup,
# few enough that an application error does not keep a cluster busy (default Job limit is 6).
DEFAULT_SUBMITTER_BACKOFF_LIMIT = 2
GCS_HEALTH_PATH = "api/gcs_healthz"
GCS_HEALTH_TIMEOUT_SECONDS = 10
_HEALTH_COMMAND = (
    "python -c \"import urllib.request; r=urllib.request.urlopen('{url}', "
    "timeout={timeout}); exit(0 if b'success' in r.read() else 1)\""
)


class InvalidRuntimeEnvError(ValueError):
    """`runtimeEnvYAML` or `entrypointResources` does not parse."""


def cluster_name_for_job(rayjob_name: str, *, suffix: str) -> str:
    """`<rayjob>-<5 random chars>` (KubeRay's `GenerateRayClusterName`), suffix given by caller."""
    return f"{rayjob_name}-{suffix}"


def submission_id_for_job(rayjob_name: str, *, suffix: str) -> str:
    """`<rayjob>-<5 random chars>` (KubeRay's `GenerateRayJobId`)."""
    return f"{rayjob_name}-{suffix}"


def owner_reference(obj: Object) -> JSON:
    """A controller ownerReference to `obj` (a RayJob or RayService as cached)."""
    metadata = obj["metadata"]
    return {
        "apiVersion": obj.get("apiVersion", "ray.io/v1"),
        "kind": obj["kind"],
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def originated_labels(owner: Object) -> dict[str, str]:
    """`ray.io/originated-from-cr-name` and `-crd` of what a RayJob/RayService creates."""
    return {
        names.ORIGINATED_FROM_CR_NAME_LABEL: owner["metadata"]["name"],
        names.ORIGINATED_FROM_CRD_LABEL: owner["kind"],
    }


def build_cluster_for_job(rayjob: Object, *, name: str) -> JSON:
    """The RayCluster of a RayJob: its `rayClusterSpec`, its labels and annotations, owned by it."""
    metadata = rayjob["metadata"]
    spec = rayjob.get("spec") or {}
    labels = {
        **(metadata.get("labels") or {}),
        **originated_labels(rayjob),
        JOB_SUBMISSION_MODE_LABEL: submission_mode(rayjob),
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": name,
            "namespace": metadata["namespace"],
            "labels": labels,
            "annotations": dict(metadata.get("annotations") or {}),
            "ownerReferences": [owner_reference(rayjob)],
        },
        "spec": copy.deepcopy(spec.get("rayClusterSpec") or {}),
    }


def submission_mode(rayjob: Object) -> str:
    """`spec.submissionMode`, defaulted as the CRD does (K8sJobMode)."""
    return str((rayjob.get("spec") or {}).get("submissionMode") or "K8sJobMode")


def runtime_env(rayjob: Object) -> dict[str, Any] | None:
    """`runtimeEnvYAML` parsed; None when unset."""
    text = (rayjob.get("spec") or {}).get("runtimeEnvYAML")
    if not text:
        return None
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise InvalidRuntimeEnvError(f"spec.runtimeEnvYAML does not parse: {error}") from error
    if parsed is None:
        return None
    if not isinstance(parsed, dict):
        raise InvalidRuntimeEnvError("spec.runtimeEnvYAML must be a mapping")
    return parsed


def job_submission(rayjob: Object, *, submission_id: str) -> JobSubmission:
    """The HTTPMode submission body (KubeRay's `ConvertRayJobToReq`)."""
    spec = rayjob.get("spec") or {}
    resources = None
    if spec.get("entrypointResources"):
        try:
            resources = json.loads(spec["entrypointResources"])
        except ValueError as error:
            raise InvalidRuntimeEnvError(
                f"spec.entrypointResources is not a JSON object: {error}"
            ) from error
    return JobSubmission(
        entrypoint=str(spec.get("entrypoint") or ""),
        submission_id=submission_id,
        runtime_env=runtime_env(rayjob),
        metadata=spec.get("metadata") or None,
        entrypoint_num_cpus=spec.get("entrypointNumCpus"),
        entrypoint_num_gpus=spec.get("entrypointNumGpus"),
        entrypoint_resources=resources,
    )


def job_submit_command(rayjob: Object, *, dashboard_address: str, submission_id: str) -> list[str]:
    """KubeRay's K8sJobMode shell words: wait for the GCS, submit unless already submitted, follow.

    `ray job submit` alone would submit twice when the Job's Pod is retried (kuberay#2154), so the
    command first asks `ray job status` whether the submission id exists.
    """
    spec = rayjob.get("spec") or {}
    address = dashboard_address if "://" in dashboard_address else "http://" + dashboard_address
    health = _HEALTH_COMMAND.format(
        url=f"{address}/{GCS_HEALTH_PATH}", timeout=GCS_HEALTH_TIMEOUT_SECONDS
    )
    command = [
        "until",
        health,
        ">/dev/null",
        "2>&1",
        ";",
        "do",
        "echo",
        json.dumps(f"Waiting for Ray Dashboard GCS to become healthy at {address} ..."),
        ";",
        "sleep",
        "2",
        ";",
        "done",
        ";",
    ]
    command += [
        "if",
        "!",
        "ray",
        "job",
        "status",
        "--address",
        address,
        submission_id,
        ">/dev/null",
        "2>&1",
        ";",
        "then",
    ]
    command += ["ray", "job", "submit", "--address", address, "--no-wait"]
    env = runtime_env(rayjob)
    if env:
        command += ["--runtime-env-json", shlex.quote(json.dumps(env, separators=(",", ":")))]
    if spec.get("metadata"):
        command += [
            "--metadata-json",
            shlex.quote(json.dumps(spec["metadata"], separators=(",", ":"))),
        ]
    command += ["--submission-id", submission_id]
    if spec.get("entrypointNumCpus"):
        command += ["--entrypoint-num-cpus", f"{float(spec['entrypointNumCpus']):f}"]
    if spec.get("entrypointNumGpus"):
        command += ["--entrypoint-num-gpus", f"{float(spec['entrypointNumGpus']):f}"]
    if spec.get("entrypointResources"):
        command += ["--entrypoint-resources", shlex.quote(str(spec["entrypointResources"]))]
    # The entrypoint is a shell command line on purpose (KubeRay passes it unquoted).
    command += ["--", str(spec.get("entrypoint") or "").strip(), ";", "fi", ";"]
    command += ["ray", "job", "logs", "--address", address, "--follow", submission_id]
    return command


def build_submitter_job(
    rayjob: Object, cluster: Object, *, dashboard_address: str, submission_id: str
) -> JSON:
    """The batch/v1 Job that runs `ray job submit` (K8sJobMode), named like the RayJob."""
    metadata = rayjob["metadata"]
    spec = rayjob.get("spec") or {}
    template = _submitter_template(spec, cluster)
    container = template["spec"]["containers"][0]
    if not container.get("command"):
        # -e: stop at the first failing command, as KubeRay does.
        container["command"] = ["/bin/bash", "-ce", "--"]
        container["args"] = [
            " ".join(
                job_submit_command(
                    rayjob, dashboard_address=dashboard_address, submission_id=submission_id
                )
            )
        ]
    env = container.setdefault("env", [])
    env += [
        {"name": "PYTHONUNBUFFERED", "value": "1"},
        {"name": ENV_RAY_DASHBOARD_ADDRESS, "value": dashboard_address},
        {"name": ENV_RAY_JOB_SUBMISSION_ID, "value": submission_id},
    ]
    cluster_spec = cluster.get("spec") or {}
    if (cluster_spec.get("authOptions") or {}).get("mode") == "token":
        token_auth_env(
            container,
            cluster_spec=dict(cluster_spec),
            pod_spec=template["spec"],
            cluster_name=cluster["metadata"]["name"],
        )
    labels = {**originated_labels(rayjob), names.CREATED_BY_LABEL: names.CREATED_BY}
    template.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    backoff = (spec.get("submitterConfig") or {}).get("backoffLimit")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "labels": dict(labels),
            "ownerReferences": [owner_reference(rayjob)],
        },
        "spec": {
            "backoffLimit": DEFAULT_SUBMITTER_BACKOFF_LIMIT if backoff is None else backoff,
            "template": template,
        },
    }


def _submitter_template(spec: Object, cluster: Object) -> JSON:
    if spec.get("submitterPodTemplate"):
        template: JSON = copy.deepcopy(dict(spec["submitterPodTemplate"]))
        template.setdefault("spec", {}).setdefault("containers", [{}])
        template["spec"].setdefault("restartPolicy", "Never")
        return template
    head = ((cluster.get("spec") or {}).get("headGroupSpec") or {}).get("template") or {}
    image = ((head.get("spec") or {}).get("containers") or [{}])[0].get("image")
    container = {
        "name": SUBMITTER_CONTAINER_NAME,
        # The head's image, so `ray job submit` matches the cluster's Ray version.
        "image": image,
        "resources": {
            "limits": {"cpu": "1", "memory": "1Gi"},
            "requests": {"cpu": "500m", "memory": "200Mi"},
        },
    }
    return {"spec": {"containers": [container], "restartPolicy": "Never"}}


def build_head_service_for_owner(owner: Object, cluster: Object) -> JSON:
    """`<owner>-head-svc` (RayJob or RayService) selecting `cluster`'s head Pod.

    KubeRay's `BuildHeadServiceForRayJob`/`ForRayService`: the cluster's head Service under the
    owner's name, so clients keep one address when the owner moves to a new cluster.
    """
    service = build_head_service(cluster)
    owner_name = owner["metadata"]["name"]
    service["metadata"] = {
        "name": f"{owner_name}-{names.HEAD_SERVICE_SUFFIX}",
        "namespace": owner["metadata"]["namespace"],
        "labels": {
            **originated_labels(owner),
            names.NODE_TYPE_LABEL: names.HEAD_NODE,
            names.IDENTIFIER_LABEL: check_label(f"{owner_name}-{names.HEAD_NODE}"),
            names.CREATED_BY_LABEL: names.CREATED_BY,
        },
        "ownerReferences": [owner_reference(owner)],
    }
    return service


def head_service_of(cluster: Object) -> str:
    """The name of the cluster's own head Service."""
    return head_service_name(dict(cluster))
