"""NetworkPolicy rule pieces the network-policy tests expect: the DNS egress rule a user allows, and
the peer that selects one RayCluster's Pods."""

from __future__ import annotations

from typing import Any

DNS_EGRESS: dict[str, Any] = {
    "to": [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ],
    "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
}


def cluster_peer(name: str) -> list[dict[str, Any]]:
    return [{"podSelector": {"matchLabels": {"ray.io/cluster": name}}}]
