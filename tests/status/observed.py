"""Observed Pods and Services as the watch cache holds them (plain dicts), for status tests."""

from __future__ import annotations

from typing import Any


def pod(
    name: str,
    *,
    node_type: str = "worker",
    group: str = "workers",
    phase: str = "Running",
    ready: bool | None = True,
    cluster: str = "demo",
    **extra: Any,
) -> dict[str, Any]:
    """A Pod of `cluster`; `ready=None` means the kubelet reported no Ready condition yet."""
    labels = {
        "ray.io/cluster": cluster,
        "ray.io/node-type": node_type,
        "ray.io/group": "headgroup" if node_type == "head" else group,
    }
    labels.update(extra.pop("labels", {}))
    status: dict[str, Any] = {"phase": phase, "podIP": extra.pop("pod_ip", "10.0.0.1")}
    if ready is not None:
        status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    status.update(extra.pop("status", {}))
    metadata = {"name": name, "namespace": "ns1", "labels": labels, **extra.pop("metadata", {})}
    return {
        "metadata": metadata,
        "spec": {"containers": [{"name": "ray"}], **extra.pop("spec", {})},
        "status": status,
    }


def head(name: str = "demo-head-aaaaa", **kwargs: Any) -> dict[str, Any]:
    return pod(name, node_type="head", **kwargs)


def head_service(*, cluster_ip: str = "None", node_port: int | None = None) -> dict[str, Any]:
    port: dict[str, Any] = {"name": "dashboard", "port": 8265, "targetPort": 8265}
    if node_port is not None:
        port["nodePort"] = node_port
    labels = {
        "ray.io/cluster": "demo",
        "ray.io/node-type": "head",
        "ray.io/identifier": "demo-head",
    }
    return {
        "metadata": {"name": "demo-head-svc", "namespace": "ns1", "labels": labels},
        "spec": {"clusterIP": cluster_ip, "ports": [port]},
    }
