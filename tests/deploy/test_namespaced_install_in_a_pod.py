"""Specification: config/namespaced works in a Pod (issue 12, finding 12).

The operator process runs exactly as that install's Deployment starts it: the container's args
and env from `kubectl kustomize config/namespaced` ($(POD_NAMESPACE) filled in as the kubelet
does), no kubeconfig, and the in-cluster environment a Pod gets — KUBERNETES_SERVICE_HOST/PORT
pointing at the API server, and the ServiceAccount's token and the cluster CA in a service-account
directory (`RAY_OPERATOR_SERVICE_ACCOUNT_DIR` stands in for the kubelet's mount). Only probes and
metrics move to free loopback ports.

It used to die: in a Pod the webhooks default to on, `--webhook-port=0` did not turn them off,
and reading their certificate Secret is forbidden by that install's Roles; after ~78 s of
retries the process exited 1. Rather than wait 78 s, the test checks the trigger directly: the
Secret is still forbidden, and the operator never starts its webhooks at all.
"""

from __future__ import annotations

import base64
import os
import re
import urllib.parse
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import SAMPLES, Kubectl
from tests.deploy.conftest import TenantInstall
from tests.deploy.manifests import (
    SERVICE_ACCOUNT,
    WEBHOOK_CERT_SECRET,
    can_i,
    service_account_user,
    the,
)
from tests.deploy.process import running_operator

CLUSTER = "ray-mini-in-a-pod"
AS_OPERATOR = "ray-as-the-operator"


def test_namespaced_install_runs_in_a_pod_with_its_own_arguments_and_rbac(
    tenant_install: TenantInstall, kubectl: Kubectl, tmp_path: Path
) -> None:
    tenant = tenant_install.tenant
    # What killed it: the webhooks' certificate Secret is not readable with these Roles.
    assert not can_i(
        kubectl, service_account_user(tenant), "get", f"secrets/{WEBHOOK_CERT_SECRET}",
        namespace=tenant,
    )  # fmt: skip
    container = manager_container(tenant_install)
    env = pod_environment(container, kubectl, tmp_path / "serviceaccount", namespace=tenant)
    arguments = [expand(argument, env) for argument in container["args"]]

    with running_operator(None, tmp_path / "operator.log", *arguments, env=env) as operator:
        try:
            reconciles_a_mini_cluster(kubectl, tenant)
            refuses_a_head_running_as_the_operator(kubectl, tenant)
        finally:
            deleted_while_the_operator_runs(kubectl, tenant)
        assert operator.process.poll() is None
        log = operator.log.read_text(errors="replace")
        (started,) = [line for line in log.splitlines() if "starting watch:" in line]
        assert "webhooks" not in started, started
        assert "webhook" not in log.replace(started, ""), operator.tail()
        assert "Traceback" not in log, operator.tail()


def manager_container(install: TenantInstall) -> dict[str, Any]:
    deployment = the(install.manifests, "Deployment", "ray-operator")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "manager"
    return dict(container)


def pod_environment(
    container: dict[str, Any], kubectl: Kubectl, directory: Path, *, namespace: str
) -> dict[str, str]:
    """The environment the kubelet would give the container, pointed at the test API server."""
    admin = yaml.safe_load(kubectl.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    server = urllib.parse.urlsplit(cluster["server"])
    write_service_account_directory(directory, kubectl, cluster, namespace=namespace)
    env = {
        # Only what a process needs to start; nothing of ours (KUBECONFIG, RAY_OPERATOR_*).
        "PATH": os.environ["PATH"],
        "HOME": str(directory.parent),
        "KUBERNETES_SERVICE_HOST": str(server.hostname),
        "KUBERNETES_SERVICE_PORT": str(server.port),
        "RAY_OPERATOR_SERVICE_ACCOUNT_DIR": str(directory),
    }
    for variable in container.get("env", ()):
        env[variable["name"]] = container_env_value(variable, namespace=namespace)
    return env


def container_env_value(variable: dict[str, Any], *, namespace: str) -> str:
    if "value" in variable:
        return str(variable["value"])
    field_path = variable["valueFrom"]["fieldRef"]["fieldPath"]
    stand_ins = {"metadata.namespace": namespace, "spec.serviceAccountName": SERVICE_ACCOUNT}
    assert field_path in stand_ins, f"no stand-in for {field_path}"
    return stand_ins[field_path]


def write_service_account_directory(
    directory: Path, kubectl: Kubectl, cluster: dict[str, Any], *, namespace: str
) -> None:
    """token, ca.crt and namespace, as the kubelet mounts them for the ServiceAccount."""
    directory.mkdir()
    token = kubectl("create", "token", "ray-operator", "-n", namespace, "--duration=1h").strip()
    (directory / "token").write_text(token)
    (directory / "token").chmod(0o600)
    ca_data = cluster.get("certificate-authority-data")
    ca = (
        base64.b64decode(ca_data)
        if ca_data is not None
        else Path(cluster["certificate-authority"]).read_bytes()
    )
    (directory / "ca.crt").write_bytes(ca)
    (directory / "namespace").write_text(namespace)


def expand(argument: str, env: dict[str, str]) -> str:
    """$(VAR) references filled in from the container's env, as the kubelet does."""
    return re.sub(r"\$\((\w+)\)", lambda match: env[match.group(1)], argument)


def reconciles_a_mini_cluster(kubectl: Kubectl, namespace: str) -> None:
    sample = yaml.safe_load((SAMPLES / "ray-cluster.mini.yaml").read_text())
    sample["metadata"]["name"] = CLUSTER
    kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump(sample))
    kubectl(
        "wait", "-n", namespace, "--for=jsonpath={.status.state}=ready",
        f"raycluster/{CLUSTER}", "--timeout=120s",
    )  # fmt: skip
    pods = kubectl("get", "pods", "-n", namespace, "-l", f"ray.io/cluster={CLUSTER}", "-o", "name")
    assert len(pods.split()) == 2


def refuses_a_head_running_as_the_operator(kubectl: Kubectl, namespace: str) -> None:
    """The Downward API told the operator its ServiceAccount: it lends it to no head Pod."""
    sample = yaml.safe_load((SAMPLES / "ray-cluster.mini.yaml").read_text())
    sample["metadata"]["name"] = AS_OPERATOR
    sample["spec"]["headGroupSpec"]["template"]["spec"]["serviceAccountName"] = SERVICE_ACCOUNT
    kubectl("apply", "-n", namespace, "-f", "-", input_text=yaml.safe_dump(sample))
    kubectl(
        "wait", "-n", namespace, "--for=condition=InvalidSpec", f"raycluster/{AS_OPERATOR}",
        "--timeout=60s",
    )  # fmt: skip
    selector = f"ray.io/cluster={AS_OPERATOR}"
    assert not kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "name")


def deleted_while_the_operator_runs(kubectl: Kubectl, namespace: str) -> None:
    """Leave the tenant namespace as we found it (other modules of this package share it)."""
    kubectl(
        "delete", "raycluster", CLUSTER, AS_OPERATOR, "-n", namespace, "--ignore-not-found",
        "--timeout=60s",
    )  # fmt: skip
    kubectl(
        "wait", "-n", namespace, "--for=delete", "pods", "-l", f"ray.io/cluster={CLUSTER}",
        "--timeout=60s",
    )  # fmt: skip
