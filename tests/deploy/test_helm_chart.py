"""Specification: charts/ray-operator is the kustomize install in Helm's form. Its defaults render
what `kubectl kustomize config/default` makes (same grants, same Deployment and arguments, same
webhooks; its crds/ are crd/), its values switch on what config/'s overlays and components do,
`watchNamespace` confines the operator and its grants to the namespaces listed, and `helm lint`
passes. The helm binary is the pinned one, built from the Go module proxy once and cached."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO_ROOT, Kubectl
from tests.deploy.helm import CHART, helm, helm_binary, render
from tests.deploy.manager import manager_container, parse_run_arguments
from tests.deploy.manifests import (
    CONFIG,
    DEFAULT_NAMESPACE,
    SERVICE_ACCOUNT,
    WEBHOOK_CONFIGURATIONS,
    Manifest,
    _Loader,
    apply_server_side,
    authorized,
    build,
    default_with_component,
    ensure_namespace,
    of_kind,
    operator_kubeconfig,
    service_account_user,
    the,
)
from tests.deploy.mini_sample import reconciles_mini_sample
from tests.deploy.process import running_operator

RBAC_KINDS = ("ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
# What Helm leaves to the user: the Namespace (`--create-namespace`) and, on upgrades, the CRDs.
NOT_IN_TEMPLATES = ("Namespace", "CustomResourceDefinition")


def render_with_crds(namespace: str) -> list[Manifest]:
    """`helm template --include-crds` with the default values: what `helm install` creates."""
    output = helm("template", "ray-operator", str(CHART), "-n", namespace, "--include-crds")
    return [doc for doc in yaml.load_all(output, Loader=_Loader) if doc]


def refusal(*sets: str) -> str:
    """The error `helm template` gives for values `sets` (it must fail)."""
    args = ["template", "ray-operator", str(CHART)]
    for value in sets:
        args += ["--set", value]
    result = subprocess.run(
        [str(helm_binary()), *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode != 0, f"helm template accepted {sets}"
    return result.stderr


def grants(manifests: Iterable[Manifest]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """What each RBAC object grants, by (kind, namespace, name): rules, roleRef, subjects and
    the aggregation labels (which grant too)."""
    found = {}
    for manifest in of_kind(manifests, *RBAC_KINDS):
        metadata = manifest["metadata"]
        labels = metadata.get("labels", {})
        key = (manifest["kind"], metadata.get("namespace", ""), metadata["name"])
        assert key not in found, f"{key} twice"
        found[key] = {
            **{k: manifest[k] for k in ("rules", "roleRef", "subjects") if k in manifest},
            "aggregation": {k: v for k, v in labels.items() if k.startswith("rbac.")},
        }
    return found


def without_labels(manifest: Manifest) -> Manifest:
    """`manifest` less its labels (the chart adds Helm's; config/'s must all be kept)."""
    metadata = {k: v for k, v in manifest["metadata"].items() if k != "labels"}
    return {**manifest, "metadata": metadata}


def by_identity(manifests: Iterable[Manifest]) -> dict[tuple[str, str, str], Manifest]:
    return {
        (m["kind"], m["metadata"].get("namespace", ""), m["metadata"]["name"]): m
        for m in manifests
        if m["kind"] not in NOT_IN_TEMPLATES
    }


def assert_same_install(chart: list[Manifest], kustomized: list[Manifest]) -> None:
    """The chart renders every object kustomize makes (but the Namespace and CRDs), field for
    field, keeping config/'s labels; and nothing else."""
    ours, theirs = by_identity(chart), by_identity(kustomized)
    assert sorted(ours) == sorted(theirs)
    for key, expected in theirs.items():
        assert without_labels(ours[key]) == without_labels(expected), key
        labels = ours[key]["metadata"]["labels"]
        assert expected["metadata"].get("labels", {}).items() <= labels.items(), key


# --- the defaults are config/default ---------------------------------------------------------


def test_helm_lint_passes_for_the_defaults_and_every_install_mode() -> None:
    for sets in (
        (),
        ("watchNamespace={a,b}",),
        ("singleNamespaceInstall=true",),
        ("webhooks.certSource=cert-manager", "metrics.serviceMonitor.enabled=true"),
    ):
        args = [arg for value in sets for arg in ("--set", value)]
        output = helm("lint", "--strict", str(CHART), *args)
        assert "0 chart(s) failed" in output


def test_packaged_chart_renders_what_the_chart_directory_renders(tmp_path: Path) -> None:
    # `helm package` turns the links into files: the package users install is the same chart.
    helm("package", str(CHART), "--destination", str(tmp_path))
    (package,) = tmp_path.glob("ray-operator-*.tgz")
    output = helm("template", "ray-operator", str(package), "-n", DEFAULT_NAMESPACE)
    assert [doc for doc in yaml.load_all(output, Loader=_Loader) if doc] == render()


def test_default_render_grants_exactly_what_config_default_grants() -> None:
    assert grants(render()) == grants(build(CONFIG / "default"))


