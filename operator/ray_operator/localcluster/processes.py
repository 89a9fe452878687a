"""The local control plane's processes: start a component in a session of its own, tell whether
a recorded pid is still the process we started, and stop it (SIGTERM, then SIGKILL).

A component is named by its pid and the kernel's start time of that pid, so a ``state.json``
read by another process (``local-cluster stop``) never signals a stranger that reused the pid.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import time
from pathlib import Path

STOP_TIMEOUT_SECONDS = 15.0


@dataclasses.dataclass
class ComponentProcess:
    """A running component: its pid and the command that started it (for a restart)."""

    name: str
    pid: int
    command: list[str]
    # The kernel's start time of the process (clock ticks since boot): with the pid it names the
    # process uniquely, across pid reuse and across the exec that turns our fork into the binary.
    started: int = 0


def launch(name: str, command: list[str], *, log_file: Path) -> ComponentProcess:
    """Start `command` in the background, its output appended to `log_file`."""
    log = log_file.open("ab")
    # A new session: the components outlive the `local-cluster start` command and do not
    # receive the terminal's Ctrl-C meant for the operator running in the foreground.
    process = subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    log.close()
    return ComponentProcess(
        name=name,
        pid=process.pid,
        command=command,
        started=process_start_time(process.pid) or 0,
    )


def is_alive(process: ComponentProcess) -> bool:
    """Alive and still the process we started (pids get reused).

    Identity is the start time, not the command line: right after Popen returns, /proc may
    still show the forking Python's command line, and a live kube-apiserver was once taken for
    dead (and then left running) that way.
    """
    try:
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return False
    zombie = fields[0] == "Z"
    # Field 22 of /proc/<pid>/stat (starttime) is the 20th after the command name.
    return not zombie and int(fields[19]) == process.started


def process_start_time(pid: int) -> int | None:
    """The start time (clock ticks after boot) of a live process, to tell a reused pid apart."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    return int(fields[19])


def terminate(process: ComponentProcess) -> None:
    """Stop a component (SIGTERM, SIGKILL after `STOP_TIMEOUT_SECONDS`); wait until it is gone."""
    if not is_alive(process):
        _reap(process.pid)
        return
    os.kill(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        _reap(process.pid)
        if not is_alive(process):
            return
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    while is_alive(process):
        _reap(process.pid)
        time.sleep(0.05)


def exit_description(pid: int) -> str:
    """How a child of ours ended ("exit code 1", "killed by signal 9"), or why we cannot tell."""
    try:
        reaped, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return "not our child or already collected"
    if reaped == 0:
        return "still running, but no longer the program we started"
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


def _reap(pid: int) -> None:
    """Collect an exited child of ours so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def tail(path: Path, lines: int = 30) -> str:
    """The last `lines` of a component's log, for an error message."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
