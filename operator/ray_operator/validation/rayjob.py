"""Semantic validation of a RayJob, shared by the RayJob controller and the admission webhook.

Covers what KubeRay's `utils/validation.go` checks for a RayJob (`ValidateRayJobMetadata`,
`ValidateRayJobSpec` with its deletion-strategy rules, and the RayCluster rules on the embedded
`spec.rayClusterSpec`), reporting every violation at once with its field path. Beyond KubeRay:
`clusterSelector` and `rayClusterSpec` may not both be set (KubeRay silently ignores the spec), and
an `entrypoint` is required unless the job is submitted interactively or by a custom submitter Pod
(KubeRay would start a cluster and then fail the submission). `rayjob_immutable_errors` lists the
changes an UPDATE may not make, `rayjob_warnings` what is legal but has no effect.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from ray_operator import bounded_json
from ray_operator.bounded_yaml import UnreadableYamlError, load_go_yaml
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.raycluster import JSON, ClusterLike, is_autoscaling_enabled
from ray_operator.validation.embedded import embedded_cluster_errors, owner_name_errors
from ray_operator.validation.errors import (
    FieldError,
    duplicate,
    forbidden,
    invalid,
    not_supported,
    required,
    shown,
)
from ray_operator.validation.identity import submitter_template_identity_errors
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.pod_template import pod_template_errors
from ray_operator.validation.raycluster import read_only_manifest

if TYPE_CHECKING:
    from ray_io.v1_views import RayClusterSpec

K8S_JOB_MODE = "K8sJobMode"
HTTP_MODE = "HTTPMode"
INTERACTIVE_MODE = "InteractiveMode"
SIDECAR_MODE = "SidecarMode"
SUBMISSION_MODES = [K8S_JOB_MODE, HTTP_MODE, INTERACTIVE_MODE, SIDECAR_MODE]
CLUSTER_SELECTOR_KEY = "ray.io/cluster"
SUBMITTER_CONTAINER_NAME = "ray-job-submitter"  # SidecarMode's container in the head Pod
# Deletion policies in the order they may take effect: workers, then the cluster, then the RayJob.
_DELETION_ORDER = ("DeleteWorkers", "DeleteCluster", "DeleteSelf")
_CLUSTER_DELETING_POLICIES = ("DeleteCluster", "DeleteWorkers")
# While the job is being submitted or runs, changing what was submitted cannot take effect.
# Not "Waiting": there an InteractiveMode job waits for the user to set spec.jobId.
_ACTIVE_DEPLOYMENT_STATUSES = ("Initializing", "Running", "Retrying")
_SUBMISSION_FIELDS = (
    "entrypoint",
    "submissionMode",
    "jobId",
    "runtimeEnvYAML",
    "clusterSelector",
    "entrypointNumCpus",
    "entrypointNumGpus",
    "entrypointResources",
    "metadata",
)


def validate_rayjob(
    rayjob: ClusterLike, *, limits: ClusterLimits = DEFAULT_LIMITS
) -> list[FieldError]:
    """Every semantic violation in the RayJob's metadata and spec; empty when it is valid."""
    manifest = read_only_manifest(rayjob)
    errors = owner_name_errors(manifest)
    errors += _spec_errors(manifest)
    errors += embedded_cluster_errors(
        manifest, field="rayClusterSpec", creator=names.CRD_RAY_JOB, limits=limits
    )
    errors += _submitter_template_errors(_spec(manifest))
    errors += submitter_template_identity_errors(manifest, identity=limits.operator_identity)
    return errors


def _submitter_template_errors(spec: JSON) -> list[FieldError]:
    """A given submitter Pod template, with Kubernetes' Pod rules (it becomes a Job's Pod)."""
    template = spec.get("submitterPodTemplate")
    if not isinstance(template, dict):
        return []
    path = "spec.submitterPodTemplate"
    if not (template.get("spec") or {}).get("containers"):
        # We would fill in a container without a name or an image: its Job could never run.
        return [required(f"{path}.spec.containers", "the submitter Pod needs a container")]
    return pod_template_errors(path, template)


def rayjob_warnings(rayjob: ClusterLike) -> list[str]:
    """Legal but surprising settings, worded for `kubectl apply` warnings."""
    spec = _spec(read_only_manifest(rayjob))
    if spec.get("clusterSelector") and spec.get("shutdownAfterJobFinishes") is True:
        # KubeRay skips every deletion for a selected cluster; so do we.
        return [
            "spec.shutdownAfterJobFinishes: has no effect with clusterSelector: "
            "the selected RayCluster is not the RayJob's and is never deleted"
        ]
    return []


