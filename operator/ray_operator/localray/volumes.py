"""What a local Pod's container sees, as a kubelet would give it: pure planning for the agent.

- Its volume mounts (`container_mounts`): each names a source the agent can make locally —
  ConfigMap, Secret and downward API files (read-only, as in a kubelet), an emptyDir (a directory
  of the Pod's, or a tmpfs for `medium: Memory`), a hostPath, a PersistentVolumeClaim (bound to a
  hostPath PersistentVolume), and projected volumes of the file sources — at its `mountPath`
  and `subPath`, read-only where the Pod says so. Anything else is refused with the volume's name.
- The files of a ConfigMap, Secret or downward API volume (`key_files`, `downward_api_files`).
- Its environment (`container_env`): literal values, `valueFrom` (`configMapKeyRef`,
  `secretKeyRef`, `fieldRef`, `resourceFieldRef`) and `envFrom`, from objects the agent read;
  a reference that cannot be resolved and is not optional raises `UnresolvableEnvError` naming it
  (the kubelet's CreateContainerConfigError). Values are never put in a message.
Nothing here does I/O.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ray_operator.spec.quantity import InvalidQuantityError, Quantity

Object = Mapping[str, Any]
KeyKind = Literal["ConfigMap", "Secret"]
FileContent = str | bytes

MAX_FILE_MODE = 0o777
_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]{0,252}")
# A path inside a volume: no `..`, no absolute part, no empty segment.
_RELATIVE_PATH = re.compile(r"[^/\0]+(/[^/\0]+)*")
_INDEXED_FIELD = re.compile(r"metadata\.(labels|annotations)\['([^'\]]{1,317})'\]")


class UnmountableVolumeError(ValueError):
    """A volume or mount the agent cannot give a local Pod; the message names it."""


class UnresolvableEnvError(ValueError):
    """An env reference that names nothing and is not optional; the message names the reference."""


@dataclass(frozen=True, slots=True)
class KeyFiles:
    """The keys of a ConfigMap or Secret as files (every key by name, or only the listed items)."""

    kind: KeyKind
    name: str
    items: tuple[tuple[str, str, int | None], ...] = ()
    """(key, path inside the volume, mode or None for `default_mode`)."""
    default_mode: int = 0o644
    optional: bool = False


@dataclass(frozen=True, slots=True)
class DownwardFiles:
    """Downward API files: (path inside the volume, field path, mode or None)."""

    items: tuple[tuple[str, str, int | None], ...]
    default_mode: int = 0o644


@dataclass(frozen=True, slots=True)
class EmptyDir:
    memory: bool = False
    size_limit: int | None = None
    """Bytes of a `medium: Memory` emptyDir (a tmpfs); None: unbounded."""


@dataclass(frozen=True, slots=True)
class HostPath:
    path: str


@dataclass(frozen=True, slots=True)
class Claim:
    """A PersistentVolumeClaim: the agent resolves it to its bound PersistentVolume's hostPath."""

    claim_name: str
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class Projected:
    sources: tuple[KeyFiles | DownwardFiles, ...]


VolumeSource = KeyFiles | DownwardFiles | EmptyDir | HostPath | Claim | Projected


@dataclass(frozen=True, slots=True)
class VolumeMount:
    """One `volumeMounts` entry of the container, with the volume it names."""

    volume: str
    source: VolumeSource
    mount_path: str
    sub_path: str = ""
    read_only: bool = False

    @property
    def written_by_agent(self) -> bool:
        """Files the agent writes from API objects (read-only to the Pod, as in a kubelet)."""
        return isinstance(self.source, KeyFiles | DownwardFiles | Projected)


@dataclass(frozen=True, slots=True)
class EnvSources:
    """The ConfigMaps and Secrets a container's env names, read by the agent: name → data
    (Secret data base64-decoded as the API serves it); a name absent from a map does not exist."""

    config_maps: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    secrets: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


def container_mounts(pod: Object, container: Object) -> tuple[VolumeMount, ...]:
    """The container's volume mounts, parents before children; UnmountableVolumeError says
    which one cannot be given locally."""
    volumes = {
        str(volume.get("name")): volume for volume in (pod.get("spec") or {}).get("volumes") or ()
    }
    mounts = []
    for mount in container.get("volumeMounts") or ():
        name = str(mount.get("name") or "")
        path = str(mount.get("mountPath") or "")
        if not path.startswith("/") or "\0" in path or ".." in path.split("/"):
            raise UnmountableVolumeError(f"volume {name!r}: mountPath {path[:100]!r} is not clean")
        sub_path = str(mount.get("subPath") or "")
        if sub_path and not _is_inside(sub_path):
            raise UnmountableVolumeError(f"volume {name!r}: subPath {sub_path[:100]!r} leaves it")
        if name not in volumes:
            raise UnmountableVolumeError(f"volume {name!r} is mounted but not defined")
        mounts.append(
            VolumeMount(
                volume=name,
                source=volume_source(volumes[name]),
                mount_path=path.rstrip("/") or "/",
                sub_path=sub_path,
                read_only=bool(mount.get("readOnly")),
            )
        )
    return tuple(sorted(mounts, key=lambda mount: mount.mount_path.count("/")))


