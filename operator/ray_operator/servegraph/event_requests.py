"""What a request to the RayServeGraph event endpoint presents and names, read without I/O:
its credentials (`refresh_credentials`, `cloudevent_credentials`; `presents_credentials` before
the body is read) and their check against the shared secret (`verify`, constant time), the
object a structured-mode CloudEvent names (`read_cloudevent`), whether a path can name an object
at all (`cannot_name_an_object`), and the refresh Secret a graph names and its value
(`refresh_secret_ref`, `refresh_secret_value`).

Every refusal is a `RefusedError` carrying the HTTP status and a short text, never a secret;
`events` decides in which order they are asked (its docstring lists the answers) and turns them
into responses. The signature schemes, the time window and the replay memory are `signatures`.
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import re
from collections.abc import Mapping
from typing import Any

from ray_operator.servegraph.signatures import (
    BODY_SIGNATURE_HEADER,
    GITHUB_BODY_SIGNATURE_HEADER,
    REFRESH_SIGNATURE_HEADER,
    TOLERANCE_SECONDS,
    Signature,
    body_signature,
    is_body_signature,
    is_refresh_signature,
    refresh_signature,
    unix_seconds_of,
)
from ray_operator.server import bearer_token
from ray_operator.spec.secret_values import SecretValueError, graphs_opted_in, secret_value

_DNS1123_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN_RE = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_SUBJECT_RE = re.compile(r"^namespaces/([^/]+)/rayservegraphs/([^/]+)$")
CREDENTIALS_REQUIRED = (
    f"credentials required: a bearer token or {REFRESH_SIGNATURE_HEADER}: t=<unix seconds>,v1=<hex>"
    f" (CloudEvents: or {BODY_SIGNATURE_HEADER})\n"
)
BODY_SIGNATURE_REFUSED = (
    f"a signature of the body alone ({BODY_SIGNATURE_HEADER} or {GITHUB_BODY_SIGNATURE_HEADER}) "
    "could be replayed forever and is not accepted on this route: sign the time, the object and "
    f'the body with {REFRESH_SIGNATURE_HEADER}: t=<unix seconds>,v1=<hex> (see "The event '
    'endpoint" in docs/features/rayservegraph.md)\n'
)
STALE_SIGNATURE = (
    f"the signature's time is more than {TOLERANCE_SECONDS} s from the operator's clock: sign "
    "each request when sending it (and check the sender's clock)\n"
)


class RefusedError(Exception):
    """An answer other than 202: the HTTP status and a short text (never a secret)."""

    def __init__(self, status: int, text: str, *, retry_after: int | None = None) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.retry_after = retry_after


# --- credentials (pure) ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Credentials:
    """What a caller presented; at least one of the two is set."""

    bearer: bytes | None = dataclasses.field(default=None, repr=False)
    """The token of `Authorization: Bearer <token>`."""
    signature: Signature | None = None
    """A signature over a time, the object and the body (see `signatures`)."""


def presents_credentials(headers: Mapping[str, str]) -> bool:
    """Whether `headers` hold a credential of a usable shape (else 401 before the body is read)."""
    return (
        _bearer_token(headers.get("Authorization", "")) is not None
        or is_refresh_signature(headers.get(REFRESH_SIGNATURE_HEADER, ""))
        or is_body_signature(_body_signature_header(headers))
    )


def refresh_credentials(
    headers: Mapping[str, str], *, namespace: str, name: str, body: bytes
) -> Credentials:
    """The credentials of a request on the refresh route; `RefusedError(401)` when none is
    usable there (a body-only signature is not: it says nothing of when, nor for what)."""
    bearer = _bearer_token(headers.get("Authorization", ""))
    header = headers.get(REFRESH_SIGNATURE_HEADER, "")
    signature = refresh_signature(header, namespace=namespace, name=name, body=body)
    if bearer is None and signature is None:
        if not header and is_body_signature(_body_signature_header(headers)):
            raise RefusedError(401, BODY_SIGNATURE_REFUSED)
        raise RefusedError(401, CREDENTIALS_REQUIRED)
    return Credentials(bearer=bearer, signature=signature)


def cloudevent_credentials(
    headers: Mapping[str, str], *, event: CloudEventReference, body: bytes
) -> Credentials:
    """The credentials of a CloudEvent: a bearer token, and `Ray-Operator-Signature` or a body
    signature (which needs the event's `time`); `RefusedError` 400/401 otherwise."""
    bearer = _bearer_token(headers.get("Authorization", ""))
    refresh_header = headers.get(REFRESH_SIGNATURE_HEADER, "")
    body_header = _body_signature_header(headers)
    if refresh_header and body_header:
        raise RefusedError(400, "one signature per request, not two\n")
    signature: Signature | None = None
    if refresh_header:
        signature = refresh_signature(
            refresh_header, namespace=event.namespace, name=event.name, body=body
        )
    elif is_body_signature(body_header):
        if event.signed_at is None:
            raise RefusedError(
                400,
                f'a CloudEvent signed with {BODY_SIGNATURE_HEADER} must carry "time" (RFC 3339): '
                "the signature covers when it was sent through it\n",
            )
        signature = body_signature(body_header, body=body, signed_at=event.signed_at)
    if bearer is None and signature is None:
        raise RefusedError(401, CREDENTIALS_REQUIRED)
    return Credentials(bearer=bearer, signature=signature)


def _body_signature_header(headers: Mapping[str, str]) -> str:
    return headers.get(BODY_SIGNATURE_HEADER) or headers.get(GITHUB_BODY_SIGNATURE_HEADER, "")


def _bearer_token(header: str) -> bytes | None:
    token = bearer_token(header)
    return None if token is None else token.encode("utf-8", "surrogateescape")


def verify(credentials: Credentials, *, secret: bytes) -> bool:
    """Whether every credential presented matches `secret` (constant-time comparisons)."""
    if not secret:
        return False  # never authenticate against an empty secret
    checks = []
    if credentials.bearer is not None:
        checks.append(hmac.compare_digest(credentials.bearer, secret))
    if credentials.signature is not None:
        checks.append(credentials.signature.verifies(secret))
    return bool(checks) and all(checks)


# --- what a request names (pure) ------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class CloudEventReference:
    """What a CloudEvent says the refresh is for, and when it was sent."""

    namespace: str
    name: str
    signed_at: int | None
    """Its `time` attribute in Unix seconds, None without one."""


def cannot_name_an_object(namespace: str, name: str) -> bool:
    """Whether `namespace`/`name` cannot name a RayServeGraph (so: 404 without a lookup)."""
    return not (
        len(namespace) <= 63
        and _DNS1123_LABEL_RE.match(namespace)
        and len(name) <= 253
        and _DNS1123_SUBDOMAIN_RE.match(name)
    )


def read_cloudevent(body: bytes) -> CloudEventReference:
    """The object and time of a structured-mode CloudEvent; `RefusedError(400)` if not one."""
    try:
        event = json.loads(body)
    except (ValueError, RecursionError):
        raise RefusedError(400, "the body is not JSON\n") from None
    if not isinstance(event, dict):
        raise RefusedError(400, "the body is not a JSON object\n")
    if event.get("specversion") != "1.0":
        raise RefusedError(400, 'not a CloudEvent: "specversion" must be "1.0"\n')
    for attribute in ("id", "source", "type", "subject"):
        value = event.get(attribute)
        if not isinstance(value, str) or not value:
            raise RefusedError(400, f'not a CloudEvent naming a RayServeGraph: no "{attribute}"\n')
    match = _SUBJECT_RE.match(event["subject"])
    if match is None:
        raise RefusedError(400, '"subject" must be namespaces/<namespace>/rayservegraphs/<name>\n')
    signed_at = None
    if "time" in event:
        signed_at = unix_seconds_of(event["time"])
        if signed_at is None:
            raise RefusedError(400, '"time" must be an RFC 3339 timestamp with an offset\n')
    return CloudEventReference(match.group(1), match.group(2), signed_at)


def refresh_secret_ref(graph: Mapping[str, Any]) -> tuple[str, str] | None:
    """(Secret name, key) of `spec.refresh.secretRef`, or None when the endpoint is off for it."""
    refresh = (graph.get("spec") or {}).get("refresh")
    reference = refresh.get("secretRef") if isinstance(refresh, dict) else None
    if not isinstance(reference, dict):
        return None
    name, key = reference.get("name"), reference.get("key")
    if not (isinstance(name, str) and name and isinstance(key, str) and key):
        return None
    return name, key


def refresh_secret_value(secret: Mapping[str, Any], *, key: str, graph_name: str) -> bytes:
    """The shared secret in `secret[data][key]`; `RefusedError(403)` unless usable and opted in.

    Surrounding whitespace is dropped: a trailing newline from `--from-file` is never meant.
    """
    if graph_name not in (graphs_opted_in(secret) or ()):
        raise RefusedError(403, "forbidden\n")
    try:
        value = secret_value(secret, key).strip()
    except SecretValueError:
        raise RefusedError(403, "forbidden\n") from None
    if not value:
        raise RefusedError(403, "forbidden\n")
    return value
