"""A real Ray head on 127.0.0.1 for the dashboard, RayJob and RayService tests (never a mock).

`RayHead.start()` runs `ray start --head --block` in its own session, with every port chosen
free on 127.0.0.1 (above Ray's worker port range), token authentication on (so the operator's
auth header is exercised against real Ray), two CPUs, a small object store, the venv's `bin/`
first on PATH (job entrypoints run `python`) and `tests/serve_apps` on PYTHONPATH (the Serve
test app is imported by name). It is ready once the dashboard's job API answers.

`RayHead.builder_dir` is on PYTHONPATH too, first: it plays the RayServeGraph builder ConfigMap
mounted into Ray containers. It starts empty; a test writes the module the operator ships into it
(`install_serve_graph_builder`). Serve imports the builder lazily, when it builds an application,
so writing it after the head started works; and the text is the same in every test, so workers
that imported it already are not stale.

Every process Ray starts inherits a marker variable; `stop()` sends SIGTERM, then SIGKILL, to
exactly the processes carrying it (drivers and workers included, even those Ray moved into
sessions of their own), so the fixture leaves nothing behind and touches nothing else.

Ray's HTTP servers used here (dashboard, Serve proxy) listen on 127.0.0.1 only; Ray's internal
gRPC and metrics servers bind every interface and cannot be told otherwise from `ray start`, but
nothing in these tests talks to any address but 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SERVE_APPS = Path(__file__).resolve().parent / "serve_apps"
VENV_BIN = Path(sys.executable).parent
MARKER = "RAY_OPERATOR_TEST_RAY_HEAD"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it from the ephemeral range)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class RayHead:
    """One `ray start --head` process tree on loopback."""

    workdir: Path
    token: str = field(default_factory=lambda: secrets.token_hex(24), repr=False)
    dashboard_port: int = field(default_factory=free_port)
    serve_port: int = field(default_factory=free_port)
    marker: str = field(default_factory=lambda: secrets.token_hex(8))
    process: subprocess.Popen[bytes] | None = None
    temp_dir: Path | None = None

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    @property
    def serve_url(self) -> str:
        return f"http://127.0.0.1:{self.serve_port}"

    @property
    def builder_dir(self) -> Path:
        """Where Ray finds the RayServeGraph builder module (first on the head's PYTHONPATH)."""
        return self.workdir / "serve-graph-builder"

    def install_serve_graph_builder(self, source: str, *, file_name: str) -> None:
        """Put the builder module's text into `builder_dir`, atomically (a worker importing it
        meanwhile sees the old file or the new one, never half of one)."""
        staged = self.builder_dir / f".{file_name}.tmp"
        staged.write_text(source, encoding="utf-8")
        staged.replace(self.builder_dir / file_name)

    def start(self, *, timeout: float = 120.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Created before Ray starts: a PYTHONPATH entry missing at a worker's start is cached as
        # absent by its import system.
        self.builder_dir.mkdir(exist_ok=True)
        # Ray's Unix sockets live under its temp dir; pytest's tmp paths exceed their 107 bytes.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="rayh-", dir="/tmp"))
        env = {
            **os.environ,
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(self.builder_dir), str(SERVE_APPS), os.environ.get("PYTHONPATH")])
            ),
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": self.token,
            "RAY_USAGE_STATS_ENABLED": "0",
            MARKER: self.marker,
        }
        command = [
            str(VENV_BIN / "ray"),
            "start",
            "--head",
            "--block",
            # Ray turns 127.0.0.1 into the machine's outward address; 127.0.0.2 is kept as is,
            # so GCS, raylet and agents are addressed on loopback.
            "--node-ip-address=127.0.0.2",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={self.dashboard_port}",
            f"--port={free_port()}",
            f"--ray-client-server-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
            f"--dashboard-agent-grpc-port={free_port()}",
            f"--runtime-env-agent-port={free_port()}",
            f"--metrics-export-port={free_port()}",
            f"--node-manager-port={free_port()}",
            f"--object-manager-port={free_port()}",
            "--num-cpus=2",
            "--object-store-memory=100000000",
            "--include-dashboard=true",
            "--disable-usage-stats",
            f"--temp-dir={self.temp_dir}",
        ]
        log = (self.workdir / "ray-start.log").open("wb")
        self.process = subprocess.Popen(
            command,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.workdir,
        )
        log.close()
        self._wait_ready(timeout)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"ray start exited: {self.log_tail()}")
            try:
                # The job API answers only once the job agent is up: then submissions work.
                self.get("/api/jobs/")
                return
            except (OSError, urllib.error.URLError, ValueError) as error:
                last = error
            time.sleep(0.5)
        raise RuntimeError(f"Ray head not ready within {timeout}s ({last}): {self.log_tail()}")

    def get(self, path: str) -> Any:
        """GET a dashboard path with the token; the parsed JSON answer (blocking: setup only)."""
        request = urllib.request.Request(
            self.dashboard_url + path, headers={"Authorization": f"Bearer {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())

    def log_tail(self, lines: int = 30) -> str:
        path = self.workdir / "ray-start.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, *, grace: float = 5.0) -> None:
        """End every process of this head (and nothing else); wait until they are gone."""
        for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            pids = self.pids()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)
            deadline = time.monotonic() + wait
            while self.pids() and time.monotonic() < deadline:
                time.sleep(0.2)
            if (
                self.process is not None
                and self.process.poll() is None
                and signum == signal.SIGKILL
            ):
                self.process.kill()
            if not self.pids():
                break
        if self.process is not None:
            self.process.wait(timeout=10)
        if self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def pids(self) -> list[int]:
        """Processes of this head: in the session of `ray start` (Ray's agents, which get an
        environment of their own) or carrying the marker (workers and job drivers, which Ray
        may move into sessions of their own)."""
        needle = f"{MARKER}={self.marker}".encode()
        session = str(self.process.pid) if self.process is not None else None
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if fields[0] == "Z":
                    continue
                if fields[3] == session or needle in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
        return found


# One head per test run, shared by the dashboard and the controller tests. Their fixtures are
# registered in two places (pytest then keeps two session fixtures of this name), so the head
# itself is counted here and stopped when its last user finishes.
_shared: RayHead | None = None
_users = 0


def acquire_shared_head(workdir: Path) -> RayHead:
    """The run's Ray head, started on first use."""
    global _shared, _users
    if _shared is None:
        if not (VENV_BIN / "ray").exists():
            raise RuntimeError(
                f"no `ray` next to {sys.executable}: install the test extra "
                "(it brings ray[default,serve]) to run the dashboard and controller tests"
            )
        head = RayHead(workdir)
        head.start()
        _shared = head
    _users += 1
    return _shared


def release_shared_head() -> None:
    """One user is done; the last one stops the head."""
    global _shared, _users
    _users -= 1
    if _users == 0 and _shared is not None:
        head, _shared = _shared, None
        head.stop()


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayHead]:
    """The run's real Ray head on 127.0.0.1 (started on first use, shared by every package that
    imports this fixture)."""
    head = acquire_shared_head(tmp_path_factory.mktemp("ray-head"))
    try:
        yield head
    finally:
        release_shared_head()