def rayjob_immutable_errors(new: ClusterLike, old: ClusterLike) -> list[FieldError]:
    """Changes an UPDATE may not make: what was submitted, while the job is being run."""
    new_manifest, old_manifest = read_only_manifest(new), read_only_manifest(old)
    status = _mapping(old_manifest.get("status")).get("jobDeploymentStatus")
    if status not in _ACTIVE_DEPLOYMENT_STATUSES:
        return []
    new_spec, old_spec = _spec(new_manifest), _spec(old_manifest)
    return [
        forbidden(f"spec.{field}", f"cannot be changed while the job is {status}")
        for field in _SUBMISSION_FIELDS
        if new_spec.get(field) != old_spec.get(field)
    ]


def _spec(rayjob: JSON) -> JSON:
    return _mapping(rayjob.get("spec"))


def _mapping(value: Any) -> JSON:
    # The old object of an UPDATE is not parsed by the webhook: tolerate any shape there.
    return dict(value) if isinstance(value, dict) else {}


def _spec_errors(rayjob: JSON) -> list[FieldError]:
    spec = _spec(rayjob)
    checks = (
        _submission_mode_errors,
        _suspend_errors,
        _cluster_source_errors,
        _sidecar_mode_errors,
        _counter_errors,
        _runtime_env_errors,
        _entrypoint_resources_errors,
        _ttl_errors,
        _deletion_strategy_errors,
    )
    return [error for check in checks for error in check(spec)]


def _submission_mode_errors(spec: JSON) -> Iterator[FieldError]:
    mode = spec.get("submissionMode") or K8S_JOB_MODE
    if mode not in SUBMISSION_MODES:
        yield not_supported("spec.submissionMode", shown(mode), SUBMISSION_MODES)
    backoff = spec.get("backoffLimit")
    if mode == INTERACTIVE_MODE and backoff is not None and backoff > 0:
        # A retried interactive job keeps its jobId and would look Running at once
        # (kuberay#3525), so KubeRay forbids retries there.
        yield invalid(
            "spec.backoffLimit", backoff, "must be 0 when submissionMode is InteractiveMode"
        )
    # A custom submitter Pod may carry its own `ray job submit` command; otherwise nothing
    # would be submitted and the cluster would idle until a deadline.
    own_submitter = mode == K8S_JOB_MODE and spec.get("submitterPodTemplate") is not None
    if mode != INTERACTIVE_MODE and not own_submitter and not spec.get("entrypoint"):
        yield required(
            "spec.entrypoint",
            "required unless submissionMode is InteractiveMode or a submitterPodTemplate is given",
        )


def _suspend_errors(spec: JSON) -> Iterator[FieldError]:
    if spec.get("suspend") is not True:
        return
    if spec.get("shutdownAfterJobFinishes") is not True:
        # Kueue's contract: a suspended RayJob gives its cluster back, so it must own one.
        yield forbidden(
            "spec.suspend", "a RayJob can be suspended only with shutdownAfterJobFinishes: true"
        )
    if spec.get("clusterSelector"):
        yield forbidden("spec.suspend", "a RayJob with a clusterSelector cannot be suspended")


def _cluster_source_errors(spec: JSON) -> Iterator[FieldError]:
    selector = spec.get("clusterSelector") or {}
    has_spec = spec.get("rayClusterSpec") is not None
    if not selector:
        if not has_spec:
            yield required(
                "spec.rayClusterSpec", "one of rayClusterSpec or clusterSelector must be set"
            )
        elif _k8s_token_auth(spec):
            yield forbidden(
                "spec.rayClusterSpec.authOptions.enableK8sTokenAuth",
                "Kubernetes token authentication is not supported for RayJob",
            )
        return
    if has_spec:
        yield forbidden(
            "spec.rayClusterSpec",
            "cannot be set together with clusterSelector (the job runs on an existing cluster)",
        )
    if not selector.get(CLUSTER_SELECTOR_KEY):
        yield required(
            f"spec.clusterSelector[{CLUSTER_SELECTOR_KEY}]", "the name of the RayCluster to run on"
        )
    if spec.get("submissionMode") == SIDECAR_MODE:
        yield invalid("spec.submissionMode", SIDECAR_MODE, "not supported with clusterSelector")
    backoff = spec.get("backoffLimit")
    if backoff is not None and backoff > 0:
        # A retry means a fresh cluster, and a selected cluster is not ours to recreate.
        yield invalid("spec.backoffLimit", backoff, "must be 0 with clusterSelector")


