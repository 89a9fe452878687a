"""`ray-operator dev` in a subprocess (its own control plane and local Ray agent), and what the
local Ray tests read from it: the addresses its agent tells in Events, the processes it runs."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ray_operator.localray.agent import ray_beside_this_python

from tests.conftest import Kubectl
from tests.runtime.processes import REPO_ROOT, free_port, wait_until

_HEAD_STARTED = re.compile(r"dashboard (?P<host>[\d.]+):(?P<port>\d+), Serve (?P<serve>http://\S+)")


class DevOperator:
    """One `ray-operator dev --dir DIR` run, stopped with SIGINT as Ctrl-C would."""

    def __init__(self, directory: Path, *flags: str, kubeconfig: Path | None = None) -> None:
        """`kubeconfig`: run against that cluster (as KUBECONFIG), not an embedded plane."""
        self.directory = directory
        self.health_port = free_port()
        self.log_path = directory.parent / f"{directory.name}.log"
        directory.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "ray_operator.cli",
                "dev",
                "--dir",
                str(directory),
                "--no-webhooks",
                "--health-addr",
                f"127.0.0.1:{self.health_port}",
                "--metrics-addr",
                f"127.0.0.1:{free_port()}",
                *flags,
            ],
            cwd=REPO_ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=_environment(kubeconfig),
        )
        self.kubectl = Kubectl(kubeconfig or directory / "kubeconfig")

    def wait_ready(self, timeout: float = 180.0) -> None:
        wait_until(self._ready, timeout=timeout, interval=0.5, what="ray-operator dev /readyz")

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"ray-operator dev exited: {self.log_tail()}")
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.health_port}/readyz", timeout=2
            ) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self, timeout: float = 90.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def component_pid(self, name: str) -> int:
        """The pid of a control-plane component dev started (from its state file)."""
        state = json.loads((self.directory / "state.json").read_text())
        return int(state["processes"][name]["pid"])

    @property
    def recorded_process_groups(self) -> dict[str, Any]:
        path = self.directory / "local-ray" / "processes.json"
        return dict(json.loads(path.read_text())) if path.exists() else {}


def ray_nodes_ray() -> Path:
    """The `ray` local Ray nodes run: as make test sets it (a Python of their own, as a Ray
    image has), else the operator's."""
    return Path(os.environ.get("RAY_OPERATOR_LOCAL_RAY_EXECUTABLE") or ray_beside_this_python())


def ray_nodes_python() -> Path:
    """The Python of the local Ray nodes: a driver joining their cluster must be the same one
    (Ray refuses a driver of another Python version)."""
    return ray_nodes_ray().parent / "python"


def _environment(kubeconfig: Path | None) -> dict[str, str]:
    """The caller's environment; KUBECONFIG only when asked for, else dev starts its own plane."""
    env = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return env


@contextlib.contextmanager
def running_dev(directory: Path, *flags: str) -> Iterator[DevOperator]:
    """A `ray-operator dev` that is ready, stopped afterwards (a module's fixture)."""
    operator = DevOperator(directory, *flags)
    try:
        operator.wait_ready()
        yield operator
    finally:
        operator.stop()


def namespace_for(kubectl: Kubectl, request: pytest.FixtureRequest) -> str:
    """A namespace named after the test, created."""
    name = request.node.name.lower().replace("_", "-")[:50].strip("-")
    kubectl("create", "namespace", name)
    return name


def events_of(kubectl: Kubectl, namespace: str, name: str, reason: str) -> list[str]:
    """Messages of the Events with `reason` about the object `name`."""
    listed = json.loads(
        kubectl(
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector",
            f"involvedObject.name={name},reason={reason}",
            "-o",
            "json",
        )
    )
    return [str(item.get("message", "")) for item in listed["items"]]


def head_pod(kubectl: Kubectl, namespace: str, cluster: str) -> str:
    """The cluster's head Pod name, or "" while there is none."""
    names = kubectl(
        "get",
        "pods",
        "-n",
        namespace,
        "-l",
        f"ray.io/cluster={cluster},ray.io/node-type=head",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ).split()
    return names[0] if names else ""


def local_head_addresses(kubectl: Kubectl, namespace: str, cluster: str) -> tuple[str, str]:
    """(dashboard base URL, Serve base URL) of a cluster's local head, from its Event."""
    found: list[re.Match[str]] = []

    def told() -> bool:
        pod = head_pod(kubectl, namespace, cluster)
        messages = events_of(kubectl, namespace, pod, "LocalRayStarted") if pod else []
        found[:] = [m for m in map(_HEAD_STARTED.search, messages) if m]
        return bool(found)

    wait_until(told, timeout=120, interval=0.5, what=f"the local head of {cluster}")
    match = found[0]
    return f"http://{match['host']}:{match['port']}", match["serve"]


def processes_on(address: str) -> list[int]:
    """Pids of processes started for a local cluster (its node IP is on their command line)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(address.encode() in word and b"node" in word for word in words):
            pids.append(int(cmdline.parent.name))
    return pids


def get_json(url: str, *, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


def get_text(url: str, *, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return str(response.read().decode())
