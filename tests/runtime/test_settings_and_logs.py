"""`ray-operator run`'s flags and env twins, and the log line formats."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import pytest
from ray_operator.logs import JsonFormatter, PlainFormatter, TextFormatter, about
from ray_operator.runtime import ObjectKey
from ray_operator.settings import (
    Settings,
    add_run_arguments,
    listen_on_loopback,
    settings_from_args,
)
from ray_operator.webhooks import WebhookOptions, add_webhook_arguments, webhook_options_from_args


def parse(*argv: str) -> Settings:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return settings_from_args(parser.parse_args(argv))


def test_defaults_watch_all_namespaces_with_leader_election() -> None:
    settings = parse()
    assert settings.namespaces == ()
    assert settings.leader_elect is True
    assert settings.kubeconfig is None
    assert (settings.health_addr, settings.metrics_addr) == (":8082", ":8080")
    assert settings.identity  # generated, unique per process


def test_flags_set_every_setting() -> None:
    settings = parse(
        "--kubeconfig",
        "/k",
        "--namespace",
        "a",
        "--namespace",
        "b",
        "--no-leader-elect",
        "--lease-name",
        "l",
        "--lease-namespace",
        "ln",
        "--health-addr",
        "127.0.0.1:1",
        "--metrics-addr",
        "127.0.0.1:2",
        "--webhook-port",
        "3",
        "--max-concurrent-reconciles",
        "7",
        "--log-format",
        "json",
        "--log-level",
        "debug",
        "--identity",
        "me",
        "--legacy-clusters",
    )
    assert settings == Settings(
        kubeconfig=Path("/k"),
        namespaces=("a", "b"),
        leader_elect=False,
        lease_name="l",
        lease_namespace="ln",
        health_addr="127.0.0.1:1",
        metrics_addr="127.0.0.1:2",
        webhook_port=3,
        max_concurrent_reconciles=7,
        log_format="json",
        log_level="DEBUG",
        identity="me",
        legacy_clusters=True,
    )


def test_environment_variables_stand_in_for_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_OPERATOR_NAMESPACE", "a,b")
    monkeypatch.setenv("RAY_OPERATOR_LEADER_ELECT", "false")
    monkeypatch.setenv("RAY_OPERATOR_MAX_CONCURRENT_RECONCILES", "9")
    monkeypatch.setenv("RAY_OPERATOR_LOG_FORMAT", "json")
    settings = parse()
    assert settings.namespaces == ("a", "b")
    assert settings.leader_elect is False
    assert settings.max_concurrent_reconciles == 9
    assert settings.log_format == "json"
    # The command line wins.
    assert parse("--leader-elect").leader_elect is True
    assert parse("--namespace", "c").namespaces == ("c",)


def test_serve_graph_fetch_caps_and_allowed_hosts_come_from_flags_or_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    defaults = parse()
    flagged = parse(
        "--serve-graph-max-concurrent-fetches",
        "16",
        "--serve-graph-max-concurrent-fetches-per-namespace",
        "3",
        "--serve-graph-allowed-hosts",
        "Registry.example.com,http://127.0.0.1:8765",
    )
    monkeypatch.setenv("RAY_OPERATOR_SERVE_GRAPH_MAX_CONCURRENT_FETCHES", "5")

    assert (
        defaults.serve_graph_max_concurrent_fetches,
        defaults.serve_graph_max_concurrent_fetches_per_namespace,
    ) == (8, 2)
    assert (
        flagged.serve_graph_max_concurrent_fetches,
        flagged.serve_graph_max_concurrent_fetches_per_namespace,
    ) == (16, 3)
    assert flagged.serve_graph_allowed_hosts == ("registry.example.com", "http://127.0.0.1:8765")
    assert parse().serve_graph_max_concurrent_fetches == 5


@pytest.mark.parametrize("entry", ["registry.example.com/graphs", "ftp://h", "h:99999"])
def test_an_allowed_host_that_names_no_origin_is_refused_at_start(entry: str) -> None:
    with pytest.raises(ValueError, match="--serve-graph-allowed-hosts"):
        parse("--serve-graph-allowed-hosts", entry)


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(AttributeError):
        settings.namespaces = ("x",)  # type: ignore[misc]


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord("ray_operator.test", logging.INFO, __file__, 1, message, None, None)


def test_log_lines_in_a_reconcile_are_prefixed_with_the_object() -> None:
    with about(ObjectKey("RayCluster", "ns", "raycluster-a")):
        line = TextFormatter().format(record("creating head pod"))
    assert line.endswith(" INFO ray_operator.test: ns/raycluster-a: creating head pod")
    assert TextFormatter().format(record("idle")).endswith("ray_operator.test: idle")


def test_json_log_lines_carry_the_object_as_a_field() -> None:
    with about(ObjectKey("RayCluster", "ns", "raycluster-a")):
        entry = json.loads(JsonFormatter().format(record("creating head pod")))
    assert entry["object"] == "ns/raycluster-a"
    assert entry["message"] == "creating head pod"
    assert entry["level"] == "INFO"
    assert entry["time"].endswith("Z")


def test_plain_log_lines_begin_with_the_cluster_name_and_carry_no_timestamp() -> None:
    # The legacy operator's docs: `kubectl logs ... | grep ^example-cluster2:`.
    with about(ObjectKey("RayCluster", "ray", "example-cluster2")):
        line = PlainFormatter().format(record("creating head pod"))
        named_twice = PlainFormatter().format(record("ray/example-cluster2: deleted Pod p"))
    assert line == "example-cluster2: INFO ray_operator.test [ray]: creating head pod"
    assert named_twice == "example-cluster2: INFO ray_operator.test [ray]: deleted Pod p"
    assert PlainFormatter().format(record("idle")) == "INFO ray_operator.test: idle"


def test_the_plain_log_format_is_a_choice_of_the_flag() -> None:
    assert parse("--log-format", "plain").log_format == "plain"
    with pytest.raises(SystemExit):
        parse("--log-format", "fancy")


def webhook_options(*argv: str) -> WebhookOptions:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    add_webhook_arguments(parser)
    args = parser.parse_args(argv)
    return webhook_options_from_args(args, port=args.webhook_port, default_namespace="ns")


@pytest.mark.parametrize("flag", ["--no-webhooks", "--webhook-port=0"])
def test_no_webhooks_and_webhook_port_zero_turn_webhooks_off_even_in_a_pod(
    flag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")  # in a Pod they default to on
    assert webhook_options().enabled is True
    assert webhook_options(flag).enabled is False


def test_webhooks_on_port_zero_is_refused_as_a_contradiction() -> None:
    with pytest.raises(ValueError, match="0 means off"):
        webhook_options("--webhooks", "--webhook-port=0")


@pytest.mark.parametrize(
    ("given", "served"),
    [
        (":8082", "127.0.0.1:8082"),
        ("0.0.0.0:8082", "0.0.0.0:8082"),
        ("127.0.0.1:9000", "127.0.0.1:9000"),
        ("[::]:8080", "[::]:8080"),
    ],
)
def test_dev_mode_listens_on_loopback_unless_a_host_is_given(given: str, served: str) -> None:
    assert listen_on_loopback(given) == served
