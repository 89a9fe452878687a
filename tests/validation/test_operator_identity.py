"""Specification: no Pod the operator builds runs as the operator's own ServiceAccount (issue 28,
finding 6). Every template it turns into a Pod or a Job is held to that in the operator's
namespace, each refusal naming its field path; elsewhere the same name is someone else's
ServiceAccount and is left alone."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ray_operator.legacy.conversion import LegacyConversionError, convert_legacy_cluster
from ray_operator.validation.identity import OperatorIdentity
from ray_operator.validation.limits import ClusterLimits
from ray_operator.validation.raycluster import validate_raycluster
from ray_operator.validation.raycronjob import validate_raycronjob
from ray_operator.validation.rayjob import validate_rayjob
from ray_operator.validation.rayservegraph import rayservegraph_errors
from ray_operator.validation.rayservice import validate_rayservice

from tests.builders.clusters import raycluster
from tests.legacy.legacy_clusters import small_legacy_cluster

OPERATOR_NAMESPACE = "ray-system"
OPERATOR_ACCOUNT = "ray-operator"
LIMITS = ClusterLimits(operator_identity=OperatorIdentity(OPERATOR_ACCOUNT, OPERATOR_NAMESPACE))
REFUSAL = (
    "Forbidden: ray-operator is the operator's own ServiceAccount in namespace ray-system; "
    "a Pod the operator creates never runs as it"
)


def cluster(*, namespace: str = OPERATOR_NAMESPACE, **spec: Any) -> dict[str, Any]:
    return raycluster(namespace=namespace, **spec)


def run_as(
    template_owner: dict[str, Any], account: str, *, field: str = "serviceAccountName"
) -> None:
    template_owner["template"]["spec"][field] = account


def messages(errors: list[Any]) -> list[str]:
    return [str(error) for error in errors]


def test_a_head_template_naming_the_operators_service_account_is_refused() -> None:
    manifest = cluster()
    run_as(manifest["spec"]["headGroupSpec"], OPERATOR_ACCOUNT)
    assert messages(validate_raycluster(manifest, limits=LIMITS)) == [
        f"spec.headGroupSpec.template.spec.serviceAccountName: {REFUSAL}"
    ]


def test_a_worker_template_naming_it_is_refused_with_its_index() -> None:
    manifest = cluster()
    run_as(manifest["spec"]["workerGroupSpecs"][0], OPERATOR_ACCOUNT)
    assert messages(validate_raycluster(manifest, limits=LIMITS)) == [
        f"spec.workerGroupSpecs[0].template.spec.serviceAccountName: {REFUSAL}"
    ]


def test_the_deprecated_service_account_field_is_refused_too() -> None:
    # Kubernetes reads `serviceAccount` when `serviceAccountName` is empty.
    manifest = cluster()
    run_as(manifest["spec"]["headGroupSpec"], OPERATOR_ACCOUNT, field="serviceAccount")
    assert messages(validate_raycluster(manifest, limits=LIMITS)) == [
        f"spec.headGroupSpec.template.spec.serviceAccount: {REFUSAL}"
    ]


def test_the_same_name_in_another_namespace_is_someone_elses_account() -> None:
    manifest = cluster(namespace="tenant-a")
    run_as(manifest["spec"]["headGroupSpec"], OPERATOR_ACCOUNT)
    assert validate_raycluster(manifest, limits=LIMITS) == []


def test_other_accounts_in_the_operators_namespace_are_allowed() -> None:
    manifest = cluster()
    run_as(manifest["spec"]["headGroupSpec"], "ray-head")
    assert validate_raycluster(manifest, limits=LIMITS) == []


def test_nothing_is_refused_while_the_operator_does_not_know_its_identity() -> None:
    manifest = cluster()
    run_as(manifest["spec"]["headGroupSpec"], OPERATOR_ACCOUNT)
    assert validate_raycluster(manifest, limits=ClusterLimits()) == []


def test_an_autoscaling_cluster_named_like_the_account_would_run_its_head_as_it() -> None:
    # The head then runs as the autoscaler's ServiceAccount, named after the cluster, which the
    # operator would also bind the autoscaler Role to.
    manifest = raycluster(
        OPERATOR_ACCOUNT, namespace=OPERATOR_NAMESPACE, enableInTreeAutoscaling=True
    )
    assert messages(validate_raycluster(manifest, limits=LIMITS)) == [
        "metadata.name: Forbidden: the head Pod of an autoscaling RayCluster whose template "
        "names no ServiceAccount runs as the one named after the cluster, and " + REFUSAL[11:]
    ]


@pytest.mark.parametrize(
    ("autoscaling", "head_account", "namespace"),
    [
        (False, None, OPERATOR_NAMESPACE),  # the head runs as the namespace's default account
        (True, "ray-head", OPERATOR_NAMESPACE),  # ... as the one its template names
        (True, None, "tenant-a"),  # ... as tenant-a's account of that name
    ],
)
def test_a_cluster_named_like_the_account_is_fine_when_its_head_runs_as_another(
    autoscaling: bool, head_account: str | None, namespace: str
) -> None:
    manifest = raycluster(
        OPERATOR_ACCOUNT, namespace=namespace, enableInTreeAutoscaling=autoscaling
    )
    if head_account is not None:
        run_as(manifest["spec"]["headGroupSpec"], head_account)
    assert validate_raycluster(manifest, limits=LIMITS) == []


def rayjob(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "job", "namespace": OPERATOR_NAMESPACE},
        "spec": {"entrypoint": "python -c 'print(1)'", "rayClusterSpec": cluster()["spec"], **spec},
    }


def submitter_template(account: str) -> dict[str, Any]:
    container = {"name": "submitter", "image": "rayproject/ray:2.52.0", "command": ["ray"]}
    return {"spec": {"serviceAccountName": account, "containers": [container]}}


def test_a_rayjob_submitter_template_naming_it_is_refused() -> None:
    manifest = rayjob(submitterPodTemplate=submitter_template(OPERATOR_ACCOUNT))
    assert messages(validate_rayjob(manifest, limits=LIMITS)) == [
        f"spec.submitterPodTemplate.spec.serviceAccountName: {REFUSAL}"
    ]


def test_a_rayjobs_cluster_spec_naming_it_is_refused() -> None:
    manifest = rayjob()
    run_as(manifest["spec"]["rayClusterSpec"]["workerGroupSpecs"][0], OPERATOR_ACCOUNT)
    assert messages(validate_rayjob(manifest, limits=LIMITS)) == [
        f"spec.rayClusterSpec.workerGroupSpecs[0].template.spec.serviceAccountName: {REFUSAL}"
    ]


def test_a_rayjob_in_another_namespace_may_name_its_own_account_of_that_name() -> None:
    manifest = rayjob(submitterPodTemplate=submitter_template(OPERATOR_ACCOUNT))
    manifest["metadata"]["namespace"] = "tenant-a"
    run_as(manifest["spec"]["rayClusterSpec"]["headGroupSpec"], OPERATOR_ACCOUNT)
    assert validate_rayjob(manifest, limits=LIMITS) == []


def test_a_rayservice_cluster_config_naming_it_is_refused() -> None:
    manifest = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "serve", "namespace": OPERATOR_NAMESPACE},
        "spec": {"rayClusterConfig": cluster()["spec"]},
    }
    run_as(manifest["spec"]["rayClusterConfig"]["headGroupSpec"], OPERATOR_ACCOUNT)
    assert messages(validate_rayservice(manifest, limits=LIMITS)) == [
        f"spec.rayClusterConfig.headGroupSpec.template.spec.serviceAccountName: {REFUSAL}"
    ]


def test_a_raycronjob_template_naming_it_is_refused_in_both_places() -> None:
    template = rayjob(submitterPodTemplate=submitter_template(OPERATOR_ACCOUNT))["spec"]
    run_as(template["rayClusterSpec"]["headGroupSpec"], OPERATOR_ACCOUNT)
    manifest = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCronJob",
        "metadata": {"name": "nightly", "namespace": OPERATOR_NAMESPACE},
        "spec": {"schedule": "0 0 * * *", "jobTemplate": template},
    }
    assert messages(validate_raycronjob(manifest, limits=LIMITS)) == [
        "spec.jobTemplate.rayClusterSpec.headGroupSpec.template.spec.serviceAccountName: "
        + REFUSAL,
        f"spec.jobTemplate.submitterPodTemplate.spec.serviceAccountName: {REFUSAL}",
    ]


def test_a_rayservegraph_cluster_spec_naming_it_is_refused() -> None:
    cluster_spec = copy.deepcopy(cluster()["spec"])
    run_as(cluster_spec["headGroupSpec"], OPERATOR_ACCOUNT)
    manifest = {
        "apiVersion": "ray-operator.io/v1alpha1",
        "kind": "RayServeGraph",
        "metadata": {"name": "pipeline", "namespace": OPERATOR_NAMESPACE},
        "spec": {
            "source": {"url": "https://registry.example.com/graphs/pipeline.pb"},
            "rayClusterSpec": cluster_spec,
        },
    }
    assert messages(rayservegraph_errors(manifest, limits=LIMITS)) == [
        f"spec.rayClusterSpec.headGroupSpec.template.spec.serviceAccountName: {REFUSAL}"
    ]


def test_a_legacy_cluster_whose_pods_would_run_as_it_does_not_convert() -> None:
    legacy = small_legacy_cluster()
    legacy["metadata"]["namespace"] = OPERATOR_NAMESPACE
    legacy["spec"]["podTypes"][0]["podConfig"]["spec"]["serviceAccountName"] = OPERATOR_ACCOUNT
    with pytest.raises(LegacyConversionError) as raised:
        convert_legacy_cluster(legacy, limits=LIMITS)
    assert str(raised.value) == (
        "(converted RayCluster): ray-operator would refuse it: "
        f"spec.headGroupSpec.template.spec.serviceAccountName: {REFUSAL}"
    )
