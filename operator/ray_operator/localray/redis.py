"""Local Redis servers for the GCS fault-tolerance samples, run by the local Ray agent.

A Pod on the fake node with a container of the Redis image running `redis-server` (KubeRay's
samples: a Deployment or StatefulSet `redis` behind a Service `redis`) gets a real `redis-server`
from this machine's PATH, configured as `redis_plan.py` plans it; a local Ray head whose
`RAY_REDIS_ADDRESS` names that Service reaches it there (`for_head`). A Pod deleted (or gone) has
its server stopped and its files removed, as an emptyDir would be.

Why this is safe although the operator did not create these Pods (the agent otherwise runs only
Pods it did, `scope.py`): nothing of the Pod runs. The program is the machine's own
`redis-server`, never the Pod's command, image or entrypoint; the Pod's command is only read to
find its config file and `--options`, and of those only `requirepass`, `port`, `appendonly` and
`save` are used. The config file is the agent's own: it binds a loopback address of its own,
keeps its files under the agent's directory, caps memory, loads no module and includes nothing.
So a Redis Pod anyone creates can start at most `max_servers` capped Redis servers on loopback,
which is all this does (Redis 7's defaults also refuse `CONFIG SET dir` and `MODULE LOAD` to
clients; an older Redis allows them to whoever has the password — that is, to the Pod's owner,
whose Ray code runs on this machine anyway).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import os
import shutil
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray_operator.localray.plan import UnplannablePodError
from ray_operator.localray.probing import first_answer_line
from ray_operator.localray.processes import LocalProcess, ProcessRecords
from ray_operator.localray.redis_plan import (
    ALLOWED_DIRECTIVES,
    RAY_REDIS_ADDRESS_ENV,
    LocalRedis,
    RedisPodPlan,
    RedisSettings,
    credential_secrets,
    listen_port,
    local_redis_address,
    names_a_service,
    parse_redis_config,
    plan_redis_pod,
    redis_address,
    redis_config_text,
    redis_credentials,
    without_credentials,
)
from ray_operator.localray.views import LocalContainer
from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.errors import KubeError, NotFound
from ray_operator.spec.kinds import CONFIG_MAP, SECRET, SERVICE

if TYPE_CHECKING:
    from ray_io.v1_views import Pod

logger = logging.getLogger(__name__)

REDIS_SERVER = "redis-server"
MAX_SERVERS = 8
"""Local Redis servers at once (each is capped at `redis_plan.MAX_MEMORY`)."""

Tell = Callable[["Pod", str, str], bool]
"""The agent's `_tell_once(pod, reason, message)`: a Warning Event the first time."""
Record = Callable[..., None]
"""The agent's `_record(pod, reason=..., message=...)`: a Normal Event."""


@dataclass(frozen=True, slots=True)
class HeadRedis:
    """What a local head needs to reach its Redis: env values and `ray start` flags."""

    env: Mapping[str, str] = field(default_factory=dict)
    flags: tuple[str, ...] = field(default=(), repr=False)
    """`--redis-password=...` and the like: secrets, never logged."""


@dataclass(slots=True)
class _Server:
    pod: Pod
    plan: RedisPodPlan
    process: LocalProcess
    files: Path
    redis: LocalRedis
    loopback_ports: bool = False
    ready: bool = False
    ended_reported: bool = False


