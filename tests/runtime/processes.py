"""Running `ray-operator run` (with the test-only MarkingController) as subprocesses; probing them.

Used by the process tests: start replicas, read their /metrics, /healthz, /readyz, their RSS,
and wait on conditions instead of sleeping.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

REPO_ROOT = Path(__file__).resolve().parents[2]

FAST_LEASE = ("--lease-duration", "4", "--lease-renew-deadline", "3", "--lease-retry-period", "0.5")
"""Lease timing for tests: 4s duration, 3s renew deadline, 0.5s retry period."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_until(
    condition: Callable[[], object],
    *,
    timeout: float,
    interval: float = 0.05,
    what: str = "condition",
) -> float:
    """Poll `condition` until truthy; the seconds it took. Fails after `timeout`."""
    started = time.monotonic()
    while True:
        if condition():
            return time.monotonic() - started
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


class OperatorProcess:
    """One operator replica in a subprocess, with loopback probe/metrics ports."""

    def __init__(
        self,
        *,
        kubeconfig: Path,
        namespace: str,
        replica: str,
        log_dir: Path,
        extra_args: tuple[str, ...] = FAST_LEASE,
    ) -> None:
        self.replica = replica
        self.port = free_port()
        self.log_path = log_dir / f"operator-{replica}.log"
        command = [
            sys.executable,
            "-m",
            "tests.runtime.operator_main",
            "--kubeconfig",
            str(kubeconfig),
            "--namespace",
            namespace,
            "--lease-namespace",
            namespace,
            "--identity",
            replica,
            "--health-addr",
            f"127.0.0.1:{self.port}",
            "--metrics-addr",
            f"127.0.0.1:{self.port}",
            *extra_args,
        ]
        env = {**os.environ, "TEST_REPLICA_NAME": replica, "PYTHONPATH": str(REPO_ROOT)}
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )

    def get(self, path: str) -> tuple[int, str]:
        """(status, body) of GET `path`; (0, error) when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError as error:
            return 0, str(error)

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of /metrics as {(name, sorted labels): value}."""
        status, body = self.get("/metrics")
        if status != 200:
            return {}
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(body)
            for sample in family.samples
        }

    def metric(self, metric_name: str, /, **labels: str) -> float:
        """The sum of the samples of `metric_name` whose labels include `labels`."""
        return sum(
            value
            for (sample, sample_labels), value in self.metrics().items()
            if sample == metric_name and set(labels.items()) <= set(sample_labels)
        )

    def is_ready(self) -> bool:
        return self.get("/readyz")[0] == 200

    def is_leader(self) -> bool:
        return self.metric("ray_operator_leader_election_status") == 1

    def rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """kill -9: no clean-up at all."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def terminate(self, *, timeout: float = 30) -> int:
        """SIGTERM and wait; the exit code."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def stop(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
