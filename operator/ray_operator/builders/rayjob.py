"""What a RayJob creates, built purely: its RayCluster (in SidecarMode with the submitter as a
container of the head Pod), its submitter Job, its head Service, and the body of an HTTP-mode
submission.

Mirrors KubeRay's `rayjob_controller.go` (`constructRayClusterForRayJob`, `getSubmitterTemplate`,
`getSubmitterContainer`, `createNewK8sJob`) and `common/job.go` (`BuildJobSubmitCommand`,
`GetDefaultSubmitterContainer`, `BuildHeadServiceForRayJob`), down to the submit command's
quoting, so what we build equals what KubeRay built for the same RayJob. The Jobs and Services we
create carry our `app.kubernetes.io/created-by` label, because the runtime watches them through it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from ray_operator import bounded_json
from ray_operator.bounded_yaml import UnreadableYamlError, load_go_yaml
from ray_operator.builders.containers import token_auth_env
from ray_operator.builders.services import build_head_service
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.dashboard_models import JobSubmission
from ray_operator.spec.object_names import check_label, head_service_name
from ray_operator.spec.raycluster import JSON, json_copy, pod_spec
from ray_operator.spec.raycluster import spec as spec_of

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster, RayClusterSpec, RayJob


Object = Mapping[str, Any]

JOB_SUBMISSION_MODE_LABEL = "ray.io/job-submission-mode"
# On a SidecarMode cluster: once provisioned, a lost head Pod is not recreated (the RayCluster
# controller reads it): a new head would run the submitter again under a used submission id.
DISABLE_PROVISIONED_HEAD_RESTART_ANNOTATION = "ray.io/disable-provisioned-head-restart"
SUBMITTER_CONTAINER_NAME = "ray-job-submitter"
SIDECAR_MODE = "SidecarMode"
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


def build_cluster_for_job(
    rayjob: RayJob,
    *,
    name: str,
    submission_id: str = "",
    dashboard_address: str = "",
    submitter_restart: bool = False,
) -> JSON:
    """The RayCluster of a RayJob: its `rayClusterSpec`, its labels and annotations, owned by it.

    In SidecarMode the head Pod template also gets the submitter container (submitting
    `submission_id` to the dashboard next to it) and `restartPolicy: Never`, as KubeRay builds it;
    `dashboard_address` is the RayJob's `status.dashboardURL` at that moment (empty until the
    cluster is ready, so in practice always empty, as in KubeRay). `submitter_restart` is
    KubeRay's SidecarSubmitterRestart gate: the submitter alone restarts when it fails.
    """
    metadata = rayjob["metadata"]
    given = job_cluster_spec(rayjob)
    labels = {
        **(metadata.get("labels") or {}),
        **originated_labels(rayjob),
        JOB_SUBMISSION_MODE_LABEL: submission_mode(rayjob),
    }
    annotations = dict(metadata.get("annotations") or {})
    cluster_spec: JSON = json_copy(given)
    if submission_mode(rayjob) == SIDECAR_MODE:
        annotations[DISABLE_PROVISIONED_HEAD_RESTART_ANNOTATION] = "true"
        head_group = cluster_spec.setdefault("headGroupSpec", {})
        head_pod_spec = head_group.setdefault("template", {}).setdefault("spec", {})
        head_pod_spec.setdefault("containers", []).append(
            build_sidecar_submitter(
                rayjob,
                cluster_name=name,
                cluster_spec=given,
                submission_id=submission_id,
                dashboard_address=dashboard_address,
                restartable=submitter_restart,
            )
        )
        # No head restart: a restarted Pod would run `ray job submit` a second time (KubeRay
        # retries a SidecarMode job only as a whole, with a new cluster and submission id).
        head_pod_spec["restartPolicy"] = "Never"
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": name,
            "namespace": metadata["namespace"],
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_reference(rayjob)],
        },
        "spec": cluster_spec,
    }


def build_sidecar_submitter(
    rayjob: RayJob,
    *,
    cluster_name: str,
    cluster_spec: RayClusterSpec,
    submission_id: str,
    dashboard_address: str,
    restartable: bool = False,
) -> JSON:
    """SidecarMode's submitter container for the head Pod (KubeRay's `getSubmitterContainer`):
    the default submitter running `ray job submit` against the dashboard on 127.0.0.1.

    `restartable` (KubeRay's SidecarSubmitterRestart gate): the container restarts on its own
    when it exits non-zero (a per-container `restartPolicy`, Kubernetes 1.35's container restart
    rules; the Pod's stays Never), typically after `ray job logs --follow` lost its connection
    while the job runs on; its command then checks for the submission before submitting.
    """
    container = _default_submitter_container(cluster_spec)
    container["command"] = ["/bin/bash", "-ce", "--"]
    words = sidecar_submit_command(rayjob, submission_id=submission_id, restartable=restartable)
    container["args"] = [" ".join(words)]
    if restartable:
        container["restartPolicy"] = "OnFailure"
    container["env"] = _submitter_env(dashboard_address, submission_id)
    if cluster_spec.get("authOptions", {}).get("mode") == "token":
        token_auth_env(
            container, cluster_spec=cluster_spec, pod_spec=None, cluster_name=cluster_name
        )
    return container


def _submitter_env(dashboard_address: str, submission_id: str) -> list[JSON]:
    # An empty value is left out, as Kubernetes (and KubeRay's Go structs) write it.
    pairs = (
        ("PYTHONUNBUFFERED", "1"),
        (ENV_RAY_DASHBOARD_ADDRESS, dashboard_address),
        (ENV_RAY_JOB_SUBMISSION_ID, submission_id),
    )
    return [{"name": name, "value": value} if value else {"name": name} for name, value in pairs]


def _default_submitter_container(cluster_spec: RayClusterSpec) -> JSON:
    """KubeRay's `GetDefaultSubmitterContainer`: the head's image, small fixed resources."""
    containers = pod_spec(cluster_spec.get("headGroupSpec", {})).get("containers") or []
    image = containers[0].get("image") if containers else None
    return {
        "name": SUBMITTER_CONTAINER_NAME,
        # The head's image, so `ray job submit` matches the cluster's Ray version.
        "image": image,
        "resources": {
            "limits": {"cpu": "1", "memory": "1Gi"},
            "requests": {"cpu": "500m", "memory": "200Mi"},
        },
    }


def job_cluster_spec(rayjob: RayJob) -> RayClusterSpec:
    """`spec.rayClusterSpec` (empty when the RayJob runs on a selected cluster instead)."""
    found = rayjob.get("spec", {}).get("rayClusterSpec")
    return found if found is not None else cast("RayClusterSpec", {})


def submission_mode(rayjob: RayJob) -> str:
    """`spec.submissionMode`, defaulted as the CRD does (K8sJobMode)."""
    return str((rayjob.get("spec") or {}).get("submissionMode") or "K8sJobMode")


def runtime_env(rayjob: RayJob) -> dict[str, Any] | None:
    """`runtimeEnvYAML` parsed as KubeRay parses it (`bounded_yaml`: the loader admission uses
    too); None when unset."""
    text = (rayjob.get("spec") or {}).get("runtimeEnvYAML")
    if not text:
        return None
    try:
        parsed = load_go_yaml(text)
    except UnreadableYamlError as error:
        raise InvalidRuntimeEnvError(f"spec.runtimeEnvYAML: {error}") from error
    if parsed is None:
        return None
    if not isinstance(parsed, dict):
        raise InvalidRuntimeEnvError("spec.runtimeEnvYAML must be a mapping")
    return parsed


def job_submission(rayjob: RayJob, *, submission_id: str) -> JobSubmission:
    """The HTTPMode submission body (KubeRay's `ConvertRayJobToReq`)."""
    spec = rayjob.get("spec") or {}
    resources = None
    if spec.get("entrypointResources"):
        try:
            resources = bounded_json.loads(spec["entrypointResources"])
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


def job_submit_command(rayjob: RayJob, *, dashboard_address: str, submission_id: str) -> list[str]:
    """KubeRay's K8sJobMode shell words: wait for the GCS, submit unless already submitted, follow.

    `ray job submit` alone would submit twice when the Job's Pod is retried (kuberay#2154), so the
    command first asks `ray job status` whether the submission id exists.
    """
    address = dashboard_address if "://" in dashboard_address else "http://" + dashboard_address
    command = _wait_for_gcs(address, health_url=f"{address}/{GCS_HEALTH_PATH}")
    return command + _submit_unless_submitted(rayjob, address=address, submission_id=submission_id)


def _submit_unless_submitted(rayjob: RayJob, *, address: str, submission_id: str) -> list[str]:
    """`ray job status` first, `ray job submit --no-wait` only when the id is unknown, then
    follow the logs: safe to run again after a restart."""
    command = ["if", "!", "ray", "job", "status", "--address", address, submission_id]
    command += [">/dev/null", "2>&1", ";", "then"]
    command += ["ray", "job", "submit", "--address", address, "--no-wait"]
    command += _submission_words(rayjob, submission_id=submission_id)
    command += ["fi", ";"]
    command += ["ray", "job", "logs", "--address", address, "--follow", submission_id]
    return command


def sidecar_submit_command(
    rayjob: RayJob, *, submission_id: str, restartable: bool = False
) -> list[str]:
    """KubeRay's SidecarMode shell words: wait for the GCS, then `ray job submit` and wait for it.

    The sidecar shares the head's network namespace, so it talks to 127.0.0.1 at the head
    container's `dashboard` port. It submits without the status check: the head Pod never
    restarts (`restartPolicy: Never`), so the command runs once; `ray job submit` without
    `--no-wait` follows the job and exits non-zero when it fails, which is how the controller
    learns that the submission or the job failed (the container's exit code). A `restartable`
    submitter may run again, so it checks first, as the K8sJobMode submitter does.
    """
    port = dashboard_port(rayjob)
    address = f"http://127.0.0.1:{port}"
    command = _wait_for_gcs(address, health_url=f"http://localhost:{port}/{GCS_HEALTH_PATH}")
    if restartable:
        return command + _submit_unless_submitted(
            rayjob, address=address, submission_id=submission_id
        )
    command += ["ray", "job", "submit", "--address", address]
    return command + _submission_words(rayjob, submission_id=submission_id)


def dashboard_port(rayjob: RayJob) -> int:
    """The head container's port named `dashboard` in `rayClusterSpec`, else 8265."""
    containers = pod_spec(job_cluster_spec(rayjob).get("headGroupSpec", {})).get("containers")
    for port in (containers[0].get("ports") or ()) if containers else ():
        if port.get("name") == "dashboard" and port.get("containerPort"):
            return int(port["containerPort"])
    return names.DASHBOARD_PORT


def _wait_for_gcs(address: str, *, health_url: str) -> list[str]:
    health = _HEALTH_COMMAND.format(url=health_url, timeout=GCS_HEALTH_TIMEOUT_SECONDS)
    message = json.dumps(f"Waiting for Ray Dashboard GCS to become healthy at {address} ...")
    return [
        "until", health, ">/dev/null", "2>&1", ";",
        "do", "echo", message, ";", "sleep", "2", ";", "done", ";",
    ]  # fmt: skip


def _submission_words(rayjob: RayJob, *, submission_id: str) -> list[str]:
    """`ray job submit`'s options after `--address`, the entrypoint and the closing `;`."""
    spec = rayjob.get("spec") or {}
    words: list[str] = []
    env = runtime_env(rayjob)
    if env:
        words += ["--runtime-env-json", _double_quoted(_compact_json(env))]
    if spec.get("metadata"):
        words += ["--metadata-json", _double_quoted(_compact_json(spec["metadata"]))]
    if submission_id:
        words += ["--submission-id", submission_id]
    if spec.get("entrypointNumCpus"):
        words += ["--entrypoint-num-cpus", f"{float(spec['entrypointNumCpus']):f}"]
    if spec.get("entrypointNumGpus"):
        words += ["--entrypoint-num-gpus", f"{float(spec['entrypointNumGpus']):f}"]
    if spec.get("entrypointResources"):
        words += ["--entrypoint-resources", _double_quoted(str(spec["entrypointResources"]))]
    # The entrypoint is a shell command line on purpose (KubeRay passes it unquoted).
    return [*words, "--", str(spec.get("entrypoint") or "").strip(), ";"]


def _compact_json(value: Any) -> str:
    """JSON as KubeRay's Go code writes it: keys sorted, no spaces, UTF-8 kept."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def _double_quoted(text: str) -> str:
    """A bash double-quoted word, written as KubeRay's `strconv.Quote` writes it for JSON text.

    Also escapes `$` and backquote, which KubeRay leaves for bash to expand: the same word
    wherever KubeRay's is safe, and literal text where KubeRay's would run a substitution.
    """
    for char in ("\\", '"', "$", "`"):
        text = text.replace(char, "\\" + char)
    return f'"{text}"'


def build_submitter_job(
    rayjob: RayJob, cluster: RayCluster, *, dashboard_address: str, submission_id: str
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
    container.setdefault("env", []).extend(_submitter_env(dashboard_address, submission_id))
    cluster_spec = spec_of(cluster)
    if cluster_spec.get("authOptions", {}).get("mode") == "token":
        token_auth_env(
            container,
            cluster_spec=cluster_spec,
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


def submitter_pod_spec(rayjob: Object, *, default_only: bool = False) -> JSON:
    """The Pod spec of the submitter a RayJob would get for its own cluster: its
    `submitterPodTemplate` (unless `default_only`), else the default submitter container."""
    spec = rayjob.get("spec") or {}
    if default_only:
        spec = {}
    cluster = {"spec": (rayjob.get("spec") or {}).get("rayClusterSpec") or {}}
    template = _submitter_template(spec, cluster)  # type: ignore[arg-type]
    pod: JSON = template["spec"]
    return pod


def _submitter_template(spec: Object, cluster: RayCluster) -> JSON:
    if spec.get("submitterPodTemplate"):
        template: JSON = copy.deepcopy(dict(spec["submitterPodTemplate"]))
        template.setdefault("spec", {}).setdefault("containers", [{}])
        template["spec"].setdefault("restartPolicy", "Never")
        return template
    container = _default_submitter_container(spec_of(cluster))
    return {"spec": {"containers": [container], "restartPolicy": "Never"}}


def build_head_service_for_owner(owner: Object, cluster: RayCluster) -> JSON:
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


def head_service_of(cluster: RayCluster) -> str:
    """The name of the cluster's own head Service."""
    return head_service_name(cluster)
