"""`running_operator`: the real `ray-operator run` as a child process, on loopback ports, for as
long as a `with` block lasts — so a test can run the operator with the credentials a cluster
would give it (see `manifests.operator_kubeconfig`) and watch what it does."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO_ROOT

STARTUP_TIMEOUT = 60.0
SHUTDOWN_TIMEOUT = 30.0


@dataclass(frozen=True)
class OperatorProcess:
    """A running operator: its process, its probe address and its log file."""

    process: subprocess.Popen[bytes]
    health_url: str
    log: Path

    def readyz(self) -> int | None:
        """The HTTP status of /readyz (None while nothing listens)."""
        try:
            with urllib.request.urlopen(f"{self.health_url}/readyz", timeout=2) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:
            return None

    def wait_until(self, condition: Callable[[], bool], what: str, timeout: float) -> None:
        """Poll `condition` until it holds; fail with the operator's log if it never does."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            if self.process.poll() is not None:
                raise AssertionError(
                    f"the operator exited ({self.process.returncode}) before {what}:\n{self.tail()}"
                )
            time.sleep(0.2)
        raise AssertionError(f"no {what} within {timeout}s:\n{self.tail()}")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def running_operator(
    kubeconfig: Path | None,
    log: Path,
    *arguments: str,
    env: Mapping[str, str] | None = None,
    program: Sequence[str] = (sys.executable, "-m", "ray_operator.cli"),
) -> Iterator[OperatorProcess]:
    """`ray-operator run [--kubeconfig kubeconfig] [arguments]`, ready (caches synced) on entry,
    stopped with SIGTERM on exit (which must end it cleanly, exit code 0).

    Probes and metrics listen on a free loopback port whatever `arguments` say (the flags come
    last, and the last one wins). `env` replaces the environment (None: inherit ours). `program`
    is the `ray-operator` that runs (by default this Python's, from the source tree).
    """
    port = _free_loopback_port()
    command = [
        *program, "run",
        *([f"--kubeconfig={kubeconfig}"] if kubeconfig is not None else []),
        *arguments,
        f"--health-addr=127.0.0.1:{port}",
        f"--metrics-addr=127.0.0.1:{port}",
    ]  # fmt: skip
    with log.open("wb") as output:
        process = subprocess.Popen(
            command,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
            cwd=REPO_ROOT,
        )
    operator = OperatorProcess(process, f"http://127.0.0.1:{port}", log)
    try:
        operator.wait_until(lambda: operator.readyz() == 200, "ready /readyz", STARTUP_TIMEOUT)
        yield operator
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(SHUTDOWN_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.returncode == 0, f"the operator exited {process.returncode}:\n{operator.tail()}"


def _free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
