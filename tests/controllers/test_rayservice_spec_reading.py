"""`RayServiceController.read_spec`: a RayService's spec is validated and its `serveConfigV2`
parsed once per change of the spec, not on every reconcile (a RayService requeues every 2 s, and
PyYAML takes seconds for a config of a megabyte)."""

from __future__ import annotations

import copy
import time
from types import SimpleNamespace
from typing import Any

import yaml
from ray_operator.controllers.rayservice import RayServiceController

from tests.controllers.ray_fixtures import head_only_cluster_spec


def controller() -> RayServiceController:
    # read_spec touches neither the API nor a dashboard: an empty context will do.
    context: Any = SimpleNamespace(store=None, client=None, events=None)
    return RayServiceController(context)


def rayservice(serve_config: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": "s", "namespace": "ns", "uid": "u", "annotations": {}},
        "spec": {
            "serveConfigV2": yaml.safe_dump(serve_config),
            "rayClusterConfig": head_only_cluster_spec(serve=True),
        },
    }


def greeter(greeting: str = "Hello", *, deployments: int = 1) -> dict[str, Any]:
    return {
        "applications": [
            {
                "name": "greeter",
                "import_path": "greeter:app",
                "route_prefix": "/",
                "deployments": [
                    {"name": f"D{i}", "user_config": {"greeting": greeting}}
                    for i in range(deployments)
                ],
            }
        ]
    }


def test_an_unchanged_spec_is_read_once_and_a_changed_one_again() -> None:
    reader = controller()
    service = rayservice(greeter())
    first = reader.read_spec(service)
    assert first.problem is None
    assert first.serve_config["applications"][0]["name"] == "greeter"
    assert reader.read_spec(copy.deepcopy(service)) is first

    edited = rayservice(greeter("Howdy"))
    second = reader.read_spec(edited)
    assert second is not first
    assert second.serve_config_hash != first.serve_config_hash

    annotated = copy.deepcopy(edited)
    annotated["metadata"]["annotations"]["ray.io/initializing-timeout"] = "not a duration"
    third = reader.read_spec(annotated)
    assert third.problem is not None
    assert "ray.io/initializing-timeout" in third.problem
    assert third.serve_config == {}


def test_a_large_serve_config_costs_its_parse_once_not_per_reconcile() -> None:
    reader = controller()
    service = rayservice(greeter(deployments=1500))  # ~100 KB of YAML
    started = time.monotonic()
    reader.read_spec(service)
    first = time.monotonic() - started
    started = time.monotonic()
    for _ in range(10):  # ten reconciles of the same spec
        reader.read_spec(service)
    again = time.monotonic() - started
    assert again < first / 5, (first, again)
    assert again < 0.5
