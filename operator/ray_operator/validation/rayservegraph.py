"""Semantic validation of a RayServeGraph, shared by its controller and the admission webhook.

Pure: a RayServeGraph (plain dict) in, every violation out, each naming its field path. Checked:

- `spec.source`: `url` required, at most 2048 characters, `https://` (`http://` only with
  `allowInsecureHTTP: true`), a host, no `user:password@` (the token belongs in
  `tokenSecretRef`), no host the fetch always refuses when it is an IP literal (link-local,
  cloud metadata such as `169.254.169.254` and Azure's `168.63.129.16`, unspecified, multicast,
  reserved, numeric spellings: `spec.fetch_addresses`; loopback depends on an operator flag and
  names on DNS, so the fetch judges those); `timeoutSeconds` 1–300; `maxBytes` 1–64 MiB;
  `pollInterval` a Go duration (or whole seconds), 0 (no polling) or at least 10 s; every
  Secret reference (`tokenSecretRef`, `caBundleSecretRef`, `refresh.secretRef`) a Secret name
  and a key Kubernetes accepts.
- The RayService the graph becomes, with the RayService rules (`validate_rayservice`) on a
  stand-in: its name (`spec.serviceName`, else the graph's own name: a DNS-1035 label of at most
  47 characters), `upgradeStrategy`, `rayClusterDeletionDelaySeconds`, and the RayCluster rules on
  `spec.rayClusterSpec` (required), paths moved under the RayServeGraph's fields.
- `spec.serveHttpOptions.port` 1–65535 when set.

Messages never show a URL's userinfo or query (where a careless user would put a token).
"""

from __future__ import annotations

import dataclasses
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

from ray_operator.spec.fetch_addresses import literal_refusal
from ray_operator.spec.raycluster import JSON
from ray_operator.validation.errors import (
    FieldError,
    forbidden,
    invalid,
    required,
    shown,
    too_long,
)
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.rayservice import initializing_timeout_seconds, validate_rayservice

MAX_URL_LENGTH = 2048
MIN_TIMEOUT_SECONDS, MAX_TIMEOUT_SECONDS = 1, 300
MIN_MAX_BYTES, MAX_MAX_BYTES = 1, 64 * 1024 * 1024
MIN_POLL_SECONDS = 10.0
_SECRET_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")
_DNS1123_SUBDOMAIN_RE = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
# Where the stand-in RayService's paths go on the RayServeGraph.
_MOVED_PATHS = (("spec.rayClusterConfig", "spec.rayClusterSpec"),)


def validate_rayservegraph(
    rsg: Mapping[str, Any], *, limits: ClusterLimits = DEFAULT_LIMITS
) -> list[str]:
    """Every problem of the RayServeGraph, each `field.path: what is wrong`; empty when valid."""
    return [str(error) for error in rayservegraph_errors(rsg, limits=limits)]


def rayservegraph_errors(
    rsg: Mapping[str, Any], *, limits: ClusterLimits = DEFAULT_LIMITS
) -> list[FieldError]:
    """The same problems as `FieldError`s (the webhook's 422 causes)."""
    spec = rsg.get("spec")
    if not isinstance(spec, Mapping):
        return [required("spec", "a RayServeGraph needs spec.source and spec.rayClusterSpec")]
    errors = list(_source_errors(spec.get("source")))
    errors += _secret_ref_errors(
        "spec.refresh.secretRef", _mapping(spec.get("refresh")).get("secretRef")
    )
    errors += _http_options_errors(spec.get("serveHttpOptions"))
    errors += _rayservice_errors(rsg, spec, limits=limits)
    return errors


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _source_errors(source: Any) -> Iterator[FieldError]:
    if not isinstance(source, Mapping):
        yield required("spec.source", "where the ServeGraph document is fetched from")
        return
    yield from _url_errors(source.get("url"), insecure=source.get("allowInsecureHTTP") is True)
    yield from _secret_ref_errors("spec.source.tokenSecretRef", source.get("tokenSecretRef"))
    yield from _secret_ref_errors("spec.source.caBundleSecretRef", source.get("caBundleSecretRef"))
    yield from _range_errors(
        "spec.source.timeoutSeconds",
        source.get("timeoutSeconds"),
        MIN_TIMEOUT_SECONDS,
        MAX_TIMEOUT_SECONDS,
    )
    yield from _range_errors(
        "spec.source.maxBytes", source.get("maxBytes"), MIN_MAX_BYTES, MAX_MAX_BYTES
    )
    yield from _poll_interval_errors(source.get("pollInterval"))


