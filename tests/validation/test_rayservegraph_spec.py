"""Specification: a RayServeGraph's spec is checked field by field, every problem at once, each
message naming its field path — the same messages in the webhook and in the controller."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ray_operator.validation.rayservegraph import (
    poll_interval_seconds,
    rayservegraph_errors,
    validate_rayservegraph,
)

from tests.builders.clusters import raycluster
from tests.validation.servegraphs import graph


def with_source(**source: Any) -> dict[str, Any]:
    manifest = graph()
    manifest["spec"]["source"].update(source)
    return manifest


def test_a_complete_graph_is_valid() -> None:
    assert validate_rayservegraph(graph()) == []


def test_source_and_cluster_spec_are_required() -> None:
    manifest = graph()
    del manifest["spec"]["source"], manifest["spec"]["rayClusterSpec"]
    assert validate_rayservegraph(manifest) == [
        "spec.source: Required value: where the ServeGraph document is fetched from",
        "spec.rayClusterSpec: Required value: the RayCluster that runs the Serve application",
    ]


def test_a_missing_spec_is_one_error() -> None:
    assert validate_rayservegraph({"metadata": {"name": "x"}}) == [
        "spec: Required value: a RayServeGraph needs spec.source and spec.rayClusterSpec"
    ]


def test_http_is_refused_unless_insecure_http_is_allowed() -> None:
    url = "http://registry.example.com/graph.pb"
    assert validate_rayservegraph(with_source(url=url)) == [
        "spec.source.url: Forbidden: http:// sends the token in clear text; use https, "
        "or set allowInsecureHTTP"
    ]
    assert validate_rayservegraph(with_source(url=url, allowInsecureHTTP=True)) == []


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "ftp://registry.example.com/g",
            'Invalid value: "ftp://registry.example.com/g": the scheme',
        ),
        ("https:///graph.pb", 'Invalid value: "https:///graph.pb": the URL has no host'),
        ("https://host:99999/g", 'Invalid value: "<omitted>": not a URL'),
        ("", "Required value"),
    ],
)
def test_urls_that_cannot_be_fetched_are_refused(url: str, message: str) -> None:
    (error,) = validate_rayservegraph(with_source(url=url))
    assert error.startswith(f"spec.source.url: {message}")


@pytest.mark.parametrize(
    ("host", "what"),
    [
        ("169.254.169.254", "a cloud metadata address (169.254.169.254)"),
        ("168.63.129.16", "a cloud metadata address (168.63.129.16)"),  # Azure WireServer
        ("[fd00:ec2::254]", "a cloud metadata address (fd00:ec2::254)"),
        ("[fd20:ce::254]", "a cloud metadata address (fd20:ce::254)"),
        ("100.100.100.200", "a cloud metadata address (100.100.100.200)"),
        ("[::ffff:168.63.129.16]", "a cloud metadata address (168.63.129.16)"),
        ("169.254.10.1", "a link-local address (169.254.10.1)"),
        ("0.0.0.0", "an unspecified address (0.0.0.0)"),
        ("2130706433", "a numeric host that is not a canonical IP address"),
    ],
)
def test_a_url_naming_an_address_the_fetch_always_refuses_is_refused_by_admission(
    host: str, what: str
) -> None:
    (error,) = validate_rayservegraph(with_source(url=f"https://{host}/latest/meta-data/"))

    assert error.startswith("spec.source.url: Invalid value: ")
    assert error.endswith(f"the host is {what}: the operator never fetches from it")


@pytest.mark.parametrize(
    "url", ["https://127.0.0.1:8443/g.pb", "https://10.0.0.5/g.pb", "https://metadata.example/g"]
)
def test_loopback_private_addresses_and_names_are_left_to_the_fetch(url: str) -> None:
    assert validate_rayservegraph(with_source(url=url)) == []


def test_credentials_in_the_url_are_refused_and_never_shown() -> None:
    url = "https://alice:hunter2@registry.example.com/graph.pb?token=s3cr3t"
    (error,) = validate_rayservegraph(with_source(url=url))
    assert error == (
        "spec.source.url: Forbidden: no user or password in the URL: put the token in "
        "tokenSecretRef"
    )
    other = validate_rayservegraph(with_source(url="ftp://bob:pw@h.example/x?token=s3cr3t"))
    assert not any("s3cr3t" in e or "pw" in e or "bob" in e for e in other)


def test_an_overlong_url_is_refused_without_echoing_it() -> None:
    (error,) = validate_rayservegraph(with_source(url="https://h.example/" + "a" * 3000))
    assert error == "spec.source.url: Too long: may not be more than 2048 bytes"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("timeoutSeconds", 0, "Invalid value: 0: must be between 1 and 300"),
        ("timeoutSeconds", 301, "Invalid value: 301: must be between 1 and 300"),
        ("timeoutSeconds", "30", 'Invalid value: "30": must be an integer'),
        ("maxBytes", 0, "Invalid value: 0: must be between 1 and 67108864"),
        ("maxBytes", 2**70, f"Invalid value: {2**70}: must be between 1 and 67108864"),
    ],
)
def test_bounds_of_the_fetch(field: str, value: Any, message: str) -> None:
    assert validate_rayservegraph(with_source(**{field: value})) == [
        f"spec.source.{field}: {message}"
    ]


@pytest.mark.parametrize(("text", "seconds"), [("0s", 0), ("0", 0), ("10s", 10), ("1h30m", 5400)])
def test_poll_intervals_of_zero_or_at_least_ten_seconds_are_valid(text: str, seconds: int) -> None:
    assert poll_interval_seconds(text) == seconds
    assert validate_rayservegraph(with_source(pollInterval=text)) == []


@pytest.mark.parametrize(
    ("text", "detail"),
    [
        ("5s", "must be 0 (no polling) or at least 10s"),
        ("-1m", "must not be negative"),
        ("soon", 'must be a duration such as "30s", "5m" or "1h" (or "0s": no polling)'),
        ("9" * 1000, 'must be a duration such as "30s", "5m" or "1h" (or "0s": no polling)'),
    ],
)
def test_poll_intervals_that_would_hammer_the_server_or_cannot_be_read(
    text: str, detail: str
) -> None:
    (error,) = validate_rayservegraph(with_source(pollInterval=text))
    assert error.startswith("spec.source.pollInterval: Invalid value: ")
    assert error.endswith(detail)


@pytest.mark.parametrize(
    "path",
    ["spec.source.tokenSecretRef", "spec.source.caBundleSecretRef", "spec.refresh.secretRef"],
)
def test_every_secret_reference_needs_a_valid_name_and_key(path: str) -> None:
    manifest = graph()
    parent = manifest["spec"]["source"] if path.startswith("spec.source") else manifest["spec"]
    if path == "spec.refresh.secretRef":
        parent = parent["refresh"]
    parent[path.rsplit(".", 1)[1]] = {"name": "Not_A_Name", "key": "a/b"}
    assert validate_rayservegraph(manifest) == [
        f'{path}.name: Invalid value: "Not_A_Name": must be a DNS-1123 subdomain (a Secret name)',
        f"{path}.key: Invalid value: \"a/b\": must consist of alphanumeric characters, '-', '_' "
        "or '.'",
    ]
    parent[path.rsplit(".", 1)[1]] = {}
    assert validate_rayservegraph(manifest) == [
        f"{path}.name: Required value: the Secret's name",
        f"{path}.key: Required value: the key in the Secret's data",
    ]


def test_cluster_spec_is_checked_with_the_raycluster_rules_under_its_own_path() -> None:
    cluster = raycluster(groups=[{"groupName": "workers", "minReplicas": 3, "maxReplicas": 1}])
    errors = validate_rayservegraph(graph(rayClusterSpec=cluster["spec"]))
    assert "spec.rayClusterSpec.workerGroupSpecs[0].minReplicas: Invalid value: 3: " in " ".join(
        errors
    )
    assert all(e.startswith("spec.rayClusterSpec.") for e in errors)


def test_cluster_spec_gets_the_rayservice_rules_too() -> None:
    cluster = raycluster()["spec"]
    cluster["headGroupSpec"]["headService"] = {"metadata": {"name": "fixed"}}
    assert validate_rayservegraph(graph(rayClusterSpec=cluster)) == [
        "spec.rayClusterSpec.headGroupSpec.headService.metadata.name: Forbidden: the RayService "
        "names the head Service of each of its clusters"
    ]


def test_upgrade_strategy_and_deletion_delay_follow_the_rayservice_rules() -> None:
    errors = validate_rayservegraph(
        graph(upgradeStrategy={"type": "Sometimes"}, rayClusterDeletionDelaySeconds=-1)
    )
    assert errors == [
        "spec.rayClusterDeletionDelaySeconds: Invalid value: -1: must be greater than or equal "
        "to 0",
        'spec.upgradeStrategy.type: Unsupported value: "Sometimes": supported values: '
        '"NewClusterWithIncrementalUpgrade", "NewCluster", "None"',
    ]


def test_the_rayservice_name_is_the_service_name_or_the_graph_name() -> None:
    long_name = "g" * 48  # the RayService's cluster adds 6 characters to a 53-character limit
    manifest = graph()
    manifest["metadata"]["name"] = long_name
    assert validate_rayservegraph(manifest) == [
        "metadata.name: Too long: may not be more than 47 bytes"
    ]
    manifest["spec"]["serviceName"] = "short"
    assert validate_rayservegraph(manifest) == []
    manifest["spec"]["serviceName"] = "Bad_Name"
    (error,) = validate_rayservegraph(manifest)
    assert error.startswith('spec.serviceName: Invalid value: "Bad_Name": a DNS-1035 label')


def test_serve_http_port_is_a_port() -> None:
    assert validate_rayservegraph(graph(serveHttpOptions={"host": "0.0.0.0", "port": 8000})) == []
    assert validate_rayservegraph(graph(serveHttpOptions={"port": 70000})) == [
        "spec.serveHttpOptions.port: Invalid value: 70000: must be between 1 and 65535"
    ]


def test_every_problem_is_reported_at_once() -> None:
    manifest = with_source(url="http://h.example/g", timeoutSeconds=0, pollInterval="1s")
    manifest["spec"]["refresh"] = {"secretRef": {"name": "", "key": "k"}}
    paths = [error.field for error in rayservegraph_errors(manifest)]
    assert paths == [
        "spec.source.url",
        "spec.source.timeoutSeconds",
        "spec.source.pollInterval",
        "spec.refresh.secretRef.name",
    ]


def test_validation_does_not_change_the_object() -> None:
    manifest = graph(upgradeStrategy={"type": "NewCluster"})
    before = copy.deepcopy(manifest)
    validate_rayservegraph(manifest)
    assert manifest == before
