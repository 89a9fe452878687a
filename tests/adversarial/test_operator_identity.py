"""Finding 6 of issue 28: the operator's own ServiceAccount is never lent to a tenant's Pod.

In the namespaced install the operator runs in the namespace it serves, as ServiceAccount
`ray-operator`; a template there naming it (`serviceAccountName: ray-operator`) used to be copied
into the head Pod, which then ran the tenant's command with the operator's token (Role and
RoleBinding writes, Secret create and delete). Here the test's namespace plays that namespace:
the operator process is told its identity as config/manager tells it, through the Downward API's
`POD_SERVICE_ACCOUNT` and `POD_NAMESPACE`, and the ServiceAccount exists as the install makes it.

With the webhook on, every template naming that ServiceAccount is refused with its field path;
with the webhook off, the controllers report the same message (InvalidSpec, ValidationFailed, a
Warning Event) and create no Pod, no Job and no binding. The indirect route is closed too: an
autoscaling RayCluster named like the operator's ServiceAccount would run its head as the
autoscaler's ServiceAccount, which KubeRay names after the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import Kubectl
from tests.robustness.conftest import StartOperator, serving_webhooks
from tests.robustness.manifests import as_text, container, ray_cluster
from tests.robustness.observe import OperatorUnderTest
from tests.runtime.processes import wait_until
from tests.webhooks.conftest import wait_until_intercepted

OPERATOR_ACCOUNT = "ray-operator"
REFUSAL = f"{OPERATOR_ACCOUNT} is the operator's own ServiceAccount in namespace"
HEAD_ACCOUNT_FIELD = "spec.headGroupSpec.template.spec.serviceAccountName"
SUBMITTER_ACCOUNT_FIELD = "spec.submitterPodTemplate.spec.serviceAccountName"
SETTLE_SECONDS = 30.0


@pytest.fixture
def operator_namespace(kubectl: Kubectl, namespace: str) -> str:
    """The test's namespace as the namespaced install makes it: the operator's ServiceAccount."""
    kubectl("create", "serviceaccount", OPERATOR_ACCOUNT, "-n", namespace)
    return namespace


def identity_env(namespace: str) -> dict[str, str]:
    """What config/manager's Downward API gives the operator's container."""
    return {"POD_SERVICE_ACCOUNT": OPERATOR_ACCOUNT, "POD_NAMESPACE": namespace}


@pytest.fixture
def operator_with_webhooks(
    start_operator: StartOperator, kubectl: Kubectl, operator_namespace: str
) -> Iterator[OperatorUnderTest]:
    env = identity_env(operator_namespace)
    with serving_webhooks(start_operator, kubectl, operator_namespace, env=env) as operator:
        yield operator


@pytest.fixture
def operator_without_webhooks(
    start_operator: StartOperator, operator_namespace: str
) -> OperatorUnderTest:
    return start_operator(env=identity_env(operator_namespace))


def cluster_running_as(name: str, account: str) -> dict[str, Any]:
    manifest = ray_cluster(name)
    manifest["spec"]["headGroupSpec"]["template"]["spec"]["serviceAccountName"] = account
    return manifest


def autoscaling_cluster(name: str) -> dict[str, Any]:
    manifest = ray_cluster(name)
    manifest["spec"]["enableInTreeAutoscaling"] = True
    return manifest


def rayjob_with_submitter_as(name: str, account: str) -> dict[str, Any]:
    submitter = {**container("submitter"), "command": ["ray", "job", "submit", "--", "true"]}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name},
        "spec": {
            "entrypoint": "python -c 'print(1)'",
            "rayClusterSpec": ray_cluster("unused")["spec"],
            "submitterPodTemplate": {
                "spec": {
                    "serviceAccountName": account,
                    "restartPolicy": "Never",
                    "containers": [submitter],
                }
            },
        },
    }


def raycronjob_with_cluster_as(name: str, account: str) -> dict[str, Any]:
    job = rayjob_with_submitter_as("unused", "default")["spec"]
    job["rayClusterSpec"] = cluster_running_as("unused", account)["spec"]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCronJob",
        "metadata": {"name": name},
        "spec": {"schedule": "* * * * *", "jobTemplate": job},
    }


def apply(kubectl: Kubectl, namespace: str, manifest: dict[str, Any]) -> tuple[int, str]:
    result = kubectl.run("apply", "-n", namespace, "-f", "-", input_text=as_text(manifest))
    return result.returncode, result.stderr


def pods_running_as(kubectl: Kubectl, namespace: str, account: str) -> list[str]:
    pods = json.loads(kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
    return [
        pod["metadata"]["name"] for pod in pods if pod["spec"].get("serviceAccountName") == account
    ]


def bindings_of(kubectl: Kubectl, namespace: str, account: str) -> list[str]:
    bindings = json.loads(kubectl("get", "rolebindings", "-n", namespace, "-o", "json"))["items"]
    return [
        binding["metadata"]["name"]
        for binding in bindings
        if any(subject.get("name") == account for subject in binding.get("subjects") or ())
    ]


def apply_now(kubectl: Kubectl, namespace: str, manifest: dict[str, Any]) -> None:
    kubectl("apply", "-n", namespace, "-f", "-", input_text=as_text(manifest))


def invalid_spec_of(kubectl: Kubectl, namespace: str, cluster: str) -> str:
    """The RayCluster's InvalidSpec message, once it names the operator's ServiceAccount."""
    found: list[str] = []

    def reported() -> bool:
        condition = 'jsonpath={.status.conditions[?(@.type=="InvalidSpec")].message}'
        found[:] = [kubectl("get", "raycluster", cluster, "-n", namespace, "-o", condition)]
        return REFUSAL in found[0]

    wait_until(reported, timeout=SETTLE_SECONDS, interval=0.5, what=f"InvalidSpec of {cluster}")
    return found[0]


def warnings_about(kubectl: Kubectl, namespace: str, name: str, reason: str) -> str:
    return kubectl(
        "get", "events", "-n", namespace,
        "--field-selector", f"involvedObject.name={name},reason={reason}",
        "-o", "jsonpath={.items[*].message}",
    )  # fmt: skip


# --- with the webhook ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("manifest", "field"),
    [
        (cluster_running_as("as-operator", OPERATOR_ACCOUNT), HEAD_ACCOUNT_FIELD),
        (rayjob_with_submitter_as("submit-as-operator", OPERATOR_ACCOUNT), SUBMITTER_ACCOUNT_FIELD),
        (
            raycronjob_with_cluster_as("cron-as-operator", OPERATOR_ACCOUNT),
            "spec.jobTemplate.rayClusterSpec.headGroupSpec.template.spec.serviceAccountName",
        ),
        (autoscaling_cluster(OPERATOR_ACCOUNT), "metadata.name"),
    ],
    ids=["raycluster", "rayjob-submitter", "raycronjob", "autoscaler-account"],
)
def test_the_webhook_refuses_a_template_running_as_the_operator(
    operator_with_webhooks: OperatorUnderTest,
    kubectl: Kubectl,
    operator_namespace: str,
    manifest: dict[str, Any],
    field: str,
) -> None:
    code, stderr = apply(kubectl, operator_namespace, manifest)
    assert code != 0, f"admitted: {manifest['metadata']['name']}"
    assert f"{field}: Forbidden: " in stderr, stderr
    assert f"{REFUSAL} {operator_namespace}" in stderr, stderr
    assert not pods_running_as(kubectl, operator_namespace, OPERATOR_ACCOUNT)


def test_the_webhook_admits_the_same_account_name_elsewhere(
    operator_with_webhooks: OperatorUnderTest, kubectl: Kubectl, operator_namespace: str
) -> None:
    other = f"{operator_namespace[:50]}-tenant"
    kubectl("create", "namespace", other)
    wait_until_intercepted(kubectl, other, timeout=30)
    manifest = cluster_running_as("own-account", OPERATOR_ACCOUNT)
    result = kubectl.run(
        "apply", "--dry-run=server", "-n", other, "-f", "-", input_text=as_text(manifest)
    )
    assert result.returncode == 0, result.stderr


# --- without the webhook: the controllers' re-validation -----------------------------------------


def test_a_raycluster_running_as_the_operator_gets_invalid_spec_and_no_pod(
    operator_without_webhooks: OperatorUnderTest, kubectl: Kubectl, operator_namespace: str
) -> None:
    apply_now(kubectl, operator_namespace, cluster_running_as("as-operator", OPERATOR_ACCOUNT))
    assert HEAD_ACCOUNT_FIELD in invalid_spec_of(kubectl, operator_namespace, "as-operator")
    assert HEAD_ACCOUNT_FIELD in warnings_about(
        kubectl, operator_namespace, "as-operator", "InvalidRayClusterSpec"
    )
    assert not kubectl(
        "get", "pods", "-n", operator_namespace, "-l", "ray.io/cluster=as-operator", "-o", "name"
    )
    assert not pods_running_as(kubectl, operator_namespace, OPERATOR_ACCOUNT)


def test_an_autoscaling_raycluster_named_like_the_operator_binds_and_runs_nothing_as_it(
    operator_without_webhooks: OperatorUnderTest, kubectl: Kubectl, operator_namespace: str
) -> None:
    apply_now(kubectl, operator_namespace, autoscaling_cluster(OPERATOR_ACCOUNT))
    message = invalid_spec_of(kubectl, operator_namespace, OPERATOR_ACCOUNT)
    assert message.startswith("metadata.name: Forbidden:"), message
    assert not pods_running_as(kubectl, operator_namespace, OPERATOR_ACCOUNT)
    assert not bindings_of(kubectl, operator_namespace, OPERATOR_ACCOUNT)
    assert not kubectl("get", "roles", "-n", operator_namespace, "-o", "name")


def test_a_rayjob_whose_submitter_runs_as_the_operator_fails_validation_and_creates_nothing(
    operator_without_webhooks: OperatorUnderTest, kubectl: Kubectl, operator_namespace: str
) -> None:
    name = "submit-as-operator"
    apply_now(kubectl, operator_namespace, rayjob_with_submitter_as(name, OPERATOR_ACCOUNT))

    def failed() -> str:
        status = kubectl(
            "get", "rayjob", name, "-n", operator_namespace,
            "-o", "jsonpath={.status.jobDeploymentStatus}|{.status.message}",
        )  # fmt: skip
        return status if status.startswith("ValidationFailed|") else ""

    wait_until(failed, timeout=SETTLE_SECONDS, interval=0.5, what="ValidationFailed")
    assert f"{SUBMITTER_ACCOUNT_FIELD}: Forbidden: {REFUSAL}" in failed()
    assert not kubectl("get", "jobs,rayclusters", "-n", operator_namespace, "-o", "name")


def test_a_raycronjob_whose_clusters_run_as_the_operator_is_reported_and_schedules_nothing(
    operator_without_webhooks: OperatorUnderTest, kubectl: Kubectl, operator_namespace: str
) -> None:
    name = "cron-as-operator"
    apply_now(kubectl, operator_namespace, raycronjob_with_cluster_as(name, OPERATOR_ACCOUNT))
    wait_until(
        lambda: (
            REFUSAL in warnings_about(kubectl, operator_namespace, name, "InvalidRayCronJobSpec")
        ),
        timeout=SETTLE_SECONDS,
        interval=0.5,
        what="the InvalidRayCronJobSpec Warning",
    )
    assert not kubectl("get", "rayjobs", "-n", operator_namespace, "-o", "name")


def test_a_cluster_named_like_the_operators_role_binding_leaves_it_alone(
    operator_without_webhooks: OperatorUnderTest, kubectl: Kubectl, operator_namespace: str
) -> None:
    # The autoscaler's Role and RoleBinding are named after the cluster, as KubeRay names them.
    # An object of that name the cluster does not own is a name conflict: never rewritten.
    name = "ray-operator-leader-election"  # config/rbac's, in the operator's namespace
    kubectl("create", "role", name, "-n", operator_namespace,
            "--verb=get", "--resource=leases")  # fmt: skip
    kubectl("create", "rolebinding", name, "-n", operator_namespace, f"--role={name}",
            f"--serviceaccount={operator_namespace}:{OPERATOR_ACCOUNT}")  # fmt: skip
    rbac = ("get", "role,rolebinding", name, "-n", operator_namespace, "-o", "yaml")
    before = kubectl(*rbac)
    apply_now(kubectl, operator_namespace, autoscaling_cluster(name))

    def conflict() -> bool:
        reasons = kubectl(
            "get", "raycluster", name, "-n", operator_namespace,
            "-o", "jsonpath={.status.conditions[*].reason}",
        )  # fmt: skip
        return "FailedCreateRole" in reasons.split()

    wait_until(conflict, timeout=SETTLE_SECONDS, interval=0.5, what="FailedCreateRole")
    assert kubectl(*rbac) == before
    assert not kubectl("get", "pods", "-n", operator_namespace, "-o", "name")
