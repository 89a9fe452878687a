"""`ray-operator dev` in a subprocess (its own control plane and local Ray agent), and what the
local Ray tests read from it: the addresses its agent tells in Events, the processes it runs.

Waits on the API server are watches (`watch_until`: one `kubectl get --watch` per wait) rather
than a kubectl process per poll: a change is seen when it happens, and the waiting costs no CPU
that the Ray processes under test need on a two-core machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from ray_operator.localray.agent import ray_beside_this_python

from tests.conftest import Kubectl
from tests.runtime.processes import REPO_ROOT, free_port, wait_until

T = TypeVar("T")
_RECHECK_SECONDS = 2.0
"""How often `watch_until` asks again without a new event: for conditions that also read what
the watch does not show (another object, a process, a port)."""

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
    messages = wait_for_event(
        kubectl,
        namespace,
        "LocalRayStarted",
        about=lambda: head_pod(kubectl, namespace, cluster),
        matching=_HEAD_STARTED.search,
        timeout=120,
        what=f"the local head of {cluster}",
    )
    match = next(found for found in map(_HEAD_STARTED.search, messages) if found)
    return f"http://{match['host']}:{match['port']}", match["serve"]


def wait_for_event(
    kubectl: Kubectl,
    namespace: str,
    reason: str,
    *,
    about: Callable[[], str],
    matching: Callable[[str], object] = bool,
    timeout: float,
    what: str,
) -> list[str]:
    """Messages of the Events with `reason` about the object `about()` names ("" while there is
    none), once one of them is `matching`; as `events_of` would list them then."""

    def told(events: dict[str, dict[str, Any]]) -> list[str]:
        candidates = [event for event in events.values() if matching(event.get("message", ""))]
        name = about() if candidates else ""
        messages = [
            str(event.get("message", ""))
            for event in events.values()
            if name and event["involvedObject"].get("name") == name
        ]
        return messages if any(map(matching, messages)) else []

    return watch_until(
        kubectl,
        "events",
        "-n",
        namespace,
        "--field-selector",
        f"reason={reason}",
        until=told,
        timeout=timeout,
        what=what,
    )


def watch_object(
    kubectl: Kubectl,
    namespace: str,
    kind_name: str,
    *,
    until: Callable[[dict[str, Any]], T],
    timeout: float,
    what: str,
) -> T:
    """`watch_until` of one object (`rayjob/name`): `until` sees its present version ({} while
    there is none; watched by name, so it may come later)."""
    kind, _, name = kind_name.partition("/")
    return watch_until(
        kubectl,
        kind,
        "-n",
        namespace,
        "--field-selector",
        f"metadata.name={name}",
        until=lambda objects: until(next(iter(objects.values()), {})),
        timeout=timeout,
        what=what,
    )


def watch_until(
    kubectl: Kubectl,
    *get_args: str,
    until: Callable[[dict[str, dict[str, Any]]], T],
    timeout: float,
    what: str,
) -> T:
    """`kubectl get GET_ARGS --watch`: the first truthy `until(objects)`, where `objects` holds
    the present version of each object listed or watched so far (by uid; deleted ones dropped).

    `until` is asked at each change and every `_RECHECK_SECONDS` besides; it may raise to end
    the wait early (a RayJob that failed). Fails after `timeout` as `wait_until` does."""
    command = ["kubectl", "--kubeconfig", str(kubectl.kubeconfig), "get", *get_args]
    command += ["--watch", "--output-watch-events", "-o", "json"]
    objects: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryFile() as errors:
        watch = _KubectlWatch(command, errors)
        try:
            while not (found := until(objects)):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
                for event in watch.events(min(left, _RECHECK_SECONDS)):
                    uid = str(event["object"]["metadata"].get("uid"))
                    if event["type"] == "DELETED":
                        objects.pop(uid, None)
                    elif event["type"] in ("ADDED", "MODIFIED"):
                        objects[uid] = event["object"]
        finally:
            watch.stop()
    return found


class _KubectlWatch:
    """A `kubectl get --watch -o json` running, read as a stream of JSON watch events; started
    again if the API server ends the watch (the objects it lists again are the present ones)."""

    def __init__(self, command: list[str], errors: Any) -> None:
        self._command, self._errors = command, errors
        self._buffer = b""
        self._decoder = json.JSONDecoder()
        self._process = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self._command, stdout=subprocess.PIPE, stderr=self._errors)

    def events(self, wait: float) -> list[dict[str, Any]]:
        """The watch events that arrive within `wait` seconds (none if none did)."""
        assert self._process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self._process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout=wait):
                return []
        chunk = os.read(self._process.stdout.fileno(), 1 << 16)
        if not chunk:
            self._restart()
            return []
        self._buffer += chunk
        return self._complete_events()

    def _complete_events(self) -> list[dict[str, Any]]:
        # Whole lines only: a read may end inside a character, never inside a line's end.
        cut = self._buffer.rfind(b"\n") + 1
        text, rest = self._buffer[:cut].decode(), self._buffer[cut:]
        events, position = [], 0
        while True:
            while position < len(text) and text[position].isspace():
                position += 1
            try:
                event, position = self._decoder.raw_decode(text, position)
            except ValueError:  # an event cut in two: the rest comes with the next read
                break
            events.append(event)
        self._buffer = text[position:].encode() + rest
        return events

    def _restart(self) -> None:
        code = self._process.wait()
        if code != 0:
            self._errors.seek(0)
            message = self._errors.read().decode(errors="replace")
            raise AssertionError(f"{' '.join(self._command)} exited {code}: {message}")
        self._buffer = b""
        self._process = self._start()

    def stop(self) -> None:
        self._process.kill()
        self._process.wait()


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
