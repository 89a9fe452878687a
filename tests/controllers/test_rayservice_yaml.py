"""Specification: `serveConfigV2` is read as KubeRay reads it, by admission and controller alike.

KubeRay parses the config with Go's YAML (yaml.v2 under sigs.k8s.io/yaml) and PUTs the result as
JSON. PyYAML's `safe_load` made an unquoted `2024-01-01` a `datetime.date` (the PUT then failed
with a TypeError on every reconcile: never deployed) and kept `5e-3` a string where Go sends a
number. One loader (`bounded_yaml`) now serves validation and the controller: a timestamp
stays the string written, `5e-3` is 0.005. End to end against the run's real Ray head, whose
greeter app answers with `str()` of its `color`: what Serve received is in the answer.
"""

from __future__ import annotations

import random
import secrets
from typing import Any

import pytest
from ray_operator.builders import rayservice as build
from ray_operator.validation.serve_config import serve_config_errors

from tests.controllers.conftest import Harness
from tests.controllers.dashboard_counter import CountingDashboard, counting_dashboard
from tests.controllers.ray_fixtures import StartOperator, auth_secret, ray_head, start_operator
from tests.controllers.rayservices import rayservice, wait_for_answer, wait_ready
from tests.ray_head import RayHead

__all__ = ["auth_secret", "counting_dashboard", "ray_head", "start_operator"]

SERVE_API = "/api/serve/applications/"


def serve_config_text(head: RayHead, *, greeting: str, color: str) -> str:
    """The config as a user writes it: `color` goes in unquoted, so YAML types it."""
    return (
        "http_options:\n"
        "  host: 127.0.0.1\n"
        f"  port: {head.serve_port}\n"
        "applications:\n"
        "  - name: greeter\n"
        "    import_path: greeter:app\n"
        "    route_prefix: /\n"
        "    deployments:\n"
        "      - name: Greeter\n"
        "        user_config:\n"
        f"          greeting: {greeting}\n"
        f"          color: {color}\n"
    )


def parsed_color(text: str) -> Any:
    config = build.serve_config({"spec": {"serveConfigV2": text}})
    return config["applications"][0]["deployments"][0]["user_config"]["color"]


# --- the loader, pure --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "value"),
    [
        pytest.param("2024-01-01", "2024-01-01", id="date-stays-a-string"),
        pytest.param("2024-01-01T10:00:00Z", "2024-01-01T10:00:00Z", id="timestamp-too"),
        pytest.param("5e-3", 0.005, id="exponent-without-dot-is-a-float"),
        pytest.param("1.5", 1.5, id="float"),
        pytest.param("12:30", "12:30", id="no-sexagesimal-integer"),
        pytest.param("yes", True, id="yaml-v2-boolean"),
        pytest.param("y", True, id="yaml-v2-short-boolean"),
        pytest.param("0x1F", 31, id="hex-integer"),
        pytest.param("'5e-3'", "5e-3", id="quoted-stays-a-string"),
    ],
)
def test_scalars_are_typed_as_kuberays_go_yaml_types_them(written: str, value: Any) -> None:
    text = f"applications:\n  - deployments:\n      - user_config:\n          color: {written}\n"
    parsed = parsed_color(text)
    assert parsed == value
    assert type(parsed) is type(value)


def test_admission_reads_the_config_the_controller_puts() -> None:
    # `target_capacity: 5e-3` is a number to both (a string would be refused by admission),
    # and a date-like import path is a string to both (a date would not be a string).
    text = "target_capacity: 5e-3\napplications:\n  - import_path: 2024-01-01\n"
    errors = [str(e) for e in serve_config_errors(text, path="spec.serveConfigV2")]
    assert not any("target_capacity" in e for e in errors), errors
    assert any('import_path: Invalid value: "2024-01-01"' in e for e in errors), errors
    config = build.serve_config({"spec": {"serveConfigV2": text}})
    assert config["target_capacity"] == 0.005
    assert config["applications"][0]["import_path"] == "2024-01-01"


# --- end to end, against the real Ray head ------------------------------------------------------


async def deploy_and_expect(
    harness: Harness,
    start_operator: StartOperator,
    head: RayHead,
    counter: CountingDashboard,
    *,
    name: str,
    color: str,
    answered_color: str,
) -> None:
    await start_operator(dashboards={f"{harness.namespace}/*": counter.url})
    greeting = f"Hi-{secrets.token_hex(3)}"  # a config the shared head never ran: it is PUT
    manifest = rayservice(head, name=name)
    manifest["spec"]["serveConfigV2"] = serve_config_text(head, greeting=greeting, color=color)
    await harness.apply(manifest)
    await wait_ready(harness, name)
    await wait_for_answer(head, f"{greeting}, world! ({answered_color})")
    assert counter.count("PUT", SERVE_API) >= 1


async def test_an_unquoted_date_is_deployed_as_the_string_written(
    harness: Harness,
    start_operator: StartOperator,
    ray_head: RayHead,
    counting_dashboard: CountingDashboard,
) -> None:
    date = f"20{random.randint(30, 99)}-0{random.randint(1, 9)}-1{random.randint(0, 9)}"
    await deploy_and_expect(
        harness,
        start_operator,
        ray_head,
        counting_dashboard,
        name="dated",
        color=date,
        answered_color=date,
    )


async def test_an_exponent_without_a_dot_is_deployed_as_a_number(
    harness: Harness,
    start_operator: StartOperator,
    ray_head: RayHead,
    counting_dashboard: CountingDashboard,
) -> None:
    # Serve's greeter answers with str() of what it got: 0.005 for a number, 5e-3 for a string.
    await deploy_and_expect(
        harness,
        start_operator,
        ray_head,
        counting_dashboard,
        name="exponent",
        color="5e-3",
        answered_color="0.005",
    )
