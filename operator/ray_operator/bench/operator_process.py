"""The operator under test: `ray-operator run` in a process of its own, measured from outside.

The benchmark never runs the operator in its own process: its RSS and CPU come from
`/proc/<pid>/status` (VmRSS) and `/proc/<pid>/stat` (utime + stime), and what it did from its
`/metrics` endpoint (requests by verb and code, reconciles, watch events), so the figures are those
of the real command and nothing of the harness leaks into them. Probes and metrics listen on one
loopback port.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from ray_operator.bench.config import BenchConfig
from ray_operator.bench.image_runtime import IMAGE_ENVIRONMENT

STOP_TIMEOUT_SECONDS = 30.0
PROBE_TIMEOUT_SECONDS = 5.0

# The counters and gauges the benchmark reads. The per-RayCluster gauges (3 lines per cluster)
# are skipped before parsing: at 1000 clusters they are most of the exposition.
_WANTED_METRICS = (
    "ray_operator_api_requests_total",
    "ray_operator_reconcile_total",
    "ray_operator_reconcile_duration_seconds_sum",
    "ray_operator_reconcile_duration_seconds_count",
    "ray_operator_api_request_duration_seconds_sum",
    "ray_operator_api_request_duration_seconds_count",
    "ray_operator_watch_events_total",
    "ray_operator_watch_restarts_total",
    "ray_operator_events_total",
    "ray_operator_workqueue_depth",
    "ray_operator_workqueue_in_flight",
    "ray_operator_cache_objects",
    "ray_operator_leader_election_status",
)

_SampleKey = tuple[str, frozenset[tuple[str, str]]]


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """The operator's counters at one instant."""

    samples: Mapping[_SampleKey, float]

    @classmethod
    def parse(cls, text: str) -> MetricsSnapshot:
        """Parse the wanted samples of a Prometheus text exposition."""
        lines = [line for line in text.splitlines() if line.startswith(_WANTED_METRICS)]
        samples = {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families("\n".join(lines) + "\n")
            for sample in family.samples
        }
        return cls(samples)

    def total(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` whose labels include `labels`."""
        wanted = set(labels.items())
        return sum(
            value
            for (sample, sample_labels), value in self.samples.items()
            if sample == name and wanted <= sample_labels
        )

    def by_label(self, name: str, label: str, **labels: str) -> dict[str, float]:
        """The samples of `name` (matching `labels`) summed per value of `label`."""
        wanted = set(labels.items())
        result: dict[str, float] = {}
        for (sample, sample_labels), value in self.samples.items():
            if sample != name or not wanted <= sample_labels:
                continue
            key = dict(sample_labels).get(label, "")
            result[key] = result.get(key, 0.0) + value
        return result


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """Resident memory and CPU time consumed so far by a process, with the time of reading."""

    rss_bytes: int
    cpu_seconds: float
    monotonic: float


def read_process(pid: int) -> ProcessSample:
    """RSS (VmRSS) and utime + stime of `pid`, from /proc (psutil is not a dependency)."""
    rss_kib = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kib = int(line.split()[1])
            break
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of stat(5)
    return ProcessSample(
        rss_bytes=rss_kib * 1024,
        cpu_seconds=ticks / os.sysconf("SC_CLK_TCK"),
        monotonic=time.monotonic(),
    )


def free_port() -> int:
    """A free loopback TCP port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ProbedProcess:
    """A command in a process of its own, its output in a log file, with an HTTP readiness probe
    on a loopback port; the base of every operator process the benchmark starts."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        probe_port: int,
        log_path: Path,
        ready_path: str = "/readyz",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.command = list(command)
        self.port = probe_port
        self.log_path = log_path
        self.ready_path = ready_path
        self.env = env
        self.started_at = 0.0
        self.ready_after: float | None = None
        """Seconds from the spawn to the first 200 of `ready_path`, once seen."""
        self._process: asyncio.subprocess.Process | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("the operator process has not been started")
        return self._process.pid

    async def start(self) -> None:
        """Spawn the process (its output goes to `log_path`); returns at once."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.started_at = time.monotonic()
            self._process = await asyncio.create_subprocess_exec(
                *self.command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                env=None if self.env is None else {**os.environ, **self.env},
            )
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT_SECONDS)
        )

    async def wait_ready(self, *, within: float, interval: float = 0.02) -> float:
        """Poll the readiness probe until 200; seconds since the process was spawned."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            self._check_alive()
            if await self.get_status(self.ready_path) == 200:
                self.ready_after = time.monotonic() - self.started_at
                return self.ready_after
            await asyncio.sleep(interval)
        raise TimeoutError(f"operator not ready within {within:.0f}s; see {self.log_path}")

    async def get_status(self, path: str) -> int:
        """The HTTP status of GET `path` (0 when nothing answers yet)."""
        try:
            async with self._require_session().get(self._url(path)) as response:
                await response.read()
                return response.status
        except (aiohttp.ClientError, TimeoutError):
            return 0

    def sample(self) -> ProcessSample:
        """RSS and CPU time of the operator process now."""
        self._check_alive()
        return read_process(self.pid)

    async def stop(self) -> None:
        """SIGTERM (an operator releases its lease, if it does, and exits), SIGKILL after a
        timeout."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        process = self._process
        if process is None or process.returncode is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout=STOP_TIMEOUT_SECONDS)
        except TimeoutError:
            process.kill()
            await process.wait()

    def _check_alive(self) -> None:
        if self._process is not None and self._process.returncode is not None:
            raise RuntimeError(
                f"the operator exited with code {self._process.returncode}; see {self.log_path}"
            )

    def _require_session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("the operator process has not been started")
        return self._session

    def _url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


class OperatorProcess(ProbedProcess):
    """One `ray-operator run` process with its probes and metrics on a loopback port."""

    def __init__(
        self,
        kubeconfig: Path,
        *,
        namespaces: Sequence[str],
        lease_namespace: str,
        lease_name: str,
        identity: str,
        log_path: Path,
        config: BenchConfig,
    ) -> None:
        self.identity = identity
        port = free_port()
        address = f"127.0.0.1:{port}"
        command = [
            sys.executable,
            "-m",
            "ray_operator.cli",
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--leader-elect" if config.leader_elect else "--no-leader-elect",
            "--lease-namespace",
            lease_namespace,
            "--lease-name",
            lease_name,
            "--identity",
            identity,
            "--health-addr",
            address,
            "--metrics-addr",
            address,
            "--webhook-port",
            str(free_port()),
            "--log-level",
            config.operator_log_level,
            *(arg for namespace in namespaces for arg in ("--namespace", namespace)),
        ]
        if config.max_concurrent_reconciles is not None:
            command += ["--max-concurrent-reconciles", str(config.max_concurrent_reconciles)]
        super().__init__(command, probe_port=port, log_path=log_path, env=IMAGE_ENVIRONMENT)
        self.scrapes = 0
        """How many times /metrics was scraped (each scrape costs the operator CPU)."""

    async def metrics(self) -> MetricsSnapshot:
        """Scrape /metrics once."""
        self._check_alive()
        self.scrapes += 1
        async with self._require_session().get(self._url("/metrics")) as response:
            response.raise_for_status()
            return MetricsSnapshot.parse(await response.text())

    async def scrape_cost(self, *, scrapes: int = 5) -> float:
        """CPU seconds one /metrics scrape costs the operator now (it grows with the clusters)."""
        start = self.sample()
        for _ in range(scrapes):
            await self.metrics()
        return (self.sample().cpu_seconds - start.cpu_seconds) / scrapes
