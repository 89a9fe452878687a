"""Start, stop and inspect a local control plane: etcd, kube-apiserver, kube-scheduler,
kube-controller-manager and KWOK.

Everything listens on 127.0.0.1 with certificates generated per directory. KWOK plays the
kubelet for one fake Node, so scheduled Pods become Running and Ready with an IP (Pods of Jobs
complete at once). kube-controller-manager runs the controllers a user's cluster has and a fake
node can serve (`CONTROLLERS`): garbage collection, Jobs, Deployments, namespaces, service
accounts, PersistentVolume binding. `controller_manager=False` leaves it out, for tests that
prove the operator cleans up after itself where no garbage collector runs (DESIGN.md).

A control plane lives in a directory holding its certificates, kubeconfig, logs and a
``state.json`` with process ids and ports, so a later ``stop`` or ``status`` (another
process) finds it again.

``audit_users`` turns on kube-apiserver's audit log (JSON lines, level Metadata, one line per
completed request) for the requests of those users: the only record of who sent what, since
``apiserver_request_total`` has no user label. A benchmark gives the operator under test its own
client certificate (``write_client_kubeconfig``) and counts its requests there.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from ray_operator import pki
from ray_operator.localcluster.binaries import ControlPlaneBinaries

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/16"
# KWOK's default Pod CIDR overlaps the service range above; keep Pod IPs apart.
POD_CIDR = "10.244.0.1/16"
FAKE_NODE_NAME = "kwok-node-0"
# Enough for the samples' claims (the largest asks 50Gi); hostPath capacity is not enforced.
LOCAL_VOLUMES = 4
LOCAL_VOLUME_SIZE = "1Ti"
CERT_VALIDITY = datetime.timedelta(days=365)
STARTUP_TIMEOUT_SECONDS = 120.0
# What a fake node can serve. Left out: node lifecycle (it would evict Pods whenever KWOK's
# heartbeat lags on a loaded machine), Pod GC (it deletes Pods bound to Nodes that do not exist,
# which tests bind on purpose), IPAM, routes, cloud and load balancers (no cloud here), and the
# publishers that would add a ConfigMap to every namespace for a kubelet that never reads it.
CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "job-controller",
    "cronjob-controller",
    "ttl-after-finished-controller",
    "replicaset-controller",
    "deployment-controller",
    "statefulset-controller",
    "daemonset-controller",
    "disruption-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "endpointslice-controller",
    "clusterrole-aggregation-controller",
    # Counts usage into a ResourceQuota's status, which the admission plugin enforces: without
    # it no quota refuses anything (KubeRay's e2e tests use one to make Pod creation fail).
    "resourcequota-controller",
    "persistentvolume-binder-controller",
    "persistentvolume-protection-controller",
    "persistentvolumeclaim-protection-controller",
)
STOP_TIMEOUT_SECONDS = 15.0


# KWOK's Pod lifecycle with one change: a Job's Pod completes at once, except a RayJob's submitter,
# which the local Ray agent runs and ends (the file says more).
KWOK_POD_STAGES_LEAVING_RAY_JOB_SUBMITTERS = Path(__file__).with_name("kwok-pod-stages.yaml")


class ControlPlaneError(RuntimeError):
    """The local control plane could not be started or reached."""


class ComponentDiedError(ControlPlaneError):
    """A component exited while the control plane was starting."""


@dataclasses.dataclass(frozen=True)
class Ports:
    """Loopback ports of one control plane."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    scheduler: int
    kwok: int
    # Default for a state.json written before the controller-manager joined.
    controller_manager: int = 0
    # The fake node's kubelet endpoint (served by `ray-operator dev`'s local Ray, if it runs).
    kubelet: int = 0


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


