"""Redis for GCS fault tolerance on the local plane: pure planning (what runs, where it listens,
and how a local Ray head finds it). Nothing here does I/O; `redis.py` runs what this plans.

KubeRay's GCS fault-tolerance samples deploy Redis themselves: a Deployment (or StatefulSet) whose
Pod runs the `redis` image's `redis-server <config file>` from a ConfigMap, a Service `redis`, and
a head whose `RAY_REDIS_ADDRESS` is `redis:6379` with a password from a Secret. On the fake node
that Pod is a KWOK fake, so the local head would never find a Redis. Here such a Pod becomes a
real `redis-server` from this machine's PATH, run with **our** configuration only:

- it listens on a loopback address of its own (`redis_address`, 127.x.y.z from the Pod's uid)
  at the port the Pod listens on (the config's `port`, else its single containerPort, else 6379);
- it keeps its files in a directory the agent chooses;
- from the user's config (file and `--option` arguments) only `requirepass`, `port`,
  `appendonly` and `save` are taken (`ALLOWED_DIRECTIVES`); everything else (`dir`, `loadmodule`,
  `include`, `logfile`, `bind`, ...) is left out, so a config cannot make redis write anywhere
  else or load code.

Then a head's `RAY_REDIS_ADDRESS` whose host names a Service of the head's namespace (`redis`,
`redis.ns`, `redis.ns.svc`, `redis.ns.svc.cluster.local`, also in a `redis://` URI) that selects
a local Redis Pod is pointed at that Redis (`local_redis_address`), as cluster DNS and the
Service would route it; and the `--redis-password`/`--redis-username` KubeRay put in the head's
`ray start` line (usually `$REDIS_PASSWORD`, an env var from a Secret) are resolved
(`redis_credentials`), since the agent's `ray start` is its own command line, not the Pod's shell.
"""

from __future__ import annotations

import base64
import binascii
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ray_operator.localray.plan import UnplannablePodError, cluster_address, container_env

if TYPE_CHECKING:
    from ray_io.v1_views import Pod

Object = Mapping[str, Any]

ALLOWED_DIRECTIVES = frozenset({"requirepass", "port", "appendonly", "save"})
"""What a user's Redis config may set here; the rest is the agent's (or left at Redis' default)."""
MAX_CONFIG_BYTES = 64 * 1024
"""A larger redis.conf is refused: the agent reads it on its event loop."""
MAX_PASSWORD_BYTES = 1024
MAX_MEMORY = "256mb"
"""Each local Redis is capped: a GCS keeps kilobytes to megabytes of metadata in it."""
DEFAULT_REDIS_PORT = 6379
RAY_REDIS_ADDRESS_ENV = "RAY_REDIS_ADDRESS"
GENERATED_RAY_START_ENV = "KUBERAY_GEN_RAY_START_CMD"
"""The `ray start` line the operator generated for the Pod (the Pod's shell expands it)."""
_CREDENTIAL_FLAGS = ("redis-password", "redis-username")
_CLUSTER_DOMAIN = "cluster.local"
_ENV_REFERENCE = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)
_SHELL_OPERATORS = frozenset({";", "&&", "||", "|", "&", ">", ">>", "<", "(", ")", "`"})


@dataclass(frozen=True, slots=True)
class RedisConfigSource:
    """Where the Pod's config file comes from: a key of a ConfigMap or Secret volume."""

    kind: str
    """"ConfigMap" or "Secret"."""
    name: str
    key: str
    optional: bool = False


@dataclass(frozen=True, slots=True)
class RedisPodPlan:
    """A Pod running the Redis image's `redis-server`, as the agent will run it."""

    namespace: str
    pod: str
    uid: str
    config_path: str | None
    """The config file the Pod's `redis-server` is given (None: none, Redis' defaults)."""
    config_source: RedisConfigSource | None
    """The volume key holding that file (None: not from a volume, so the file is empty here)."""
    options: tuple[str, ...]
    """`--name value...` arguments after the config file, as config lines (`name value...`)."""
    container_ports: Mapping[str, int] = field(default_factory=dict)
    """The Redis container's TCP containerPorts by name ("" for an unnamed one)."""
    container: str = ""
    """The Redis container's name (`kubectl exec -c`, `kubectl logs -c`)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Its literal env values (what a command run in it sees besides PATH)."""


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """What the agent takes from a user's Redis config (file, then `--options`)."""

    port: int | None = None
    password: str | None = field(default=None, repr=False)
    appendonly: bool | None = None
    save: tuple[str, ...] | None = None
    """`save` arguments (pairs of seconds and changes); () for `save ""` (no snapshots)."""
    ignored: tuple[str, ...] = ()
    """Directive names left out (the allow-list is `ALLOWED_DIRECTIVES`), for a debug log."""


