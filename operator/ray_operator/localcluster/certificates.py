"""A local control plane's certificates and kubeconfigs: one CA per directory, the API server's
serving certificate, the admin identity, the fake node's kubelet endpoint pair, the
ServiceAccount signing key, and kubeconfigs with credentials inlined."""

from __future__ import annotations

import base64
import datetime
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from ray_operator import pki
from ray_operator.localcluster.manifests import FAKE_NODE_NAME

CERT_VALIDITY = datetime.timedelta(days=365)


def write_pki(pki_dir: Path) -> None:
    """Every certificate and key the components use, written (owner-only) into `pki_dir`."""
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


def write_admin_kubeconfig(pki_dir: Path, path: Path, *, server: str) -> None:
    """The admin identity's kubeconfig for `server`, written to `path` (owner-only)."""
    kubeconfig = build_kubeconfig(
        server=server,
        ca_pem=(pki_dir / "ca.crt").read_bytes(),
        client_cert_pem=(pki_dir / "admin.crt").read_bytes(),
        client_key_pem=(pki_dir / "admin.key").read_bytes(),
        user="admin",
    )
    path.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
    path.chmod(0o600)


def write_client_kubeconfig(
    pki_dir: Path,
    path: Path,
    *,
    server: str,
    common_name: str,
    organizations: Sequence[str],
) -> Path:
    """Issue a client certificate (user `common_name`, groups `organizations`) from the CA in
    `pki_dir` and write a kubeconfig for `server` with it to `path`."""
    ca = pki.KeyPair((pki_dir / "ca.crt").read_bytes(), (pki_dir / "ca.key").read_bytes())
    client = pki.issue_certificate(
        ca,
        common_name,
        organizations=organizations,
        valid_for=CERT_VALIDITY,
        client=True,
    )
    kubeconfig = build_kubeconfig(
        server=server,
        ca_pem=ca.cert_pem,
        client_cert_pem=client.cert_pem,
        client_key_pem=client.key_pem,
        user=common_name,
    )
    path.write_text(yaml.safe_dump(kubeconfig, sort_keys=False))
    path.chmod(0o600)
    return path


def build_kubeconfig(
    *, server: str, ca_pem: bytes, client_cert_pem: bytes, client_key_pem: bytes, user: str
) -> dict[str, Any]:
    """A kubeconfig with one cluster, user and context, credentials inlined."""

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