def _k8s_token_auth(spec: JSON) -> bool:
    auth = (spec.get("rayClusterSpec") or {}).get("authOptions") or {}
    return auth.get("enableK8sTokenAuth") is True


def _sidecar_mode_errors(spec: JSON) -> Iterator[FieldError]:
    if spec.get("submissionMode") != SIDECAR_MODE:
        return
    for field in ("submitterPodTemplate", "submitterConfig"):
        if spec.get(field) is not None:
            yield forbidden(f"spec.{field}", "not supported when submissionMode is SidecarMode")
    head_template = ((spec.get("rayClusterSpec") or {}).get("headGroupSpec") or {}).get("template")
    pod_spec = (head_template or {}).get("spec") or {}
    policy = pod_spec.get("restartPolicy")
    if policy not in (None, "", "Never"):
        # The submitter runs in the head Pod: a restarted head would submit the job twice.
        yield invalid(
            "spec.rayClusterSpec.headGroupSpec.template.spec.restartPolicy",
            policy,
            "must be Never or unset when submissionMode is SidecarMode",
        )
    for index, container in enumerate(pod_spec.get("containers") or ()):
        if isinstance(container, dict) and container.get("name") == SUBMITTER_CONTAINER_NAME:
            # Beyond KubeRay, whose head Pod would then be refused by the API server for a
            # duplicate container name, leaving the job's cluster without a head.
            yield invalid(
                f"spec.rayClusterSpec.headGroupSpec.template.spec.containers[{index}].name",
                SUBMITTER_CONTAINER_NAME,
                "is the name of the submitter container SidecarMode adds to the head Pod",
            )


def _counter_errors(spec: JSON) -> Iterator[FieldError]:
    for field in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        value = spec.get(field)
        if value is not None and value <= 0:
            yield invalid(f"spec.{field}", value, "must be greater than 0")
    for field in ("backoffLimit", "ttlSecondsAfterFinished"):
        value = spec.get(field)
        if value is not None and value < 0:
            yield invalid(f"spec.{field}", value, "must be greater than or equal to 0")
    submitter_backoff = (spec.get("submitterConfig") or {}).get("backoffLimit")
    if submitter_backoff is not None and submitter_backoff < 0:
        yield invalid(
            "spec.submitterConfig.backoffLimit",
            submitter_backoff,
            "must be greater than or equal to 0",
        )


def _runtime_env_errors(spec: JSON) -> Iterator[FieldError]:
    text = spec.get("runtimeEnvYAML")
    if not text:
        return
    try:
        parsed = load_go_yaml(text)  # what the controller submits, typed as KubeRay types it
    except UnreadableYamlError as error:
        yield invalid("spec.runtimeEnvYAML", shown(text), str(error))
        return
    if parsed is not None and not isinstance(parsed, dict):
        yield invalid("spec.runtimeEnvYAML", shown(text), "must be a YAML mapping (a runtime_env)")


def _entrypoint_resources_errors(spec: JSON) -> Iterator[FieldError]:
    """A JSON object of amounts: KubeRay decodes it into a `map[string]float32` (HTTPMode), and
    `ray job submit --entrypoint-resources` wants one too; KubeRay finds out only on submission."""
    text = spec.get("entrypointResources")
    if not text:
        return
    try:
        parsed = bounded_json.loads(text)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not all(map(_is_amount, parsed.values())):
        yield invalid(
            "spec.entrypointResources",
            shown(text),
            'must be a JSON object of resource amounts, such as {"GPU": 1}',
        )


