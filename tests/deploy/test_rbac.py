"""Specification: config/rbac gives the operator's ServiceAccount exactly what the operator
does — and not a Secret outside its own namespace, not the CRDs, not the cluster's RBAC, and in
namespaced mode nothing outside the namespace it watches.

The RBAC is really applied to the control plane (tests/deploy/conftest.py) and every question
goes to the API server's own authorizer, as the ServiceAccount: impersonated
(`kubectl auth can-i --as=system:serviceaccount:...`, or creating a Role `--as` it, which also
runs the escalation check), or for the long tables as SubjectAccessReviews sent in one request.
"""

from __future__ import annotations

import pytest
import yaml

from tests.conftest import Kubectl
from tests.deploy.conftest import TenantInstall
from tests.deploy.manifests import (
    DEFAULT_NAMESPACE,
    LEASE_NAME,
    WEBHOOK_CERT_SECRET,
    WEBHOOK_CONFIGURATIONS,
    Manifest,
    authorized,
    can_i,
    service_account_user,
)

OPERATOR = service_account_user(DEFAULT_NAMESPACE)

# (verb, resource, subresource): what the controllers do in the namespaces they watch.
WORKLOAD_NEEDS = [
    *[
        (verb, kind, None)
        for kind in (
            "rayclusters.ray.io",
            "rayjobs.ray.io",
            "rayservices.ray.io",
            "raycronjobs.ray.io",
        )
        for verb in ("get", "list", "watch", "create", "update", "patch", "delete")
    ],
    *[
        (verb, kind, "status")
        for kind in (
            "rayclusters.ray.io",
            "rayjobs.ray.io",
            "rayservices.ray.io",
            "raycronjobs.ray.io",
        )
        for verb in ("get", "update", "patch")
    ],
    ("update", "rayclusters.ray.io", "finalizers"),
    *[(verb, "pods", None) for verb in ("get", "list", "watch", "create", "patch", "delete")],
    ("patch", "pods", "resize"),
    *[(verb, "services", None) for verb in ("get", "list", "watch", "create", "patch", "delete")],
    *[(verb, "jobs.batch", None) for verb in ("get", "list", "watch", "create", "delete")],
    *[
        (verb, "ingresses.networking.k8s.io", None)
        for verb in ("get", "list", "watch", "create", "patch", "delete")
    ],
    *[
        (verb, "persistentvolumeclaims", None)
        for verb in ("get", "list", "watch", "create", "patch", "delete")
    ],
    ("list", "endpointslices.discovery.k8s.io", None),
    *[(verb, "serviceaccounts", None) for verb in ("get", "create", "patch", "delete")],
    *[
        (verb, "roles.rbac.authorization.k8s.io", None)
        for verb in ("get", "create", "patch", "delete")
    ],
    *[
        (verb, "rolebindings.rbac.authorization.k8s.io", None)
        for verb in ("get", "create", "patch")
    ],
    # RayService incremental upgrades (gate on by default): the Gateway and HTTPRoute by name.
    *[
        (verb, f"{kind}.gateway.networking.k8s.io", None)
        for kind in ("gateways", "httproutes")
        for verb in ("get", "create", "patch", "delete")
    ],
    ("create", "events", None),
    ("patch", "events", None),
    ("create", "events.events.k8s.io", None),
    # RayServeGraph: reconciled (finalizer, status), its refresh annotation patched by the event
    # endpoint; its builder ConfigMap created, patched and deleted.
    *[
        (verb, "rayservegraphs.ray-operator.io", None)
        for verb in ("get", "list", "watch", "update", "patch")
    ],
    *[(verb, "rayservegraphs.ray-operator.io", "status") for verb in ("get", "update", "patch")],
    ("update", "rayservegraphs.ray-operator.io", "finalizers"),
    *[
        (verb, "configmaps", None)
        for verb in ("get", "list", "watch", "create", "update", "patch", "delete")
    ],
]

