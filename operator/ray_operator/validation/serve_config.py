"""`serveConfigV2` of a RayService: valid YAML that Ray Serve's `ServeDeploySchema` would accept.

KubeRay only finds a broken Serve config when the dashboard refuses it, long after the RayCluster
is up. We check the parts of Ray Serve's schema (ray/serve/schema.py) that decide whether a config
can deploy at all: `applications` present, each with a well-formed `import_path`, non-empty unique
names, unique well-formed `route_prefix`es, named deployments with sane `num_replicas`, and the
top-level `proxy_location` and `target_capacity`. Unknown keys are accepted, as Serve accepts them
(forward compatibility). Paths inside the YAML are written after the field:
`spec.serveConfigV2.applications[1].route_prefix: Duplicate value: "/"`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ray_operator.bounded_yaml import UnreadableYamlError, load_go_yaml
from ray_operator.validation.errors import (
    FieldError,
    duplicate,
    forbidden,
    invalid,
    not_supported,
    required,
    shown,
)

PROXY_LOCATIONS = ["Disabled", "HeadOnly", "EveryNode"]


def serve_config_errors(text: Any, *, path: str) -> list[FieldError]:
    """Every problem of the Serve config `text` (the field at `path`); empty when it deploys."""
    if not isinstance(text, str) or not text.strip():
        return []  # No Serve config: the RayService runs a cluster without applications.
    try:
        config = load_go_yaml(text)  # what the controller PUTs, typed as KubeRay types it
    except UnreadableYamlError as error:
        return [invalid(path, shown(text), str(error))]
    if not isinstance(config, dict):
        return [invalid(path, shown(text), "must be a YAML mapping with an applications list")]
    return list(_config_errors(config, path))


def _config_errors(config: dict[Any, Any], path: str) -> Iterator[FieldError]:
    location = config.get("proxy_location")
    if location is not None and location not in PROXY_LOCATIONS:
        yield not_supported(f"{path}.proxy_location", shown(location), PROXY_LOCATIONS)
    capacity = config.get("target_capacity")
    if capacity is not None and (not _is_number(capacity) or not 0 <= capacity <= 100):
        yield invalid(f"{path}.target_capacity", shown(capacity), "must be a number from 0 to 100")
    for section in ("http_options", "grpc_options", "logging_config"):
        if config.get(section) is not None and not isinstance(config[section], dict):
            yield invalid(f"{path}.{section}", shown(config[section]), "must be a mapping")
    if "applications" not in config:
        yield required(f"{path}.applications", "the Serve applications to deploy")
        return
    applications = config["applications"]
    if not isinstance(applications, list):
        yield invalid(f"{path}.applications", shown(applications), "must be a list")
        return
    yield from _applications_errors(applications, f"{path}.applications")


def _applications_errors(applications: list[Any], path: str) -> Iterator[FieldError]:
    names: set[Any] = set()
    routes: set[Any] = set()
    for index, application in enumerate(applications):
        app_path = f"{path}[{index}]"
        if not isinstance(application, dict):
            yield invalid(app_path, shown(application), "must be a mapping")
            continue
        # Serve's defaults: name "default", route_prefix "/".
        name = application.get("name", "default")
        if not isinstance(name, str) or not name:
            yield invalid(f"{app_path}.name", shown(name), "must be a non-empty string")
        elif name in names:
            yield duplicate(f"{app_path}.name", shown(name))
        names.add(name if isinstance(name, str) else repr(name))
        route = application.get("route_prefix", "/")
        route_error = _route_prefix_error(route)
        if route_error:
            yield invalid(f"{app_path}.route_prefix", shown(route), route_error)
        elif route is not None and route in routes:
            yield duplicate(f"{app_path}.route_prefix", route)
        if isinstance(route, str):
            routes.add(route)
        yield from _application_errors(application, app_path)


def _application_errors(application: dict[Any, Any], path: str) -> Iterator[FieldError]:
    if "import_path" not in application:
        yield required(f"{path}.import_path", "the module and attribute of the application")
    else:
        problem = _import_path_error(application["import_path"])
        if problem:
            yield invalid(f"{path}.import_path", shown(application["import_path"]), problem)
    for field in ("host", "port"):
        if field in application:
            # Serve's multi-application config takes them from http_options only.
            yield forbidden(f"{path}.{field}", "set it in http_options at the top level")
    for field in ("runtime_env", "args"):
        value = application.get(field)
        if value is not None and not isinstance(value, dict):
            yield invalid(f"{path}.{field}", shown(value), "must be a mapping")
    deployments = application.get("deployments")
    if deployments is None:
        return
    if not isinstance(deployments, list):
        yield invalid(f"{path}.deployments", shown(deployments), "must be a list")
        return
    for index, deployment in enumerate(deployments):
        yield from _deployment_errors(deployment, f"{path}.deployments[{index}]")


def _deployment_errors(deployment: Any, path: str) -> Iterator[FieldError]:
    if not isinstance(deployment, dict):
        yield invalid(path, shown(deployment), "must be a mapping")
        return
    name = deployment.get("name")
    if name is None:
        yield required(f"{path}.name", "the name of the deployment it configures")
    elif not isinstance(name, str):
        yield invalid(f"{path}.name", shown(name), "must be a string")
    # Two entries for one deployment are legal in Serve (the last one wins): not refused.
    replicas = deployment.get("num_replicas")
    valid_count = isinstance(replicas, int) and not isinstance(replicas, bool) and replicas > 0
    if replicas is not None and replicas != "auto" and not valid_count:
        yield invalid(
            f"{path}.num_replicas", shown(replicas), 'must be a positive integer or "auto"'
        )
    ongoing = deployment.get("max_ongoing_requests")
    if ongoing is not None and (not _is_number(ongoing) or ongoing <= 0):
        yield invalid(f"{path}.max_ongoing_requests", shown(ongoing), "must be greater than 0")


def _route_prefix_error(route: Any) -> str | None:
    """Serve's `_route_prefix_format` rules; None when the route prefix is fine."""
    if route is None:
        return None
    if not isinstance(route, str):
        return "must be a string"
    if not route.startswith("/"):
        return 'must start with "/"'
    if len(route) > 1 and route.endswith("/"):
        return 'must not end with "/" (unless it is just "/")'
    if "{" in route or "}" in route:
        return "must not contain wildcards ({ or })"
    return None


def _import_path_error(import_path: Any) -> str | None:
    """Serve's `import_path_format_valid` rules; None when the import path is fine."""
    if not isinstance(import_path, str) or not import_path:
        return 'must be a non-empty string such as "module.submodule:app"'
    if ":" in import_path:
        if import_path.count(":") > 1:
            return "may have at most one colon"
        if import_path.startswith(":") or import_path.endswith(":"):
            return "may not start or end with a colon"
        return None
    if "." not in import_path:
        return 'must separate the module from the attribute with a dot or a colon ("module.app")'
    if import_path.startswith(".") or import_path.endswith("."):
        return "may not start or end with a dot"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