@dataclass(frozen=True, slots=True)
class LocalRedis:
    """A local Redis the agent runs now: what a Service selects it by, and where it listens."""

    namespace: str
    labels: Mapping[str, str]
    container_ports: Mapping[str, int]
    address: str
    port: int


def redis_address(pod_uid: str) -> str:
    """The loopback address of a local Redis: 127.x.y.z from its Pod's uid (as a cluster's)."""
    return cluster_address(f"redis/{pod_uid}")


def is_redis_image(image: str) -> bool:
    """The official Redis image (`redis`, `library/redis`, `docker.io/library/redis`, any tag or
    digest): its `redis-server` is the program the agent has an equivalent of."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name = name[: len(name) - len(last)] + last.split(":", 1)[0]
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        name = name.removeprefix(prefix)
    return name.removeprefix("library/") == "redis"


def plan_redis_pod(pod: Pod) -> RedisPodPlan | None:
    """The Redis a Pod runs, or None when it is not a Redis Pod (no container of the Redis image
    running `redis-server`); UnplannablePodError when it is one whose command cannot be read."""
    metadata = pod["metadata"]
    containers: list[Object] = [dict(c) for c in pod.get("spec", {}).get("containers") or ()]
    redis = [c for c in containers if is_redis_image(str(c.get("image") or ""))]
    if not redis:
        return None
    container = redis[0]
    argv = _redis_server_argv(container)
    if argv is None:
        return None
    config_path, options = _config_and_options(argv)
    return RedisPodPlan(
        namespace=metadata.get("namespace", ""),
        pod=metadata["name"],
        uid=metadata.get("uid", ""),
        config_path=config_path,
        config_source=None if config_path is None else _config_source(pod, container, config_path),
        options=options,
        container_ports={
            str(port.get("name") or ""): int(port["containerPort"])
            for port in container.get("ports") or ()
            if port.get("containerPort") and (port.get("protocol") or "TCP") == "TCP"
        },
        container=str(container.get("name") or ""),
        env=container_env(container),
    )


def _redis_server_argv(container: Object) -> list[str] | None:
    """`redis-server`'s arguments (after the program), or None when the container runs something
    else; a `sh -c` line counts only when it is one plain `[exec] redis-server ...` command."""
    command = [str(word) for word in container.get("command") or ()]
    args = [str(word) for word in container.get("args") or ()]
    words = command + args
    # No command: the image's entrypoint, which prefixes `redis-server` to options or a file.
    if not command and (not args or args[0].startswith("-") or args[0].endswith(".conf")):
        return args
    if len(words) >= 3 and words[0] in ("sh", "/bin/sh", "bash", "/bin/bash") and "-c" in words:
        script = words[words.index("-c") + 1 :]
        script = [word for word in script if word != "--"]
        if not script:
            return None
        try:
            words = shlex.split(script[0])
        except ValueError as error:
            raise UnplannablePodError(f"the Redis command line cannot be read: {error}") from None
        if any(word in _SHELL_OPERATORS or "$" in word for word in words):
            raise UnplannablePodError(
                "only a plain `redis-server [config] [--options]` command runs locally; this one "
                "is a shell script"
            )
        if words[:1] == ["exec"]:
            words = words[1:]
    if not words or words[0].rsplit("/", 1)[-1] != "redis-server":
        return None
    return words[1:]


def _config_and_options(argv: Sequence[str]) -> tuple[str | None, tuple[str, ...]]:
    """The config file (a first argument that is no option) and the `--name value...` options,
    each as the config line Redis makes of it."""
    config_path = None
    rest = list(argv)
    if rest and not rest[0].startswith("--") and rest[0] != "-":
        config_path = rest.pop(0)
    options: list[str] = []
    for word in rest:
        if word.startswith("--"):
            options.append(word[2:])
        elif options:
            options[-1] += " " + shlex.quote(word)
    return config_path, tuple(options)


def _config_source(pod: Pod, container: Object, path: str) -> RedisConfigSource | None:
    """The ConfigMap or Secret key a mounted file comes from (a `subPath` mount of that key, or
    a whole volume mounted at the file's directory)."""
    volumes = {str(v.get("name")): dict(v) for v in pod.get("spec", {}).get("volumes") or ()}
    for mount in container.get("volumeMounts") or ():
        volume = volumes.get(str(mount.get("name")))
        mount_path = str(mount.get("mountPath") or "").rstrip("/")
        if volume is None or not mount_path:
            continue
        if mount.get("subPath"):
            relative = str(mount["subPath"]) if mount_path == path else None
        else:
            relative = path[len(mount_path) + 1 :] if path.startswith(mount_path + "/") else None
        if relative:
            found = _volume_key(volume, relative)
            if found is not None:
                return found
    return None


def _volume_key(volume: Object, relative: str) -> RedisConfigSource | None:
    for kind, field_name, name_field in (
        ("ConfigMap", "configMap", "name"),
        ("Secret", "secret", "secretName"),
    ):
        source = volume.get(field_name)
        if not isinstance(source, Mapping) or not source.get(name_field):
            continue
        key = relative
        items = source.get("items") or ()
        if items:
            keys = [str(item.get("key")) for item in items if item.get("path") == relative]
            if not keys:
                return None
            key = keys[0]
        return RedisConfigSource(
            kind=kind, name=str(source[name_field]), key=key, optional=bool(source.get("optional"))
        )
    return None


def parse_redis_config(text: str, options: Sequence[str] = ()) -> RedisSettings:
    """The allowed directives of a redis.conf text and the `--options` after it (later wins, as in
    Redis); UnplannablePodError for a value Redis itself would refuse."""
    if len(text.encode()) > MAX_CONFIG_BYTES:
        raise UnplannablePodError(f"the Redis config is over {MAX_CONFIG_BYTES} bytes")
    port: int | None = None
    password: str | None = None
    appendonly: bool | None = None
    save: list[str] | None = None
    ignored: list[str] = []
    for line in [*text.splitlines(), *options]:
        words = _config_words(line)
        if not words:
            continue
        name, values = words[0].lower(), words[1:]
        if name not in ALLOWED_DIRECTIVES:
            if name not in ignored:
                ignored.append(name[:40])
            continue
        if name == "port":
            port = _port(values)
        elif name == "requirepass":
            password = _password(values)
        elif name == "appendonly":
            appendonly = _yes_no(values)
        else:
            save = _save(values, save)
    return RedisSettings(
        port=port,
        password=password,
        appendonly=appendonly,
        save=None if save is None else tuple(save),
        ignored=tuple(ignored),
    )


def _config_words(line: str) -> list[str]:
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return []
    words = split_redis_args(stripped)
    return words if words is not None else [stripped.split()[0].lower(), "<unreadable>"]


_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "a": "\a"}
# One word of a Redis config line (`sdssplitargs`): a double-quoted string with escapes, a
# single-quoted one, or a bare word; a closing quote must end the word.
_REDIS_WORD = re.compile(r""""((?:\\.|[^"\\])*)"(?=\s|$)|'((?:\\'|[^'])*)'(?=\s|$)|([^\s"']+)""")
_REDIS_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})|\\(.)", re.DOTALL)