# What the operator never needs, anywhere.
NEVER = [
    ("get", "secrets", None),
    ("list", "secrets", None),
    ("create", "pods", "exec"),
    ("get", "pods", "log"),
    ("get", "services", "proxy"),
    ("deletecollection", "pods", None),
    ("update", "namespaces", None),
    ("list", "nodes", None),
    ("escalate", "roles.rbac.authorization.k8s.io", None),
    ("bind", "roles.rbac.authorization.k8s.io", None),
    ("impersonate", "serviceaccounts", None),
    ("create", "deployments.apps", None),
    # Users create and delete RayServeGraphs; the operator only reconciles them.
    ("create", "rayservegraphs.ray-operator.io", None),
    ("delete", "rayservegraphs.ray-operator.io", None),
    ("deletecollection", "configmaps", None),
    # The Gateway API: only the RayService's own Gateway and HTTPRoute, by name; never listed,
    # never their status (a Gateway controller writes it), never the cluster's GatewayClasses.
    ("list", "gateways.gateway.networking.k8s.io", None),
    ("update", "httproutes.gateway.networking.k8s.io", "status"),
    ("patch", "gateways.gateway.networking.k8s.io", "status"),
    ("create", "gatewayclasses.gateway.networking.k8s.io", None),
    ("create", "grpcroutes.gateway.networking.k8s.io", None),
]

SERVE_GRAPH_SECRETS_ROLE = "ray-operator-serve-graph-secrets"

# The widest per-cluster autoscaler Role we may grant: KubeRay's (common/rbac.go: pods
# get/list/watch/patch, pods/resize patch, rayclusters get/patch) plus pods delete and rayclusters
# list/watch. Whatever our autoscaler Role ends up holding within this, the operator can grant.
AUTOSCALER_ROLE_RULES = [
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["patch"]},
    {
        "apiGroups": ["ray.io"],
        "resources": ["rayclusters"],
        "verbs": ["get", "list", "watch", "patch"],
    },
]


def denied(
    kubectl: Kubectl, user: str, cases: list[tuple[str, str, str | None]], *, namespace: str
) -> list[str]:
    """The cases that `user` may not do in `namespace`, as `verb resource[/subresource]`."""
    answers = authorized(kubectl, user, cases, namespace=namespace)
    return [case for case, allowed in answers.items() if not allowed]


def allowed(
    kubectl: Kubectl, user: str, cases: list[tuple[str, str, str | None]], *, namespace: str
) -> list[str]:
    """The cases that `user` may do in `namespace`, as `verb resource[/subresource]`."""
    answers = authorized(kubectl, user, cases, namespace=namespace)
    return [case for case, allowed in answers.items() if allowed]


# --- cluster-wide install (config/default) ------------------------------------------------


@pytest.mark.usefixtures("default_install")
def test_operator_can_manage_ray_workloads_in_any_namespace(
    kubectl: Kubectl, namespace: str
) -> None:
    assert denied(kubectl, OPERATOR, WORKLOAD_NEEDS, namespace=namespace) == []


@pytest.mark.usefixtures("default_install")
def test_operator_cannot_do_what_it_never_needs(kubectl: Kubectl, namespace: str) -> None:
    assert allowed(kubectl, OPERATOR, NEVER, namespace=namespace) == []
    # Its own namespace holds its certificate Secret, but only that one, by name (below).
    assert allowed(kubectl, OPERATOR, NEVER, namespace=DEFAULT_NAMESPACE) == []


@pytest.mark.usefixtures("default_install")
def test_operator_cannot_read_secrets_cluster_wide(kubectl: Kubectl) -> None:
    for verb in ("get", "list", "watch"):
        assert not can_i(kubectl, OPERATOR, verb, "secrets")
    assert not can_i(kubectl, OPERATOR, "get", "secrets", namespace="kube-system")


