"""`kubectl logs`, `exec` and `port-forward` of local Pods under `ray-operator dev`: the API
server reaches the fake node's kubelet endpoint, which answers from the local Ray processes.

One `ray-operator dev` and one local Ray head serve the module; kubectl is the real one, so the
requests go kubectl → API server (WebSockets translated to SPDY) → our endpoint.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import re
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import termios
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from ray_operator.localray.plan import cluster_address

from tests.conftest import Kubectl
from tests.localray.dev_operator import DevOperator, head_pod, local_head_addresses
from tests.runtime.processes import wait_until

pytestmark = pytest.mark.timeout(300)

NAMESPACE = "kubelet"
RAY = str(Path(sys.executable).parent / "ray")
PRINT_ONE = ("--", "python", "-c", "print(1)")
# kubectl speaks WebSockets, which the API server turns into SPDY toward the kubelet; client-go's
# SPDY executor (KubeRay's e2e tests use it) reaches the kubelet through the API server as is.
TRANSPORTS = [
    pytest.param({}, id="websockets"),
    pytest.param(
        {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false", "KUBECTL_PORT_FORWARD_WEBSOCKETS": "false"},
        id="spdy",
    ),
]
CLUSTER = """
    apiVersion: ray.io/v1
    kind: RayCluster
    metadata: {name: logs-exec}
    spec:
      headGroupSpec:
        rayStartParams: {num-cpus: "1"}
        template:
          spec:
            containers: [{name: ray-head, image: rayproject/ray:2.52.0}]
"""
JOB = """
    apiVersion: ray.io/v1
    kind: RayJob
    metadata: {name: print-once}
    spec:
      clusterSelector: {ray.io/cluster: logs-exec}
      entrypoint: python -c "print('printed by the job')"
"""
FAKE_POD = """
    apiVersion: v1
    kind: Pod
    metadata: {name: not-local}
    spec:
      nodeName: kwok-node-0
      containers: [{name: main, image: busybox}]