def test_default_render_runs_the_operator_with_config_defaults_arguments() -> None:
    ours, theirs = manager_container(render()), manager_container(build(CONFIG / "default"))
    assert ours["args"] == theirs["args"]
    assert ours["image"] == theirs["image"] == "ray-operator:0.1.0"


def test_default_render_is_config_default_object_for_object() -> None:
    # The Deployment (probes, security contexts, resources, volumes), Services, PDB, webhook
    # configurations: everything but the Namespace, which `--create-namespace` makes.
    assert_same_install(render(), build(CONFIG / "default"))


def test_chart_crds_are_the_generated_crds() -> None:
    # Links to the generator's compact JSON copies of crd/ (a release Secret holds the whole
    # chart, at most 1 MiB: crd/'s YAML would not fit), one per CRD config/default installs.
    for link in (CHART / "crds").iterdir():
        assert link.is_symlink(), link
        assert link.resolve().is_relative_to((REPO_ROOT / "generated").resolve()), link
    ours = of_kind(render_with_crds(DEFAULT_NAMESPACE), "CustomResourceDefinition")
    theirs = of_kind(build(CONFIG / "default"), "CustomResourceDefinition")
    assert sorted(ours, key=_name) == sorted(theirs, key=_name)


def _name(manifest: Manifest) -> str:
    return str(manifest["metadata"]["name"])


# --- values do what config/'s overlays and components do ------------------------------------


def test_cert_manager_cert_source_renders_config_certmanager() -> None:
    assert_same_install(render("webhooks.certSource=cert-manager"), build(CONFIG / "certmanager"))


def test_single_namespace_install_renders_config_namespaced(tmp_path: Path) -> None:
    assert_same_install(
        render("singleNamespaceInstall=true", namespace="ray-tenant"),
        build(CONFIG / "namespaced"),
    )


def test_batch_scheduler_and_feature_gates_add_the_components_grants_and_flags(
    tmp_path: Path,
) -> None:
    kustomized = build(
        default_with_component(tmp_path, "batch-scheduler/volcano", "mtls", "network-policy")
    )
    chart = render(
        "batchScheduler.name=volcano",
        "featureGates[0].name=RayClusterMTLS",
        "featureGates[0].enabled=true",
        "featureGates[1].name=RayClusterNetworkPolicy",
        "featureGates[1].enabled=true",
    )
    assert grants(chart) == grants(kustomized)
    assert parse_run_arguments(manager_container(chart)["args"]) == parse_run_arguments(
        manager_container(kustomized)["args"]
    )
    # KubeRay's deprecated `batchScheduler.enabled` means volcano.
    deprecated = parse_run_arguments(
        manager_container(render("batchScheduler.enabled=true"))["args"]
    )
    assert deprecated.batch_scheduler == "volcano"


def test_values_with_kuberay_names_become_the_operator_flags() -> None:
    args = manager_container(
        render(
            "reconcileConcurrency=7",
            "logging.stdoutEncoder=console",
            "logging.level=debug",
            "rayServeGraph.allowedHosts={graphs.example.com,http://in.cluster:8000}",
            "rayServeGraph.maxConcurrentFetches=3",
        )
    )["args"]
    parsed = parse_run_arguments(args)
    assert parsed.max_concurrent_reconciles == 7
    assert (parsed.log_format, parsed.log_level) == ("text", "DEBUG")
    assert parsed.serve_graph_allowed_hosts == ["graphs.example.com,http://in.cluster:8000"]
    assert parsed.serve_graph_max_concurrent_fetches == 3


def test_service_monitor_is_config_prometheus_with_kuberay_values() -> None:
    chart = render(
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.interval=15s",
        "metrics.serviceMonitor.additionalLabels.release=kube-prometheus-stack",
        "metrics.serviceMonitor.namespace=monitoring",
    )
    monitor = the(chart, "ServiceMonitor")
    config_monitor = the(build(CONFIG / "prometheus"), "ServiceMonitor")
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["selector"] == config_monitor["spec"]["selector"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [DEFAULT_NAMESPACE]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint == {
        **config_monitor["spec"]["endpoints"][0],
        "interval": "15s",
        "honorLabels": True,
    }
    # Plain /metrics is scraped over plain HTTP, without a token.
    plain = the(
        render("metrics.serviceMonitor.enabled=true", "metrics.auth=none"), "ServiceMonitor"
    )
    assert plain["spec"]["endpoints"][0]["scheme"] == "http"
    assert "bearerTokenFile" not in plain["spec"]["endpoints"][0]
    assert not of_kind(render(), "ServiceMonitor")


def test_serve_graph_secret_namespaces_bind_the_secret_reader_there_only() -> None:
    chart = render("rayServeGraph.secretNamespaces={graphs}")
    (binding,) = [
        m
        for m in of_kind(chart, "RoleBinding")
        if m["metadata"]["name"] == "ray-operator-serve-graph-secrets"
    ]
    assert binding["metadata"]["namespace"] == "graphs"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "ray-operator-serve-graph-secrets",
    }
    assert binding["subjects"][0]["namespace"] == DEFAULT_NAMESPACE


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        (("leaderElectionEnabled=false",), "needs replicas: 1"),
        (("batchScheduler.enabled=true", "batchScheduler.name=yunikorn"), "both set"),
        (("batchScheduler.name=slurm",), "batchScheduler.name must be"),
        (("webhooks.certSource=vault",), "webhooks.certSource must be"),
        (("logging.stdoutEncoder=xml",), "logging.stdoutEncoder must be"),
        # values.schema.json: a misspelt name or a wrong type is refused, not ignored.
        (("watchNamspace={a}",), "'watchNamspace' not allowed"),
        (("replicas=two",), "want integer"),
        (
            ("watchNamespace={a}", "rayServeGraph.secretNamespaces={b}"),
            "b is not a watched namespace",
        ),
    ],
)
def test_contradictory_or_unknown_values_are_refused_by_name(
    sets: tuple[str, ...], says: str
) -> None:
    assert says in refusal(*sets)