def volume_source(volume: Object) -> VolumeSource:
    """What a Pod volume is made of; UnmountableVolumeError for a kind the agent cannot make."""
    name = str(volume.get("name"))
    if isinstance(volume.get("configMap"), Mapping):
        return _key_files("ConfigMap", volume["configMap"], "name")
    if isinstance(volume.get("secret"), Mapping):
        return _key_files("Secret", volume["secret"], "secretName")
    if isinstance(volume.get("downwardAPI"), Mapping):
        return _downward_files(volume["downwardAPI"])
    if isinstance(volume.get("emptyDir"), Mapping):
        return _empty_dir(name, volume["emptyDir"])
    if isinstance(volume.get("hostPath"), Mapping):
        return HostPath(path=_host_path(name, volume["hostPath"]))
    if isinstance(volume.get("persistentVolumeClaim"), Mapping):
        claim = volume["persistentVolumeClaim"]
        return Claim(str(claim.get("claimName") or ""), read_only=bool(claim.get("readOnly")))
    if isinstance(volume.get("projected"), Mapping):
        return _projected(name, volume["projected"])
    kinds = sorted(key for key in volume if key != "name")
    raise UnmountableVolumeError(
        f"volume {name!r} ({', '.join(kinds)[:80] or 'no source'}) cannot be made on this "
        "machine; local Pods get configMap, secret, downwardAPI, emptyDir, hostPath, projected "
        "and persistentVolumeClaim (hostPath PersistentVolume) volumes"
    )


def host_path_of_volume(volume: Object) -> str | None:
    """The hostPath a PersistentVolume stands for, or None when it is something else."""
    host_path = (volume.get("spec") or {}).get("hostPath")
    if not isinstance(host_path, Mapping):
        return None
    return _host_path(str((volume.get("metadata") or {}).get("name")), host_path)


def key_files(
    source: KeyFiles, data: Mapping[str, FileContent] | None
) -> dict[str, tuple[FileContent, int]]:
    """Relative path → (content, mode) of a ConfigMap's or Secret's volume (None: it does not
    exist); UnmountableVolumeError when it, or a listed key, is missing and not optional."""
    if data is None:
        if source.optional:
            return {}
        raise UnmountableVolumeError(f"{source.kind} {source.name!r} does not exist")
    if not source.items:
        return {key: (value, source.default_mode) for key, value in data.items() if _is_inside(key)}
    files: dict[str, tuple[FileContent, int]] = {}
    for key, path, mode in source.items:
        if key not in data:
            if source.optional:
                continue
            raise UnmountableVolumeError(f"{source.kind} {source.name!r} has no key {key!r}")
        files[path] = (data[key], source.default_mode if mode is None else mode)
    return files


def downward_api_files(source: DownwardFiles, pod: Object) -> dict[str, tuple[FileContent, int]]:
    """Relative path → (content, mode) of a downward API volume, as the kubelet writes them."""
    files: dict[str, tuple[FileContent, int]] = {}
    for path, field_path, mode in source.items:
        if field_path in ("metadata.labels", "metadata.annotations"):
            values = (pod.get("metadata") or {}).get(field_path.split(".")[1]) or {}
            content = "\n".join(f"{key}={json.dumps(str(values[key]))}" for key in sorted(values))
        else:
            content = pod_field(pod, field_path, pod_ip="")
        files[path] = (content, source.default_mode if mode is None else mode)
    return files


def pod_field(pod: Object, field_path: str, *, pod_ip: str) -> str:
    """A `fieldRef` of the Pod (`status.podIP` and `status.hostIP` are `pod_ip`, the local
    address its process has); UnresolvableEnvError for a path the kubelet would refuse."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    simple = {
        "metadata.name": metadata.get("name"),
        "metadata.namespace": metadata.get("namespace"),
        "metadata.uid": metadata.get("uid"),
        "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName"),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": pod_ip,
        "status.hostIPs": pod_ip,
    }
    if field_path in simple:
        return str(simple[field_path] or "")
    if indexed := _INDEXED_FIELD.fullmatch(field_path):
        return str((metadata.get(indexed[1]) or {}).get(indexed[2], ""))
    raise UnresolvableEnvError(f"fieldRef {field_path[:80]!r} is not a field a Pod can read")


def env_sources_named(container: Object) -> tuple[set[str], set[str]]:
    """(ConfigMap names, Secret names) the container's `env` and `envFrom` read."""
    config_maps: set[str] = set()
    secrets: set[str] = set()
    for entry in container.get("envFrom") or ():
        if name := (entry.get("configMapRef") or {}).get("name"):
            config_maps.add(str(name))
        if name := (entry.get("secretRef") or {}).get("name"):
            secrets.add(str(name))
    for entry in container.get("env") or ():
        value_from = entry.get("valueFrom") or {}
        if name := (value_from.get("configMapKeyRef") or {}).get("name"):
            config_maps.add(str(name))
        if name := (value_from.get("secretKeyRef") or {}).get("name"):
            secrets.add(str(name))
    return config_maps, secrets


