"""Kubernetes' own Pod rules on a Pod template we will turn into Pods, so admission refuses what the
API server would refuse at Pod creation (a RayCluster that can never produce a Pod, issue 12).

The subset of apimachinery/`pkg/apis/core/validation` (Kubernetes 1.34) that a Ray template can
break, with the API server's wording and paths relative to the template:

- containers and initContainers: `name` required, a DNS-1123 label, unique across both lists;
  `image` required, without surrounding whitespace (Pods, unlike templates, need one);
- `ports[]`: `containerPort` 1-65535, `hostPort` 0-65535, `name` an IANA_SVC_NAME unique in the
  container, `protocol` TCP, UDP or SCTP;
- `env[].name` and `envFrom[].prefix`: printable ASCII other than '=' (the rule Kubernetes 1.34
  applies, RelaxedEnvironmentVariableValidation being GA);
- `resources.limits`/`requests`: valid, bounded quantities (`spec.quantity`), not negative,
  a request at most its limit; extended resources (`nvidia.com/gpu`) and huge pages whole and
  with a request equal to a limit that must be set.

Pure and bounded: at most `MAX_ERRORS_PER_TEMPLATE` errors per template, offending values cut to a
printable length; the work is linear in the template (which the API server caps at 3 MiB).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Mapping
from typing import Any

from ray_operator.spec.quantity import InvalidQuantityError, Quantity
from ray_operator.validation.errors import (
    FieldError,
    duplicate,
    invalid,
    not_supported,
    required,
    shown,
)

MAX_ERRORS_PER_TEMPLATE = 50
_DNS1123_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL_MAX = 63
_DNS1123_LABEL_RULE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_PORT_NAME_MAX = 15
_PORT_NAME_CHARACTERS_RE = re.compile(r"[-a-z0-9]+")
_PORT_NAME_LETTER_RE = re.compile(r"[a-z]")
_PROTOCOLS = ["SCTP", "TCP", "UDP"]
_ENV_NAME_RULE = (
    "a valid environment variable name must consist only of printable ASCII characters other "
    "than '='"
)


def pod_template_errors(path: str, template: Any) -> list[FieldError]:
    """Every violation (up to `MAX_ERRORS_PER_TEMPLATE`) in the Pod template at `path`."""
    pod_spec = _mapping(_mapping(template).get("spec"))
    return list(
        itertools.islice(_pod_spec_errors(f"{path}.spec", pod_spec), MAX_ERRORS_PER_TEMPLATE)
    )


def _pod_spec_errors(path: str, pod_spec: Mapping[str, Any]) -> Iterator[FieldError]:
    seen: set[str] = set()
    for field in ("initContainers", "containers"):
        for index, container in enumerate(_list(pod_spec.get(field))):
            container_path = f"{path}.{field}[{index}]"
            container = _mapping(container)
            yield from _container_name_errors(container_path, container.get("name"), seen)
            yield from container_errors(container_path, container)


def _container_name_errors(path: str, name: Any, seen: set[str]) -> Iterator[FieldError]:
    if not name:
        yield required(f"{path}.name", "")
        return
    name = str(name)
    yield from dns1123_label_errors(f"{path}.name", name)
    if name in seen:
        # Across containers and initContainers: Kubernetes names their logs and statuses by it.
        yield duplicate(f"{path}.name", shown(name))
    seen.add(name)


def dns1123_label_errors(path: str, name: str) -> Iterator[FieldError]:
    """apimachinery's `IsDNS1123Label`, with its messages."""
    if len(name) > _DNS1123_LABEL_MAX:
        yield invalid(path, shown(name), f"must be no more than {_DNS1123_LABEL_MAX} characters")
    if not _DNS1123_LABEL_RE.fullmatch(name):
        yield invalid(path, shown(name), _DNS1123_LABEL_RULE)


def container_errors(path: str, container: Mapping[str, Any]) -> Iterator[FieldError]:
    """Kubernetes' rules on one container's image, ports, env and resources."""
    image = container.get("image")
    if not image:
        yield required(f"{path}.image", "")
    elif str(image) != str(image).strip():
        yield invalid(f"{path}.image", shown(image), "must not have leading or trailing whitespace")
    yield from _port_errors(f"{path}.ports", _list(container.get("ports")))
    yield from _env_errors(path, container)
    yield from resource_errors(f"{path}.resources", _mapping(container.get("resources")))


def _port_errors(path: str, ports: list[Any]) -> Iterator[FieldError]:
    names: set[str] = set()
    for index, port in enumerate(ports):
        port_path = f"{path}[{index}]"
        port = _mapping(port)
        number = port.get("containerPort")
        if number is None:
            yield required(f"{port_path}.containerPort", "")
        elif not _in_port_range(number, lowest=1):
            yield invalid(f"{port_path}.containerPort", number, _port_range_rule(1))
        host_port = port.get("hostPort")
        if host_port is not None and not _in_port_range(host_port, lowest=0):
            yield invalid(f"{port_path}.hostPort", host_port, _port_range_rule(0))
        protocol = port.get("protocol")
        if protocol is not None and protocol not in _PROTOCOLS:
            yield not_supported(f"{port_path}.protocol", shown(protocol), _PROTOCOLS)
        name = port.get("name")
        if name:
            name = str(name)
            yield from port_name_errors(f"{port_path}.name", name)
            if name in names:
                yield duplicate(f"{port_path}.name", shown(name))
            names.add(name)