@dataclasses.dataclass
class ComponentProcess:
    """A running component: its pid and the command that started it (for a restart)."""

    name: str
    pid: int
    command: list[str]
    # The kernel's start time of the process (clock ticks since boot): with the pid it names the
    # process uniquely, across pid reuse and across the exec that turns our fork into the binary.
    started: int = 0


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
        self._ports = _pick_ports()
        self._write_pki()
        self._write_kubeconfig()
        if self._audit_users is not None:
            self._audit_policy_file.write_text(
                yaml.safe_dump(audit_policy(self._audit_users), sort_keys=False)
            )
        self._launch("etcd", self._etcd_command(binaries))
        self._launch("kube-apiserver", self._apiserver_command(binaries))
        self.wait_until_ready()
        self._register_fake_node()
        self._launch("kube-scheduler", self._scheduler_command(binaries))
        if self._with_controller_manager:
            self._launch("kube-controller-manager", self._controller_manager_command(binaries))
            self._register_local_volumes()
        self._launch("kwok", self._kwok_command(binaries))

    def stop(self) -> None:
        """Stop every component (kube-apiserver before etcd) and wait until they are gone."""
        for name in reversed(list(self._processes)):
            _terminate(self._processes[name])
        self._processes.clear()
        self._state_file.unlink(missing_ok=True)

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again on the same port (etcd keeps the data)."""
        process = self._processes["kube-apiserver"]
        _terminate(process)
        self._launch("kube-apiserver", process.command)
        self.wait_until_ready()

    def stop_apiserver(self) -> None:
        """Stop only kube-apiserver (to test clients against an unreachable API)."""
        _terminate(self._processes["kube-apiserver"])

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
        return {name: _is_alive(p) for name, p in self._processes.items()}

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
                    how = _exit_description(self._processes[name].pid)
                    raise ComponentDiedError(
                        f"{name} exited during start-up ({how}); see {self.log_file(name)}:\n"
                        + _tail(self.log_file(name))
                    )
            time.sleep(0.2)
        raise ControlPlaneError(
            f"kube-apiserver not ready after {timeout:.0f}s; see {self.log_file('kube-apiserver')}"
        )

    # --- components ---------------------------------------------------------------------------

    def _etcd_command(self, binaries: ControlPlaneBinaries) -> list[str]:
        ports = self.ports
        client_url = f"http://127.0.0.1:{ports.etcd_client}"
        peer_url = f"http://127.0.0.1:{ports.etcd_peer}"
        return [
            str(binaries.etcd),
            "--name=default",
            f"--data-dir={self.directory / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=default={peer_url}",
            # A throwaway cluster: durability buys nothing and fsync costs every write.
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=8589934592",
            "--log-level=warn",
        ]

    def _apiserver_command(self, binaries: ControlPlaneBinaries) -> list[str]:
        gates = self._apiserver_feature_gates
        feature_flags = [f"--feature-gates={','.join(gates)}"] if gates else []
        return self._apiserver_base_command(binaries) + self._audit_flags() + feature_flags

    def _audit_flags(self) -> list[str]:
        if self._audit_users is None:
            return []
        return [
            f"--audit-policy-file={self._audit_policy_file}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            # Never rotate: a reader follows one file from its first byte.
            "--audit-log-maxsize=0",
            "--audit-log-maxbackup=0",
        ]

    def _apiserver_base_command(self, binaries: ControlPlaneBinaries) -> list[str]:
        pki_dir = self._pki_dir
        ports = self.ports
        return [
            str(binaries.kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
            f"--secure-port={ports.apiserver}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # No kubelet or endpoints controller runs here: keep the apiserver from
            # publishing an unreachable 'kubernetes' Service endpoint.
            "--endpoint-reconciler-type=none",
            f"--cert-dir={pki_dir}",
            f"--tls-cert-file={pki_dir / 'apiserver.crt'}",
            f"--tls-private-key-file={pki_dir / 'apiserver.key'}",
            f"--client-ca-file={pki_dir / 'ca.crt'}",
            # `kubectl logs`, `exec` and `port-forward` go through the fake node's kubelet
            # endpoint (kubelet_credentials): mutual TLS under the plane's CA.
            f"--kubelet-client-certificate={pki_dir / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki_dir / 'apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki_dir / 'ca.crt'}",
            f"--service-account-key-file={pki_dir / 'sa.pub'}",
            f"--service-account-signing-key-file={pki_dir / 'sa.key'}",
            f"--service-account-issuer=https://127.0.0.1:{ports.apiserver}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            # ServiceAccount: no controller creates the default ServiceAccounts.
            # TaintNodesByCondition: the not-ready taint would never be lifted without
            # kube-controller-manager, and every Pod would stay Pending.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--max-requests-inflight=2000",
            "--max-mutating-requests-inflight=1000",
            "--v=0",
        ]

    def _client_component_flags(self, *, port: int, cert_dir: str) -> list[str]:
        """What kube-scheduler and kube-controller-manager share: the admin kubeconfig, no
        leader election, a loopback secure port with its own self-signed certificate."""
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            # No front-proxy CA is configured; do not keep asking kube-system for one.
            "--authentication-skip-lookup=true",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={self.directory / cert_dir}",
            # The default client rates (50 and 20 qps) make binding or collecting thousands of
            # Pods crawl.
            "--kube-api-qps=1000",
            "--kube-api-burst=2000",
            "--v=0",
        ]

    def _scheduler_command(self, binaries: ControlPlaneBinaries) -> list[str]:
        return [
            str(binaries.kube_scheduler),
            *self._client_component_flags(port=self.ports.scheduler, cert_dir="scheduler-certs"),
        ]

    def _controller_manager_command(self, binaries: ControlPlaneBinaries) -> list[str]:
        pki_dir = self._pki_dir
        return [
            str(binaries.kube_controller_manager),
            *self._client_component_flags(
                port=self.ports.controller_manager, cert_dir="controller-manager-certs"
            ),
            f"--controllers={','.join(CONTROLLERS)}",
            # The token controller signs ServiceAccount tokens with the API server's key pair.
            f"--service-account-private-key-file={pki_dir / 'sa.key'}",
            f"--root-ca-file={pki_dir / 'ca.crt'}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            # One admin identity: no per-controller ServiceAccounts to wait for.
            "--use-service-account-credentials=false",
        ]

    def _kwok_command(self, binaries: ControlPlaneBinaries) -> list[str]:
        command = [
            str(binaries.kwok),
            f"--kubeconfig={self.kubeconfig}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--cidr={POD_CIDR}",
            "--node-ip=127.0.0.1",
            f"--server-address=127.0.0.1:{self.ports.kwok}",
            # The kubelet port the fake node advertises (status.daemonEndpoints); KWOK itself
            # serves on --server-address, so only our kubelet endpoint listens here.
            f"--node-port={self.ports.kubelet}",
        ]
        if self._submitters_run_locally:
            command.append(f"--config={KWOK_POD_STAGES_LEAVING_RAY_JOB_SUBMITTERS}")
        return command

    def _launch(self, name: str, command: list[str]) -> None:
        log = self.log_file(name).open("ab")
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
        self._processes[name] = ComponentProcess(
            name=name,
            pid=process.pid,
            command=command,
            started=process_start_time(process.pid) or 0,
        )
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

    def _write_pki(self) -> None:
        pki_dir = self._pki_dir
        pki_dir.mkdir(parents=True, exist_ok=True)
        ca = pki.create_ca("ray-operator-local-ca", valid_for=CERT_VALIDITY)
        serving = pki.issue_certificate(
            ca,
            "kube-apiserver",
            valid_for=CERT_VALIDITY,
            server=True,
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ip_addresses=["127.0.0.1", "10.0.0.1"],
        )
        admin = pki.issue_certificate(
            ca,
            "admin",
            organizations=["system:masters"],
            valid_for=CERT_VALIDITY,
            client=True,
        )
        kubelet = pki.issue_certificate(
            ca,
            FAKE_NODE_NAME,
            valid_for=CERT_VALIDITY,
            server=True,
            dns_names=["localhost", FAKE_NODE_NAME],
            ip_addresses=["127.0.0.1"],
        )
        # No groups: it only ever authenticates the API server to the kubelet endpoint.
        kubelet_client = pki.issue_certificate(
            ca, "kube-apiserver-kubelet-client", valid_for=CERT_VALIDITY, client=True
        )
        service_account_key = pki.new_private_key_pem()
        files = {
            "ca.crt": ca.cert_pem,
            "ca.key": ca.key_pem,
            "apiserver.crt": serving.cert_pem,
            "apiserver.key": serving.key_pem,
            "admin.crt": admin.cert_pem,
            "admin.key": admin.key_pem,
            "kubelet.crt": kubelet.cert_pem,
            "kubelet.key": kubelet.key_pem,
            "apiserver-kubelet-client.crt": kubelet_client.cert_pem,
            "apiserver-kubelet-client.key": kubelet_client.key_pem,
            "sa.key": service_account_key,
            "sa.pub": pki.public_key_pem(service_account_key),
        }
        for name, content in files.items():
            path = pki_dir / name
            path.write_bytes(content)
            path.chmod(0o600)

    def write_client_kubeconfig(
        self, path: Path, *, common_name: str, organizations: Sequence[str] = ("system:masters",)
    ) -> Path:
        """Issue a client certificate (user `common_name`, groups `organizations`) from this
        control plane's CA and write a kubeconfig with it to `path`: a second identity, whose
        requests the API server (and its audit log) tells apart from the admin's."""
        pki_dir = self._pki_dir
        ca = pki.KeyPair((pki_dir / "ca.crt").read_bytes(), (pki_dir / "ca.key").read_bytes())
        client = pki.issue_certificate(
            ca,
            common_name,
            organizations=organizations,
            valid_for=CERT_VALIDITY,
            client=True,
        )
        kubeconfig = build_kubeconfig(
            server=self.server,
            ca_pem=ca.cert_pem,
            client_cert_pem=client.cert_pem,
            client_key_pem=client.key_pem,
            user=common_name,
        )
        path.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
        path.chmod(0o600)
        return path

    def _write_kubeconfig(self) -> None:
        kubeconfig = build_kubeconfig(
            server=self.server,
            ca_pem=(self._pki_dir / "ca.crt").read_bytes(),
            client_cert_pem=(self._pki_dir / "admin.crt").read_bytes(),
            client_key_pem=(self._pki_dir / "admin.key").read_bytes(),
            user="admin",
        )
        self.kubeconfig.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
        self.kubeconfig.chmod(0o600)

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


