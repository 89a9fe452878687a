"""The objects a local control plane writes into itself or its directory: the fake Node KWOK
manages, hostPath PersistentVolumes for claims without a StorageClass, and kube-apiserver's audit
Policy. Pure: manifests in, nothing written."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

FAKE_NODE_NAME = "kwok-node-0"
# Enough for the samples' claims (the largest asks 50Gi); hostPath capacity is not enforced.
LOCAL_VOLUMES = 4
LOCAL_VOLUME_SIZE = "1Ti"


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
