"""What a real Ray head reports as deployed, against what we would PUT (both directions).

Each case PUTs a Serve config to the run's real head, reads `GET /api/serve/applications/` back
with our client and checks that `serve_config_deployed` takes the config as deployed — so every
normalisation Serve applies (coerced numbers, inherited and renamed logging settings, absent
defaults) is accepted — and that each small change of the same config is NOT taken as deployed,
against the very same answer. The greeter app (tests/serve_apps) only needs to be accepted: no
case waits for it to run.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from ray_operator.dashboard.client import DashboardClient, DashboardEndpoint, DashboardOptions
from ray_operator.status.deployed_serve_config import serve_config_deployed

from tests.ray_head import RayHead

Config = dict[str, Any]


def greeter(**fields: Any) -> Config:
    app: Config = {
        "name": "greeter",
        "import_path": "greeter:app",
        "route_prefix": "/",
        "deployments": [{"name": "Greeter", "user_config": {"greeting": "Hi", "color": "blue"}}],
    }
    app.update(fields)
    return app


def deployment(config: Config, app: int = 0, index: int = 0) -> Config:
    result: Config = config["applications"][app]["deployments"][index]
    return result


def edit(change: Callable[[Config], None]) -> Callable[[Config], Config]:
    def apply(config: Config) -> Config:
        changed = copy.deepcopy(config)
        change(changed)
        return changed

    return apply


@dataclass
class Case:
    name: str
    config: Config
    changes: dict[str, Callable[[Config], Config]] = field(default_factory=dict)


CASES = [
    Case(
        "plain",
        {"applications": [greeter()]},
        {
            "user_config value": edit(lambda c: deployment(c)["user_config"].update(color="red")),
            "route_prefix": edit(lambda c: c["applications"][0].update(route_prefix="/g")),
            "route_prefix dropped": edit(lambda c: c["applications"][0].pop("route_prefix")),
            "import_path": edit(lambda c: c["applications"][0].update(import_path="greeter:bob")),
            "application added": edit(
                lambda c: c["applications"].append(greeter(name="other", route_prefix="/o"))
            ),
            "deployment option added": edit(lambda c: deployment(c).update(num_replicas=2)),
            "target_capacity set": edit(lambda c: c.update(target_capacity=50)),
            "tracing_config set": edit(
                lambda c: c.update(tracing_config={"exporter_import_path": "m:f"})
            ),
        },
    ),
    Case(
        "unnamed application, no route_prefix (Serve fills neither in)",
        {"applications": [{"import_path": "greeter:app"}]},
        {"named": edit(lambda c: c["applications"][0].update(name="default"))},
    ),
    Case(
        "explicit null route_prefix",
        {"applications": [greeter(route_prefix=None)]},
        {"route_prefix /": edit(lambda c: c["applications"][0].update(route_prefix="/"))},
    ),
    Case(
        "numbers Serve coerces to float",
        {
            "applications": [
                greeter(
                    deployments=[
                        {
                            "name": "Greeter",
                            "num_replicas": 1,
                            "max_ongoing_requests": 7,
                            "graceful_shutdown_timeout_s": 3,
                            "ray_actor_options": {"num_cpus": 0, "memory": 1000},
                            "user_config": {"flag": 1},
                        }
                    ]
                )
            ]
        },
        {
            "num_cpus value": edit(lambda c: deployment(c)["ray_actor_options"].update(num_cpus=1)),
            "user_config 1 became true": edit(
                lambda c: deployment(c)["user_config"].update(flag=True)
            ),
            "user_config 1 became '1'": edit(
                lambda c: deployment(c)["user_config"].update(flag="1")
            ),
        },
    ),
    Case(
        "runtime_env with env_vars, per application and per deployment",
        {
            "applications": [
                greeter(
                    runtime_env={"env_vars": {"TOKEN": "s3cr3t", "N": "1"}},
                    deployments=[
                        {
                            "name": "Greeter",
                            "ray_actor_options": {"runtime_env": {"env_vars": {"A": "b"}}},
                        }
                    ],
                )
            ]
        },
        {
            "env var value": edit(
                lambda c: c["applications"][0]["runtime_env"]["env_vars"].update(TOKEN="other")
            ),
            "deployment env var added": edit(
                lambda c: deployment(c)["ray_actor_options"]["runtime_env"]["env_vars"].update(
                    B="c"
                )
            ),
        },
    ),
    Case(
        "top-level logging_config inherited, numeric level, repeated attributes",
        {
            "logging_config": {
                "log_level": 20,
                "encoding": "JSON",
                "additional_log_standard_attrs": ["name", "lineno", "name"],
            },
            "applications": [
                greeter(),
                greeter(name="other", route_prefix="/o", logging_config={"log_level": "DEBUG"}),
            ],
        },
        {
            "shared level": edit(lambda c: c["logging_config"].update(log_level="WARNING")),
            "own level": edit(
                lambda c: c["applications"][1]["logging_config"].update(log_level="INFO")
            ),
            "attribute added": edit(
                lambda c: c["logging_config"]["additional_log_standard_attrs"].append("funcName")
            ),
            "shared config dropped": edit(lambda c: c.pop("logging_config")),
        },
    ),
    Case(
        "empty top-level logging_config",
        {"logging_config": {}, "applications": [greeter()]},
        {"dropped": edit(lambda c: c.pop("logging_config"))},
    ),
    Case(
        "deployment logging_config with a numeric level",
        {
            "applications": [
                greeter(
                    deployments=[
                        {
                            "name": "Greeter",
                            "logging_config": {
                                "log_level": 10,
                                "additional_log_standard_attrs": ["lineno", "name"],
                            },
                        }
                    ]
                )
            ]
        },
        {"level": edit(lambda c: deployment(c)["logging_config"].update(log_level=20))},
    ),
    Case(
        "autoscaling, args and a user_config with an int key",
        {
            "applications": [
                greeter(
                    args={"k": {"nested": [1, "a"]}},
                    deployments=[
                        {
                            "name": "Greeter",
                            "num_replicas": "auto",
                            "autoscaling_config": {"min_replicas": 1, "max_replicas": 2},
                            "user_config": {"x": [1, 2.5, True, None], 7: "int key"},
                        }
                    ],
                )
            ]
        },
        {
            "max_replicas": edit(
                lambda c: deployment(c)["autoscaling_config"].update(max_replicas=3)
            ),
            "args": edit(lambda c: c["applications"][0]["args"]["k"]["nested"].append(2)),
            "list order": edit(lambda c: deployment(c)["user_config"]["x"].reverse()),
        },
    ),
    Case(
        "target_capacity and options Serve applies only at start",
        {
            "target_capacity": 50,
            "proxy_location": "HeadOnly",
            "grpc_options": {"port": 9123},
            "applications": [greeter()],
        },
        {
            "target_capacity": edit(lambda c: c.update(target_capacity=60)),
            "target_capacity dropped": edit(lambda c: c.pop("target_capacity")),
        },
    ),
]


@pytest.fixture
async def ray(ray_head: RayHead) -> AsyncIterator[DashboardClient]:
    endpoint = DashboardEndpoint(ray_head.dashboard_url, token=ray_head.token)
    async with DashboardClient(endpoint, options=DashboardOptions(start_timeout=60)) as client:
        yield client


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
async def test_a_config_is_taken_as_deployed_exactly_when_ray_runs_it(
    case: Case, ray: DashboardClient, ray_head: RayHead
) -> None:
    config = {"http_options": {"host": "127.0.0.1", "port": ray_head.serve_port}, **case.config}
    # The body exactly as the operator sends it (aiohttp's json.dumps turns int keys to strings).
    await ray.deploy_serve_applications(json.loads(json.dumps(config)))
    details = await ray.serve_details()

    deployed, reason = serve_config_deployed(config, details)
    assert deployed, reason
    for change, changed in case.changes.items():
        assert not serve_config_deployed(changed(config), details)[0], change


async def test_a_config_with_keys_serve_ignores_is_not_taken_as_deployed(
    ray: DashboardClient, ray_head: RayHead
) -> None:
    # Serve drops keys it does not know: whether they matter cannot be told, so PUT again.
    config = {
        "http_options": {"host": "127.0.0.1", "port": ray_head.serve_port},
        "applications": [greeter(some_future_option=True)],
    }
    await ray.deploy_serve_applications(config)
    details = await ray.serve_details()
    assert "some_future_option" not in (details.applications["greeter"].deployed_config or {})
    assert serve_config_deployed(config, details) == (False, "application greeter differs")
