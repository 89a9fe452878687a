"""Watching the operator from outside: its process, its /healthz latency, the Pods it creates.

Everything here runs in threads of the test process, never on an asyncio loop, so a slow
`kubectl` call in the test cannot delay a probe and bias the latency it measures.

    OperatorUnderTest   `ray-operator run` (the real command and controllers) in its own process;
                        `wait_until_quiet`: until its work queue has been idle a while
    HealthProbe         GET /healthz every 100 ms; the worst latency and every failure
    RssProbe            the operator's resident memory every 100 ms; the peak
    ObjectWatch         one watch on a resource (one namespace or all, optionally by label):
                        when each object was first seen, and every event (when, type, name)
    PodWatch            an ObjectWatch on the Pods of one namespace by label
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families
from ray_operator.bench.operator_process import read_process

from tests.runtime.processes import REPO_ROOT, free_port, wait_until

MIB = 1024 * 1024
METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
METADATA_LIST_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


class OperatorUnderTest:
    """`python -m ray_operator.cli run` for one namespace (None: all), probes and metrics on one
    port.

    No leader election (a lone replica starts reconciling at once). Webhooks are off unless
    `webhooks=True`, which serves them on 127.0.0.1 with a self-managed certificate and registers
    configurations calling that address (the URL mode of `make run`). `env` is added to the test
    process's environment; `command_prefix` runs the operator under another program (`unshare`,
    say).
    """

    def __init__(
        self,
        *,
        kubeconfig: Path,
        namespace: str | None,
        log_dir: Path,
        name: str = "robust",
        webhooks: bool = False,
        extra_args: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
        command_prefix: Sequence[str] = (),
    ) -> None:
        self.port = free_port()
        self.webhook_port = free_port()
        self.log_path = log_dir / f"operator-{name}.log"
        webhook_args = (
            (
                "--webhooks",
                "--webhook-url-base",
                f"https://127.0.0.1:{self.webhook_port}",
                "--webhook-namespace",
                namespace or "default",
            )
            if webhooks
            else ("--no-webhooks",)
        )
        scope = ("--namespace", namespace) if namespace is not None else ()
        command = [
            *command_prefix,
            sys.executable,
            "-m",
            "ray_operator.cli",
            "run",
            "--kubeconfig",
            str(kubeconfig),
            *scope,
            "--no-leader-elect",
            "--lease-namespace",
            namespace or "default",
            "--identity",
            name,
            "--health-addr",
            f"127.0.0.1:{self.port}",
            "--metrics-addr",
            f"127.0.0.1:{self.port}",
            "--webhook-port",
            str(self.webhook_port),
            *webhook_args,
            *extra_args,
        ]
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=None if env is None else {**os.environ, **env},
        )

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/healthz"

    def get_status(self, path: str, *, timeout: float = 5.0) -> int:
        """The HTTP status of GET `path`; 0 when nothing answers in time."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            response.read()
            return response.status
        except OSError:
            return 0
        finally:
            connection.close()

    def wait_ready(self, *, timeout: float = 60.0) -> None:
        """Until /readyz answers 200 (caches synced); fails at once if the process died."""

        def ready() -> bool:
            if not self.alive():
                raise AssertionError(f"the operator exited: {self.log()[-3000:]}")
            return self.get_status("/readyz") == 200

        wait_until(ready, timeout=timeout, interval=0.1, what="the operator to be ready")

    def rss_bytes(self) -> int:
        return read_process(self.process.pid).rss_bytes

    def work_done(self) -> WorkDone | None:
        """What its work queue holds and has done so far, from /metrics (None: no answer)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5.0)
        try:
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            body = response.read().decode()
        except OSError:
            return None
        finally:
            connection.close()
        if response.status != 200:
            return None
        totals = dict.fromkeys(WORK_METRICS, 0.0)
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                if sample.name in totals:
                    totals[sample.name] += sample.value
        return WorkDone(*(totals[name] for name in WORK_METRICS))

    def wait_until_quiet(self, *, quiet: float, timeout: float, what: str) -> float:
        """Until no key has been queued, in flight, added or reconciled for `quiet` seconds
        (scraped every 100 ms, as often as /healthz is probed); the seconds it took. Fails after
        `timeout`: a reconcile that never ends, or keys that keep coming back, never fall quiet."""
        started = time.monotonic()
        quiet_since: float | None = None
        last: WorkDone | None = None
        while True:
            now = time.monotonic()
            done = self.work_done()
            if done is None or not done.idle:
                quiet_since = None
            elif done != last or quiet_since is None:
                quiet_since = now  # the first scrape that saw it idle with these counts
            elif now - quiet_since >= quiet:
                return now - started
            if now - started > timeout:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}: {done}")
            last = done
            time.sleep(0.1)

    def alive(self) -> bool:
        return self.process.poll() is None

    def terminate(self, *, timeout: float) -> tuple[int | None, float]:
        """SIGTERM; (exit code or None if still running after `timeout`, seconds waited)."""
        signalled_at = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            code: int | None = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        return code, time.monotonic() - signalled_at

    def stop(self) -> None:
        """SIGTERM, SIGKILL after 30 s; idempotent."""
        if self.alive():
            code, _ = self.terminate(timeout=30)
            if code is None:
                self.process.kill()
                self.process.wait()
        self._log.close()

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")


WORK_METRICS = (
    "ray_operator_workqueue_depth",
    "ray_operator_workqueue_in_flight",
    "ray_operator_workqueue_adds_total",
    "ray_operator_reconcile_total",
)


@dataclass(frozen=True)
class WorkDone:
    """One scrape of an operator's work queue: keys waiting and in flight now, keys added and
    reconciles run since it started (every kind and result summed)."""

    queued: float
    in_flight: float
    added: float
    reconciled: float

    @property
    def idle(self) -> bool:
        return self.queued == 0 and self.in_flight == 0


@dataclass
class HealthProbe:
    """GET /healthz every `interval` seconds in a thread; latencies and failures, measured."""

    url: str
    interval: float = 0.1
    timeout: float = 5.0
    samples: list[tuple[float, float]] = field(default_factory=list)
    """(when the probe was sent (monotonic), seconds it took to answer)."""
    failures: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> HealthProbe:
        self._thread = threading.Thread(target=self._run, name="healthz-probe", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout + 1)

    @property
    def latencies(self) -> list[float]:
        return [took for _, took in self.samples]

    @property
    def max_latency(self) -> float:
        return max(self.latencies, default=0.0)

    def max_latency_between(self, start: float, end: float) -> float:
        """The worst latency of the probes sent between two monotonic instants."""
        return max((took for sent, took in self.samples if start <= sent < end), default=0.0)

    def summary(self) -> str:
        ordered = sorted(self.latencies)
        p99 = ordered[int(len(ordered) * 0.99)] if ordered else 0.0
        return (
            f"{len(ordered)} probes, max {self.max_latency * 1000:.0f} ms, "
            f"p99 {p99 * 1000:.0f} ms, {len(self.failures)} failures"
        )

    def _run(self) -> None:
        parsed = urllib.parse.urlsplit(self.url)
        while not self._stop.is_set():
            started = time.monotonic()
            connection = http.client.HTTPConnection(
                parsed.hostname or "127.0.0.1", parsed.port, timeout=self.timeout
            )
            try:
                connection.request("GET", parsed.path)
                response = connection.getresponse()
                response.read()
                if response.status != 200:
                    self.failures.append(f"HTTP {response.status}")
            except OSError as error:
                self.failures.append(repr(error))
            finally:
                connection.close()
            took = time.monotonic() - started
            self.samples.append((started, took))
            self._stop.wait(max(0.0, self.interval - took))


@dataclass
class RssProbe:
    """The operator's RSS every `interval` seconds in a thread: the peak, and whether the
    process was gone (a spike between two `rss_bytes()` calls of a test is seen here)."""

    operator: OperatorUnderTest
    interval: float = 0.1
    peak: int = 0
    vanished: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> RssProbe:
        self.peak = self.operator.rss_bytes()
        self._thread = threading.Thread(target=self._run, name="rss-probe", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.peak = max(self.peak, self.operator.rss_bytes())
            except OSError:  # the process is gone (killed, or restarted by nobody)
                self.vanished = True
                return


class ApiServer:
    """Plain HTTPS to the test API server with the admin credentials of a kubeconfig."""

    def __init__(self, kubeconfig: Path) -> None:
        config = yaml.safe_load(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        user = config["users"][0]["user"]
        server = urllib.parse.urlsplit(cluster["server"])
        self.host = server.hostname or "127.0.0.1"
        self.port = server.port or 443
        self.context = ssl.create_default_context(
            cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
        )
        # load_cert_chain wants files: write the pair once, readable by us only.
        self._directory = tempfile.TemporaryDirectory(prefix="robustness-cert-")
        cert = Path(self._directory.name) / "client.crt"
        key = Path(self._directory.name) / "client.key"
        cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        key.chmod(0o600)
        self.context.load_cert_chain(cert, key)

    def connect(self, *, timeout: float | None) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(
            self.host, self.port, context=self.context, timeout=timeout
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30,
    ) -> tuple[int, bytes]:
        """One request on a connection of its own: (HTTP status, the answer's bytes)."""
        connection = self.connect(timeout=timeout)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            answer = response.read()
        finally:
            connection.close()
        return response.status, answer

    def get_json(self, path: str) -> Any:
        """GET `path`; the decoded body (None on 404). Cheaper than a kubectl process per poll."""
        status, body = self.request("GET", path, timeout=10)
        if status == 404:
            return None
        if status != 200:
            raise AssertionError(f"GET {path}: HTTP {status}: {body[:500]!r}")
        return json.loads(body)

    def create(self, path: str, manifest: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """POST `manifest` to the collection at `path` with strict field validation (kubectl
        create's default): (HTTP status, the decoded answer: the object, or a Status)."""
        return self._send("POST", path, manifest, "application/json")

    def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of the object at `path`, with strict field validation; the object."""
        status, body = self._send("PATCH", path, patch, "application/merge-patch+json")
        if status != 200:
            raise AssertionError(f"PATCH {path}: HTTP {status}: {str(body)[:500]}")
        return body

    def _send(
        self, method: str, path: str, body: dict[str, Any], content_type: str
    ) -> tuple[int, dict[str, Any]]:
        query = "?" + urllib.parse.urlencode({"fieldValidation": "Strict"})
        status, answer = self.request(
            method,
            path + query,
            body=json.dumps(body).encode(),
            headers={"Content-Type": content_type},
        )
        decoded: dict[str, Any] = json.loads(answer)
        return status, decoded

    def delete_collection(self, path: str, *, selector: str | None = None) -> None:
        """DELETE every object of the collection at `path` (matching `selector`, if given)."""
        query = "?" + urllib.parse.urlencode({"labelSelector": selector}) if selector else ""
        status, body = self.request("DELETE", path + query)
        if status != 200:
            raise AssertionError(f"DELETE {path}{query}: HTTP {status}: {body[:500]!r}")

    def ray_cluster(self, namespace: str, name: str) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.get_json(
            f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters/{name}"
        )
        return found

    def state(self, namespace: str, name: str) -> str | None:
        cluster = self.ray_cluster(namespace, name) or {}
        state: str | None = (cluster.get("status") or {}).get("state")
        return state

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The Events about object `name` in `namespace`."""
        query = urllib.parse.urlencode({"fieldSelector": f"involvedObject.name={name}"})
        listed = self.get_json(f"/api/v1/namespaces/{namespace}/events?{query}")
        items: list[dict[str, Any]] = listed["items"]
        return items

    def pod_count(self, namespace: str, selector: str) -> int:
        """How many Pods match `selector` (only their metadata is transferred)."""
        query = urllib.parse.urlencode({"labelSelector": selector})
        status, body = self.request(
            "GET",
            f"/api/v1/namespaces/{namespace}/pods?{query}",
            headers={"Accept": METADATA_LIST_ONLY},
        )
        if status != 200:
            raise AssertionError(f"listing Pods: HTTP {status}: {body[:500]!r}")
        # An empty list comes back with `items: null`.
        return len(json.loads(body)["items"] or ())

    def close(self) -> None:
        self._directory.cleanup()


class ObjectWatch:
    """Watch one resource in a thread: when each object was first seen, and every event.

    A watch without a resourceVersion starts with an ADDED event for every existing object, then
    streams changes, so nothing created after `start()` returns can be missed. Times are this
    process's `time.monotonic()` at delivery (a few ms after the API server's write). Objects are
    named `name` in one namespace, `namespace/name` across all (`namespace=None`).
    """

    def __init__(
        self,
        api: ApiServer,
        *,
        resource: str,
        namespace: str | None,
        selector: str | None = None,
        api_prefix: str = "/api/v1",
    ) -> None:
        self._api = api
        self._all_namespaces = namespace is None
        scope = "" if namespace is None else f"/namespaces/{namespace}"
        query = {"watch": "true", "timeoutSeconds": "3600"}
        if selector:
            query["labelSelector"] = selector
        self._path = f"{api_prefix}{scope}/{resource}?" + urllib.parse.urlencode(query)
        self.first_seen: dict[str, float] = {}
        self.events: list[tuple[float, str, str]] = []
        """(when delivered, event type, name) of every event, in order."""
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._connection: http.client.HTTPSConnection | None = None
        self._started = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=f"watch-{resource}", daemon=True)

    def __enter__(self) -> ObjectWatch:
        self._thread.start()
        if not self._started.wait(timeout=10):
            raise AssertionError(f"the watch of {self._path} did not start: {self.errors}")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped = True
        if self._connection is not None and self._connection.sock is not None:
            # Unblocks the reading thread at once.
            self._connection.sock.shutdown(2)
        self._thread.join(timeout=5)

    def created_after(self, moment: float) -> list[str]:
        """Pods first seen after `moment` (monotonic)."""
        with self._lock:
            return [name for name, seen in self.first_seen.items() if seen > moment]

    def seen(self) -> int:
        with self._lock:
            return len(self.first_seen)

    def last_event_at(self) -> float:
        """When the last event was delivered (monotonic; 0.0: none yet)."""
        with self._lock:
            return self.events[-1][0] if self.events else 0.0

    def events_after(self, moment: float) -> list[tuple[str, str]]:
        """(event type, name) of the events delivered after `moment` (monotonic)."""
        with self._lock:
            return [(kind, name) for seen, kind, name in self.events if seen > moment]

    def _run(self) -> None:
        try:
            self._connection = self._api.connect(timeout=None)
            # Metadata only: the names are all we need, and full Pods would cost the shared
            # cores (API server encoding, our decoding) for nothing.
            self._connection.request("GET", self._path, headers={"Accept": METADATA_ONLY})
            response = self._connection.getresponse()
            if response.status != 200:
                self.errors.append(f"HTTP {response.status}: {response.read()[:500]!r}")
                return
            self._started.set()
            for event in _json_lines(response):
                self._record(event)
        except (OSError, http.client.HTTPException, ValueError) as error:
            # Shutting the socket down on stop may cut a chunk short (IncompleteRead) or leave
            # half a line that is no JSON (seen once: a UnicodeDecodeError): only an error before
            # the stop is one.
            if not self._stopped:
                self.errors.append(repr(error))
        finally:
            self._started.set()

    def _record(self, event: dict[str, Any]) -> None:
        now = time.monotonic()
        metadata = (event.get("object") or {}).get("metadata", {})
        name = metadata.get("name")
        if not name:
            self.errors.append(f"unexpected watch event: {str(event)[:300]}")
            return
        if self._all_namespaces:
            name = f"{metadata.get('namespace', '')}/{name}"
        with self._lock:
            self.first_seen.setdefault(name, now)
            self.events.append((now, str(event.get("type")), name))


class PodWatch(ObjectWatch):
    """An `ObjectWatch` on the Pods matching `selector` in one namespace."""

    def __init__(self, api: ApiServer, namespace: str, selector: str) -> None:
        super().__init__(api, resource="pods", namespace=namespace, selector=selector)


def _json_lines(response: http.client.HTTPResponse) -> Iterator[dict[str, Any]]:
    # A line without its newline is the stream cut short (by `__exit__`): not an event.
    while (line := response.readline()).endswith(b"\n"):
        if line.strip():
            yield json.loads(line)


def wait_for(
    condition: Callable[[], object], *, timeout: float, what: str, interval: float = 0.1
) -> float:
    """`wait_until` with a coarser default poll, for conditions that shell out to kubectl."""
    return wait_until(condition, timeout=timeout, interval=interval, what=what)


def mib(size: float) -> str:
    return f"{size / MIB:.1f} MiB"
