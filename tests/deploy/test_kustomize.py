"""Specification: the config/ overlays build with plain `kubectl kustomize`, the kube-apiserver
accepts what they make, and what they make is the secure, highly available install
docs/install.md promises."""

from __future__ import annotations

import shlex

import pytest
import yaml
from ray_operator.webhooks import webhook_options_from_args

from tests.conftest import REPO_ROOT, Kubectl
from tests.deploy.manager import manager_container, parse_run_arguments
from tests.deploy.manifests import (
    CONFIG,
    DEFAULT_NAMESPACE,
    LEASE_NAME,
    SERVICE_ACCOUNT,
    WEBHOOK_CONFIGURATIONS,
    Manifest,
    apply_server_side,
    build,
    ensure_namespace,
    of_kind,
    the,
)

RAY_KINDS = ("raycluster", "rayjob", "rayservice", "raycronjob")
CLUSTER_SCOPED = {
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    *WEBHOOK_CONFIGURATIONS,
}


@pytest.fixture(scope="module")
def default() -> list[Manifest]:
    return build(CONFIG / "default")


@pytest.fixture(scope="module")
def namespaced() -> list[Manifest]:
    return build(CONFIG / "namespaced")


# --- the API server accepts the installs -----------------------------------------------------


def test_default_install_is_accepted_by_the_api_server(
    default: list[Manifest], kubectl: Kubectl
) -> None:
    # A dry run creates nothing, so the namespace it installs into must already exist.
    apply_server_side(kubectl, of_kind(default, "Namespace"), dry_run=False)
    output = apply_server_side(kubectl, default, dry_run=True)
    assert "deployment.apps/ray-operator serverside-applied (server dry run)" in output
    assert output.count("(server dry run)") == len(default)


def test_namespaced_install_is_accepted_by_the_api_server(
    namespaced: list[Manifest], kubectl: Kubectl
) -> None:
    (namespace,) = {m["metadata"]["namespace"] for m in namespaced}
    ensure_namespace(kubectl, namespace)
    output = apply_server_side(kubectl, namespaced, dry_run=True)
    assert output.count("(server dry run)") == len(namespaced)


def test_crd_base_installs_the_ray_and_serve_graph_crds_and_the_user_roles() -> None:
    manifests = build(CONFIG / "crd")
    assert sorted(
        m["metadata"]["name"] for m in of_kind(manifests, "CustomResourceDefinition")
    ) == [
        "rayclusters.ray.io",
        "raycronjobs.ray.io",
        "rayjobs.ray.io",
        "rayservegraphs.ray-operator.io",
        "rayservices.ray.io",
    ]
    roles = of_kind(manifests, "ClusterRole")
    aggregated_to = {label for role in roles for label in role["metadata"]["labels"]}
    assert {
        "rbac.authorization.k8s.io/aggregate-to-edit",
        "rbac.authorization.k8s.io/aggregate-to-view",
    } <= aggregated_to


def test_crd_kustomization_lists_every_generated_crd() -> None:
    # kustomize only reaches files outside config/ through a kustomization, so crd/ has one; a
    # CRD the generator adds must be listed there too, or `kubectl apply -k` silently skips it.
    listed = yaml.safe_load((REPO_ROOT / "crd" / "kustomization.yaml").read_text())["resources"]
    generated = sorted(
        p.name for p in (REPO_ROOT / "crd").glob("*.yaml") if p.stem != "kustomization"
    )
    assert sorted(listed) == generated


# --- the default install --------------------------------------------------------------------


def test_default_install_puts_everything_namespaced_into_ray_operator_system(
    default: list[Manifest],
) -> None:
    namespaced_objects = [m for m in default if m["kind"] not in CLUSTER_SCOPED]
    assert namespaced_objects
    assert {m["metadata"].get("namespace") for m in namespaced_objects} == {DEFAULT_NAMESPACE}
    assert the(default, "Namespace")["metadata"]["name"] == DEFAULT_NAMESPACE


def test_default_install_leaves_the_service_monitor_out(default: list[Manifest]) -> None:
    # Clusters without the Prometheus Operator would reject the whole apply.
    assert not of_kind(default, "ServiceMonitor")


def test_operator_runs_two_replicas_that_elect_a_leader(default: list[Manifest]) -> None:
    deployment = the(default, "Deployment", "ray-operator")
    assert deployment["spec"]["replicas"] == 2
    arguments = parse_run_arguments(manager_container(default)["args"])
    assert arguments.leader_elect is True
    assert arguments.lease_name == LEASE_NAME
    assert arguments.lease_namespace == "pod-ns"
    env = {e["name"]: e for e in manager_container(default)["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert the(default, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1


def test_operator_learns_its_own_service_account_from_the_downward_api(
    default: list[Manifest], namespaced: list[Manifest]
) -> None:
    for manifests in (default, namespaced):
        deployment = the(manifests, "Deployment", "ray-operator")
        assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == SERVICE_ACCOUNT
        env = {e["name"]: e for e in manager_container(manifests)["env"]}
        field = env["POD_SERVICE_ACCOUNT"]["valueFrom"]["fieldRef"]["fieldPath"]
        assert field == "spec.serviceAccountName"


def test_operator_arguments_are_flags_that_ray_operator_run_accepts(
    default: list[Manifest], namespaced: list[Manifest]
) -> None:
    for manifests in (default, namespaced):
        arguments = parse_run_arguments(manager_container(manifests)["args"])
        assert (arguments.health_addr, arguments.metrics_addr) == (":8082", ":8080")
        assert arguments.log_format == "json"


def test_operator_probes_healthz_and_readyz_on_the_health_port(default: list[Manifest]) -> None:
    container = manager_container(default)
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"health": 8082, "metrics": 8080, "webhook-server": 9443}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]


