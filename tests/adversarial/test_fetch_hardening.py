"""Issue 28, finding 7: a namespace editor aims the operator's RayServeGraph fetch.

The attacker writes `spec.source.url` and may annotate its own Secrets; the operator fetches
from wherever the URL says, with the operator's network position. What it must not get:

    (1) an opted-in token sent in clear text   test_a_token_opted_in_for_a_host_is_never_sent_...
    (2) a port and name scanner                test_closed_open_silent_and_black_holed_targets_...
    (3) the cloud's metadata and host agents   test_metadata_addresses_are_refused_by_literal_...
    (4) everyone else's fetches, stalled       test_black_holed_names_and_hung_servers_do_not_...,
                                               test_concurrent_fetches_never_exceed_the_cap

Each test runs `ray-operator run` in its own process with `--serve-graph-allow-loopback`: the
targets are this test's servers on 127.0.0.1, and loopback is a flag, not a rule under test.
No `--serve-graph-allowed-hosts`: the default, where any host may be named.

Names: where they matter, the operator runs in a mount namespace of its own (`unshare --mount`)
whose /etc/hosts names this test's server (`registry.test`) and metadata addresses
(`wireserver.test` → 168.63.129.16, ...), and whose resolv.conf points at a DNS server of this
test that receives every query and answers none: any other name is black-holed, as behind a
firewall that drops DNS. Real glibc, real getaddrinfo, real threads stuck in it. Binding port 53
and mounting need root; without it those tests skip.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from ray_operator.spec.serve_graph_names import SECRET_HOSTS_ANNOTATION

from tests.conftest import Kubectl
from tests.robustness.conftest import StartOperator
from tests.robustness.manifests import UNSCHEDULED, container
from tests.robustness.observe import HealthProbe, wait_for
from tests.servegraph.artifact_server import ArtifactServer
from tests.servegraph.graphs import document, pipeline_graph
from tests.servegraph.raw_servers import RawServer, closed_port

TOKEN = "adversarial-token-5e1f0c2b9a"
GRAPH_PATH = "/graphs/pipeline.pb"
ALLOW_LOOPBACK = ("--serve-graph-allow-loopback",)
BLACK_HOLE_DNS = "127.0.0.153"
REGISTRY_NAME = "registry.test"
HOSTS = {
    REGISTRY_NAME: ["127.0.0.1"],
    "wireserver.test": ["168.63.129.16"],  # Azure WireServer
    "alibaba-metadata.test": ["100.100.100.200"],
    "mixed.test": ["127.0.0.1", "168.63.129.16"],  # one good address does not save it
}
FETCH_TIMEOUT = 4
"""spec.source.timeoutSeconds of the graphs probing ports: their failures are due then."""
VICTIM_BOUND = 15.0
"""Seconds from creating a healthy graph to its document parsed, while another namespace's
graphs hang in DNS and on a silent server. Measured ~2-3 s; before this fix, minutes."""
HEALTHZ_BOUND = 1.0
NO_FINALIZERS = '{"metadata":{"finalizers":null}}'


# --- the operator's view of names ---------------------------------------------------------


@dataclass
class NameSandbox:
    """What `unshare` gives the operator: the hosts file above, a DNS server that never answers."""

    command_prefix: tuple[str, ...]
    lock: threading.Lock = field(default_factory=threading.Lock)
    queries: list[str] = field(default_factory=list)

    def names_asked(self) -> set[str]:
        with self.lock:
            return set(self.queries)


@pytest.fixture
def name_sandbox(tmp_path: Path) -> Iterator[NameSandbox]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare: a DNS server on port 53, a mount namespace")
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        dns.bind((BLACK_HOLE_DNS, 53))
    except OSError as error:
        dns.close()
        pytest.skip(f"cannot listen on {BLACK_HOLE_DNS}:53: {error}")
    hosts, resolv = tmp_path / "hosts", tmp_path / "resolv.conf"
    extra = "".join(f"{a} {name}\n" for name, addrs in HOSTS.items() for a in addrs)
    hosts.write_text(Path("/etc/hosts").read_text() + "\n" + extra)
    # glibc's longest: 30 s per try, 5 tries. A black-holed name holds its thread minutes.
    resolv.write_text(f"nameserver {BLACK_HOLE_DNS}\noptions timeout:30 attempts:5\n")
    script = (
        'mount --bind "$1" /etc/hosts && mount --bind "$2" /etc/resolv.conf && shift 2 && exec "$@"'
    )
    sandbox = NameSandbox(
        command_prefix=(
            "unshare",
            "--mount",
            "sh",
            "-c",
            script,
            "sandbox",
            str(hosts),
            str(resolv),
        )
    )
    stop = threading.Event()
    receiving = threading.Thread(target=_swallow_queries, args=(dns, sandbox, stop), daemon=True)
    receiving.start()
    try:
        yield sandbox
    finally:
        stop.set()
        receiving.join(timeout=5)
        dns.close()


def _swallow_queries(dns: socket.socket, sandbox: NameSandbox, stop: threading.Event) -> None:
    """Receive every query, answer none (a close from another thread would not wake recvfrom:
    poll with a timeout instead)."""
    dns.settimeout(0.2)
    while not stop.is_set():
        try:
            packet, _ = dns.recvfrom(4096)
        except TimeoutError:
            continue
        with sandbox.lock:
            sandbox.queries.append(_query_name(packet))


def _query_name(packet: bytes) -> str:
    labels, offset = [], 12
    while offset < len(packet) and packet[offset]:
        length = packet[offset]
        labels.append(packet[offset + 1 : offset + 1 + length].decode("ascii", "replace"))
        offset += 1 + length
    return ".".join(labels)


# --- objects and what the operator says of them -------------------------------------------


def graph(
    name: str,
    url: str,
    *,
    timeout: int = FETCH_TIMEOUT,
    token_secret: str | None = None,
    ca_secret: str | None = None,
) -> dict[str, Any]:
    """A RayServeGraph fetching `url`; its head Pod names no real scheduler (nothing runs)."""
    source: dict[str, Any] = {"url": url, "timeoutSeconds": timeout, "pollInterval": "0s"}
    if url.startswith("http://"):
        source["allowInsecureHTTP"] = True
    if token_secret is not None:
        source["tokenSecretRef"] = {"name": token_secret, "key": "token"}
    if ca_secret is not None:
        source["caBundleSecretRef"] = {"name": ca_secret, "key": "ca.crt"}
    head = {"containers": [container("ray-head")], "schedulerName": UNSCHEDULED}
    return {
        "apiVersion": "ray-operator.io/v1alpha1",
        "kind": "RayServeGraph",
        "metadata": {"name": name},
        "spec": {
            "source": source,
            "rayClusterSpec": {
                "rayVersion": "2.52.0",
                "headGroupSpec": {"rayStartParams": {}, "template": {"spec": head}},
            },
        },
    }


def apply(kubectl: Kubectl, namespace: str, *manifests: dict[str, Any]) -> None:
    items = {"apiVersion": "v1", "kind": "List", "items": list(manifests)}
    kubectl("apply", "-n", namespace, "-f", "-", input_text=json.dumps(items))


def secret(name: str, data: dict[str, bytes], *, hosts: str | None = None) -> dict[str, Any]:
    annotations = {SECRET_HOSTS_ANNOTATION: hosts} if hosts is not None else {}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "annotations": annotations},
        "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
    }


def conditions(kubectl: Kubectl, namespace: str, name: str) -> dict[str, dict[str, Any]]:
    obj = json.loads(kubectl("get", "rayservegraph", name, "-n", namespace, "-o", "json"))
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}


def wait_for_condition(
    kubectl: Kubectl, namespace: str, name: str, kind: str, *, status: str, timeout: float = 60
) -> dict[str, Any]:
    """The condition `kind` once it has `status`."""
    found: dict[str, Any] = {}

    def reached() -> bool:
        found.update(conditions(kubectl, namespace, name).get(kind) or {})
        return found.get("status") == status

    wait_for(reached, timeout=timeout, what=f"{kind}={status} on RayServeGraph {name}")
    return found


def warnings_about(kubectl: Kubectl, namespace: str, name: str, reason: str) -> list[str]:
    selector = f"involvedObject.name={name},reason={reason}"
    listed = json.loads(
        kubectl("get", "events", "-n", namespace, "--field-selector", selector, "-o", "json")
    )
    return [event["message"] for event in listed["items"]]


@contextlib.contextmanager
def graphs_deleted_afterwards(kubectl: Kubectl, *namespaces: str) -> Iterator[None]:
    """Delete the test's RayServeGraphs while its operator still runs (their finalizer is the
    operator's); whatever is left after a minute loses its finalizer."""
    try:
        yield
    finally:
        for namespace in namespaces:
            kubectl("delete", "rayservegraphs", "--all", "-n", namespace, "--wait=false")
        deadline = time.monotonic() + 60
        for namespace in namespaces:
            while (
                time.monotonic() < deadline
                and kubectl("get", "rayservegraphs", "-n", namespace, "-o", "name").strip()
            ):
                time.sleep(0.25)  # the operator removes its finalizers within a reconcile
            for left in kubectl("get", "rayservegraphs", "-n", namespace, "-o", "name").split():
                kubectl("patch", left, "-n", namespace, "--type=merge", "-p", NO_FINALIZERS)