# --- watchNamespace: the operator and its grants in exactly those namespaces -----------------


def test_watch_namespaces_get_the_manager_role_and_the_operator_watches_exactly_them() -> None:
    chart = render("watchNamespace={ray-a,ray-b}")
    manager_roles = [
        m for m in of_kind(chart, "Role") if m["metadata"]["name"] == "ray-operator-manager"
    ]
    assert sorted(m["metadata"]["namespace"] for m in manager_roles) == ["ray-a", "ray-b"]
    bindings = [
        m for m in of_kind(chart, "RoleBinding") if m["metadata"]["name"] == "ray-operator-manager"
    ]
    assert sorted(m["metadata"]["namespace"] for m in bindings) == ["ray-a", "ray-b"]
    for binding in bindings:
        assert binding["roleRef"]["kind"] == "Role"
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": DEFAULT_NAMESPACE}
        ]
    assert "ray-operator-manager" not in {
        m["metadata"]["name"] for m in of_kind(chart, "ClusterRole")
    }
    assert parse_run_arguments(manager_container(chart)["args"]).namespaces == ["ray-a", "ray-b"]
    # The webhooks intercept the watched namespaces, and no other (never the operator's own).
    for kind, name in WEBHOOK_CONFIGURATIONS.items():
        for webhook in the(chart, kind, name)["webhooks"]:
            assert webhook["namespaceSelector"] == {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": [DEFAULT_NAMESPACE],
                    },
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "In",
                        "values": ["ray-a", "ray-b"],
                    },
                ]
            }


def test_default_render_is_accepted_by_the_api_server_strictly(kubectl: Kubectl) -> None:
    ensure_namespace(kubectl, DEFAULT_NAMESPACE)
    manifests = render_with_crds(DEFAULT_NAMESPACE)
    output = apply_server_side(kubectl, manifests, dry_run=True, validate="strict")
    assert output.count("(server dry run)") == len(manifests)


def test_helm_install_watching_two_namespaces_reconciles_in_them_and_nowhere_else(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    home, watched, neighbour = "helm-ops", ["helm-a", "helm-b"], "helm-c"
    for name in (home, *watched, neighbour):
        ensure_namespace(kubectl, name)
    # singleNamespaceInstall: nothing cluster-scoped (the session's CRDs are already there, and
    # fail-closed webhooks with no operator behind them would refuse every other test's objects).
    values = [
        "singleNamespaceInstall=true",
        f"watchNamespace={{{','.join(watched)}}}",
        "replicas=0",
    ]
    sets = [arg for value in values for arg in ("--set", value)]
    kube = ["--kubeconfig", str(kubectl.kubeconfig), "--namespace", home]
    helm("install", "ray-operator", str(CHART), *kube, "--skip-crds", *sets)
    try:
        roles = kubectl(
            "get",
            "roles",
            "-A",
            "-o",
            "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {end}",
        )
        with_manager_role = sorted(
            r.split("/")[0] for r in roles.split() if r.endswith("/ray-operator-manager")
        )
        assert with_manager_role == watched
        user = service_account_user(home)
        questions = [
            ("create", "pods", None),
            ("list", "rayclusters.ray.io", None),
            ("patch", "rayclusters.ray.io", "status"),
        ]
        for name in watched:
            assert all(authorized(kubectl, user, questions, namespace=name).values()), name
        assert not any(authorized(kubectl, user, questions, namespace=neighbour).values())

        args = manager_container(render(*values, namespace=home))["args"]
        args = [arg.replace("$(POD_NAMESPACE)", home) for arg in args]
        kubeconfig = operator_kubeconfig(kubectl, tmp_path / "kubeconfig", namespace=home)
        with running_operator(kubeconfig, tmp_path / "operator.log", *args):
            reconciles_mini_sample(kubectl, watched[0])
    finally:
        helm("uninstall", "ray-operator", *kube, "--wait")
