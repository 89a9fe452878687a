"""Issue 28, finding 2: a tenant cannot aim the operator's dashboard client at another tenant.

The attack: tenant A makes its cluster's head Service an ExternalName for tenant B's head
Service. Cluster DNS then answers A's `<head svc>.<A>.svc.cluster.local` with B's address, and
an operator that asks the dashboard at that name POSTs A's job entrypoint (or PUTs A's Serve
config) to B's Ray dashboard — past any NetworkPolicy that admits the operator — and reflects
B's error bodies into A's status.

These tests make that DNS real for the operator alone: its process runs in a private mount
namespace whose /etc/hosts maps A's head Service name to 127.0.0.1, as cluster DNS would after
the CNAME, and B's dashboard is a recording HTTP server there (`Dashboards`), on the dashboard
port A's head container declares. A's own head Pod gets 127.0.0.2 as its IP (the test writes
the Pod's status, as a kubelet would) with the same recorder listening there, so a test sees
where each request went: B's dashboard must receive none, A's own head may. Every body B's
server sends carries `VICTIM_BODY`, which must appear in no status, Event or operator log line.
"""

from __future__ import annotations

import copy
import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Kubectl
from tests.robustness.conftest import StartOperator
from tests.robustness.manifests import IMAGE, as_text
from tests.robustness.observe import OperatorUnderTest, wait_for
from tests.runtime.processes import free_port
from tests.webhooks.conftest import load_sample

VICTIM_IP = "127.0.0.1"
"""Where cluster DNS sends A's head Service name after the ExternalName's CNAME: B's dashboard."""
OWN_HEAD_IP = "127.0.0.2"
"""The IP of A's own head Pod (any loopback address serves: Linux routes 127.0.0.0/8 locally)."""
VICTIM_BODY = "victim-dashboard-body-7c1e9a"
OWN_HEAD_BODY = "own-head-body-51d2"
ALIAS_NAME = "aliased-head"
ENTRYPOINT = "python -c 'print(\"tenant A runs here\")'"
SETTLE_SECONDS = 120.0
HEAD_SERVICE_TYPE = "headGroupSpec.headService.spec.type"


@dataclass(frozen=True)
class Request:
    """One request a dashboard received: on which address, what, with which body."""

    address: str
    method: str
    path: str
    body: str


@dataclass
class Dashboards:
    """One recording server on B's dashboard address and on A's head Pod IP, same port."""

    port: int
    requests: list[Request] = field(default_factory=list)

    def at(self, address: str) -> list[Request]:
        return [request for request in self.requests if request.address == address]

    def posted_jobs(self) -> list[Request]:
        return [r for r in self.requests if r.method == "POST" and r.path == "/api/jobs/"]


def _handler(dashboards: Dashboards) -> type[http.server.BaseHTTPRequestHandler]:
    class Record(http.server.BaseHTTPRequestHandler):
        """Answers like a dashboard that knows no job and refuses every write, with a body."""

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length).decode(errors="replace") if length else ""
            address = self.server.server_address[0]
            dashboards.requests.append(Request(str(address), self.command, self.path, body))
            marker = VICTIM_BODY if address == VICTIM_IP else OWN_HEAD_BODY
            if self.command == "GET" and self.path.startswith("/api/serve/applications/"):
                status, text = 200, json.dumps({"applications": {}})
            elif self.command == "GET":
                status, text = 404, f"no such job ({marker})"
            else:
                status, text = 500, f"Traceback (most recent call last): {marker}"
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        # http.server dispatches to `do_<METHOD>`.
        do_GET = do_POST = do_PUT = do_DELETE = _answer  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Record


@pytest.fixture
def dashboards() -> Iterator[Dashboards]:
    port = free_port()
    recorded = Dashboards(port)
    servers = [
        http.server.ThreadingHTTPServer((address, port), _handler(recorded))
        for address in (VICTIM_IP, OWN_HEAD_IP)
    ]
    threads = [threading.Thread(target=server.serve_forever, daemon=True) for server in servers]
    for thread in threads:
        thread.start()
    try:
        yield recorded
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


@dataclass
class AliasedDns:
    """The operator's /etc/hosts: what cluster DNS answers once A's Service is an alias."""

    path: Path
    namespace: str

    def alias(self, service: str) -> None:
        """`<service>.<namespace>.svc.cluster.local` resolves to B's dashboard from now on
        (written in place: the bind mount keeps the file's inode)."""
        with self.path.open("a") as hosts:
            hosts.write(f"{VICTIM_IP} {service}.{self.namespace}.svc.cluster.local\n")

    def operator(self, start_operator: StartOperator) -> OperatorUnderTest:
        """An operator without webhooks whose DNS is this file."""
        script = 'mount --bind "$0" /etc/hosts && exec "$@"'
        prefix = ("unshare", "--mount", "sh", "-c", script, str(self.path))
        return start_operator(command_prefix=prefix)