def _is_amount(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _ttl_errors(spec: JSON) -> Iterator[FieldError]:
    ttl = spec.get("ttlSecondsAfterFinished")
    if spec.get("shutdownAfterJobFinishes") is not True and ttl is not None and ttl > 0:
        yield forbidden("spec.ttlSecondsAfterFinished", "requires shutdownAfterJobFinishes: true")


def _deletion_strategy_errors(spec: JSON) -> Iterator[FieldError]:
    strategy = spec.get("deletionStrategy")
    if strategy is None:
        return
    path = "spec.deletionStrategy"
    legacy = strategy.get("onSuccess") is not None or strategy.get("onFailure") is not None
    rules = strategy.get("deletionRules") or []
    if rules and spec.get("shutdownAfterJobFinishes") is True:
        yield forbidden(
            f"{path}.deletionRules", "cannot be used together with shutdownAfterJobFinishes: true"
        )
    if rules and legacy:
        yield forbidden(path, "use either deletionRules or onSuccess/onFailure, not both")
    elif legacy:
        yield from _legacy_policy_errors(spec, strategy)
    elif rules:
        yield from _deletion_rule_errors(spec, rules)
    else:
        yield required(path, "either deletionRules or both onSuccess and onFailure")


def _legacy_policy_errors(spec: JSON, strategy: JSON) -> Iterator[FieldError]:
    for outcome in ("onSuccess", "onFailure"):
        path = f"spec.deletionStrategy.{outcome}"
        if strategy.get(outcome) is None:
            yield required(path, "onSuccess and onFailure must be set together")
            continue
        policy = strategy[outcome].get("policy")
        if policy is None:
            yield required(f"{path}.policy", "the deletion policy to apply")
            continue
        yield from _policy_errors(spec, f"{path}.policy", policy)
        if policy == "DeleteNone" and spec.get("shutdownAfterJobFinishes") is True:
            yield invalid(f"{path}.policy", policy, "contradicts shutdownAfterJobFinishes: true")


def _policy_errors(spec: JSON, path: str, policy: Any) -> Iterator[FieldError]:
    if spec.get("clusterSelector") and policy in _CLUSTER_DELETING_POLICIES:
        yield invalid(
            path, policy, "not supported with clusterSelector (the cluster is not the RayJob's)"
        )
    cluster_spec = cast("RayClusterSpec", spec.get("rayClusterSpec") or {})
    if policy == "DeleteWorkers" and is_autoscaling_enabled(cluster_spec):
        yield invalid(path, policy, "not supported when the Ray autoscaler is enabled")


def _deletion_rule_errors(spec: JSON, rules: list[JSON]) -> Iterator[FieldError]:
    # (condition field, condition value) → {policy: (rule index, ttl)}
    grouped: dict[tuple[str, str], dict[str, tuple[int, int]]] = {}
    for index, rule in enumerate(rules):
        path = f"spec.deletionStrategy.deletionRules[{index}]"
        condition = rule.get("condition") or {}
        given = [f for f in ("jobStatus", "jobDeploymentStatus") if condition.get(f) is not None]
        if len(given) != 1:
            detail = "set exactly one of jobStatus and jobDeploymentStatus"
            yield (forbidden if given else required)(f"{path}.condition", detail)
            continue
        ttl = condition.get("ttlSeconds") or 0
        if ttl < 0:
            yield invalid(f"{path}.condition.ttlSeconds", ttl, "must be greater than or equal to 0")
            continue
        policy = rule.get("policy")
        policy_errors = list(_policy_errors(spec, f"{path}.policy", policy))
        yield from policy_errors
        if policy_errors:
            continue
        key = (given[0], str(condition[given[0]]))
        by_policy = grouped.setdefault(key, {})
        if str(policy) in by_policy:
            yield duplicate(path, {"policy": policy, given[0]: condition[given[0]]})
            continue
        by_policy[str(policy)] = (index, ttl)
    for (condition_field, value), by_policy in grouped.items():
        yield from _ttl_order_errors(by_policy, condition=f"{condition_field} {value}")


def _ttl_order_errors(
    by_policy: dict[str, tuple[int, int]], *, condition: str
) -> Iterator[FieldError]:
    """Workers go no later than the cluster, the cluster no later than the RayJob itself."""
    previous: tuple[str, int] | None = None
    for policy in _DELETION_ORDER:
        if policy not in by_policy:
            continue
        index, ttl = by_policy[policy]
        if previous is not None and ttl < previous[1]:
            yield invalid(
                f"spec.deletionStrategy.deletionRules[{index}].condition.ttlSeconds",
                ttl,
                f"must be greater than or equal to the ttlSeconds of {previous[0]} "
                f"for {condition} ({previous[1]})",
            )
        previous = (policy, ttl)
