"""The command line of each local control plane component: etcd, kube-apiserver,
kube-scheduler, kube-controller-manager and KWOK, as flags over one directory and its ports.
Pure: nothing is started here (`controlplane.py` starts them, `processes.py` runs them)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ray_operator.localcluster.binaries import ControlPlaneBinaries
from ray_operator.localcluster.ports import Ports

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/16"
# KWOK's default Pod CIDR overlaps the service range above; keep Pod IPs apart.
POD_CIDR = "10.244.0.1/16"
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


# KWOK's Pod lifecycle with one change: a Job's Pod completes at once, except a RayJob's submitter,
# which the local Ray agent runs and ends (the file says more).
KWOK_POD_STAGES_LEAVING_RAY_JOB_SUBMITTERS = Path(__file__).with_name("kwok-pod-stages.yaml")


@dataclasses.dataclass(frozen=True)
class ComponentCommands:
    """The command lines of one control plane's components."""

    binaries: ControlPlaneBinaries
    directory: Path
    """Where etcd's data and the scheduler's and controller-manager's certificates live."""
    ports: Ports
    kubeconfig: Path
    """The admin kubeconfig every client component uses."""
    pki_dir: Path
    audit_policy_file: Path | None
    """kube-apiserver's audit Policy (None: no audit log)."""
    audit_log: Path
    apiserver_feature_gates: tuple[str, ...] = ()
    """`Name=true` items for kube-apiserver's --feature-gates (e.g. ContainerRestartRules)."""
    ray_job_submitters_run_locally: bool = False
    """KWOK leaves RayJob submitter Pods to the local Ray agent (see `LocalControlPlane`)."""

    def etcd(self) -> list[str]:
        ports = self.ports
        client_url = f"http://127.0.0.1:{ports.etcd_client}"
        peer_url = f"http://127.0.0.1:{ports.etcd_peer}"
        return [
            str(self.binaries.etcd),
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

    def apiserver(self) -> list[str]:
        gates = self.apiserver_feature_gates
        feature_flags = [f"--feature-gates={','.join(gates)}"] if gates else []
        return self._apiserver_base() + self._audit_flags() + feature_flags

    def _audit_flags(self) -> list[str]:
        if self.audit_policy_file is None:
            return []
        return [
            f"--audit-policy-file={self.audit_policy_file}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            # Never rotate: a reader follows one file from its first byte.
            "--audit-log-maxsize=0",
            "--audit-log-maxbackup=0",
        ]

    def _apiserver_base(self) -> list[str]:
        pki_dir = self.pki_dir
        ports = self.ports
        return [
            str(self.binaries.kube_apiserver),
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
            # On SIGTERM, end open watches (kube-scheduler's, KWOK's, an operator's) and exit.
            # Without a grace period they are not drained: they held the process until our
            # SIGKILL fallback (15 s) on every stop and restart of the API server.
            "--shutdown-watch-termination-grace-period=2s",
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

    def scheduler(self) -> list[str]:
        return [
            str(self.binaries.kube_scheduler),
            *self._client_component_flags(port=self.ports.scheduler, cert_dir="scheduler-certs"),
        ]

    def controller_manager(self) -> list[str]:
        pki_dir = self.pki_dir
        return [
            str(self.binaries.kube_controller_manager),
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

    def kwok(self) -> list[str]:
        command = [
            str(self.binaries.kwok),
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
        if self.ray_job_submitters_run_locally:
            command.append(f"--config={KWOK_POD_STAGES_LEAVING_RAY_JOB_SUBMITTERS}")
        return command
