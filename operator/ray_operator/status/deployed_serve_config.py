"""Whether a cluster already runs the Serve config a RayService would PUT (pure).

Which Serve config was PUT to which cluster is remembered in memory only (as KubeRay does). With
no record — after our restart, or on a cluster KubeRay deployed to before we took over — the
controller asks this module instead of PUTting blindly: it compares what we would PUT with what
`GET /api/serve/applications/` says the cluster runs, and only a config known to be the same
skips the PUT. Anything this module cannot verify counts as different: a needless PUT costs a
no-op in Serve, a missed one leaves the user's change undeployed.

How Ray reports a config, read from Ray Serve 2.x (`ServeController.apply_config` and
`get_serve_instance_details`) and checked against a real head (tests/dashboard):
- Each application's `deployed_app_config` is the application as PUT after pydantic validation,
  dumped with `exclude_unset`: no defaults are filled in (an unset `name` or `route_prefix` stays
  absent, an explicit `route_prefix: null` stays null); unknown keys are dropped (so a config
  with keys Ray ignores never compares equal: PUT, as before); numbers are coerced to the field's
  type (`num_cpus: 1` comes back as `1.0`: numbers compare by value, never equal to a bool);
  strings are never turned into numbers here, so `"5"` against `5` differs.
- A top-level `logging_config` is copied into each application that has none of its own; inside
  any `logging_config` a numeric `log_level` becomes its name (20 → "INFO") and
  `additional_log_standard_attrs` loses duplicates and order.
- `target_capacity` is reported for the whole instance; `tracing_config` is not reported at all
  (a config with one is never taken as deployed), nor is a top-level `logging_config` that every
  application overrides.
- `proxy_location`, `http_options`, `grpc_options` and `controller_options` are not compared:
  Serve applies them only when it starts, so a PUT to a running Serve cannot change them either.
- `runtime_env` comes back verbatim (Ray redacts it only for browsers, which we are not).
- Applications being deleted (status DELETING) that the config no longer names are on their way
  out, as the config wants; any other application the config does not name means a difference.

The work is linear in the sizes of the config and of the (bounded) dashboard answer, and done
without recursion, so a deeply nested config cannot exhaust the stack.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from ray_operator.spec.dashboard_models import DEFAULT_SERVE_APP_NAME, ServeDetails

JSON = dict[str, Any]

DELETING = "DELETING"
# Python's logging level numbers, as Ray's LoggingConfig turns them into names.
_LEVEL_NAMES: Mapping[int, str] = {
    logging.CRITICAL: "CRITICAL",
    logging.ERROR: "ERROR",
    logging.WARNING: "WARNING",
    logging.INFO: "INFO",
    logging.DEBUG: "DEBUG",
    logging.NOTSET: "NOTSET",
}


def serve_config_deployed(config: Mapping[str, Any], details: ServeDetails) -> tuple[bool, str]:
    """Whether `details` (what the cluster runs) shows `config` (what we would PUT) deployed;
    and why not. The reason names applications and fields, never values (they may be secrets)."""
    sent = _as_sent(config)
    if sent is None:
        return False, "the Serve config is not plain JSON"
    if sent.get("tracing_config") is not None:
        return False, "Serve does not report tracing_config"
    if not _same_number_or_none(sent.get("target_capacity"), details.target_capacity):
        return False, "target_capacity differs"
    expected = _expected_applications(sent)
    if isinstance(expected, str):
        return False, expected
    live = {
        name: app
        for name, app in details.applications.items()
        if app.status != DELETING or name in expected
    }
    if expected.keys() != live.keys():
        return False, "the set of applications differs"
    for name, application in expected.items():
        deployed = live[name].deployed_config
        if deployed is None or live[name].status == DELETING:
            return False, f"application {name} has no deployed config"
        if not same_json(_normalised(application), _normalised(deployed)):
            return False, f"application {name} differs"
    return True, "the cluster runs this Serve config already"


def same_json(left: Any, right: Any) -> bool:
    """Equality of two JSON values where numbers compare by value (`1 == 1.0`) but never equal
    a bool, and types otherwise must match. Iterative: depth costs no stack."""
    try:
        # Python's == is ours but for `True == 1`: C-speed answers first. Unequal there is
        # unequal here; equal there and no bool on either side is equal here.
        if left != right:
            return False
        if not (_may_hold_bool(left) or _may_hold_bool(right)):
            return True
    except RecursionError:
        pass  # nested deeper than Python's recursion limit: the walk below needs no stack
    return _same_json_walk(left, right)


def _may_hold_bool(value: Any) -> bool:
    """False only when `value` surely holds no bool (its JSON text has no true/false)."""
    text = json.dumps(value)
    return "true" in text or "false" in text


def _same_json_walk(left: Any, right: Any) -> bool:
    pending = [(left, right)]
    while pending:
        one, other = pending.pop()
        if isinstance(one, Mapping) and isinstance(other, Mapping):
            if one.keys() != other.keys():
                return False
            pending.extend((one[key], other[key]) for key in one)
        elif isinstance(one, list) and isinstance(other, list):
            if len(one) != len(other):
                return False
            pending.extend(zip(one, other, strict=True))
        elif _is_number(one) and _is_number(other):
            if one != other:
                return False
        elif type(one) is not type(other) or one != other:
            return False
    return True


def _as_sent(config: Mapping[str, Any]) -> JSON | None:
    """The config as Ray receives it: the JSON body of the PUT (int keys become strings)."""
    try:
        sent = json.loads(json.dumps(config))
    except (TypeError, ValueError, RecursionError):
        return None
    return sent if isinstance(sent, dict) else None


def _expected_applications(sent: JSON) -> dict[str, JSON] | str:
    """Each application as Serve will report it, by name; or why that cannot be known."""
    applications = sent.get("applications")
    if not isinstance(applications, list):
        return "the Serve config has no applications list"
    shared_logging = sent.get("logging_config")
    inherited = False
    expected: dict[str, JSON] = {}
    for application in applications:
        if not isinstance(application, dict):
            return "an application is not a mapping"
        application = dict(application)
        if application.get("logging_config") is None and shared_logging is not None:
            # Serve's apply_config gives an application without its own the top-level one.
            application["logging_config"] = shared_logging
            inherited = True
        name = application.get("name", DEFAULT_SERVE_APP_NAME)
        if not isinstance(name, str) or name in expected:
            return "application names are not unique strings"
        expected[name] = application
    if shared_logging is not None and not inherited:
        return "Serve does not report a top-level logging_config that every application overrides"
    return expected


def _normalised(application: Mapping[str, Any]) -> JSON:
    """`application` with its logging configs in the form Serve reports them."""
    result = dict(application)
    if isinstance(result.get("logging_config"), Mapping):
        result["logging_config"] = _normalised_logging(result["logging_config"])
    deployments = result.get("deployments")
    if isinstance(deployments, list):
        result["deployments"] = [
            {**d, "logging_config": _normalised_logging(d["logging_config"])}
            if isinstance(d, Mapping) and isinstance(d.get("logging_config"), Mapping)
            else d
            for d in deployments
        ]
    return result


def _normalised_logging(config: Mapping[str, Any]) -> JSON:
    result = dict(config)
    level = result.get("log_level")
    if isinstance(level, int) and not isinstance(level, bool) and level in _LEVEL_NAMES:
        result["log_level"] = _LEVEL_NAMES[level]
    attributes = result.get("additional_log_standard_attrs")
    if isinstance(attributes, list) and all(isinstance(a, str) for a in attributes):
        # Ray keeps these as `list(set(...))`: neither order nor duplicates survive.
        result["additional_log_standard_attrs"] = sorted(set(attributes))
    return result


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same_number_or_none(one: Any, other: Any) -> bool:
    if one is None or other is None:
        return one is None and other is None
    return _is_number(one) and _is_number(other) and one == other