def container_env(
    pod: Object, container: Object, *, sources: EnvSources, pod_ip: str
) -> dict[str, str]:
    """The container's environment as a kubelet builds it: `envFrom` first, then `env` in order
    (later names win); UnresolvableEnvError names the first reference that cannot be read."""
    env: dict[str, str] = {}
    for entry in container.get("envFrom") or ():
        env.update(_env_from(entry, sources))
    for entry in container.get("env") or ():
        name = entry.get("name")
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            continue
        if "valueFrom" not in entry:
            env[name] = str(entry.get("value") or "")
            continue
        value = _value_from(name, entry.get("valueFrom") or {}, pod, container, sources, pod_ip)
        if value is not None:
            env[name] = value
    return env


def _env_from(entry: Object, sources: EnvSources) -> dict[str, str]:
    prefix = str(entry.get("prefix") or "")
    if isinstance(entry.get("configMapRef"), Mapping):
        kind, ref, known = "ConfigMap", entry["configMapRef"], sources.config_maps
    elif isinstance(entry.get("secretRef"), Mapping):
        kind, ref, known = "Secret", entry["secretRef"], sources.secrets
    else:
        return {}
    data = known.get(str(ref.get("name") or ""))
    if data is None:
        if ref.get("optional"):
            return {}
        raise UnresolvableEnvError(f"envFrom: {kind} {str(ref.get('name'))[:253]!r} not found")
    # As the kubelet: keys that are no valid variable name are left out.
    return {prefix + key: value for key, value in data.items() if _ENV_NAME.fullmatch(prefix + key)}


def _value_from(
    name: str,
    value_from: Object,
    pod: Object,
    container: Object,
    sources: EnvSources,
    pod_ip: str,
) -> str | None:
    for ref_kind, kind, known in (
        ("configMapKeyRef", "ConfigMap", sources.config_maps),
        ("secretKeyRef", "Secret", sources.secrets),
    ):
        if isinstance(value_from.get(ref_kind), Mapping):
            ref = value_from[ref_kind]
            object_name, key = str(ref.get("name") or ""), str(ref.get("key") or "")
            data = known.get(object_name)
            if data is not None and key in data:
                return data[key]
            if ref.get("optional"):
                return None
            missing = "not found" if data is None else f"has no key {key[:253]!r}"
            raise UnresolvableEnvError(
                f"env {name}: {ref_kind} {kind} {object_name[:253]!r} {missing}"
            )
    if isinstance(value_from.get("fieldRef"), Mapping):
        return pod_field(pod, str(value_from["fieldRef"].get("fieldPath") or ""), pod_ip=pod_ip)
    if isinstance(value_from.get("resourceFieldRef"), Mapping):
        return _resource_field(name, value_from["resourceFieldRef"], container)
    raise UnresolvableEnvError(f"env {name}: valueFrom names no source the agent knows")


def _resource_field(name: str, ref: Object, container: Object) -> str:
    """`limits.cpu` and the like, in cores (rounded up) or bytes, divided by `divisor`."""
    resource = str(ref.get("resource") or "")
    kind, _, what = resource.partition(".")
    if kind not in ("limits", "requests") or what not in ("cpu", "memory", "ephemeral-storage"):
        raise UnresolvableEnvError(f"env {name}: resourceFieldRef {resource[:60]!r} is unknown")
    amount = ((container.get("resources") or {}).get(kind) or {}).get(what)
    if amount is None and kind == "requests":
        amount = ((container.get("resources") or {}).get("limits") or {}).get(what)
    try:
        divisor = Quantity.parse(ref.get("divisor") or "1").amount
        value = Quantity.parse(amount).amount if amount is not None else None
    except InvalidQuantityError as error:
        raise UnresolvableEnvError(f"env {name}: resourceFieldRef {resource}: {error}") from None
    if value is None:
        # No limit: the kubelet gives the node's allocatable amount, which a local Pod has not.
        raise UnresolvableEnvError(f"env {name}: resourceFieldRef {resource}: the Pod sets none")
    return str(math.ceil(value / (divisor or 1)))


