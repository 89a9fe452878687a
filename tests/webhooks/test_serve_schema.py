"""Our `serveConfigV2` checks agree with Ray Serve's own (from the installed `ray[serve]`): its
deploy schema `ServeDeploySchema`, plus the route-prefix rules Serve applies when it deploys
(`validate_route_prefix`; the schema alone lets `route_prefix: api` through, the deploy fails).
A config Serve deploys is never refused, and one we accept deploys."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ray_operator.validation.serve_config import serve_config_errors

schema = pytest.importorskip("ray.serve.schema")
serve_utils = pytest.importorskip("ray.serve._private.utils")

names = st.sampled_from(["a", "b", "", "default"])
routes = st.sampled_from(["/", "/a", "/b", "a", "/a/", "/{x}", None])
import_paths = st.sampled_from(["m:app", "m.app", "pkg.m:app", "app", ":x", "m:", "m::x", ".m"])
replicas = st.one_of(st.integers(-1, 3), st.just("auto"), st.just("many"))
deployments = st.lists(
    st.fixed_dictionaries(
        {}, optional={"name": st.sampled_from(["D", "E", ""]), "num_replicas": replicas}
    ),
    max_size=3,
)
applications = st.lists(
    st.fixed_dictionaries(
        {"import_path": import_paths},
        optional={
            "name": names,
            "route_prefix": routes,
            "deployments": deployments,
            "port": st.just(8000),
        },
    ),
    max_size=3,
)
configs = st.fixed_dictionaries(
    {"applications": applications},
    optional={
        "proxy_location": st.sampled_from(["EveryNode", "HeadOnly", "Disabled", "Nowhere"]),
        "target_capacity": st.one_of(st.integers(-10, 110), st.floats(0, 100)),
    },
)


def _serve_accepts(config: dict[str, Any]) -> bool:
    try:
        deploy = schema.ServeDeploySchema.model_validate(config)
        for application in deploy.applications:
            serve_utils.validate_route_prefix(application.route_prefix)
    except (pydantic.ValidationError, ValueError):
        return False
    return True


@settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(configs)
def test_serve_config_checks_agree_with_ray_serve(config: dict[str, Any]) -> None:
    errors = serve_config_errors(json.dumps(config), path="spec.serveConfigV2")
    assert (errors == []) == _serve_accepts(config), [str(e) for e in errors]