def build_kubeconfig(
    *, server: str, ca_pem: bytes, client_cert_pem: bytes, client_key_pem: bytes, user: str
) -> dict[str, Any]:
    """A kubeconfig with one cluster, user and context, credentials inlined."""
    import base64

    def encode(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {"server": server, "certificate-authority-data": encode(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": encode(client_cert_pem),
                    "client-key-data": encode(client_key_pem),
                },
            }
        ],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }


def audit_policy(users: Sequence[str]) -> dict[str, Any]:
    """An audit Policy: metadata of every completed request of `users` (of all when empty)."""
    logged: dict[str, Any] = {"level": "Metadata"}
    if users:
        logged["users"] = list(users)
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        # One line per request, written when it completes (a watch: when it ends).
        "omitStages": ["RequestReceived", "ResponseStarted"],
        "rules": [logged, {"level": "None"}],
    }


def local_volume_manifest(name: str, path: Path) -> dict[str, Any]:
    """A hostPath PersistentVolume any claim without a StorageClass can bind (every access mode:
    one fake node, so ReadWriteMany holds)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {"ray-operator.io/local-volume": "true"}},
        "spec": {
            "capacity": {"storage": LOCAL_VOLUME_SIZE},
            "accessModes": ["ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
        },
    }


def fake_node_manifest(name: str) -> dict[str, Any]:
    """A Node KWOK will manage, roomy enough for thousands of Pods, GPUs and TPUs included."""
    capacity = {
        "cpu": "10000",
        "memory": "100Ti",
        "pods": "110000",
        "ephemeral-storage": "100Ti",
        "nvidia.com/gpu": "1000",
        "google.com/tpu": "1000",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
        "spec": {},
        "status": {
            "allocatable": capacity,
            "capacity": capacity,
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "fake",
                "kubeProxyVersion": "fake",
                "bootID": "",
                "containerRuntimeVersion": "",
                "kernelVersion": "",
                "machineID": "",
                "osImage": "",
                "systemUUID": "",
            },
        },
    }


def _pick_ports() -> Ports:
    """Free loopback ports for every component."""
    return Ports(*reserve_ports(len(dataclasses.fields(Ports)), host="127.0.0.1"))


def reserve_ports(count: int, *, host: str) -> list[int]:
    """`count` distinct ports free on `host` right now, held open together while chosen so no
    two are the same (another program may still take one before its user binds it)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))  # never listened on: bound only to learn a free port
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _is_alive(process: ComponentProcess) -> bool:
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


def _terminate(process: ComponentProcess) -> None:
    if not _is_alive(process):
        _reap(process.pid)
        return
    os.kill(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        _reap(process.pid)
        if not _is_alive(process):
            return
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    while _is_alive(process):
        _reap(process.pid)
        time.sleep(0.05)


def _exit_description(pid: int) -> str:
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


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
