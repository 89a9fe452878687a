"""What a local Pod's container sees, planned as a kubelet would: its volume mounts, the files of
its ConfigMap, Secret and downward API volumes, and its environment with `valueFrom`/`envFrom`."""

from __future__ import annotations

from typing import Any

import pytest
from ray_operator.localray.volumes import (
    Claim,
    DownwardFiles,
    EmptyDir,
    EnvSources,
    HostPath,
    KeyFiles,
    Projected,
    UnmountableVolumeError,
    UnresolvableEnvError,
    config_map_contents,
    container_env,
    container_mounts,
    downward_api_files,
    key_files,
)

POD: dict[str, Any] = {
    "metadata": {
        "name": "head-abc",
        "namespace": "team",
        "uid": "u-1",
        "labels": {"ray.io/cluster": "c", "app": 'say "hi"'},
        "annotations": {"note": "x"},
    },
    "spec": {
        "nodeName": "kwok-node",
        "volumes": [
            {
                "name": "code",
                "configMap": {
                    "name": "code-cm",
                    "defaultMode": 0o755,
                    "items": [
                        {"key": "a", "path": "sub/a.py", "mode": 0o600},
                        {"key": "b", "path": "../escape.py"},
                    ],
                },
            },
            {"name": "creds", "secret": {"secretName": "creds", "optional": True}},
            {
                "name": "info",
                "downwardAPI": {
                    "items": [
                        {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                        {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                    ]
                },
            },
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
            {"name": "scratch", "emptyDir": {}},
            {"name": "data", "hostPath": {"path": "/srv/data"}},
            {"name": "claim", "persistentVolumeClaim": {"claimName": "pvc", "readOnly": True}},
            {
                "name": "bundle",
                "projected": {
                    "sources": [
                        {"secret": {"name": "creds"}},
                        {"serviceAccountToken": {"path": "token"}},
                        {"configMap": {"name": "code-cm"}},
                    ]
                },
            },
        ],
    },
}


def mounts_of(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"volumeMounts": list(entries)}


def test_every_local_volume_kind_is_planned_at_its_mount_path_parents_first() -> None:
    container = mounts_of(
        {"name": "code", "mountPath": "/home/ray/samples/deep/"},
        {"name": "code", "mountPath": "/home/ray/one.py", "subPath": "sub/a.py"},
        {"name": "creds", "mountPath": "/etc/creds"},
        {"name": "info", "mountPath": "/etc/podinfo"},
        {"name": "shm", "mountPath": "/dev/shm"},
        {"name": "scratch", "mountPath": "/scratch", "readOnly": True},
        {"name": "data", "mountPath": "/data"},
        {"name": "claim", "mountPath": "/claimed"},
        {"name": "bundle", "mountPath": "/bundle"},
    )
    mounts = {mount.mount_path: mount for mount in container_mounts(POD, container)}
    assert [m.mount_path.count("/") for m in container_mounts(POD, container)] == sorted(
        m.mount_path.count("/") for m in mounts.values()
    )
    code = mounts["/home/ray/samples/deep"]
    assert code.source == KeyFiles("ConfigMap", "code-cm", (("a", "sub/a.py", 0o600),), 0o755)
    assert code.written_by_agent
    assert not code.read_only
    assert mounts["/home/ray/one.py"].sub_path == "sub/a.py"
    assert mounts["/etc/creds"].source == KeyFiles("Secret", "creds", optional=True)
    assert isinstance(mounts["/etc/podinfo"].source, DownwardFiles)
    assert mounts["/dev/shm"].source == EmptyDir(memory=True, size_limit=1024**3)
    assert mounts["/scratch"].source == EmptyDir()
    assert mounts["/scratch"].read_only
    assert not mounts["/scratch"].written_by_agent
    assert mounts["/data"].source == HostPath("/srv/data")
    assert mounts["/claimed"].source == Claim("pvc", read_only=True)
    bundle = mounts["/bundle"].source
    assert isinstance(bundle, Projected)
    assert [part.name for part in bundle.sources if isinstance(part, KeyFiles)] == [
        "creds",
        "code-cm",
    ]


@pytest.mark.parametrize(
    ("volume", "mount", "message"),
    [
        (
            {"name": "v", "nfs": {"server": "x", "path": "/"}},
            {"name": "v", "mountPath": "/v"},
            "volume 'v' (nfs) cannot be made on this machine",
        ),
        (
            {"name": "v", "emptyDir": {}},
            {"name": "v", "mountPath": "/v", "subPath": "../up"},
            "subPath '../up' leaves it",
        ),
        ({"name": "v", "emptyDir": {}}, {"name": "w", "mountPath": "/w"}, "'w' is mounted but"),
        (
            {"name": "v", "hostPath": {"path": "relative"}},
            {"name": "v", "mountPath": "/v"},
            "hostPath 'relative' is not clean",
        ),
    ],
)
def test_a_volume_the_agent_cannot_make_is_refused_by_name(
    volume: dict[str, Any], mount: dict[str, Any], message: str
) -> None:
    pod = {"metadata": POD["metadata"], "spec": {"volumes": [volume]}}
    with pytest.raises(
        UnmountableVolumeError, match=message.replace("(", r"\(").replace(")", r"\)")
    ):
        container_mounts(pod, mounts_of(mount))


def test_key_files_are_laid_out_as_the_kubelet_does() -> None:
    every_key = KeyFiles("ConfigMap", "cm")
    assert key_files(every_key, {"main.py": "x", "../up": "y"}) == {"main.py": ("x", 0o644)}
    picked = KeyFiles("Secret", "s", (("a", "sub/a", 0o400), ("b", "b", None)), 0o640)
    assert key_files(picked, {"a": b"1", "b": b"2", "c": b"3"}) == {
        "sub/a": (b"1", 0o400),
        "b": (b"2", 0o640),
    }
    with pytest.raises(UnmountableVolumeError, match="Secret 's' has no key 'b'"):
        key_files(picked, {"a": b"1"})
    with pytest.raises(UnmountableVolumeError, match="ConfigMap 'cm' does not exist"):
        key_files(every_key, None)
    assert key_files(KeyFiles("Secret", "s", optional=True), None) == {}


def test_a_config_maps_binary_data_keys_are_files_too() -> None:
    """KubeRay's e2e tests ship their job scripts (counter.py, ...) as `binaryData`."""
    config_map = {"data": {"a.txt": "text"}, "binaryData": {"counter.py": "aW1wb3J0IHJheQ=="}}

    contents = config_map_contents(config_map)

    assert contents == {"a.txt": "text", "counter.py": b"import ray"}
    assert key_files(KeyFiles("ConfigMap", "jobs"), contents)["counter.py"] == (
        b"import ray",
        0o644,
    )


def test_downward_api_files_hold_the_pods_fields() -> None:
    source = DownwardFiles(
        (
            ("name", "metadata.name", None),
            ("labels", "metadata.labels", None),
            ("cluster", "metadata.labels['ray.io/cluster']", 0o600),
        )
    )
    assert downward_api_files(source, POD) == {
        "name": ("head-abc", 0o644),
        "labels": ('app="say \\"hi\\""\nray.io/cluster="c"', 0o644),
        "cluster": ("c", 0o600),
    }


def test_env_takes_env_from_then_value_from_as_the_kubelet_does() -> None:
    container = {
        "resources": {"limits": {"cpu": "1500m", "memory": "1Gi"}},
        "envFrom": [
            {"configMapRef": {"name": "settings"}, "prefix": "S_"},
            {"secretRef": {"name": "absent", "optional": True}},
        ],
        "env": [
            {"name": "LITERAL", "value": "v"},
            {"name": "S_MODE", "value": "overridden"},
            {
                "name": "REDIS_PASSWORD",
                "valueFrom": {"secretKeyRef": {"name": "redis", "key": "pw"}},
            },
            {
                "name": "OPTIONAL",
                "valueFrom": {"configMapKeyRef": {"name": "nope", "key": "k", "optional": True}},
            },
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {
                "name": "CLUSTER",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['ray.io/cluster']"}},
            },
            {"name": "CPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {
                "name": "MEMORY_MI",
                "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}},
            },
        ],
    }
    sources = EnvSources(
        config_maps={"settings": {"MODE": "fast", "bad key": "x"}},
        secrets={"redis": {"pw": "s3cret"}},
    )
    assert container_env(POD, container, sources=sources, pod_ip="127.9.9.9") == {
        "S_MODE": "overridden",
        "LITERAL": "v",
        "REDIS_PASSWORD": "s3cret",
        "POD": "head-abc",
        "NS": "team",
        "UID": "u-1",
        "IP": "127.9.9.9",
        "NODE": "kwok-node",
        "CLUSTER": "c",
        "CPUS": "2",
        "MEMORY_MI": "1024",
    }


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "redis", "key": "pw"}}},
            "env PW: secretKeyRef Secret 'redis' not found",
        ),
        (
            {"name": "K", "valueFrom": {"configMapKeyRef": {"name": "present", "key": "k"}}},
            "env K: configMapKeyRef ConfigMap 'present' has no key 'k'",
        ),
        (
            {"name": "F", "valueFrom": {"fieldRef": {"fieldPath": "spec.containers"}}},
            "fieldRef 'spec.containers' is not a field a Pod can read",
        ),
    ],
)
def test_an_unresolvable_reference_is_named_and_no_value_is_told(
    entry: dict[str, Any], message: str
) -> None:
    sources = EnvSources(config_maps={"present": {"other": "secret-ish"}})
    with pytest.raises(UnresolvableEnvError, match=message) as raised:
        container_env(POD, {"env": [entry]}, sources=sources, pod_ip="")
    assert "secret-ish" not in str(raised.value)