class LocalRedisServers:
    """One local `redis-server` per Redis Pod on the fake node; the heads' way to them."""

    def __init__(
        self,
        *,
        client: KubeClient,
        tell: Tell,
        record: Record,
        directory: Path,
        log_path: Callable[[Pod], Path],
        records: ProcessRecords,
        path: str,
        sandboxed: Callable[[Pod], Awaitable[bool]],
        max_servers: int = MAX_SERVERS,
    ) -> None:
        self._client = client
        self._tell = tell
        self._record = record
        self._directory = directory
        self._log_path = log_path
        self._records = records
        self._path = path
        self._sandboxed = sandboxed
        self._max_servers = max_servers
        self._servers: dict[str, _Server] = {}

    async def sync(self, pods: Sequence[Pod]) -> None:
        """Stop the servers whose Pod is gone, start the missing ones, note which answer."""
        wanted: dict[str, tuple[Pod, RedisPodPlan]] = {}
        for pod in pods:
            if _is_live(pod):
                try:
                    plan = plan_redis_pod(pod)
                except UnplannablePodError as error:
                    self._tell(pod, "LocalRedisNotRun", f"no local Redis: {error}")
                    continue
                if plan is not None:
                    wanted[plan.uid] = (pod, plan)
        await asyncio.gather(*(self._stop(uid) for uid in list(self._servers) if uid not in wanted))
        for pod, plan in wanted.values():
            if plan.uid not in self._servers:
                try:
                    await self._start(pod, plan)
                except (KubeError, OSError) as error:
                    self._tell(pod, "LocalRedisNotRun", f"no local Redis yet: {error}")
        for server in self._servers.values():
            await self._check(server)

    def ready(self) -> list[LocalRedis]:
        """The local Redis servers that answer now."""
        return [s.redis for s in self._servers.values() if s.ready and s.process.returncode is None]

    async def for_head(self, pod: Pod, env: Mapping[str, str]) -> HeadRedis | None:
        """A head's Redis address pointed at its local Redis, with its credentials; None while
        that Redis (or a Secret) is not there yet (told once, looked at again next pass)."""
        value = env.get(RAY_REDIS_ADDRESS_ENV)
        if not value:
            return HeadRedis()
        local = await self._local_address(pod, value)
        flags = None if local is None else await self._credential_flags(pod)
        if local is None or flags is None:
            return None
        return HeadRedis(env={RAY_REDIS_ADDRESS_ENV: local}, flags=flags)

    async def local_address(self, namespace: str, value: str) -> str:
        """A `RAY_REDIS_ADDRESS` of `namespace` with each Service of a local Redis pointed at it
        (the rest unchanged)."""
        services = (await self._client.list(SERVICE, namespace=namespace)).items
        return local_redis_address(value, services, self.ready())

    async def _local_address(self, pod: Pod, value: str) -> str | None:
        namespace = pod["metadata"]["namespace"]
        local = await self.local_address(namespace, value)
        if local == value and names_a_service(value, namespace):
            self._tell(
                pod,
                "LocalRedisWaiting",
                f"the head waits for its Redis {without_credentials(value)[:100]!r}: no local "
                "Redis serves that Service yet (a Pod of the redis image running redis-server, "
                "selected by it)",
            )
            return None
        return local

    async def _credential_flags(self, pod: Pod) -> tuple[str, ...] | None:
        """`--redis-password=...` (and username) for the head's `ray start`, as its shell would
        have expanded them from its env and Secrets."""
        namespace = pod["metadata"]["namespace"]
        containers = pod.get("spec", {}).get("containers") or ()
        container: Mapping[str, Any] = dict(containers[0]) if containers else {}
        secrets: dict[str, Mapping[str, str]] = {}
        for name in sorted(credential_secrets(container)):
            try:
                secret = await self._client.get(SECRET, name, namespace=namespace)
            except NotFound:
                self._tell(pod, "LocalRedisWaiting", f"Secret {name} does not exist yet")
                return None
            secrets[name] = secret.get("data") or {}
        try:
            credentials = redis_credentials(container, secrets)
        except UnplannablePodError as error:
            self._tell(pod, "LocalRedisWaiting", f"Redis credentials: {error}")
            return None
        return tuple(f"--{flag}={credentials[flag]}" for flag in sorted(credentials))

    async def stop_all(self) -> None:
        await asyncio.gather(*(self._stop(uid) for uid in list(self._servers)))

    async def _start(self, pod: Pod, plan: RedisPodPlan) -> None:
        """Start the Pod's Redis, unless a cap, a missing `redis-server` or its config says no
        (each told once on the Pod)."""
        if len(self._servers) >= self._max_servers:
            self._tell(
                pod,
                "LocalRedisCapReached",
                f"no local Redis: {self._max_servers} already run; it starts when one is deleted",
            )
            return
        program = shutil.which(REDIS_SERVER, path=self._path)
        if program is None:
            self._tell(
                pod,
                "LocalRedisNotRun",
                "no local Redis: redis-server is not on PATH (install it: apt-get install "
                "redis-server, or brew install redis)",
            )
            return
        settings = await self._settings(pod, plan)
        if settings is not None:
            await self._launch(pod, plan, settings, program=program)

    async def _settings(self, pod: Pod, plan: RedisPodPlan) -> RedisSettings | None:
        """What the agent takes of the Pod's config; None (told) when it cannot be read."""
        config = await self._config_text(pod, plan)
        if config is None:
            return None
        try:
            settings = parse_redis_config(config, plan.options)
        except UnplannablePodError as error:
            self._tell(pod, "LocalRedisNotRun", f"no local Redis: {error}")
            return None
        if settings.ignored:
            logger.debug(
                "%s/%s: Redis directives the agent does not take: %s",
                plan.namespace,
                plan.pod,
                ", ".join(settings.ignored),
            )
        return settings

    async def _launch(
        self, pod: Pod, plan: RedisPodPlan, settings: RedisSettings, *, program: str
    ) -> None:
        address, port = redis_address(plan.uid), listen_port(plan, settings)
        files = self._directory / plan.uid
        text = redis_config_text(
            settings, address=address, port=port, directory=str(files / "data")
        )
        await asyncio.to_thread(_write_config, files, text)
        process = LocalProcess(
            [program, str(files / "redis.conf")],
            env={"PATH": self._path},
            cwd=files / "data",
            log_path=self._log_path(pod),
            records=self._records,
        )
        try:
            await process.start()
        except OSError:
            await asyncio.to_thread(shutil.rmtree, files, True)
            raise
        labels = dict(pod["metadata"].get("labels") or {})
        redis = LocalRedis(plan.namespace, labels, dict(plan.container_ports), address, port)
        self._servers[plan.uid] = _Server(
            pod=pod,
            plan=plan,
            process=process,
            files=files,
            redis=redis,
            # `kubectl exec` finds the server at 127.0.0.1:<port> where namespaces can be made.
            loopback_ports=await self._sandboxed(pod),
        )
        message = (
            f"local redis-server on {address}:{port} (of its config only "
            f"{', '.join(sorted(ALLOWED_DIRECTIVES))} are used); its log: {self._log_path(pod)}"
        )
        logger.info("%s/%s: %s", plan.namespace, plan.pod, message)
        self._record(pod, reason="LocalRedisStarted", message=message)

    def container(self, namespace: str, pod: str, container: str | None) -> LocalContainer | None:
        """`LocalPods`: the Redis container of a local Redis Pod (None: the Pod's first, which
        is the Redis one only when it comes first; the other containers do not run here)."""
        server = self._server(namespace, pod)
        if server is None:
            return None
        plan = server.plan
        spec = server.pod.get("spec", {})
        containers: Sequence[Mapping[str, Any]] = spec.get("containers") or [{}]
        first = str(containers[0].get("name") or "")
        if (container if container is not None else first) != plan.container:
            return None
        process = server.process
        return LocalContainer(
            namespace=namespace,
            pod=pod,
            pod_uid=plan.uid,
            container=plan.container,
            log_path=process.log_path,
            env={**plan.env, "PATH": self._path, "HOSTNAME": pod},
            working_dir=str(server.files / "data"),
            ports=self._ports(server),
            loopback_ports=server.loopback_ports,
            running=process.returncode is None,
        )

    def pod_port(self, namespace: str, pod: str, port: int) -> tuple[str, int] | None:
        """`LocalPods`: where a local Redis Pod's port listens (its Redis port only)."""
        server = self._server(namespace, pod)
        if server is None or server.process.returncode is not None:
            return None
        return self._ports(server).get(port)

    def _server(self, namespace: str, pod: str) -> _Server | None:
        for server in self._servers.values():
            if server.plan.namespace == namespace and server.plan.pod == pod:
                return server
        return None

    @staticmethod
    def _ports(server: _Server) -> dict[int, tuple[str, int]]:
        redis = server.redis
        return {redis.port: (redis.address, redis.port)}

    async def _config_text(self, pod: Pod, plan: RedisPodPlan) -> str | None:
        """The Pod's config file as its volume holds it ("" when it names none)."""
        source = plan.config_source
        if source is None:
            return ""
        kind = CONFIG_MAP if source.kind == "ConfigMap" else SECRET
        try:
            found: Mapping[str, Any] = await self._client.get(
                kind, source.name, namespace=plan.namespace
            )
        except NotFound:
            found = {}
        if source.kind == "ConfigMap":
            text = (found.get("data") or {}).get(source.key)
        else:
            text = _decoded((found.get("data") or {}).get(source.key))
        if text is None and not source.optional:
            self._tell(
                pod,
                "LocalRedisNotRun",
                f"no local Redis yet: {source.kind} {source.name} has no key {source.key}",
            )
            return None
        return str(text or "")

    async def _check(self, server: _Server) -> None:
        code = server.process.returncode
        if code is not None:
            if not server.ended_reported:
                server.ended_reported = True
                self._tell(
                    server.pod,
                    "LocalRedisEnded",
                    f"the local redis-server ended with exit code {code}; delete the Pod to "
                    f"start it again. Last lines of {server.process.log_path}:\n"
                    + server.process.tail(),
                )
            return
        if not server.ready:
            server.ready = await _answers_ping(server.redis.address, server.redis.port)

    async def _stop(self, uid: str) -> None:
        server = self._servers.pop(uid, None)
        if server is None:
            return
        await server.process.stop()
        await asyncio.to_thread(shutil.rmtree, server.files, True)


def _is_live(pod: Pod) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get(
        "phase"
    ) not in ("Succeeded", "Failed")


def _decoded(encoded: str | None) -> str | None:
    if encoded is None:
        return None
    try:
        return base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def _write_config(files: Path, text: str) -> None:
    (files / "data").mkdir(parents=True, exist_ok=True)
    path = files / "redis.conf"
    # Owner-only: it holds the password.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as config:
        config.write(text)


async def _answers_ping(host: str, port: int) -> bool:
    """Whether Redis answers an inline PING (with PONG, or NOAUTH when it wants a password)."""
    answer = await first_answer_line(host, port, b"PING\r\n")
    return answer.startswith((b"+PONG", b"-NOAUTH"))
