"""Planning a local Redis for the GCS fault-tolerance samples: which Pods, what config, and how a
head's Redis address and password reach it (pure functions, no I/O)."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from ray_operator.localray.plan import UnplannablePodError
from ray_operator.localray.redis_plan import (
    LocalRedis,
    RedisConfigSource,
    credential_secrets,
    is_redis_image,
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


def redis_pod(
    container: dict[str, Any], *, volumes: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "redis-abc",
            "namespace": "ns",
            "uid": "u-1",
            "labels": {"app": "redis"},
        },
        "spec": {"containers": [{"name": "redis", **container}], "volumes": volumes or []},
    }


SAMPLE_CONTAINER = {
    "image": "redis:7.4.0",
    "command": ["sh", "-c", "redis-server /usr/local/etc/redis/redis.conf"],
    "ports": [{"containerPort": 6379}],
    "volumeMounts": [
        {"name": "config", "mountPath": "/usr/local/etc/redis/redis.conf", "subPath": "redis.conf"}
    ],
}
SAMPLE_VOLUMES = [{"name": "config", "configMap": {"name": "redis-config"}}]


@pytest.mark.parametrize(
    ("image", "is_redis"),
    [
        ("redis", True),
        ("redis:7.4.0", True),
        ("docker.io/library/redis:7@sha256:abc", True),
        ("library/redis", True),
        ("bitnami/redis:7", False),
        ("myregistry:5000/redis", False),
        ("rayproject/ray:2.46.0", False),
        ("redis-stack", False),
    ],
)
def test_only_the_official_redis_image_counts(image: str, is_redis: bool) -> None:
    assert is_redis_image(image) is is_redis


def test_the_samples_redis_pod_reads_its_config_from_the_config_map_key() -> None:
    plan = plan_redis_pod(redis_pod(SAMPLE_CONTAINER, volumes=SAMPLE_VOLUMES))
    assert plan is not None
    assert plan.config_path == "/usr/local/etc/redis/redis.conf"
    assert plan.config_source == RedisConfigSource("ConfigMap", "redis-config", "redis.conf")
    assert plan.container_ports == {"": 6379}


def test_a_whole_secret_volume_and_command_line_options_are_read() -> None:
    container = {
        "image": "redis",
        "args": ["/etc/redis/redis.conf", "--requirepass", "s3cret", "--appendonly", "yes"],
        "volumeMounts": [{"name": "conf", "mountPath": "/etc/redis"}],
    }
    volumes = [{"name": "conf", "secret": {"secretName": "conf", "items": [
        {"key": "the-config", "path": "redis.conf"}
    ]}}]  # fmt: skip
    plan = plan_redis_pod(redis_pod(container, volumes=volumes))
    assert plan is not None
    assert plan.config_source == RedisConfigSource("Secret", "conf", "the-config")
    settings = parse_redis_config("", plan.options)
    assert (settings.password, settings.appendonly) == ("s3cret", True)


def test_a_pod_of_another_image_or_program_is_no_redis_pod() -> None:
    assert plan_redis_pod(redis_pod({**SAMPLE_CONTAINER, "image": "busybox"})) is None
    assert plan_redis_pod(redis_pod({"image": "redis", "command": ["redis-cli", "ping"]})) is None


def test_a_shell_script_around_redis_server_is_refused_with_why() -> None:
    scripted = {"image": "redis", "command": ["sh", "-c", "rm -rf ~ ; redis-server"]}
    with pytest.raises(UnplannablePodError, match="shell script"):
        plan_redis_pod(redis_pod(scripted))


def test_only_the_allowed_directives_are_taken_from_a_users_config() -> None:
    settings = parse_redis_config(
        "dir /etc\nloadmodule /tmp/evil.so\ninclude /etc/passwd\nport 6380\n"
        'requirepass "pa ss"\nappendonly yes\nsave 60 1000\nsave 300 10\nbind 0.0.0.0\n'
    )
    assert settings.port == 6380
    assert settings.password == "pa ss"
    assert settings.appendonly is True
    assert settings.save == ("60", "1000", "300", "10")
    assert settings.ignored == ("dir", "loadmodule", "include", "bind")
    assert "pa ss" not in repr(settings)


def test_save_with_an_empty_string_turns_snapshots_off() -> None:
    assert parse_redis_config('save 60 1\nsave ""').save == ()


@pytest.mark.parametrize(
    "line", ["port 0", "port 70000", "port x", "appendonly maybe", "save 60", "save a b"]
)
def test_a_value_redis_would_refuse_is_refused(line: str) -> None:
    with pytest.raises(UnplannablePodError):
        parse_redis_config(line)


def test_an_oversized_config_is_refused() -> None:
    with pytest.raises(UnplannablePodError, match="over"):
        parse_redis_config("# x\n" * 20000)


def test_the_agents_config_binds_loopback_keeps_files_in_its_directory_and_quotes_values() -> None:
    settings = parse_redis_config('requirepass "a\\nloadmodule /x.so"\nsave ""')
    text = redis_config_text(settings, address="127.1.2.3", port=6379, directory="/state/r/d")
    lines = text.splitlines()
    assert lines[:3] == ["bind 127.1.2.3", "port 6379", 'dir "/state/r/d"']
    assert 'save ""' in lines
    assert not any(line.startswith("loadmodule") for line in lines)
    [password] = [line for line in lines if line.startswith("requirepass")]
    assert password == 'requirepass "a\\x0aloadmodule\\x20/x.so"'


def test_the_pod_listens_on_its_configured_port_else_its_container_port() -> None:
    plan = plan_redis_pod(redis_pod({**SAMPLE_CONTAINER, "ports": [{"containerPort": 7000}]}))
    assert plan is not None
    assert listen_port(plan, parse_redis_config("")) == 7000
    assert listen_port(plan, parse_redis_config("port 6390")) == 6390


def service(name: str = "redis", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"selector": {"app": "redis"}, "ports": [{"port": 6379}], **spec},
    }


LOCAL = LocalRedis("ns", {"app": "redis", "pod-template-hash": "x"}, {"": 6379}, "127.9.9.9", 6379)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("redis:6379", "127.9.9.9:6379"),
        ("redis", "127.9.9.9:6379"),
        ("redis.ns:6379", "127.9.9.9:6379"),
        ("redis.ns.svc:6379", "127.9.9.9:6379"),
        ("redis.ns.svc.cluster.local:6379", "127.9.9.9:6379"),
        ("redis://redis:6379", "redis://127.9.9.9:6379"),
        ("redis://:pw@redis:6379/0", "redis://:pw@127.9.9.9:6379/0"),
        ("redis:6379,redis:6379", "127.9.9.9:6379,127.9.9.9:6379"),
        ("redis.other:6379", "redis.other:6379"),
        ("redis:6380", "redis:6380"),
        ("elsewhere.example.com:6379", "elsewhere.example.com:6379"),
    ],
)
def test_a_redis_address_naming_the_service_reaches_the_local_redis(
    value: str, expected: str
) -> None:
    assert local_redis_address(value, [service()], [LOCAL]) == expected


def test_a_service_selecting_no_local_redis_leaves_the_address_alone() -> None:
    other = service(selector={"app": "other"})
    assert local_redis_address("redis:6379", [other], [LOCAL]) == "redis:6379"
    elsewhere = LocalRedis("other", LOCAL.labels, LOCAL.container_ports, "127.9.9.8", 6379)
    assert local_redis_address("redis:6379", [service()], [elsewhere]) == "redis:6379"


def test_a_named_target_port_is_the_redis_containers_port() -> None:
    named = service(ports=[{"port": 16379, "targetPort": "redis"}])
    local = LocalRedis("ns", {"app": "redis"}, {"redis": 6379}, "127.9.9.9", 6379)
    assert local_redis_address("redis:16379", [named], [local]) == "127.9.9.9:6379"


def test_a_head_waits_only_for_an_address_naming_a_service_of_its_namespace() -> None:
    assert names_a_service("redis:6379", "ns")
    assert names_a_service("redis://:pw@redis.ns.svc.cluster.local:6379", "ns")
    assert not names_a_service("redis.other:6379", "ns")
    assert not names_a_service("10.0.0.5:6379", "ns")


def head_container(password_param: str, *env: dict[str, Any]) -> dict[str, Any]:
    line = f"ray start --head  --block  --num-cpus=0  --redis-password={password_param} "
    return {"env": [*env, {"name": "KUBERAY_GEN_RAY_START_CMD", "value": line}]}


def test_the_heads_password_is_read_from_its_secret_through_its_env() -> None:
    container = head_container(
        "$REDIS_PASSWORD",
        {"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "pw", "key": "k"}}},
    )
    assert credential_secrets(container) == {"pw"}
    secrets = {"pw": {"k": base64.b64encode(b"5241590000000000").decode()}}
    assert redis_credentials(container, secrets) == {"redis-password": "5241590000000000"}


def test_a_literal_or_literal_env_password_is_taken_as_it_is() -> None:
    assert redis_credentials(head_container("plain"), {}) == {"redis-password": "plain"}
    container = head_container("${PW}", {"name": "PW", "value": "from-env"})
    assert credential_secrets(container) == set()
    assert redis_credentials(container, {}) == {"redis-password": "from-env"}


def test_a_secret_without_the_key_is_refused_without_its_data() -> None:
    container = head_container(
        "$REDIS_PASSWORD",
        {"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "pw", "key": "k"}}},
    )
    with pytest.raises(UnplannablePodError, match="Secret pw has no key k"):
        redis_credentials(container, {"pw": {"other": "c2VjcmV0"}})


def test_each_redis_pod_gets_its_own_loopback_address() -> None:
    first, second = redis_address("uid-1"), redis_address("uid-2")
    assert first != second
    assert first.startswith("127.")
    assert first != "127.0.0.1"


def test_an_address_is_shown_without_the_password_of_its_uri() -> None:
    assert without_credentials("redis://user:s3cret@redis:6379/0") == "redis://redis:6379/0"
    assert without_credentials("redis:6379") == "redis:6379"
