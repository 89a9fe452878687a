"""Finding 9: /metrics does not tell a caller on the Pod network every tenant's object names.

The per-resource gauges (KubeRay's `kuberay_*`, here `ray_operator_*`) label each RayCluster,
RayJob and RayService with its name and namespace. The attacker reaches the operator's metrics
port from a Pod, with no credentials, or with its own namespace's ServiceAccount token. The
operator is a separate `ray-operator run` process watching every namespace, started with the
`--metrics-*` flags of config/manager (the shipped install); only the address is moved to
loopback. A scraper whose ServiceAccount is bound to config/metrics-auth's reader role gets the
same series as before, with KubeRay-compatible names and labels: the real TokenReview and
SubjectAccessReview of the API server decide.
"""

from __future__ import annotations

import http.client
import ssl
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import yaml

from tests.conftest import REPO_ROOT, Kubectl
from tests.robustness.conftest import StartOperator
from tests.robustness.manifests import UNSCHEDULED, ray_cluster
from tests.robustness.observe import OperatorUnderTest
from tests.webhooks.server import free_port

VICTIM_CLUSTER = "victim-secret-project"
MANAGER = REPO_ROOT / "config" / "manager" / "manager.yaml"
READER_ROLE = REPO_ROOT / "config" / "metrics-auth" / "reader_role.yaml"


@dataclass(frozen=True)
class Scrape:
    status: int
    body: str


@dataclass(frozen=True)
class MetricsPort:
    """The operator and the loopback port its /metrics listens on."""

    operator: OperatorUnderTest
    port: int

    def scrape(self, token: str | None = None) -> Scrape:
        """GET /metrics as a caller that does not know the scheme: HTTPS without verifying
        (as config/prometheus does), else plain HTTP."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        unverified = ssl.create_default_context()
        unverified.check_hostname = False
        unverified.verify_mode = ssl.CERT_NONE
        secure = http.client.HTTPSConnection("127.0.0.1", self.port, context=unverified)
        try:
            return _get(secure, headers)
        except ssl.SSLError:
            return _get(http.client.HTTPConnection("127.0.0.1", self.port), headers)


def _get(connection: http.client.HTTPConnection, headers: dict[str, str]) -> Scrape:
    connection.timeout = 10
    try:
        connection.request("GET", "/metrics", headers=headers)
        response = connection.getresponse()
        return Scrape(response.status, response.read().decode(errors="replace"))
    finally:
        connection.close()


def shipped_metrics_flags() -> list[str]:
    """The `--metrics-*` flags config/manager gives the operator, but the address."""
    deployment = yaml.safe_load(MANAGER.read_text())
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return [arg for arg in args if arg.startswith("--metrics-") and "--metrics-addr" not in arg]


@pytest.fixture
def metrics_port(
    start_operator: StartOperator, kubectl: Kubectl, other_namespace: str
) -> Iterator[MetricsPort]:
    """A victim's RayCluster in `other_namespace`, and the operator (watching every namespace)
    serving /metrics as shipped, on a loopback port of its own."""
    victim = ray_cluster(VICTIM_CLUSTER, replicas=0)
    victim["spec"]["headGroupSpec"]["template"]["spec"]["schedulerName"] = UNSCHEDULED
    kubectl("apply", "-n", other_namespace, "-f", "-", input_text=yaml.safe_dump(victim))
    port = free_port()
    operator = start_operator(
        all_namespaces=True,
        extra_args=("--metrics-addr", f"127.0.0.1:{port}", *shipped_metrics_flags()),
    )
    try:
        yield MetricsPort(operator, port)
    finally:
        # This namespace is not tidied by start_operator: let the operator clean its Pods.
        kubectl("delete", "raycluster", VICTIM_CLUSTER, "-n", other_namespace, "--wait=true")
        kubectl("delete", "pods", "--all", "-n", other_namespace, "--wait=false")


def service_account_token(
    kubectl: Kubectl, namespace: str, name: str, *, read_metrics: bool = False
) -> str:
    """A token of a new ServiceAccount, bound to the metrics reader role if `read_metrics`."""
    kubectl("create", "serviceaccount", name, "-n", namespace)
    if read_metrics:
        kubectl("apply", "--server-side", "-f", str(READER_ROLE))
        kubectl(
            "create", "clusterrolebinding", f"metrics-reader-{namespace}",
            "--clusterrole=ray-operator-metrics-reader", f"--serviceaccount={namespace}:{name}",
        )  # fmt: skip
    return kubectl("create", "token", name, "-n", namespace).strip()


def test_an_unauthenticated_scrape_gets_no_object_names(
    metrics_port: MetricsPort, kubectl: Kubectl, namespace: str
) -> None:
    attacker = service_account_token(kubectl, namespace, "attacker")
    for token, expected in ((None, 401), ("made-up-token", 401), (attacker, 403)):
        scrape = metrics_port.scrape(token)
        assert VICTIM_CLUSTER not in scrape.body, f"names leaked with token {token!r}"
        assert scrape.status == expected, scrape
    assert metrics_port.operator.alive()


def test_an_authorized_service_account_reads_every_object_name(
    metrics_port: MetricsPort, kubectl: Kubectl, namespace: str, other_namespace: str
) -> None:
    try:
        scraper = service_account_token(kubectl, namespace, "scraper", read_metrics=True)
        scrape = metrics_port.scrape(scraper)
        assert scrape.status == 200, scrape
        # KubeRay's series and labels (under the ray_operator_ prefix) for the authorized reader.
        expected = (
            f'ray_operator_cluster_info{{name="{VICTIM_CLUSTER}",namespace="{other_namespace}",'
            'owner_kind="None"} 1.0'
        )
        assert expected in scrape.body
    finally:
        kubectl("delete", "clusterrolebinding", f"metrics-reader-{namespace}", "--ignore-not-found")
