"""The real `ray-operator run` with its admission webhooks on, as a child process, and what a
test reads of it from outside: its child processes, its RSS, its webhook port (HTTPS).

It watches one namespace without leader election, and serves its webhooks in the URL mode
(`https://127.0.0.1:<port>`, like `make run`), so it registers configurations that call it for
every namespace while it runs (withdrawn when it stops) — the same rules as the session's webhook
server, so tests running after it meet nothing different.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.deploy.process import OperatorProcess, running_operator
from tests.webhooks.server import free_port

MIB = 1024 * 1024


@dataclass(frozen=True)
class WebhookOperator:
    """A running operator with webhooks: the process and the port they are served on."""

    operator: OperatorProcess
    webhook_port: int

    @property
    def pid(self) -> int:
        return self.operator.process.pid

    @property
    def health_port(self) -> int:
        """The port of its /healthz (and /readyz, /metrics), plain HTTP."""
        return int(self.operator.health_url.rsplit(":", 1)[1])

    def child_pids(self) -> list[int]:
        """The operator's child processes, as the kernel lists them."""
        return child_pids(self.pid)

    def rss_bytes(self) -> int:
        """VmRSS of the operator process alone."""
        return rss_bytes(self.pid)


@contextlib.contextmanager
def operator_with_webhooks(
    kubeconfig: Path, namespace: str, log: Path, *, env: Mapping[str, str] | None = None
) -> Iterator[WebhookOperator]:
    """`ray-operator run --webhooks` for `namespace`: ready (caches synced, webhooks listening)
    on entry, stopped with SIGTERM (exit code 0) on exit. `env`: as `running_operator`'s."""
    port = free_port()
    with running_operator(
        kubeconfig,
        log,
        f"--namespace={namespace}",
        "--no-leader-elect",
        f"--lease-namespace={namespace}",
        f"--webhook-port={port}",
        "--webhooks",
        f"--webhook-url-base=https://127.0.0.1:{port}",
        f"--webhook-namespace={namespace}",
        env=env,
    ) as operator:
        operator.wait_until(lambda: _listening(port), "webhook listener", 30)
        yield WebhookOperator(operator, port)


def child_pids(pid: int) -> list[int]:
    """The children of `pid` (every thread's list: a child belongs to the thread that forked it)."""
    pids: list[int] = []
    for children in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):  # a thread that just ended
            pids.extend(int(child) for child in children.read_text().split())
    return pids


def rss_bytes(pid: int) -> int:
    """VmRSS of one process (/proc/<pid>/status)."""
    return status_bytes(pid, "VmRSS")


def status_bytes(pid: int, name: str) -> int:
    """A size field of /proc/<pid>/status (VmRSS, VmHWM, VmSize, ...), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1]) * 1024
    raise LookupError(f"no {name} for process {pid}")


def is_running(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie (an orphan's zombie waits for init, not us)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(condition: Callable[[], bool], what: str, timeout: float) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.1)


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False