def masked(text: str, origin: str) -> str:
    return text.replace(origin, "<origin>")


# --- (1) the scheme is part of the opt-in ---------------------------------------------------


def test_a_token_opted_in_for_a_host_is_never_sent_over_http(
    start_operator: StartOperator, kubectl: Kubectl, namespace: str
) -> None:
    """A Secret opted in for `127.0.0.1:<port>` (no scheme: https) and a graph that asks for
    `http://127.0.0.1:<port>` with allowInsecureHTTP: the plain-HTTP server counts the
    Authorization headers it receives. None, until the Secret says `http://` itself."""
    with ArtifactServer.start(tls=False) as plain, graphs_deleted_afterwards(kubectl, namespace):
        plain.serve(GRAPH_PATH, document(pipeline_graph()), token=TOKEN)
        origin = f"127.0.0.1:{plain.port}"
        start_operator(extra_args=ALLOW_LOOPBACK)
        apply(kubectl, namespace, secret("registry-token", {"token": TOKEN.encode()}, hosts=origin))
        manifest = graph("cleartext", plain.url(GRAPH_PATH), token_secret="registry-token")
        apply(kubectl, namespace, manifest)

        wait_for(
            lambda: "Fetched" in conditions(kubectl, namespace, "cleartext"),
            timeout=60,
            what="a fetch attempt",
        )
        fetched = conditions(kubectl, namespace, "cleartext")["Fetched"]
        time.sleep(2)  # a retry, had there been one, would have sent it again
        sent = [r.authorization for r in plain.requests(GRAPH_PATH) if r.authorization]

        assert sent == [], "the token went over http to a host it opted in for over https"
        assert (fetched["status"], fetched["reason"]) == ("False", "SecretNotOptedIn")
        assert f"add http://{origin} to its" in fetched["message"]

        # Said with the scheme, clear text is allowed: the server sees the token (and so would
        # have seen it above). A spec change fetches at once (Secrets are not watched).
        opt_in = f"{SECRET_HOSTS_ANNOTATION}=http://{origin}"
        kubectl("annotate", "secret", "registry-token", "-n", namespace, "--overwrite", opt_in)
        manifest["spec"]["source"]["timeoutSeconds"] = FETCH_TIMEOUT + 1
        apply(kubectl, namespace, manifest)
        wait_for_condition(kubectl, namespace, "cleartext", "Parsed", status="True")
        assert [r.authorization for r in plain.requests(GRAPH_PATH)] == [f"Bearer {TOKEN}"]