@pytest.fixture
def dns(tmp_path: Path, namespace: str) -> AliasedDns:
    path = tmp_path / "hosts"
    path.write_text(Path("/etc/hosts").read_text())
    aliased = AliasedDns(path, namespace)
    aliased.alias(ALIAS_NAME)
    return aliased


# --- manifests --------------------------------------------------------------------------------


def alias_of(other_namespace: str, *, name: str | None = ALIAS_NAME) -> dict[str, Any]:
    """A custom head Service that is only a CNAME for B's head Service."""
    service: dict[str, Any] = {
        "spec": {
            "type": "ExternalName",
            "externalName": f"victim-head-svc.{other_namespace}.svc.cluster.local",
        }
    }
    if name is not None:
        service["metadata"] = {"name": name}
    return service


def head_only_cluster_spec(port: int, head_service: dict[str, Any] | None) -> dict[str, Any]:
    """A head without workers, its dashboard on `port` (B's dashboard port)."""
    ports = [
        {"name": "gcs-server", "containerPort": 6379},
        {"name": "dashboard", "containerPort": port},
        {"name": "client", "containerPort": 10001},
        {"name": "serve", "containerPort": 8000},
    ]
    head: dict[str, Any] = {
        "rayStartParams": {},
        "template": {
            "spec": {"containers": [{"name": "ray-head", "image": IMAGE, "ports": ports}]}
        },
    }
    if head_service is not None:
        head["headService"] = head_service
    return {"rayVersion": "2.52.0", "headGroupSpec": head}


def ray_object(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def rayjob(name: str, cluster: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    """An HTTPMode RayJob: the operator itself POSTs the entrypoint to the dashboard."""
    job_spec = {"entrypoint": ENTRYPOINT, "submissionMode": "HTTPMode", **spec}
    if cluster is not None:
        job_spec["rayClusterSpec"] = cluster
    return ray_object("RayJob", name, job_spec)


def raycluster(name: str, cluster: dict[str, Any]) -> dict[str, Any]:
    return ray_object("RayCluster", name, cluster)


def rayservice(name: str, cluster: dict[str, Any]) -> dict[str, Any]:
    sample = copy.deepcopy(load_sample("ray-service.sample.yaml", "RayService"))
    sample["metadata"] = {"name": name}
    sample["spec"]["rayClusterConfig"] = cluster
    return sample


def apply(kubectl: Kubectl, namespace: str, manifest: dict[str, Any]) -> Any:
    return kubectl.run("apply", "-n", namespace, "-f", "-", input_text=as_text(manifest))


def get(kubectl: Kubectl, namespace: str, kind: str, name: str) -> dict[str, Any]:
    result = kubectl.run("get", kind, name, "-n", namespace, "-o", "json")
    return json.loads(result.stdout) if result.returncode == 0 else {}


# --- observations -----------------------------------------------------------------------------


def leaks(kubectl: Kubectl, operator: OperatorUnderTest, *namespaces: str) -> list[str]:
    """Where B's response bodies landed: each Ray object's status, Events, the operator's log."""
    found = []
    for namespace in namespaces:
        for kind in ("rayjobs", "rayclusters", "rayservices"):
            listed = json.loads(kubectl("get", kind, "-n", namespace, "-o", "json"))
            for item in listed["items"]:
                if VICTIM_BODY in json.dumps(item.get("status") or {}):
                    found.append(f"status of {kind}/{item['metadata']['name']}")
        events = json.loads(kubectl("get", "events", "-n", namespace, "-o", "json"))["items"]
        found += [f"Event {e['reason']}" for e in events if VICTIM_BODY in e.get("message", "")]
    found += [f"log: {line[:160]}" for line in operator.log().splitlines() if VICTIM_BODY in line]
    return found


def until(*conditions: Callable[[], object], what: str) -> None:
    """Until any condition holds (the attack landing, or the defence reporting)."""
    wait_for(
        lambda: any(condition() for condition in conditions), timeout=SETTLE_SECONDS, what=what
    )


def reported_invalid(kubectl: Kubectl, namespace: str, kind: str, name: str) -> str:
    """The invalid-spec message the controller wrote into the object's status ("" if none)."""
    status = get(kubectl, namespace, kind, name).get("status") or {}
    if status.get("jobDeploymentStatus") == "ValidationFailed":
        return str(status.get("message", ""))
    for condition in status.get("conditions") or []:
        if condition.get("reason") == "ValidationFailed" or condition["type"] == "InvalidSpec":
            return str(condition.get("message", ""))
    return ""


# --- with the webhook: refused at once --------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("RayCluster", "spec"),
        ("RayJob", "spec.rayClusterSpec"),
        ("RayService", "spec.rayClusterConfig"),
    ],
)
def test_the_webhook_refuses_an_external_name_head_service_naming_its_type(
    operator_with_webhooks: OperatorUnderTest,
    kubectl: Kubectl,
    namespace: str,
    other_namespace: str,
    kind: str,
    path: str,
) -> None:
    cluster = head_only_cluster_spec(8265, alias_of(other_namespace, name=None))
    manifest = {
        "RayCluster": lambda: raycluster("aliased", cluster),
        "RayJob": lambda: rayjob("aliased", cluster),
        "RayService": lambda: rayservice("aliased", cluster),
    }[kind]()
    result = apply(kubectl, namespace, manifest)
    assert result.returncode != 0
    assert f'{path}.{HEAD_SERVICE_TYPE}: Invalid value: "ExternalName"' in result.stderr
    assert kubectl("get", kind.lower(), "-n", namespace, "-o", "name").strip() == ""


