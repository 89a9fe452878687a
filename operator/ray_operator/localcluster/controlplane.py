"""Start, stop and inspect a local control plane: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager and KWOK.

Everything listens on 127.0.0.1 with certificates generated per directory. KWOK plays the
kubelet for one fake Node, so scheduled Pods become Running and Ready with an IP (Pods of Jobs
complete at once). kube-controller-manager runs the controllers a user's cluster has and a fake
node can serve (`command_lines.CONTROLLERS`): garbage collection, Jobs, Deployments, namespaces,
service accounts, PersistentVolume binding. `controller_manager=False` leaves it out, for tests that
prove the operator cleans up after itself where no garbage collector runs (DESIGN.md).

A control plane lives in a directory holding its certificates, kubeconfig, logs and a
``state.json`` with process ids and ports, so a later ``stop`` or ``status`` (another
process) finds it again.

``audit_users`` turns on kube-apiserver's audit log (JSON lines, level Metadata, one line per
completed request) for the requests of those users: the only record of who sent what, since
``apiserver_request_total`` has no user label. A benchmark gives the operator under test its own
client certificate (``write_client_kubeconfig``) and counts its requests there.

Its parts: `ports.py` (a free loopback port per component), `certificates.py` (the CA, every
certificate and the kubeconfigs), `command_lines.py` (each component's flags), `processes.py`
(start, liveness across pid reuse, stop) and `manifests.py` (the fake Node, local
PersistentVolumes, the audit Policy). This module ties them: start in order, wait for
readiness, record and adopt the state, stop.
"""

from __future__ import annotations

import dataclasses
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from ray_operator.localcluster.binaries import ControlPlaneBinaries
from ray_operator.localcluster.certificates import (
    write_admin_kubeconfig,
    write_client_kubeconfig,
    write_pki,
)
from ray_operator.localcluster.command_lines import ComponentCommands
from ray_operator.localcluster.manifests import (
    FAKE_NODE_NAME,
    LOCAL_VOLUMES,
    audit_policy,
    fake_node_manifest,
    local_volume_manifest,
)
from ray_operator.localcluster.ports import Ports, pick_ports
from ray_operator.localcluster.processes import (
    ComponentProcess,
    exit_description,
    is_alive,
    launch,
    terminate,
)
from ray_operator.localcluster.processes import tail as log_tail

STARTUP_TIMEOUT_SECONDS = 120.0


class ControlPlaneError(RuntimeError):
    """The local control plane could not be started or reached."""


class ComponentDiedError(ControlPlaneError):
    """A component exited while the control plane was starting."""


@dataclasses.dataclass(frozen=True)
class KubeletCredentials:
    """The fake node's kubelet endpoint: the API server dials `port`, verifies the serving
    certificate against the plane's CA and shows `client_cert_file`, the one client certificate
    the endpoint accepts (other certificates of the same CA are users', who must go through the
    API server's authorisation)."""

    port: int
    cert_file: Path
    key_file: Path
    client_ca_file: Path
    client_cert_file: Path