# --- (2) no port or name scanner --------------------------------------------------------------


def test_closed_open_silent_and_black_holed_targets_read_alike(
    start_operator: StartOperator,
    kubectl: Kubectl,
    namespace: str,
    name_sandbox: NameSandbox,
) -> None:
    """What a scan must tell apart — nothing listens; something listens and speaks no HTTP (an
    SSH banner); something listens and never answers; the name never resolves — ends in the
    same reason and message (up to the origin the graph named), in the status and in the
    Events, and never before the fetch's deadline (a refused connection fails in a
    millisecond: reported then, its timing would tell)."""
    with (
        RawServer.start("banner") as banner,
        RawServer.start("silent") as silent,
        graphs_deleted_afterwards(kubectl, namespace),
    ):
        targets = {
            "closed": f"127.0.0.1:{closed_port()}",
            "banner": f"127.0.0.1:{banner.port}",
            "silent": f"127.0.0.1:{silent.port}",
            "black-holed": "scan-target.black-holed.test:443",
        }
        start_operator(extra_args=ALLOW_LOOPBACK, command_prefix=name_sandbox.command_prefix)
        applied = time.monotonic()
        apply(
            kubectl,
            namespace,
            *(graph(name, f"https://{origin}/g.pb") for name, origin in targets.items()),
        )
        failed = {
            name: wait_for_condition(kubectl, namespace, name, "Fetched", status="False")
            for name in targets
        }
        closed_reported_after = time.monotonic() - applied  # the first one waited for

        shown = {
            (failure["reason"], masked(failure["message"], targets[name]))
            for name, failure in failed.items()
        }
        assert len(shown) == 1, shown
        ((reason, message),) = shown
        assert reason == "ConnectionFailed"
        for tell in ("ECONNREFUSED", "refused", "reset", "TLS", "handshake", "resolve", "DNS"):
            assert tell not in message
        events = {
            masked(message, targets[name])
            for name in targets
            for message in warnings_about(kubectl, namespace, name, "FetchFailed")
        }
        assert events == {f"ConnectionFailed: {message}"}
        assert closed_reported_after >= FETCH_TIMEOUT - 0.1
        assert banner.connections, "the banner port was never reached"
        assert silent.connections, "the silent port was never reached"
        assert "scan-target.black-holed.test" in name_sandbox.names_asked()