def _in_port_range(number: Any, *, lowest: int) -> bool:
    return isinstance(number, int) and not isinstance(number, bool) and lowest <= number <= 65535


def _port_range_rule(lowest: int) -> str:
    return f"must be between {lowest} and 65535, inclusive"


def port_name_errors(path: str, name: str) -> Iterator[FieldError]:
    """apimachinery's `IsValidPortName` (IANA_SVC_NAME), one error per broken rule."""
    value = shown(name)
    if len(name) > _PORT_NAME_MAX:
        yield invalid(path, value, f"must be no more than {_PORT_NAME_MAX} characters")
    if not _PORT_NAME_CHARACTERS_RE.fullmatch(name):
        yield invalid(
            path, value, "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
        )
    if not _PORT_NAME_LETTER_RE.search(name):
        yield invalid(path, value, "must contain at least one letter (a-z)")
    if "--" in name:
        yield invalid(path, value, "must not contain consecutive hyphens")
    if name.startswith("-") or name.endswith("-"):
        yield invalid(path, value, "must not begin or end with a hyphen")


def _env_errors(path: str, container: Mapping[str, Any]) -> Iterator[FieldError]:
    for index, variable in enumerate(_list(container.get("env"))):
        name = _mapping(variable).get("name")
        if not name:
            yield required(f"{path}.env[{index}].name", "")
        elif not _is_env_var_name(str(name)):
            yield invalid(f"{path}.env[{index}].name", shown(name), _ENV_NAME_RULE)
    for index, source in enumerate(_list(container.get("envFrom"))):
        prefix = _mapping(source).get("prefix")
        if prefix and not _is_env_var_name(str(prefix)):
            yield invalid(f"{path}.envFrom[{index}].prefix", shown(prefix), _ENV_NAME_RULE)


def _is_env_var_name(name: str) -> bool:
    # Printable ASCII (0x20-0x7E) without '=': str methods, as an env list may be long.
    return name.isascii() and name.isprintable() and "=" not in name


def resource_errors(path: str, resources: Mapping[str, Any]) -> Iterator[FieldError]:
    """Quantities of `resources.limits`/`requests`: valid, not negative, requests <= limits."""
    parsed: dict[str, dict[str, Quantity]] = {}
    for field in ("limits", "requests"):
        parsed[field] = {}
        for name, text in _mapping(resources.get(field)).items():
            field_path = f"{path}.{field}[{name}]"
            try:
                quantity = Quantity.parse(text)
            except InvalidQuantityError as error:
                yield invalid(field_path, shown(text), str(error))
                continue
            if quantity.amount < 0:
                yield invalid(field_path, shown(text), "must be greater than or equal to 0")
                continue
            parsed[field][str(name)] = quantity
    for field, quantities in parsed.items():
        for name, quantity in quantities.items():
            if _is_extended_resource(name) and not _is_whole_in_milli_units(quantity):
                yield invalid(f"{path}.{field}[{name}]", str(quantity), "must be an integer")
    for name, request in parsed["requests"].items():
        limit = parsed["limits"].get(name)
        if limit is None:
            if not _overcommit_allowed(name):
                yield required(
                    f"{path}.limits[{name}]", "Limit must be set for non overcommitable resources"
                )
        elif request.amount != limit.amount and not _overcommit_allowed(name):
            yield invalid(
                f"{path}.requests",
                str(request),
                f"must be equal to {shown(name)} limit of {limit}",
            )
        elif request.amount > limit.amount:
            yield invalid(
                f"{path}.requests",
                str(request),
                f"must be less than or equal to {shown(name)} limit of {limit}",
            )


def _is_extended_resource(name: str) -> bool:
    """GPUs, TPUs and other device-plugin resources (`nvidia.com/gpu`): Kubernetes counts them in
    whole units and never overcommits them (apimachinery's IsExtendedResourceName)."""
    return "/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")


def _overcommit_allowed(name: str) -> bool:
    """Native resources other than huge pages may be requested below their limit."""
    native = "/" not in name or "kubernetes.io/" in name
    return native and not name.startswith("hugepages-")


def _is_whole_in_milli_units(quantity: Quantity) -> bool:
    """Kubernetes' integer test (`MilliValue() % 1000 == 0`): a whole number whose milli-units
    fit an int64, so `999999Ti` GPUs (whole, but 10^21 milli-units) is not an integer there."""
    return quantity.amount.denominator == 1 and abs(quantity.amount) * 1000 <= _INT64_MAX


_INT64_MAX = 2**63 - 1


def quantity_map_errors(path: str, quantities: Any) -> Iterator[FieldError]:
    """A map of name -> quantity (e.g. a worker group's `resources`): each valid and bounded."""
    for name, text in _mapping(quantities).items():
        try:
            Quantity.parse(text)
        except InvalidQuantityError as error:
            yield invalid(f"{path}[{name}]", shown(text), str(error))


def _mapping(value: Any) -> Mapping[str, Any]:
    # Tolerate any shape (the old object of an UPDATE is not schema-checked by us). `dict`, not
    # `Mapping`: objects are parsed JSON, and an ABC check per env var is measurably slower.
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