@pytest.mark.usefixtures("default_install")
def test_operator_reads_and_writes_only_its_own_certificate_secret(kubectl: Kubectl) -> None:
    own = DEFAULT_NAMESPACE
    for verb in ("get", "update", "patch"):
        assert can_i(kubectl, OPERATOR, verb, f"secrets/{WEBHOOK_CERT_SECRET}", namespace=own)
        assert not can_i(kubectl, OPERATOR, verb, "secrets/some-other-secret", namespace=own)
    # A create request carries no name to authorize, so create is granted in its own namespace.
    assert can_i(kubectl, OPERATOR, "create", "secrets", namespace=own)
    # `delete` (not a read) is granted everywhere for the Ray auth token Secrets it generates:
    # the test control plane has no garbage collector, so it deletes them with their cluster.


@pytest.mark.usefixtures("default_install")
def test_operator_cannot_read_secrets_for_serve_graphs_until_the_role_is_bound(
    kubectl: Kubectl, namespace: str
) -> None:
    # The ClusterRole is installed but bound nowhere: RayServeGraphs get SecretForbidden.
    for verb in ("get", "list", "watch"):
        assert not can_i(kubectl, OPERATOR, verb, "secrets", namespace=namespace)
    bindings = kubectl("get", "rolebindings,clusterrolebindings", "-A", "-o", "json")
    assert SERVE_GRAPH_SECRETS_ROLE not in bindings


@pytest.mark.usefixtures("default_install")
def test_the_serve_graph_secret_role_grants_get_and_nothing_else(kubectl: Kubectl) -> None:
    role = yaml.safe_load(kubectl("get", "clusterrole", SERVE_GRAPH_SECRETS_ROLE, "-o", "yaml"))
    assert role["rules"] == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]


@pytest.mark.usefixtures("default_install")
def test_a_binding_in_one_namespace_lets_the_operator_get_secrets_there_only(
    kubectl: Kubectl, namespace: str
) -> None:
    # The documented command (docs/features/rayservegraph.md, config/rbac/serve_graph_secrets.yaml).
    kubectl(
        "create",
        "rolebinding",
        SERVE_GRAPH_SECRETS_ROLE,
        "-n",
        namespace,
        f"--clusterrole={SERVE_GRAPH_SECRETS_ROLE}",
        f"--serviceaccount={DEFAULT_NAMESPACE}:ray-operator",
    )
    try:
        assert can_i(kubectl, OPERATOR, "get", "secrets", namespace=namespace)
        assert can_i(kubectl, OPERATOR, "get", "secrets/registry-token", namespace=namespace)
        for verb in ("list", "watch", "update", "patch"):
            assert not can_i(kubectl, OPERATOR, verb, "secrets", namespace=namespace)
        assert not can_i(kubectl, OPERATOR, "get", "secrets", namespace="kube-system")
        assert not can_i(kubectl, OPERATOR, "get", "secrets", namespace=DEFAULT_NAMESPACE)
        for verb in ("get", "list", "watch"):
            assert not can_i(kubectl, OPERATOR, verb, "secrets")  # not cluster-wide
    finally:
        kubectl("delete", "rolebinding", SERVE_GRAPH_SECRETS_ROLE, "-n", namespace)


@pytest.mark.usefixtures("default_install")
def test_operator_cannot_change_or_delete_the_crds(kubectl: Kubectl) -> None:
    for verb in ("create", "update", "patch", "delete"):
        assert not can_i(kubectl, OPERATOR, verb, "customresourcedefinitions.apiextensions.k8s.io")
        assert not can_i(
            kubectl,
            OPERATOR,
            verb,
            "customresourcedefinitions.apiextensions.k8s.io/rayclusters.ray.io",
        )


@pytest.mark.usefixtures("default_install")
def test_operator_holds_its_lease_only_in_its_own_namespace(
    kubectl: Kubectl, namespace: str
) -> None:
    lease = f"leases.coordination.k8s.io/{LEASE_NAME}"
    for verb in ("get", "update"):
        assert can_i(kubectl, OPERATOR, verb, lease, namespace=DEFAULT_NAMESPACE)
        assert not can_i(
            kubectl, OPERATOR, verb, "leases.coordination.k8s.io/other", namespace=DEFAULT_NAMESPACE
        )
        assert not can_i(kubectl, OPERATOR, verb, lease, namespace=namespace)
    assert can_i(
        kubectl, OPERATOR, "create", "leases.coordination.k8s.io", namespace=DEFAULT_NAMESPACE
    )
    assert not can_i(kubectl, OPERATOR, "create", "leases.coordination.k8s.io", namespace=namespace)