# --- without the webhook: nothing reaches B ---------------------------------------------------


@dataclass
class Attack:
    """Tenant A against an operator without webhooks whose DNS aliases A's head Services."""

    operator: OperatorUnderTest
    dashboards: Dashboards
    kubectl: Kubectl
    namespace: str
    other_namespace: str

    def landed(self) -> bool:
        """A dashboard was told to run something: a job POSTed, a Serve config PUT."""
        return any(request.method in ("POST", "PUT") for request in self.dashboards.requests)

    def assert_refused(
        self, kind: str, name: str, *, path: str, meanwhile: Callable[[], object] = bool
    ) -> None:
        """Nothing reached B (nor leaked from it), and `kind/name` reports the alias refused."""

        def refused() -> str:
            return reported_invalid(self.kubectl, self.namespace, kind, name)

        until(meanwhile, self.landed, refused, what=f"the attack landing, or the {kind} refused")
        found = leaks(self.kubectl, self.operator, self.namespace, self.other_namespace)
        assert (self.dashboards.requests, found) == ([], [])
        assert f'{path}.{HEAD_SERVICE_TYPE}: Invalid value: "ExternalName"' in refused()


@pytest.fixture
def attack(
    start_operator: StartOperator,
    dns: AliasedDns,
    dashboards: Dashboards,
    kubectl: Kubectl,
    namespace: str,
    other_namespace: str,
) -> Attack:
    return Attack(dns.operator(start_operator), dashboards, kubectl, namespace, other_namespace)


def test_a_rayjob_whose_head_service_aliases_another_dashboard_never_reaches_it(
    attack: Attack,
) -> None:
    cluster = head_only_cluster_spec(attack.dashboards.port, alias_of(attack.other_namespace))
    assert apply(attack.kubectl, attack.namespace, rayjob("aliased", cluster)).returncode == 0
    attack.assert_refused("rayjob", "aliased", path="spec.rayClusterSpec")


def test_a_rayjob_on_a_selected_cluster_whose_head_service_is_an_alias_never_reaches_it(
    attack: Attack,
) -> None:
    cluster = head_only_cluster_spec(attack.dashboards.port, alias_of(attack.other_namespace))
    selecting = rayjob("selecting", clusterSelector={"ray.io/cluster": "aliased"})
    for manifest in (raycluster("aliased", cluster), selecting):
        assert apply(attack.kubectl, attack.namespace, manifest).returncode == 0
    attack.assert_refused("raycluster", "aliased", path="spec")


def test_a_rayservice_whose_head_service_aliases_another_dashboard_never_puts_its_config_there(
    attack: Attack, dns: AliasedDns
) -> None:
    # A RayService names its clusters' head Services itself: `<cluster>-head-svc`.
    alias = alias_of(attack.other_namespace, name=None)
    cluster = head_only_cluster_spec(attack.dashboards.port, alias)
    assert apply(attack.kubectl, attack.namespace, rayservice("aliased", cluster)).returncode == 0
    aliased: set[str] = set()

    def alias_new_clusters() -> bool:
        """Cluster DNS answers each new cluster's head Service name with B's address."""
        listed = attack.kubectl("get", "rayclusters", "-n", attack.namespace, "-o", "name")
        for name in listed.split():
            service = f"{name.rpartition('/')[2]}-head-svc"
            if service not in aliased:
                dns.alias(service)
                aliased.add(service)
        return False

    attack.assert_refused(
        "rayservice", "aliased", path="spec.rayClusterConfig", meanwhile=alias_new_clusters
    )


