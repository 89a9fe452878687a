"""A local Pod's container as its process sees it: volumes and environment, read from the API
server and written under the Pod's directory, and the sandbox spec that mounts them.

`PodViews.prepare` reads the ConfigMaps, Secrets, PersistentVolumeClaims and PersistentVolumes
the container names (planned by `volumes.py`), writes the files of ConfigMap, Secret and
downward API volumes under `<pod dir>/volumes/<volume>`, makes emptyDirs there, and writes
`sandbox.json` for `sandbox.py`: every mount at its `mountPath` and `subPath`, the Pod's own
`/tmp` and `/etc/hosts`, and (for a Ray node) its Ray temp dir at Ray's default `/tmp/ray`.
Secret contents go only into files of mode the Pod asks and into the process's environment,
never into a log line, an Event or the spec.

Where user namespaces are not allowed, `sandboxed=False` gives the older view: the same files,
and environment values naming a mount path pointed at its local directory.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray_operator.localray.plan import rewrite_paths
from ray_operator.localray.volumes import (
    Claim,
    DownwardFiles,
    EmptyDir,
    EnvSources,
    FileContent,
    HostPath,
    KeyFiles,
    Projected,
    UnmountableVolumeError,
    VolumeMount,
    as_text,
    config_map_files_data,
    container_env,
    container_mounts,
    decoded_secret_data,
    downward_api_files,
    env_sources_named,
    host_path_of_volume,
    key_files,
)
from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.errors import NotFound
from ray_operator.spec.kinds import (
    CONFIG_MAP,
    JSON,
    PERSISTENT_VOLUME,
    PERSISTENT_VOLUME_CLAIM,
    SECRET,
    Kind,
)

Object = Mapping[str, Any]
RAY_DEFAULT_TEMP_DIR = "/tmp/ray"
IMAGE_HOME = "/home/ray"
"""The Ray images' working directory, used when the container names none and it exists."""


@dataclass(frozen=True, slots=True)
class PodView:
    """What a container's process is started with."""

    env: dict[str, str]
    """The container's own environment (literal, `valueFrom`, `envFrom`)."""
    working_dir: str
    spec_path: Path | None
    """The sandbox spec; None when the process runs without namespaces of its own."""
    local_dirs: dict[str, str] = field(default_factory=dict)
    """Without a sandbox: mount path → the directory standing for it."""

    def localised(self, text: str) -> str:
        """`text` with mount paths pointed at their local directories (only without a sandbox:
        in one, mount paths are real)."""
        return text if self.spec_path is not None else rewrite_paths(text, self.local_dirs)