@pytest.mark.usefixtures("default_install")
def test_operator_patches_only_its_own_webhook_configurations(kubectl: Kubectl) -> None:
    for kind, name in WEBHOOK_CONFIGURATIONS.items():
        resource = f"{kind.lower()}s.admissionregistration.k8s.io"
        assert can_i(kubectl, OPERATOR, "patch", f"{resource}/{name}")
        assert not can_i(kubectl, OPERATOR, "patch", f"{resource}/someone-elses")
        assert not can_i(kubectl, OPERATOR, "create", resource)
        assert not can_i(kubectl, OPERATOR, "delete", f"{resource}/{name}")


@pytest.mark.usefixtures("default_install")
def test_operator_cannot_grant_itself_cluster_wide_rights(kubectl: Kubectl) -> None:
    for resource in ("clusterroles", "clusterrolebindings"):
        assert not can_i(kubectl, OPERATOR, "create", f"{resource}.rbac.authorization.k8s.io")


@pytest.mark.usefixtures("default_install")
def test_operator_may_ask_who_a_metrics_caller_is_and_whether_it_may_read(
    kubectl: Kubectl,
) -> None:
    # --metrics-auth=kubernetes: a TokenReview and a SubjectAccessReview per new scraper token.
    assert can_i(kubectl, OPERATOR, "create", "tokenreviews.authentication.k8s.io")
    assert can_i(kubectl, OPERATOR, "create", "subjectaccessreviews.authorization.k8s.io")


@pytest.mark.usefixtures("default_install")
def test_nobody_reads_metrics_until_the_reader_role_is_bound(
    kubectl: Kubectl, namespace: str
) -> None:
    for user in (OPERATOR, service_account_user(namespace, "default")):
        result = kubectl.run("auth", "can-i", "get", "/metrics", f"--as={user}")
        assert result.stdout.strip() == "no", result.stderr


@pytest.mark.usefixtures("default_install")
def test_operator_can_create_the_autoscaler_role_it_grants_per_cluster(
    kubectl: Kubectl, namespace: str
) -> None:
    # Kubernetes refuses a Role that grants more than its creator holds (escalation check), and
    # `can-i create roles` does not evaluate that: create the real thing, as the operator.
    as_operator = ("--as", OPERATOR, "-n", namespace)
    kubectl("create", "serviceaccount", "ray-mini-autoscaler", *as_operator)
    kubectl(
        "apply",
        "--server-side",
        "-f",
        "-",
        *as_operator,
        input_text=role("ray-mini", AUTOSCALER_ROLE_RULES),
    )
    kubectl(
        "create",
        "rolebinding",
        "ray-mini",
        "--role=ray-mini",
        f"--serviceaccount={namespace}:ray-mini-autoscaler",
        *as_operator,
    )


@pytest.mark.usefixtures("default_install")
def test_operator_cannot_create_a_role_granting_more_than_it_holds(
    kubectl: Kubectl, namespace: str
) -> None:
    rules = [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
    result = kubectl.run(
        "apply",
        "--server-side",
        "-f",
        "-",
        "--as",
        OPERATOR,
        "-n",
        namespace,
        input_text=role("sneaky", rules),
    )
    assert result.returncode != 0
    assert "forbidden" in result.stderr
    assert "attempting to grant RBAC permissions not currently held" in result.stderr


def role(name: str, rules: list[Manifest]) -> str:
    """A Role manifest as YAML, for `kubectl apply -f -`."""
    return yaml.safe_dump(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name},
            "rules": rules,
        }
    )


# --- namespaced install (config/namespaced) -----------------------------------------------


def tenant_operator(install: TenantInstall) -> str:
    return service_account_user(install.tenant)