def split_redis_args(line: str) -> list[str] | None:
    """A config line's words as Redis reads them; None for quotes Redis would refuse."""
    words: list[str] = []
    position = 0
    while True:
        while position < len(line) and line[position].isspace():
            position += 1
        if position == len(line):
            return words
        match = _REDIS_WORD.match(line, position)
        if match is None:
            return None
        double, single, bare = match.groups()
        if double is not None:
            words.append(_REDIS_ESCAPE.sub(_unescaped, double))
        elif single is not None:
            words.append(single.replace("\\'", "'"))
        else:
            words.append(bare)
        position = match.end()


def _unescaped(match: re.Match[str]) -> str:
    if match.group(1):
        return chr(int(match.group(1), 16))
    return _ESCAPES.get(match.group(2), match.group(2))


def _port(values: Sequence[str]) -> int:
    if len(values) != 1 or not values[0].isdigit() or not 0 < int(values[0]) < 65536:
        raise UnplannablePodError(f"Redis `port {' '.join(values)[:20]}`: not a TCP port")
    return int(values[0])


def _password(values: Sequence[str]) -> str:
    if len(values) != 1 or len(values[0].encode()) > MAX_PASSWORD_BYTES:
        raise UnplannablePodError("Redis `requirepass` takes one value of at most 1024 bytes")
    return values[0]


