"""Where `kubectl exec` runs a command: in the Pod's user and mount namespaces when the agent
gave it some (its volumes at their mount paths), with the Pod's working directory; on a loopback
of its own where the Pod's ports answer when the Pod has `loopback_ports` (a local Redis)."""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray_operator.localray.kubelet.remotecommand import command_in_pod
from ray_operator.localray.views import LocalContainer


def _container(working_dir: str, namespace_pid: int | None) -> LocalContainer:
    return LocalContainer(
        namespace="default",
        pod="pod",
        pod_uid="uid",
        container="ray-head",
        log_path=Path("/dev/null"),
        env={"PATH": "/usr/bin:/bin"},
        working_dir=working_dir,
        namespace_pid=namespace_pid,
    )


@pytest.fixture
def pod_namespaces(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A process in user+mount namespaces of its own, with a tmpfs holding one file mounted
    over `tmp_path/volume` (empty in the host's view)."""
    volume = tmp_path / "volume"
    volume.mkdir()
    script = (
        f"mount -t tmpfs none {volume} && echo mounted > {volume}/file && echo up && exec sleep 60"
    )
    process = subprocess.Popen(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    if process.stdout.readline().strip() != "up":
        process.wait()
        pytest.skip(f"no unprivileged user namespaces here: {process.stderr.read()}")  # type: ignore[union-attr]
    try:
        yield process.pid, volume
    finally:
        process.kill()
        process.wait()


def test_a_command_joins_the_pods_namespaces_and_starts_in_its_working_directory(
    pod_namespaces: tuple[int, Path],
) -> None:
    pid, volume = pod_namespaces
    argv = command_in_pod(_container(str(volume), pid), ["sh", "-c", "pwd; cat file"])
    output = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=10).stdout
    assert output.splitlines() == [str(volume), "mounted"]
    assert not (volume / "file").exists()  # the host's view has no such mount


def test_a_pod_without_namespaces_runs_the_command_as_given() -> None:
    assert command_in_pod(_container("/", None), ["python", "-c", "1"]) == ["python", "-c", "1"]


def test_a_pod_with_loopback_ports_is_reached_at_127_0_0_1_and_the_commands_code_is_kept(
    pod_namespaces: tuple[int, Path],
) -> None:
    """(`pod_namespaces` only to skip where user namespaces cannot be made.)"""
    with socket.create_server(("127.31.41.59", 0)) as server:
        port = server.getsockname()[1]
        answering = threading.Thread(target=_answer_once, args=(server,), daemon=True)
        answering.start()
        container = dataclasses.replace(
            _container("/", None), ports={6379: ("127.31.41.59", port)}, loopback_ports=True
        )
        client = (
            "import socket, sys; s = socket.create_connection(('127.0.0.1', 6379)); "
            "s.sendall(b'PING'); s.shutdown(socket.SHUT_WR); print(s.recv(64).decode()); "
            "sys.exit(3)"
        )
        argv = command_in_pod(container, [sys.executable, "-c", client])
        result = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    assert (result.returncode, result.stdout.strip()) == (3, "PONG to PING"), result.stderr


def _answer_once(server: socket.socket) -> None:
    connection, _ = server.accept()
    with connection:
        connection.sendall(b"PONG to " + connection.recv(64))
