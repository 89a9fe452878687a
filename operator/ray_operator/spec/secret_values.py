"""A Secret's values and its `ray-operator.io/serve-graphs` opt-in list, read one way: the
serve-graph token and CA bundle (the controller's fetch) and the event endpoint's refresh secret
(`servegraph.event_requests`) all come through here.

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
    """The key is missing, empty or not base64 (the message names the Secret and the key)."""


def secret_value(secret: Mapping[str, Any], key: str, *, named_by: str = "") -> bytes:
    """The decoded bytes of `data[key]` (strict base64); `named_by`, the field that named the
    Secret, goes into the message."""
    name = (secret.get("metadata") or {}).get("name", "")
    where = f"Secret {name} ({named_by})" if named_by else f"Secret {name}"
    encoded = (secret.get("data") or {}).get(key)
    if not isinstance(encoded, str) or not encoded:
        raise SecretValueError(f"{where} has no key {key!r}")
    try:
        return base64.b64decode(encoded, validate=True)
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