def test_namespaced_operator_can_manage_ray_workloads_in_its_namespace(
    kubectl: Kubectl, tenant_install: TenantInstall
) -> None:
    user = tenant_operator(tenant_install)
    assert denied(kubectl, user, WORKLOAD_NEEDS, namespace=tenant_install.tenant) == []


def test_namespaced_operator_cannot_touch_a_namespace_it_does_not_watch(
    kubectl: Kubectl, tenant_install: TenantInstall
) -> None:
    user = tenant_operator(tenant_install)
    assert allowed(kubectl, user, WORKLOAD_NEEDS, namespace=tenant_install.neighbour) == []


def test_namespaced_operator_cannot_list_anything_cluster_wide(
    kubectl: Kubectl, tenant_install: TenantInstall
) -> None:
    user = tenant_operator(tenant_install)
    for resource in (
        "pods",
        "rayclusters.ray.io",
        "services",
        "jobs.batch",
        "secrets",
        "leases.coordination.k8s.io",
    ):
        assert not can_i(kubectl, user, "list", resource)


def test_namespaced_operator_cannot_review_tokens(
    kubectl: Kubectl, tenant_install: TenantInstall
) -> None:
    # Cluster-scoped reviews need a ClusterRole: its /metrics stays plain (--metrics-auth=none).
    user = tenant_operator(tenant_install)
    assert not can_i(kubectl, user, "create", "tokenreviews.authentication.k8s.io")


def test_namespaced_operator_reads_no_secrets_even_in_its_own_namespace(
    kubectl: Kubectl, tenant_install: TenantInstall
) -> None:
    # It serves no webhooks, so it has no certificate to keep, and no reason to read a Secret.
    user = tenant_operator(tenant_install)
    for verb in ("get", "list", "watch", "update", "patch"):
        assert not can_i(kubectl, user, verb, "secrets", namespace=tenant_install.tenant)
    # It may create (and delete) the Ray auth token Secrets of token-auth clusters: not a read.
    assert can_i(kubectl, user, "create", "secrets", namespace=tenant_install.tenant)


def test_namespaced_operator_gets_secrets_for_serve_graphs_only_once_the_role_is_bound(
    kubectl: Kubectl, tenant_install: TenantInstall
) -> None:
    user, tenant = tenant_operator(tenant_install), tenant_install.tenant
    assert not can_i(kubectl, user, "get", "secrets", namespace=tenant)
    kubectl(
        "create",
        "rolebinding",
        SERVE_GRAPH_SECRETS_ROLE,
        "-n",
        tenant,
        f"--role={SERVE_GRAPH_SECRETS_ROLE}",
        f"--serviceaccount={tenant}:ray-operator",
    )
    try:
        assert can_i(kubectl, user, "get", "secrets", namespace=tenant)
        assert not can_i(kubectl, user, "list", "secrets", namespace=tenant)
        assert not can_i(kubectl, user, "get", "secrets", namespace=tenant_install.neighbour)
    finally:
        kubectl("delete", "rolebinding", SERVE_GRAPH_SECRETS_ROLE, "-n", tenant)


def test_namespaced_operator_holds_its_lease_in_its_own_namespace(
    kubectl: Kubectl, tenant_install: TenantInstall
) -> None:
    user = tenant_operator(tenant_install)
    lease = f"leases.coordination.k8s.io/{LEASE_NAME}"
    assert can_i(kubectl, user, "update", lease, namespace=tenant_install.tenant)
    assert not can_i(kubectl, user, "update", lease, namespace=tenant_install.neighbour)


def test_namespaced_operator_cannot_touch_webhooks_or_crds(
    kubectl: Kubectl, tenant_install: TenantInstall
) -> None:
    user = tenant_operator(tenant_install)
    for kind, name in WEBHOOK_CONFIGURATIONS.items():
        assert not can_i(
            kubectl, user, "patch", f"{kind.lower()}s.admissionregistration.k8s.io/{name}"
        )
    assert not can_i(kubectl, user, "delete", "customresourcedefinitions.apiextensions.k8s.io")