def test_operator_runs_unprivileged_on_a_read_only_root_filesystem(
    default: list[Manifest],
) -> None:
    pod = the(default, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = manager_container(default)["securityContext"]
    assert container["allowPrivilegeEscalation"] is False
    assert container["readOnlyRootFilesystem"] is True
    assert container["capabilities"] == {"drop": ["ALL"]}


def test_operator_pod_is_admitted_under_the_restricted_pod_security_standard(
    default: list[Manifest], kubectl: Kubectl, namespace: str
) -> None:
    # The API server's own PodSecurity admission judges the Pod the Deployment would create.
    kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    template = the(default, "Deployment")["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "ray-operator", "labels": template["metadata"]["labels"]},
        "spec": template["spec"],
    }
    kubectl(
        "create", "--dry-run=server", "-n", namespace, "-f", "-", input_text=yaml.safe_dump(pod)
    )
    # And the check is live: the same Pod without its pod-level security context is refused.
    pod["spec"] = {**pod["spec"], "securityContext": {}}
    refused = kubectl.run(
        "create", "--dry-run=server", "-n", namespace, "-f", "-", input_text=yaml.safe_dump(pod)
    )
    assert "violates PodSecurity" in refused.stderr


def test_operator_namespace_enforces_the_restricted_pod_security_standard(
    default: list[Manifest],
) -> None:
    labels = the(default, "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("kind", ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"])
def test_webhooks_fail_closed_and_never_intercept_the_operator_namespace(
    default: list[Manifest], kind: str
) -> None:
    configuration = the(default, kind, WEBHOOK_CONFIGURATIONS[kind])
    for webhook in configuration["webhooks"]:
        assert webhook["failurePolicy"] == "Fail"
        assert webhook["sideEffects"] == "None"
        assert webhook["admissionReviewVersions"] == ["v1"]
        assert 5 <= webhook["timeoutSeconds"] <= 10
        assert webhook["namespaceSelector"]["matchExpressions"] == [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": [DEFAULT_NAMESPACE],
            }
        ]
        service = webhook["clientConfig"]["service"]
        assert (service["name"], service["namespace"]) == (
            "ray-operator-webhook",
            DEFAULT_NAMESPACE,
        )


@pytest.mark.parametrize(
    ("kind", "prefix"),
    [("MutatingWebhookConfiguration", "mutate"), ("ValidatingWebhookConfiguration", "validate")],
)
def test_webhooks_serve_every_ray_kind_at_the_kubebuilder_paths(
    default: list[Manifest], kind: str, prefix: str
) -> None:
    configuration = the(default, kind, WEBHOOK_CONFIGURATIONS[kind])
    paths = {
        webhook["rules"][0]["resources"][0]: webhook["clientConfig"]["service"]["path"]
        for webhook in configuration["webhooks"]
    }
    assert paths == {
        **{f"{kind}s": f"/{prefix}-ray-io-v1-{kind}" for kind in RAY_KINDS},
        "rayservegraphs": f"/{prefix}-ray-operator-io-v1alpha1-rayservegraph",
    }


def test_webhook_service_reaches_the_webhook_port_of_every_replica(
    default: list[Manifest],
) -> None:
    service = the(default, "Service", "ray-operator-webhook")
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 443, "targetPort": "webhook-server", "protocol": "TCP"}
    ]
    pod_labels = the(default, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


# --- the namespaced install -----------------------------------------------------------------


def test_namespaced_install_creates_nothing_cluster_scoped(namespaced: list[Manifest]) -> None:
    assert [m["kind"] for m in namespaced if m["kind"] in CLUSTER_SCOPED] == []
    assert len({m["metadata"]["namespace"] for m in namespaced}) == 1


def test_namespaced_operator_watches_only_its_own_namespace(namespaced: list[Manifest]) -> None:
    arguments = parse_run_arguments(manager_container(namespaced)["args"])
    assert arguments.namespaces == ["pod-ns"]
    assert arguments.lease_namespace == "pod-ns"


def test_namespaced_operator_serves_no_webhooks_even_in_a_pod(
    namespaced: list[Manifest], monkeypatch: pytest.MonkeyPatch
) -> None:
    # In a Pod, webhooks default to on; that install's RBAC cannot read their Secret (finding
    # 12 of issue 12: the process exited after ~78 s). The flag must say off, plainly.
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    args = manager_container(namespaced)["args"]
    assert "--no-webhooks" in args
    arguments = parse_run_arguments(args)
    options = webhook_options_from_args(
        arguments, port=arguments.webhook_port, default_namespace="pod-ns"
    )
    assert options.enabled is False


def test_namespaced_install_binds_the_manager_role_with_a_role_binding(
    namespaced: list[Manifest],
) -> None:
    binding = the(namespaced, "RoleBinding", "ray-operator-manager")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "ray-operator-manager",
    }
    (namespace,) = {m["metadata"]["namespace"] for m in namespaced}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}
    ]