def _yes_no(values: Sequence[str]) -> bool:
    if len(values) != 1 or values[0].lower() not in ("yes", "no"):
        raise UnplannablePodError(f"Redis `appendonly {' '.join(values)[:20]}`: yes or no")
    return values[0].lower() == "yes"


def _save(values: Sequence[str], before: list[str] | None) -> list[str]:
    if values in ([""], []):
        return []
    if len(values) % 2 or not all(value.isdigit() and len(value) < 10 for value in values):
        raise UnplannablePodError(f"Redis `save {' '.join(values)[:40]}`: pairs of numbers")
    return [*(before or []), *values]


def listen_port(plan: RedisPodPlan, settings: RedisSettings) -> int:
    """Where the Pod's Redis listens: its config's port, else its only containerPort, else 6379."""
    if settings.port is not None:
        return settings.port
    ports = set(plan.container_ports.values())
    return ports.pop() if len(ports) == 1 else DEFAULT_REDIS_PORT


def redis_config_text(settings: RedisSettings, *, address: str, port: int, directory: str) -> str:
    """The whole config the local `redis-server` reads: the agent's lines, then the allowed ones.

    Values are written quoted with every other byte escaped, so no value can start a line."""
    lines = [
        f"bind {address}",
        f"port {port}",
        f"dir {_quoted(directory)}",
        "daemonize no",
        'logfile ""',
        "protected-mode no",
        f"maxmemory {MAX_MEMORY}",
        "maxmemory-policy noeviction",
        f"appendonly {'yes' if settings.appendonly else 'no'}",
    ]
    if settings.save is not None:
        lines.append(f"save {' '.join(settings.save)}" if settings.save else 'save ""')
    if settings.password is not None:
        lines.append(f"requirepass {_quoted(settings.password)}")
    return "\n".join(lines) + "\n"


def _quoted(value: str) -> str:
    """A Redis config string: double-quoted, every byte but letters, digits and `/._-` as \\xHH."""
    safe = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-"
    escaped = "".join(chr(byte) if byte in safe else f"\\x{byte:02x}" for byte in value.encode())
    return f'"{escaped}"'


def local_redis_address(
    value: str, services: Sequence[Object], redis_pods: Sequence[LocalRedis]
) -> str:
    """`value` (a `RAY_REDIS_ADDRESS`: `host:port`, a `redis://` URI, or a comma list of them)
    with each address of a Service (in `services`, the head's namespace's) that selects a local
    Redis pointed at that Redis' own address; anything else unchanged."""
    return ",".join(_localised(part, services, redis_pods) for part in value.split(","))


def _localised(part: str, services: Sequence[Object], redis_pods: Sequence[LocalRedis]) -> str:
    scheme, rest = ("", part)
    if "://" in part:
        scheme, rest = part.split("://", 1)
        scheme += "://"
    netloc, slash, path = rest.partition("/")
    userinfo, at, hostport = netloc.rpartition("@")
    host, colon, port_text = hostport.strip().rpartition(":")
    if not colon:
        host, port_text = hostport.strip(), str(DEFAULT_REDIS_PORT)
    if not port_text.isdigit():
        return part
    target = _service_target(host, int(port_text), services, redis_pods)
    if target is None:
        return part
    return f"{scheme}{userinfo}{at}{target}{slash}{path}"


def _service_target(
    host: str, port: int, services: Sequence[Object], redis_pods: Sequence[LocalRedis]
) -> str | None:
    for service in services:
        metadata = service.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "")
        if host.lower().rstrip(".") not in _service_host_names(
            str(metadata.get("name")), namespace
        ):
            continue
        spec = service.get("spec") or {}
        selector = spec.get("selector") or {}
        if not selector or spec.get("type") == "ExternalName":
            return None
        for service_port in spec.get("ports") or ():
            if service_port.get("port") != port or (service_port.get("protocol") or "TCP") != "TCP":
                continue
            target_port = service_port.get("targetPort") or port
            for redis in redis_pods:
                if redis.namespace == namespace and _selects(selector, redis.labels):
                    wanted = (
                        target_port
                        if isinstance(target_port, int)
                        else redis.container_ports.get(str(target_port))
                    )
                    if wanted == redis.port:
                        return f"{redis.address}:{redis.port}"
    return None