# --- (3) metadata and host-agent addresses ------------------------------------------------


def test_metadata_addresses_are_refused_by_literal_and_by_resolution(
    start_operator: StartOperator,
    kubectl: Kubectl,
    namespace: str,
    name_sandbox: NameSandbox,
) -> None:
    """Azure's WireServer (168.63.129.16: a public address, in no range rule) and the other
    clouds' metadata addresses: as an IP literal the spec is invalid (the controller's
    re-validation here; the webhook says the same), behind a name the fetch refuses once the
    name resolves, before connecting — also when the name has one harmless address besides."""
    literals = {
        "wireserver-literal": "https://168.63.129.16/machine/?comp=goalstate",
        "imds6-literal": "https://[fd00:ec2::254]/latest/meta-data/",
        "gcp6-literal": "https://[fd20:ce::254]/computeMetadata/v1/",
        "alibaba-literal": "http://100.100.100.200/latest/meta-data/",
    }
    names = {
        "wireserver-name": "https://wireserver.test/machine/?comp=goalstate",
        "mixed-name": "https://mixed.test/g.pb",
        "alibaba-name": "http://alibaba-metadata.test/latest/meta-data/",
    }
    with graphs_deleted_afterwards(kubectl, namespace):
        start_operator(extra_args=ALLOW_LOOPBACK, command_prefix=name_sandbox.command_prefix)
        apply(kubectl, namespace, *(graph(n, u) for n, u in {**literals, **names}.items()))

        for name in literals:
            ready = wait_for_condition(kubectl, namespace, name, "Ready", status="False")
            assert ready["reason"] == "InvalidSpec", (name, ready)
            assert ready["message"].startswith("spec.source.url: Invalid value: ")
            assert "a cloud metadata address" in ready["message"]
            assert warnings_about(kubectl, namespace, name, "InvalidSpec")
            fetched = conditions(kubectl, namespace, name).get("Fetched") or {}
            assert fetched.get("status") in (None, "Unknown"), fetched  # never attempted
        for name in names:
            fetched = wait_for_condition(kubectl, namespace, name, "Fetched", status="False")
            assert fetched["reason"] == "AddressRefused", (name, fetched)
            assert "resolves to a cloud metadata address" in fetched["message"]


# --- (4) one tenant's hung fetches stall no one else -----------------------------------------


