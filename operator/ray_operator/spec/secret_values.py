"""A Secret's values and its `ray-operator.io/serve-graphs` opt-in list, read one way: the
serve-graph token and CA bundle (the controller's fetch), the event endpoint's refresh secret
(`servegraph.event_requests`), a RayCluster's Ray auth token (`controllers.dashboards`) and the
webhook's self-managed certificate Secret (`webhooks.certificates`) all come through here.

Pure: the Secret is a dict as the API server returns it (`data` base64-encoded). What goes
wrong is said naming the Secret and the key, never a value: a Secret's bytes never reach a
message.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from ray_operator.spec.serve_graph_names import SECRET_GRAPHS_ANNOTATION


class SecretValueError(ValueError):
    """The key is missing, empty, not base64 or not text (the message names the Secret and the
    key)."""


class MissingSecretKeyError(SecretValueError):
    """The key is missing or empty."""


def secret_value(
    secret: Mapping[str, Any], key: str, *, named_by: str = "", strict: bool = True
) -> bytes:
    """The decoded bytes of `data[key]`; `named_by`, the field that named the Secret, goes into
    the message. `strict=False`: base64's characters outside its alphabet are skipped (Python's
    `b64decode` default), for readers that always took them so."""
    where = _where(secret, named_by)
    encoded = (secret.get("data") or {}).get(key)
    if not isinstance(encoded, str) or not encoded:
        raise MissingSecretKeyError(f"{where} has no key {key!r}")
    return _decoded(encoded, key=key, where=where, strict=strict)


def secret_text(
    secret: Mapping[str, Any], key: str, *, named_by: str = "", strict: bool = True
) -> str:
    """`secret_value` as UTF-8 text, surrounding whitespace dropped (a token written by `echo`
    ends in a newline)."""
    value = secret_value(secret, key, named_by=named_by, strict=strict)
    try:
        return value.decode().strip()
    except UnicodeDecodeError:
        # Its own message would quote a byte of the value.
        raise SecretValueError(
            f"key {key!r} of {_where(secret, named_by)} is not UTF-8 text"
        ) from None


def secret_values(secret: Mapping[str, Any], *, strict: bool = True) -> dict[str, bytes]:
    """Every key of `data`, decoded (an empty value as empty bytes); SecretValueError when any
    one is not base64 (`strict` as for `secret_value`)."""
    where = _where(secret, "")
    data = secret.get("data") or {}
    return {
        str(key): _decoded(encoded, key=str(key), where=where, strict=strict)
        for key, encoded in data.items()
    }


def _where(secret: Mapping[str, Any], named_by: str) -> str:
    name = (secret.get("metadata") or {}).get("name", "")
    return f"Secret {name} ({named_by})" if named_by else f"Secret {name}"


def _decoded(encoded: object, *, key: str, where: str, strict: bool) -> bytes:
    if not isinstance(encoded, str):
        raise SecretValueError(f"key {key!r} of {where} is not valid base64")
    try:
        return base64.b64decode(encoded, validate=strict)
    except (binascii.Error, ValueError):
        raise SecretValueError(f"key {key!r} of {where} is not valid base64") from None


def graphs_opted_in(secret: Mapping[str, Any]) -> list[str] | None:
    """The RayServeGraph names the Secret's `serve-graphs` annotation lists (comma-separated,
    blanks dropped); None when it has no such annotation."""
    annotations = (secret.get("metadata") or {}).get("annotations") or {}
    listed = annotations.get(SECRET_GRAPHS_ANNOTATION)
    if listed is None:
        return None
    return [item.strip() for item in str(listed).split(",") if item.strip()]