def test_a_head_service_replaced_by_a_foreign_alias_is_never_talked_through(
    attack: Attack, dashboards: Dashboards, kubectl: Kubectl, namespace: str, other_namespace: str
) -> None:
    """A valid RayJob; once the operator built its head Service, the tenant (who may edit
    Services) puts an ExternalName Service of its own in its place, with an ownerReference to
    the cluster copied from the RayCluster it can read. The operator must keep addressing the
    head Pod the cluster made, and only it."""
    valid_service = {"metadata": {"name": ALIAS_NAME}}
    cluster = head_only_cluster_spec(dashboards.port, valid_service)
    assert apply(kubectl, namespace, rayjob("replaced", cluster)).returncode == 0
    head = ReplacedHead(kubectl, namespace, other_namespace)

    until(
        head.replace_service_and_place_head_pod,
        lambda: head.service_replaced and dashboards.posted_jobs(),
        what="the head Service replaced and the job POSTed somewhere",
    )
    assert dashboards.at(VICTIM_IP) == []
    posted = dashboards.posted_jobs()
    assert {request.address for request in posted} == {OWN_HEAD_IP}
    assert json.loads(posted[0].body)["entrypoint"] == ENTRYPOINT
    assert leaks(kubectl, attack.operator, namespace, other_namespace) == []


@dataclass
class ReplacedHead:
    """The tenant's moves against its own RayJob's cluster, one step per call (for `until`)."""

    kubectl: Kubectl
    namespace: str
    other_namespace: str
    service_replaced: bool = False
    pod_placed: bool = False

    def replace_service_and_place_head_pod(self) -> bool:
        cluster = self._cluster()
        if cluster and not self.service_replaced:
            self.service_replaced = self._replace_service(cluster)
        if cluster and not self.pod_placed:
            self.pod_placed = self._place_head_pod(cluster)
        return False

    def _cluster(self) -> dict[str, Any]:
        name = (get(self.kubectl, self.namespace, "rayjob", "replaced").get("status") or {}).get(
            "rayClusterName"
        )
        return get(self.kubectl, self.namespace, "raycluster", name) if name else {}

    def _replace_service(self, cluster: dict[str, Any]) -> bool:
        built = get(self.kubectl, self.namespace, "service", ALIAS_NAME)
        if not built:
            return False
        self.kubectl("delete", "service", ALIAS_NAME, "-n", self.namespace, "--wait=false")
        metadata = cluster["metadata"]
        forged_owner = {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "name": metadata["name"],
            "uid": metadata["uid"],
        }
        alias = alias_of(self.other_namespace)
        alias["metadata"].update(
            labels=built["metadata"].get("labels") or {}, ownerReferences=[forged_owner]
        )
        alias["spec"]["ports"] = built["spec"]["ports"]
        service = {"apiVersion": "v1", "kind": "Service", **alias}
        deadline = time.monotonic() + 30
        while apply(self.kubectl, self.namespace, service).returncode != 0:
            assert time.monotonic() < deadline, "the tenant's Service could not be created"
            time.sleep(0.2)
        return True

    def _place_head_pod(self, cluster: dict[str, Any]) -> bool:
        """Give the head Pod its IP on this machine, as a kubelet would (KWOK gave it one from
        the fake Pod network, which nothing here answers)."""
        selector = f"ray.io/cluster={cluster['metadata']['name']},ray.io/node-type=head"
        listed = json.loads(
            self.kubectl("get", "pods", "-n", self.namespace, "-l", selector, "-o", "json")
        )
        pods = [pod for pod in listed["items"] if (pod.get("status") or {}).get("podIP")]
        if not pods:
            return False
        ip = {"podIP": OWN_HEAD_IP, "podIPs": [{"ip": OWN_HEAD_IP}]}
        self.kubectl(
            "patch", "pod", pods[0]["metadata"]["name"], "-n", self.namespace,
            "--subresource=status", "--type=merge", "-p", json.dumps({"status": ip}),
        )  # fmt: skip
        return True