def _url_errors(url: Any, *, insecure: bool) -> Iterator[FieldError]:
    path = "spec.source.url"
    if not isinstance(url, str) or not url:
        yield required(path, "the https:// URL of the ServeGraph document")
        return
    if len(url) > MAX_URL_LENGTH:
        yield too_long(path, "<omitted>", MAX_URL_LENGTH)
        return
    try:
        parsed = urllib.parse.urlsplit(url)
        port = parsed.port
    except ValueError as error:
        yield invalid(path, "<omitted>", f"not a URL: {shown(str(error))}")
        return
    shown_url = _url_for_message(parsed, port)
    if parsed.scheme not in ("https", "http"):
        yield invalid(path, shown_url, "the scheme must be https (or http)")
    elif parsed.scheme == "http" and not insecure:
        yield forbidden(
            path, "http:// sends the token in clear text; use https, or set allowInsecureHTTP"
        )
    if not parsed.hostname:
        yield invalid(path, shown_url, "the URL has no host")
    elif (why := literal_refusal(parsed.hostname, allow_loopback=True)) is not None:
        yield invalid(path, shown_url, f"the host is {why}: the operator never fetches from it")
    if parsed.username is not None or parsed.password is not None:
        yield forbidden(path, "no user or password in the URL: put the token in tokenSecretRef")


def _url_for_message(parsed: urllib.parse.SplitResult, port: int | None) -> str:
    """scheme://host[:port]/path, without userinfo and query: safe to show."""
    host = parsed.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return str(shown(f"{parsed.scheme}://{netloc}{parsed.path}"))


def _secret_ref_errors(path: str, reference: Any) -> Iterator[FieldError]:
    if reference is None:
        return
    if not isinstance(reference, Mapping):
        yield invalid(path, "<omitted>", "must be an object with name and key")
        return
    name, key = reference.get("name"), reference.get("key")
    if not isinstance(name, str) or not name:
        yield required(f"{path}.name", "the Secret's name")
    elif len(name) > 253 or not _DNS1123_SUBDOMAIN_RE.match(name):
        yield invalid(f"{path}.name", shown(name), "must be a DNS-1123 subdomain (a Secret name)")
    if not isinstance(key, str) or not key:
        yield required(f"{path}.key", "the key in the Secret's data")
    elif len(key) > 253 or not _SECRET_KEY_RE.match(key):
        yield invalid(
            f"{path}.key", shown(key), "must consist of alphanumeric characters, '-', '_' or '.'"
        )


def _range_errors(path: str, value: Any, low: int, high: int) -> Iterator[FieldError]:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        yield invalid(path, shown(value), "must be an integer")
    elif not low <= value <= high:
        yield invalid(path, value, f"must be between {low} and {high}")


def _poll_interval_errors(value: Any) -> Iterator[FieldError]:
    path = "spec.source.pollInterval"
    if value is None:
        return
    seconds = poll_interval_seconds(value)
    if seconds is None:
        detail = 'must be a duration such as "30s", "5m" or "1h" (or "0s": no polling)'
        yield invalid(path, shown(value), detail)
    elif seconds < 0:
        yield invalid(path, shown(value), "must not be negative")
    elif 0 < seconds < MIN_POLL_SECONDS:
        yield invalid(
            path, shown(value), f"must be 0 (no polling) or at least {MIN_POLL_SECONDS:g}s"
        )


def poll_interval_seconds(value: Any) -> float | None:
    """Seconds of a `pollInterval` (a Go duration or whole seconds); None when unreadable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return float(value)
    if isinstance(value, str) and len(value) <= 64:
        return initializing_timeout_seconds(value.strip())
    return None


def _http_options_errors(options: Any) -> Iterator[FieldError]:
    if options is None:
        return
    if not isinstance(options, Mapping):
        yield invalid("spec.serveHttpOptions", "<omitted>", "must be an object")
        return
    yield from _range_errors("spec.serveHttpOptions.port", options.get("port"), 1, 65535)


def _rayservice_errors(
    rsg: Mapping[str, Any], spec: Mapping[str, Any], *, limits: ClusterLimits
) -> list[FieldError]:
    """The RayService rules on the RayService this graph becomes, paths moved to the graph's."""
    if not isinstance(spec.get("rayClusterSpec"), Mapping):
        return [required("spec.rayClusterSpec", "the RayCluster that runs the Serve application")]
    metadata = _mapping(rsg.get("metadata"))
    service_name = spec.get("serviceName")
    stand_in_spec: JSON = {"rayClusterConfig": spec["rayClusterSpec"]}
    for field in ("upgradeStrategy", "rayClusterDeletionDelaySeconds"):
        if field in spec:
            stand_in_spec[field] = spec[field]
    stand_in: JSON = {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {
            "name": service_name if service_name else metadata.get("name", ""),
            # The graph's: the operator-identity rule applies in one namespace only.
            "namespace": metadata.get("namespace") or "",
            "annotations": dict(_mapping(metadata.get("annotations"))),
        },
        "spec": stand_in_spec,
    }
    name_path = "spec.serviceName" if service_name else "metadata.name"
    return [
        _moved(error, name_path=name_path) for error in validate_rayservice(stand_in, limits=limits)
    ]


def _moved(error: FieldError, *, name_path: str) -> FieldError:
    if error.field == "metadata.name":
        return dataclasses.replace(error, field=name_path)
    for old, new in _MOVED_PATHS:
        if error.field == old or error.field.startswith((old + ".", old + "[")):
            return dataclasses.replace(error, field=new + error.field[len(old) :])
    return error


__all__ = ["poll_interval_seconds", "rayservegraph_errors", "validate_rayservegraph"]