"""


@dataclass(frozen=True)
class Head:
    dev: DevOperator
    pod: str
    address: str

    @property
    def kubectl(self) -> Kubectl:
        return self.dev.kubectl


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    dev = DevOperator(
        tmp_path_factory.mktemp("kubelet") / "dev",
        "--local-ray-max-clusters=1",
        "--local-ray-max-nodes=1",
    )
    try:
        dev.wait_ready()
        kubectl = dev.kubectl
        kubectl("create", "namespace", NAMESPACE)
        kubectl("apply", "-n", NAMESPACE, "-f", "-", input_text=textwrap.dedent(CLUSTER))
        local_head_addresses(kubectl, NAMESPACE, "logs-exec")
        pod = head_pod(kubectl, NAMESPACE, "logs-exec")
        # Ready once its Ray node serves (the agent's probe): a loaded machine takes a while.
        kubectl("wait", "-n", NAMESPACE, f"pod/{pod}", "--for=condition=Ready", "--timeout=240s")
        uid = kubectl("get", "-n", NAMESPACE, "raycluster/logs-exec", "-o=jsonpath={.metadata.uid}")
        yield Head(dev, pod, cluster_address(uid))
    finally:
        dev.stop()


def test_kubectl_logs_shows_the_heads_output_and_tail_keeps_its_last_lines(head: Head) -> None:
    def started() -> str:
        text = head.kubectl("logs", "-n", NAMESPACE, head.pod)
        return text if "Ray runtime started" in text else ""

    wait_until(started, timeout=30, interval=1.0, what="the head's start in its log")
    whole = started().splitlines()
    tail = head.kubectl("logs", "-n", NAMESPACE, head.pod, "--tail=2").splitlines()
    assert tail == whole[-2:]
    assert (
        head.kubectl("logs", "-n", NAMESPACE, head.pod, "-c", "ray-head", "--limit-bytes=5")
        == ("\n".join(whole)[:5])
    )


def test_kubectl_logs_follow_shows_a_line_written_after_it_started(head: Head) -> None:
    log_path = head.dev.directory / "local-ray" / "logs" / f"{NAMESPACE}_{head.pod}.log"
    following = subprocess.Popen(
        [*_kubectl(head), "logs", "-f", "--tail=0", "-n", NAMESPACE, head.pod],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.0)  # kubectl connects; a line written before would not count
        marker = f"a line written at {time.time()}"
        with log_path.open("a") as log:
            log.write(marker + "\n")
        assert following.stdout is not None
        assert _read_line_within(following.stdout, seconds=20) == marker
    finally:
        following.kill()
        following.wait()


def _read_line_within(stream: object, *, seconds: float) -> str:
    import selectors

    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)  # type: ignore[arg-type]
    if not selector.select(timeout=seconds):
        return "(nothing within the time)"
    return str(stream.readline()).rstrip("\n")  # type: ignore[attr-defined]


def test_logs_of_a_finished_submitter_show_its_job_and_follow_returns(head: Head) -> None:
    head.kubectl("apply", "-n", NAMESPACE, "-f", "-", input_text=textwrap.dedent(JOB))
    head.kubectl(
        "wait", "-n", NAMESPACE, "rayjob/print-once", "--timeout=180s",
        "--for=jsonpath={.status.jobDeploymentStatus}=Complete",
    )  # fmt: skip
    submitter = head.kubectl(
        "get", "pods", "-n", NAMESPACE, "-l", "job-name=print-once",
        "-o", "jsonpath={.items[0].metadata.name}",
    )  # fmt: skip
    # kubectl logs -f of a process that ended returns, as a kubelet's of a stopped container.
    output = head.kubectl("logs", "-f", "-n", NAMESPACE, submitter)
    assert "printed by the job" in output
    refused = head.kubectl.run("exec", "-n", NAMESPACE, submitter, "--", "true")
    assert "cannot exec into a container in a completed pod" in refused.stderr


def test_kubectl_exec_runs_ray_init_that_joins_the_pods_own_cluster(head: Head) -> None:
    script = (
        "import ray; ray.init(); print(ray.cluster_resources()); "
        "print(sorted({n['NodeManagerAddress'] for n in ray.nodes()}))"
    )
    output = head.kubectl("exec", "-n", NAMESPACE, head.pod, "--", "python", "-c", script)
    resources, addresses = output.strip().splitlines()[-2:]
    assert "'CPU': 1.0" in resources
    assert addresses == repr([head.address])


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_kubectl_exec_feeds_stdin_and_exits_with_the_commands_code(
    head: Head, transport: dict[str, str]
) -> None:
    command = [
        "exec",
        "-i",
        "-n",
        NAMESPACE,
        head.pod,
        "--",
        "sh",
        "-c",
        "cat; echo oops >&2; exit 7",
    ]
    result = subprocess.run(
        [*_kubectl(head), *command],
        input="from stdin\n",
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **transport},
        check=False,
    )
    assert (result.returncode, result.stdout) == (7, "from stdin\n")
    assert result.stderr == "oops\ncommand terminated with exit code 7\n"


def test_a_command_that_cannot_start_is_reported_by_name(head: Head) -> None:
    result = head.kubectl.run("exec", "-n", NAMESPACE, head.pod, "--", "no-such-command", "x")
    assert result.returncode == 127  # a shell's "command not found"
    assert 'exec: "no-such-command": executable file not found in $PATH' in result.stderr


def test_kubectl_exec_in_a_terminal_runs_the_command_on_one_of_the_given_size(head: Head) -> None:
    # kubectl asks for a TTY only when its own input is one.
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 111, 0, 0))
    command = [*_kubectl(head), "exec", "-it"]
    command += ["-n", NAMESPACE, head.pod, "--", "sh", "-c", "tty -s && stty size"]
    process = subprocess.Popen(command, stdin=terminal, stdout=terminal, stderr=terminal)
    os.close(terminal)
    output = b""
    with contextlib.suppress(OSError):  # EIO once kubectl exits
        while chunk := os.read(controller, 1024):
            output += chunk
    os.close(controller)
    assert process.wait(timeout=30) == 0, output
    assert output.strip().splitlines()[-1] == b"33 111"


def test_a_command_whose_kubectl_exec_went_away_is_ended(head: Head) -> None:
    # Its pid on stdout: the command runs in the Pod's mount namespace, whose /tmp is the Pod's.
    script = "echo $$; exec sleep 300"
    execing = subprocess.Popen(
        [*_kubectl(head), "exec", "-n", NAMESPACE, head.pod, "--", "sh", "-c", script],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert execing.stdout is not None
        pid = int(execing.stdout.readline())
    finally:
        execing.kill()
        execing.wait()
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), timeout=30, what="the command's end")


def test_port_forward_to_the_head_service_takes_a_ray_job(head: Head) -> None:
    service = "svc/logs-exec-head-svc"
    with _port_forward(head, service, 8265) as local_port:
        submitted = subprocess.run(
            [RAY, "job", "submit", f"--address=http://127.0.0.1:{local_port}", *PRINT_ONE],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    assert "succeeded" in submitted.stdout


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_port_forward_to_a_port_the_pod_does_not_serve_names_it(
    head: Head, transport: dict[str, str]
) -> None:
    forward = _port_forward(head, f"pod/{head.pod}", 9999, env=transport)
    with forward as local_port, socket.create_connection(("127.0.0.1", local_port)) as connection:
        connection.settimeout(10)
        assert connection.recv(100) == b""  # closed: nothing serves Pod port 9999
    assert "does not serve Pod port 9999 under ray-operator dev" in forward.errors()


def test_a_pod_without_a_local_process_gets_a_clear_error(head: Head) -> None:
    head.kubectl("apply", "-n", NAMESPACE, "-f", "-", input_text=textwrap.dedent(FAKE_POD))
    head.kubectl("wait", "-n", NAMESPACE, "pod/not-local", "--for=condition=Ready", "--timeout=60s")
    for verb in (["logs", "not-local"], ["exec", "not-local", "--", "true"]):
        result = head.kubectl.run("-n", NAMESPACE, *verb)
        assert result.returncode != 0
        assert "not-local runs no local process under ray-operator dev" in result.stderr, verb


def test_only_the_api_servers_certificate_is_served(head: Head) -> None:
    port, pki = _kubelet_port(head), head.dev.directory / "pki"
    without_certificate = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    path = f"/containerLogs/{NAMESPACE}/{head.pod}/ray-head"
    assert _get(port, without_certificate, path) == b"(refused in the TLS handshake)"
    # The admin's certificate is the same CA's, but a user must go through the API server.
    admin = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    admin.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    answer = _get(port, admin, f"/containerLogs/{NAMESPACE}/{head.pod}/ray-head")
    assert answer.startswith(b"HTTP/1.1 403")


def test_a_request_head_over_its_bound_is_refused(head: Head) -> None:
    pki = head.dev.directory / "pki"
    api_server = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    api_server.load_cert_chain(
        str(pki / "apiserver-kubelet-client.crt"), str(pki / "apiserver-kubelet-client.key")
    )
    path = f"/containerLogs/{NAMESPACE}/{head.pod}/ray-head"
    assert _get(_kubelet_port(head), api_server, path).startswith(b"HTTP/1.1 200")
    huge_header = "X-Filler: " + "y" * (32 << 10)
    answer = _get(_kubelet_port(head), api_server, path, header=huge_header)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]


def _kubelet_port(head: Head) -> int:
    return int(json.loads((head.dev.directory / "state.json").read_text())["ports"]["kubelet"])


def _kubectl(head: Head) -> list[str]:
    return ["kubectl", "--kubeconfig", str(head.kubectl.kubeconfig)]


def _get(port: int, context: ssl.SSLContext, path: str, *, header: str = "Host: x") -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(f"GET {path} HTTP/1.1\r\n{header}\r\n\r\n".encode())
                # TLS 1.3: the server's verdict on our certificate arrives after our handshake.
                answer = tls.recv(4096)
        except (ssl.SSLError, ConnectionError):
            answer = b""
    return answer or b"(refused in the TLS handshake)"


class _port_forward:  # noqa: N801 - used as a context manager, like a function
    """`kubectl port-forward TARGET :PORT` running; its local port."""

    _FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+)")

    def __init__(
        self, head: Head, target: str, port: int, *, env: dict[str, str] | None = None
    ) -> None:
        self._env = {**os.environ, **(env or {})}
        self._command = [*_kubectl(head), "port-forward"]
        self._command += ["-n", NAMESPACE, target, f":{port}"]

    def __enter__(self) -> int:
        self._errors = tempfile.TemporaryFile()
        self._process = subprocess.Popen(
            self._command, stdout=subprocess.PIPE, stderr=self._errors, text=True, env=self._env
        )
        assert self._process.stdout is not None
        line = _read_line_within(self._process.stdout, seconds=30)
        match = self._FORWARDING.search(line)
        assert match, line
        return int(match[1])

    def __exit__(self, *_: object) -> None:
        self._process.terminate()
        self._process.wait()

    def errors(self) -> str:
        """What kubectl wrote to stderr."""
        self._errors.seek(0)
        return self._errors.read().decode(errors="replace")