class PodViews:
    """Prepares Pods' views; one per agent (it holds the client)."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def prepare(
        self,
        pod: Object,
        container: Object,
        *,
        pod_dir: Path,
        pod_ip: str,
        argv: Sequence[str],
        sandboxed: bool,
        ray_temp_dir: Path | None = None,
        head_temp_dir: Path | None = None,
        spec_file: str = "sandbox.json",
    ) -> PodView:
        """Read and write what the container's process needs; UnmountableVolumeError or
        UnresolvableEnvError (raised before any file is written) say why it cannot start.

        `head_temp_dir`: a worker's head's temp dir, shown at its path too: every node of a
        cluster shares its address here, so `ray.init()` on a worker picks the head's raylet (as
        Ray does for nodes on one host) and must reach its sockets. `spec_file`: the sandbox
        spec's name in `pod_dir` (one per container of the Pod)."""
        namespace = str(pod["metadata"].get("namespace") or "")
        sources = await self._env_sources(namespace, container)
        env = container_env(pod, container, sources=sources, pod_ip=pod_ip)
        mounts = [
            mount
            for mount in container_mounts(pod, container)
            # The node's own temp dir is shown there (KubeRay's `ray-logs` emptyDir is for sharing
            # it with a sidecar, which runs beside it here).
            if not (ray_temp_dir is not None and mount.mount_path == RAY_DEFAULT_TEMP_DIR)
        ]
        spec_mounts = [await self._source(pod, mount, pod_dir) for mount in mounts]
        working_dir = _working_dir(container, mounts, pod_dir=pod_dir, sandboxed=sandboxed)
        if not sandboxed:
            local_dirs = {
                mount.mount_path: spec["source"]
                for mount, spec in zip(mounts, spec_mounts, strict=True)
                if not mount.sub_path and "source" in spec
            }
            return PodView(env=env, working_dir=working_dir, spec_path=None, local_dirs=local_dirs)
        if ray_temp_dir is not None:
            for target in (str(ray_temp_dir), RAY_DEFAULT_TEMP_DIR):
                spec_mounts.append({"source": str(ray_temp_dir), "target": target})
        if head_temp_dir is not None:
            spec_mounts.append({"source": str(head_temp_dir), "target": str(head_temp_dir)})
        hosts = pod_dir / "hosts"
        name = str(pod["metadata"].get("name") or "")
        await asyncio.to_thread(_write_hosts, hosts, f"{pod_ip}\t{name}\n")
        spec_mounts.append({"source": str(hosts), "target": "/etc/hosts"})
        private_tmp = pod_dir / "tmp"
        private_tmp.mkdir(parents=True, exist_ok=True)
        spec = {
            "argv": list(argv),
            "working_dir": working_dir,
            "private_tmp": str(private_tmp),
            "mounts": spec_mounts,
        }
        spec_path = pod_dir / spec_file
        await asyncio.to_thread(spec_path.write_text, json.dumps(spec, indent=1))
        return PodView(env=env, working_dir=working_dir, spec_path=spec_path)

    async def _env_sources(self, namespace: str, container: Object) -> EnvSources:
        config_map_names, secret_names = env_sources_named(container)
        config_maps = {}
        for name in sorted(config_map_names):
            if (found := await self._get(CONFIG_MAP, namespace, name)) is not None:
                config_maps[name] = {str(k): str(v) for k, v in (found.get("data") or {}).items()}
        secrets = {}
        for name in sorted(secret_names):
            if (found := await self._get(SECRET, namespace, name)) is not None:
                secrets[name] = as_text(decoded_secret_data(found))
        return EnvSources(config_maps=config_maps, secrets=secrets)

    async def _source(self, pod: Object, mount: VolumeMount, pod_dir: Path) -> dict[str, Any]:
        """The sandbox spec's entry for one mount (its files written first)."""
        source = mount.source
        read_only = mount.read_only or mount.written_by_agent
        if isinstance(source, EmptyDir) and source.memory and not mount.sub_path:
            return {"tmpfs_size": source.size_limit, "target": mount.mount_path}
        if isinstance(source, HostPath):
            base, own = Path(source.path), False
        elif isinstance(source, Claim):
            base, own = Path(await self._claimed_host_path(pod, source)), False
            read_only = read_only or source.read_only
        else:
            base, own = pod_dir / "volumes" / mount.volume, True
            files = await self._files(pod, source)
            await asyncio.to_thread(_write_volume, base, files)
        path = base / mount.sub_path if mount.sub_path else base
        if own and mount.sub_path and not path.exists():
            # As the kubelet: a missing subPath of the Pod's own volume is made (a directory).
            await asyncio.to_thread(path.mkdir, parents=True)
        if not path.exists():
            raise UnmountableVolumeError(
                f"volume {mount.volume!r}: {path} does not exist on this machine (the local Ray "
                "agent makes nothing outside its own directory)"
            )
        return {"source": str(path), "target": mount.mount_path, "read_only": read_only}

    async def _files(
        self, pod: Object, source: KeyFiles | DownwardFiles | Projected | EmptyDir
    ) -> dict[str, tuple[FileContent, int]]:
        if isinstance(source, EmptyDir):
            return {}
        parts = source.sources if isinstance(source, Projected) else (source,)
        files: dict[str, tuple[FileContent, int]] = {}
        for part in parts:
            if isinstance(part, DownwardFiles):
                files.update(downward_api_files(part, pod))
            else:
                files.update(key_files(part, await self._key_data(pod, part)))
        return files

    async def _key_data(self, pod: Object, source: KeyFiles) -> Mapping[str, FileContent] | None:
        namespace = str(pod["metadata"].get("namespace") or "")
        kind = CONFIG_MAP if source.kind == "ConfigMap" else SECRET
        found = await self._get(kind, namespace, source.name)
        if found is None:
            return None
        if source.kind == "Secret":
            return decoded_secret_data(found)
        return config_map_files_data(found)

    async def _claimed_host_path(self, pod: Object, source: Claim) -> str:
        namespace = str(pod["metadata"].get("namespace") or "")
        claim = await self._get(PERSISTENT_VOLUME_CLAIM, namespace, source.claim_name)
        what = f"PersistentVolumeClaim {source.claim_name!r}"
        if claim is None:
            raise UnmountableVolumeError(f"{what} does not exist")
        volume_name = str((claim.get("spec") or {}).get("volumeName") or "")
        if (claim.get("status") or {}).get("phase") != "Bound" or not volume_name:
            raise UnmountableVolumeError(f"{what} is not bound to a PersistentVolume yet")
        volume = await self._get(PERSISTENT_VOLUME, None, volume_name)
        host_path = None if volume is None else host_path_of_volume(volume)
        if host_path is None:
            raise UnmountableVolumeError(
                f"{what} is bound to PersistentVolume {volume_name!r}, which is no hostPath "
                "volume; local Pods can mount only hostPath PersistentVolumes"
            )
        return host_path

    async def _get(self, kind: Kind[JSON], namespace: str | None, name: str) -> Object | None:
        try:
            return await self._client.get(kind, name, namespace=namespace)
        except NotFound:
            return None


def _working_dir(
    container: Object, mounts: Iterable[VolumeMount], *, pod_dir: Path, sandboxed: bool
) -> str:
    """The container's `workingDir`, else the Ray images' `/home/ray` where the Pod's view has
    it, else the Pod's directory."""
    named = str(container.get("workingDir") or "")
    if named.startswith("/") and (sandboxed or os.path.isdir(named)):
        return named
    made_home = any(mount.mount_path.startswith(IMAGE_HOME + "/") for mount in mounts)
    if os.path.isdir(IMAGE_HOME) or (sandboxed and made_home):
        return IMAGE_HOME
    return str(pod_dir)


def _write_volume(directory: Path, files: Mapping[str, tuple[FileContent, int]]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for relative, (content, mode) in files.items():
        path = directory / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode() if isinstance(content, str) else content
        # Created with its mode, never wider first: a Secret's file may be 0400.
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            os.fchmod(file.fileno(), mode)


def _write_hosts(path: Path, line: str) -> None:
    try:
        machine = Path("/etc/hosts").read_text()
    except OSError:
        machine = "127.0.0.1\tlocalhost\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(machine.rstrip("\n") + "\n" + line)