# --- optional overlays ----------------------------------------------------------------------


def test_certmanager_overlay_has_cainjector_fill_in_the_ca_of_its_certificate() -> None:
    manifests = build(CONFIG / "certmanager")
    certificate = the(manifests, "Certificate", "ray-operator-serving-cert")
    assert certificate["metadata"]["namespace"] == DEFAULT_NAMESPACE
    assert certificate["spec"]["dnsNames"] == [
        f"ray-operator-webhook.{DEFAULT_NAMESPACE}.svc",
        f"ray-operator-webhook.{DEFAULT_NAMESPACE}.svc.cluster.local",
    ]
    for kind, name in WEBHOOK_CONFIGURATIONS.items():
        annotations = the(manifests, kind, name)["metadata"]["annotations"]
        assert annotations["cert-manager.io/inject-ca-from"] == (
            f"{DEFAULT_NAMESPACE}/ray-operator-serving-cert"
        )
    volumes = the(manifests, "Deployment")["spec"]["template"]["spec"]["volumes"]
    secrets = [volume["secret"]["secretName"] for volume in volumes if "secret" in volume]
    assert secrets == [certificate["spec"]["secretName"]]


def test_certmanager_overlay_drops_the_grants_for_a_self_managed_certificate() -> None:
    manifests = build(CONFIG / "certmanager")
    names = {m["metadata"]["name"] for m in of_kind(manifests, "Role", "ClusterRole")}
    assert "ray-operator-webhook-certificate" not in names
    assert "ray-operator-webhook-configurations" not in names


def test_prometheus_overlay_scrapes_the_metrics_service(default: list[Manifest]) -> None:
    monitor = the(build(CONFIG / "prometheus"), "ServiceMonitor")
    assert monitor["metadata"]["namespace"] == DEFAULT_NAMESPACE
    service = the(default, "Service", "ray-operator-metrics")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"] == [
        {
            "port": "metrics",
            "path": "/metrics",
            "scheme": "https",
            # Prometheus's own token: the operator checks it with the API server.
            "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
            "tlsConfig": {"insecureSkipVerify": True},
            "interval": "30s",
        }
    ]
    assert [port["name"] for port in service["spec"]["ports"]] == ["metrics"]


# --- who may read /metrics ---------------------------------------------------------------------


def test_the_operator_serves_metrics_only_to_authorized_callers(default: list[Manifest]) -> None:
    arguments = parse_run_arguments(manager_container(default)["args"])
    assert arguments.metrics_auth == "kubernetes"
    grant = the(default, "ClusterRole", "ray-operator-metrics-auth")
    granted = {(r["apiGroups"][0], r["resources"][0]): r["verbs"] for r in grant["rules"]}
    assert granted == {
        ("authentication.k8s.io", "tokenreviews"): ["create"],
        ("authorization.k8s.io", "subjectaccessreviews"): ["create"],
    }
    binding = the(default, "ClusterRoleBinding", "ray-operator-metrics-auth")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": DEFAULT_NAMESPACE}
    ]


def test_reading_metrics_is_a_role_of_its_own_bound_to_no_one(default: list[Manifest]) -> None:
    reader = the(default, "ClusterRole", "ray-operator-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    bindings = of_kind(default, "ClusterRoleBinding", "RoleBinding")
    bound = {binding["roleRef"]["name"] for binding in bindings}
    assert "ray-operator-metrics-reader" not in bound


def test_the_namespaced_operator_serves_plain_metrics_of_its_own_namespace(
    namespaced: list[Manifest],
) -> None:
    # TokenReview needs a ClusterRole, which this install cannot have; its metrics name only
    # objects of the namespace it watches.
    arguments = parse_run_arguments(manager_container(namespaced)["args"])
    assert arguments.metrics_auth == "none"
    assert arguments.namespaces == ["pod-ns"]


def test_config_readme_install_commands_name_overlays_that_exist() -> None:
    readme = (CONFIG / "README.md").read_text()
    for line in readme.splitlines():
        if "kubectl apply" in line and "-k" in line:
            words = shlex.split(line.strip().strip("`"))
            overlay = words[words.index("-k") + 1]
            assert (CONFIG.parent / overlay / "kustomization.yaml").is_file(), line