class LocalControlPlane:
    """One control plane rooted in ``directory``; start() it, use ``kubeconfig``, stop() it.

    ``controller_manager=False`` starts no kube-controller-manager: no garbage collector, no Job,
    Deployment or namespace controllers. ``ray_job_submitters_run_locally=True`` keeps KWOK from
    completing RayJob submitter Pods, for the local Ray agent runs them and writes their end.
    ``audit_users`` (None: no audit log) writes the requests of those users (all users when
    empty) to ``audit_log``.
    """

    def __init__(
        self,
        directory: Path,
        binaries: ControlPlaneBinaries | None = None,
        *,
        controller_manager: bool = True,
        ray_job_submitters_run_locally: bool = False,
        audit_users: Sequence[str] | None = None,
        apiserver_feature_gates: Sequence[str] = (),
    ) -> None:
        self.directory = directory.resolve()
        # `Name=true` items for kube-apiserver's --feature-gates (e.g. ContainerRestartRules).
        self._apiserver_feature_gates = tuple(apiserver_feature_gates)
        self._audit_users = None if audit_users is None else tuple(audit_users)
        self._binaries = binaries
        self._with_controller_manager = controller_manager
        self._submitters_run_locally = ray_job_submitters_run_locally
        self._processes: dict[str, ComponentProcess] = {}
        self._ports: Ports | None = None

    # --- paths --------------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def ports(self) -> Ports:
        if self._ports is None:
            raise ControlPlaneError(f"no control plane has been started in {self.directory}")
        return self._ports

    @property
    def _pki_dir(self) -> Path:
        return self.directory / "pki"

    @property
    def _state_file(self) -> Path:
        return self.directory / "state.json"

    def admin_credentials(self) -> tuple[Path, Path, Path]:
        """(CA, client certificate, client key) files of the admin identity, for local
        processes that speak to the API server themselves (Ray's autoscaler)."""
        return self._pki_dir / "ca.crt", self._pki_dir / "admin.crt", self._pki_dir / "admin.key"

    def kubelet_credentials(self) -> KubeletCredentials:
        """Where the fake node's kubelet endpoint listens and its TLS files."""
        pki_dir = self._pki_dir
        return KubeletCredentials(
            port=self.ports.kubelet,
            cert_file=pki_dir / "kubelet.crt",
            key_file=pki_dir / "kubelet.key",
            client_ca_file=pki_dir / "ca.crt",
            client_cert_file=pki_dir / "apiserver-kubelet-client.crt",
        )

    def log_file(self, component: str) -> Path:
        return self.directory / "logs" / f"{component}.log"

    @property
    def audit_log(self) -> Path:
        """kube-apiserver's audit log (JSON lines), written when ``audit_users`` was given."""
        return self.directory / "logs" / "audit.jsonl"

    @property
    def _audit_policy_file(self) -> Path:
        return self.directory / "audit-policy.yaml"

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start every component in the background and wait until the API server is ready."""
        if self.load_state() and any(self.running_components().values()):
            raise ControlPlaneError(
                f"a control plane is already running in {self.directory}; stop it first"
            )
        binaries = self._require_binaries()
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "logs").mkdir(exist_ok=True)
        try:
            self._start_components(binaries)
        except BaseException:
            self.stop()
            raise

    def _start_components(self, binaries: ControlPlaneBinaries) -> None:
        self._ports = pick_ports()
        write_pki(self._pki_dir)
        write_admin_kubeconfig(self._pki_dir, self.kubeconfig, server=self.server)
        if self._audit_users is not None:
            self._audit_policy_file.write_text(
                yaml.safe_dump(audit_policy(self._audit_users), sort_keys=False)
            )
        commands = self._commands(binaries)
        self._launch("etcd", commands.etcd())
        self._launch("kube-apiserver", commands.apiserver())
        self.wait_until_ready()
        self._register_fake_node()
        self._launch("kube-scheduler", commands.scheduler())
        if self._with_controller_manager:
            self._launch("kube-controller-manager", commands.controller_manager())
            self._register_local_volumes()
        self._launch("kwok", commands.kwok())

    def stop(self) -> None:
        """Stop every component (kube-apiserver before etcd) and wait until they are gone."""
        for name in reversed(list(self._processes)):
            terminate(self._processes[name])
        self._processes.clear()
        self._state_file.unlink(missing_ok=True)

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port (etcd keeps the data)."""
        process = self._processes["kube-apiserver"]
        terminate(process)
        self._launch("kube-apiserver", process.command)
        self.wait_until_ready()

    def stop_apiserver(self) -> None:
        """Stop only kube-apiserver (to test clients against an unreachable API)."""
        terminate(self._processes["kube-apiserver"])

    def start_apiserver(self) -> None:
        """Start kube-apiserver again after ``stop_apiserver``."""
        self._launch("kube-apiserver", self._processes["kube-apiserver"].command)
        self.wait_until_ready()

    def load_state(self) -> bool:
        """Adopt the control plane recorded in ``state.json`` (from another process)."""
        if not self._state_file.exists():
            return False
        state = json.loads(self._state_file.read_text())
        self._ports = Ports(**state["ports"])
        self._processes = {
            name: ComponentProcess(
                name=name, pid=entry["pid"], command=entry["command"], started=entry["started"]
            )
            for name, entry in state["processes"].items()
        }
        return True

    def running_components(self) -> dict[str, bool]:
        """Each recorded component and whether its process is still alive."""
        return {name: is_alive(p) for name, p in self._processes.items()}

    def is_ready(self) -> bool:
        """Whether the API server answers ``/readyz`` with ``ok``."""
        try:
            return self._get("/readyz", timeout=2.0).strip() == b"ok"
        except (OSError, urllib.error.URLError, ControlPlaneError):
            return False

    def wait_until_ready(self, timeout: float = STARTUP_TIMEOUT_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.is_ready():
                return
            for name, alive in self.running_components().items():
                if not alive:
                    how = exit_description(self._processes[name].pid)
                    raise ComponentDiedError(
                        f"{name} exited during start-up ({how}); see {self.log_file(name)}:\n"
                        + log_tail(self.log_file(name))
                    )
            time.sleep(0.2)
        raise ControlPlaneError(
            f"kube-apiserver not ready after {timeout:.0f}s; see {self.log_file('kube-apiserver')}"
        )

    # --- components ---------------------------------------------------------------------------

    def _commands(self, binaries: ControlPlaneBinaries) -> ComponentCommands:
        return ComponentCommands(
            binaries=binaries,
            directory=self.directory,
            ports=self.ports,
            kubeconfig=self.kubeconfig,
            pki_dir=self._pki_dir,
            audit_policy_file=None if self._audit_users is None else self._audit_policy_file,
            audit_log=self.audit_log,
            apiserver_feature_gates=self._apiserver_feature_gates,
            ray_job_submitters_run_locally=self._submitters_run_locally,
        )

    def _launch(self, name: str, command: list[str]) -> None:
        self._processes[name] = launch(name, command, log_file=self.log_file(name))
        self._save_state()

    def _save_state(self) -> None:
        state = {
            "ports": dataclasses.asdict(self.ports),
            "processes": {
                name: {"pid": p.pid, "command": p.command, "started": p.started}
                for name, p in self._processes.items()
            },
        }
        self._state_file.write_text(json.dumps(state, indent=2))

    def _require_binaries(self) -> ControlPlaneBinaries:
        if self._binaries is None:
            from ray_operator.localcluster.binaries import ensure_binaries

            self._binaries = ensure_binaries()
        return self._binaries

    # --- certificates and kubeconfig ----------------------------------------------------------

    def write_client_kubeconfig(
        self, path: Path, *, common_name: str, organizations: Sequence[str] = ("system:masters",)
    ) -> Path:
        """Issue a client certificate (user `common_name`, groups `organizations`) from this
        control plane's CA and write a kubeconfig with it to `path`: a second identity, whose
        requests the API server (and its audit log) tells apart from the admin's."""
        return write_client_kubeconfig(
            self._pki_dir,
            path,
            server=self.server,
            common_name=common_name,
            organizations=organizations,
        )

    # --- API access (bootstrap only; the operator has its own client) -------------------------

    def _ssl_context(self) -> ssl.SSLContext:
        pki_dir = self._pki_dir
        context = ssl.create_default_context(cafile=str(pki_dir / "ca.crt"))
        context.load_cert_chain(str(pki_dir / "admin.crt"), str(pki_dir / "admin.key"))
        return context

    def _get(self, path: str, *, timeout: float) -> bytes:
        request = urllib.request.Request(self.server + path)
        with urllib.request.urlopen(request, timeout=timeout, context=self._ssl_context()) as r:
            body: bytes = r.read()
            return body

    def _post_json(self, path: str, body: dict[str, Any]) -> None:
        request = urllib.request.Request(
            self.server + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10, context=self._ssl_context()):
                return
        except urllib.error.HTTPError as error:
            if error.code != 409:  # already there after a restart of the same directory
                detail = error.read().decode(errors="replace")
                raise ControlPlaneError(f"POST {path} failed: {error.code} {detail}") from error

    def _register_fake_node(self) -> None:
        self._post_json("/api/v1/nodes", fake_node_manifest(FAKE_NODE_NAME))

    def _register_local_volumes(self) -> None:
        """PersistentVolumes for claims without a StorageClass (the samples' shared data), so
        their Pods get scheduled: the binder binds each to one claim; no provisioner runs."""
        for number in range(LOCAL_VOLUMES):
            path = self.directory / "volumes" / f"pv-{number}"
            path.mkdir(parents=True, exist_ok=True)
            self._post_json(
                "/api/v1/persistentvolumes", local_volume_manifest(f"local-pv-{number}", path)
            )


__all__ = [
    "FAKE_NODE_NAME",
    "ComponentDiedError",
    "ControlPlaneError",
    "KubeletCredentials",
    "LocalControlPlane",
    "Ports",
]