def test_black_holed_names_and_hung_servers_do_not_delay_another_namespace(
    start_operator: StartOperator,
    kubectl: Kubectl,
    namespace: str,
    other_namespace: str,
    name_sandbox: NameSandbox,
) -> None:
    """The attacker (`other_namespace`) has 24 graphs whose names never answer DNS and 6 on a
    server that never answers HTTP, each with the longest timeout. A victim's healthy graph,
    by name through the same resolver, is fetched and parsed within `VICTIM_BOUND`;
    /healthz stays fast; the attacker never has more fetches under way than its share."""
    attacker, victim = other_namespace, namespace
    caps = ("--serve-graph-max-concurrent-fetches", "4")
    share = ("--serve-graph-max-concurrent-fetches-per-namespace", "2")
    with (
        ArtifactServer.start(tls=True) as registry,
        RawServer.start("silent") as silent,
        graphs_deleted_afterwards(kubectl, victim, attacker),
    ):
        registry.serve(GRAPH_PATH, document(pipeline_graph()), token=TOKEN)
        operator = start_operator(
            extra_args=(*ALLOW_LOOPBACK, *caps, *share, "--namespace", attacker),
            command_prefix=name_sandbox.command_prefix,
        )
        black_holed = [
            graph(f"dns-{i}", f"https://h{i}.black-holed.test/g.pb", timeout=300) for i in range(24)
        ]
        hung = [
            graph(f"hung-{i}", f"http://127.0.0.1:{silent.port}/hung-{i}.pb", timeout=300)
            for i in range(6)
        ]
        # One hung server first, then the names, then the rest: both kinds are under way soon.
        apply(kubectl, attacker, hung[0], *black_holed, *hung[1:])
        wait_for(
            lambda: len(name_sandbox.names_asked()) >= 2 and silent.open_now() >= 1,
            timeout=60,
            what="the attacker's lookups and connections hanging",
        )

        origin = f"{REGISTRY_NAME}:{registry.port}"
        apply(
            kubectl,
            victim,
            secret("registry-token", {"token": TOKEN.encode()}, hosts=origin),
            secret("registry-ca", {"ca.crt": registry.ca_pem}),
        )
        with HealthProbe(operator.health_url) as probe:
            started = time.monotonic()
            apply(
                kubectl,
                victim,
                graph(
                    "healthy",
                    registry.url(GRAPH_PATH, host=REGISTRY_NAME),
                    token_secret="registry-token",
                    ca_secret="registry-ca",
                ),
            )
            wait_for_condition(
                kubectl, victim, "healthy", "Parsed", status="True", timeout=VICTIM_BOUND + 45
            )
            took = time.monotonic() - started
            time.sleep(3)  # the attacker's work goes on; keep watching its connections

        assert took < VICTIM_BOUND, f"the healthy graph took {took:.1f} s"
        assert probe.max_latency < HEALTHZ_BOUND, probe.max_latency
        assert not probe.failures, probe.failures[:3]
        assert silent.max_open("/hung-") <= 2, silent.max_open("/hung-")
        assert registry.requests(GRAPH_PATH)[0].authorization == f"Bearer {TOKEN}"


def test_concurrent_fetches_never_exceed_the_cap(
    start_operator: StartOperator,
    kubectl: Kubectl,
    namespace: str,
    other_namespace: str,
) -> None:
    """Three namespaces, three graphs each on a server that never answers: 9 fetches wanted,
    2 at most per namespace, 4 at most in all. Counted as open connections at the server."""
    third = f"{namespace[:55]}-c"
    kubectl("create", "namespace", third)
    namespaces = (namespace, other_namespace, third)
    with (
        RawServer.start("silent") as silent,
        graphs_deleted_afterwards(kubectl, *namespaces),
    ):
        caps = (
            ("--serve-graph-max-concurrent-fetches", "4"),
            ("--serve-graph-max-concurrent-fetches-per-namespace", "2"),
            ("--namespace", other_namespace),
            ("--namespace", third),
        )
        start_operator(extra_args=(*ALLOW_LOOPBACK, *(arg for pair in caps for arg in pair)))
        for ns in namespaces:
            url = f"http://127.0.0.1:{silent.port}/{ns}/{{}}.pb"
            apply(kubectl, ns, *(graph(f"hung-{i}", url.format(i), timeout=20) for i in range(3)))
        wait_for(lambda: silent.open_now() >= 4, timeout=60, what="4 fetches under way")
        time.sleep(5)  # more would have connected by now

        assert silent.max_open() == 4, silent.max_open()
        for ns in namespaces:
            assert silent.max_open(f"/{ns}/") <= 2, (ns, silent.max_open(f"/{ns}/"))