def _key_files(kind: KeyKind, source: Object, name_field: str) -> KeyFiles:
    default_mode = _mode(source.get("defaultMode"), 0o644)
    items = tuple(
        (str(item["key"]), str(item["path"]), _mode(item.get("mode"), None))
        for item in source.get("items") or ()
        if item.get("key") and _is_inside(str(item.get("path") or ""))
    )
    return KeyFiles(
        kind=kind,
        name=str(source.get(name_field) or ""),
        items=items,
        default_mode=default_mode or 0o644,
        optional=bool(source.get("optional")),
    )


def _downward_files(source: Object) -> DownwardFiles:
    items = []
    for item in source.get("items") or ():
        path = str(item.get("path") or "")
        field_path = str((item.get("fieldRef") or {}).get("fieldPath") or "")
        if not _is_inside(path):
            raise UnmountableVolumeError(f"downwardAPI path {path[:100]!r} leaves the volume")
        if not field_path:
            raise UnmountableVolumeError(
                f"downwardAPI {path[:100]!r}: only fieldRef items are made locally"
            )
        items.append((path, field_path, _mode(item.get("mode"), None)))
    return DownwardFiles(
        items=tuple(items), default_mode=_mode(source.get("defaultMode"), 0o644) or 0o644
    )


def _projected(name: str, source: Object) -> Projected:
    default_mode = _mode(source.get("defaultMode"), 0o644) or 0o644
    parts: list[KeyFiles | DownwardFiles] = []
    for part in source.get("sources") or ():
        if isinstance(part.get("configMap"), Mapping):
            found: KeyFiles | DownwardFiles = _key_files("ConfigMap", part["configMap"], "name")
        elif isinstance(part.get("secret"), Mapping):
            found = _key_files("Secret", part["secret"], "name")
        elif isinstance(part.get("downwardAPI"), Mapping):
            found = _downward_files(part["downwardAPI"])
        elif "serviceAccountToken" in part:
            continue  # no token is lent to a local process: the file is simply absent
        else:
            kinds = ", ".join(sorted(part))[:60]
            raise UnmountableVolumeError(
                f"projected volume {name!r}: a {kinds} source cannot be made on this machine"
            )
        parts.append(_with_default_mode(found, default_mode))
    return Projected(tuple(parts))


def _with_default_mode(part: KeyFiles | DownwardFiles, mode: int) -> KeyFiles | DownwardFiles:
    if isinstance(part, KeyFiles):
        return KeyFiles(part.kind, part.name, part.items, mode, part.optional)
    return DownwardFiles(part.items, mode)


def _empty_dir(name: str, source: Object) -> EmptyDir:
    if source.get("medium") != "Memory":
        return EmptyDir()
    limit = source.get("sizeLimit")
    try:
        size = None if limit is None else Quantity.parse(limit).value()
    except InvalidQuantityError as error:
        raise UnmountableVolumeError(f"volume {name!r}: sizeLimit: {error}") from None
    return EmptyDir(memory=True, size_limit=size)


def _host_path(name: str, source: Object) -> str:
    path = str(source.get("path") or "")
    if not path.startswith("/") or "\0" in path or ".." in path.split("/"):
        raise UnmountableVolumeError(f"volume {name!r}: hostPath {path[:100]!r} is not clean")
    return path


def _mode(value: object, default: int | None) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_FILE_MODE:
        return value
    return default


def _is_inside(path: str) -> bool:
    """A relative path that stays inside its volume's directory."""
    return bool(_RELATIVE_PATH.fullmatch(path)) and ".." not in path.split("/")


def decoded_secret_data(secret: Object) -> dict[str, bytes]:
    """A Secret's `data` (base64, as the API serves it); undecodable values are left out."""
    return _decoded(secret.get("data"))


def config_map_files_data(config_map: Object) -> dict[str, FileContent]:
    """What a ConfigMap volume holds, as the kubelet mounts it: its `data` as text and its
    `binaryData` (base64, as the API serves it) as bytes; the API server keeps their keys apart."""
    text: dict[str, FileContent] = {
        str(key): str(value) for key, value in (config_map.get("data") or {}).items()
    }
    return {**text, **_decoded(config_map.get("binaryData"))}


def _decoded(encoded: object) -> dict[str, bytes]:
    decoded = {}
    for key, value in (encoded if isinstance(encoded, Mapping) else {}).items():
        try:
            decoded[str(key)] = base64.b64decode(str(value), validate=True)
        except ValueError:
            continue
    return decoded


def as_text(data: Mapping[str, bytes]) -> dict[str, str]:
    """Values that are UTF-8 text (what an env variable can hold)."""
    text = {}
    for key, value in data.items():
        try:
            text[key] = value.decode()
        except UnicodeDecodeError:
            continue
    return text