def _service_host_names(name: str, namespace: str) -> set[str]:
    return {
        name,
        f"{name}.{namespace}",
        f"{name}.{namespace}.svc",
        f"{name}.{namespace}.svc.{_CLUSTER_DOMAIN}",
    }


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    return all(labels.get(str(key)) == str(value) for key, value in selector.items())


def without_credentials(value: str) -> str:
    """A Redis address as it may be shown: a URI's `user:password@` left out."""
    return re.sub(r"://[^/@,]*@", "://", value)


def names_a_service(value: str, namespace: str) -> bool:
    """Whether a `RAY_REDIS_ADDRESS` names a Service of `namespace` by any of its DNS names (the
    head then waits for the local Redis behind it rather than start against nothing)."""
    for part in value.split(","):
        rest = part.split("://", 1)[-1].partition("/")[0].rpartition("@")[2]
        host = rest.rpartition(":")[0] if ":" in rest else rest
        labels = host.lower().rstrip(".").split(".")
        if len(labels) == 1 or labels[1:] in (
            [namespace],
            [namespace, "svc"],
            [namespace, "svc", *_CLUSTER_DOMAIN.split(".")],
        ):
            return bool(labels[0])
    return False


def credential_secrets(container: Object) -> set[str]:
    """The Secrets the head's Redis credentials are read from (through `$VAR`s of its env)."""
    refs = _secret_refs(container)
    return {
        refs[name][0]
        for value in _credential_flags(container).values()
        for name in _referenced(value)
        if name in refs
    }


def redis_credentials(
    container: Object, secrets: Mapping[str, Mapping[str, str]]
) -> dict[str, str]:
    """`redis-password`/`redis-username` of the `ray start` line the operator generated for the
    head (`KUBERAY_GEN_RAY_START_CMD`), `$VAR`s expanded from the container's env as its shell
    would: literal values, or `secretKeyRef`s looked up in `secrets` (name → base64 data)."""
    literal = {
        str(entry["name"]): str(entry.get("value") or "")
        for entry in container.get("env") or ()
        if entry.get("name") and "valueFrom" not in entry
    }
    refs = _secret_refs(container)
    return {
        flag: _ENV_REFERENCE.sub(
            lambda match: _env_value(
                match.group("braced") or match.group("bare"), literal, refs, secrets
            ),
            value,
        )
        for flag, value in _credential_flags(container).items()
    }


def _credential_flags(container: Object) -> dict[str, str]:
    """`redis-password`/`redis-username` → their unexpanded values in the generated line."""
    line = ""
    for entry in container.get("env") or ():
        if entry.get("name") == GENERATED_RAY_START_ENV and "value" in entry:
            line = str(entry["value"])
    try:
        words = shlex.split(line)
    except ValueError:
        return {}
    found: dict[str, str] = {}
    for word in words:
        flag, equals, value = word.partition("=")
        if equals and flag.removeprefix("--") in _CREDENTIAL_FLAGS:
            found[flag.removeprefix("--")] = value
    return found


def _referenced(value: str) -> list[str]:
    return [m.group("braced") or m.group("bare") for m in _ENV_REFERENCE.finditer(value)]


def _secret_refs(container: Object) -> dict[str, tuple[str, str]]:
    """Env name → (Secret name, key) of the container's `secretKeyRef` values."""
    refs: dict[str, tuple[str, str]] = {}
    for entry in container.get("env") or ():
        ref = (entry.get("valueFrom") or {}).get("secretKeyRef") or {}
        if entry.get("name") and ref.get("name") and ref.get("key"):
            refs[str(entry["name"])] = (str(ref["name"]), str(ref["key"]))
    return refs


def _env_value(
    name: str,
    literal: Mapping[str, str],
    refs: Mapping[str, tuple[str, str]],
    secrets: Mapping[str, Mapping[str, str]],
) -> str:
    if name in refs:
        secret, key = refs[name]
        encoded = (secrets.get(secret) or {}).get(key)
        if encoded is None:
            raise UnplannablePodError(f"Secret {secret} has no key {key} (env {name})")
        try:
            return base64.b64decode(encoded, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise UnplannablePodError(f"Secret {secret} key {key} is not text") from None
    return literal.get(name, "")
