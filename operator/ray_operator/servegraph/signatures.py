"""Signed refresh requests: the signature schemes, the time window and the replay memory (pure).

A body-only HMAC proves who wrote a body, not when nor for which object: a captured request
verifies forever (issue 28, finding 8). So every signature the event endpoint accepts covers a
time and the object, and is accepted once.

`Ray-Operator-Signature: t=<unix seconds>,v1=<64 hex digits>` (both routes). `v1` is the
HMAC-SHA256, keyed with the shared secret, of exactly these bytes (ASCII, `\\n` is the byte 0x0A):

    <t>\\nnamespaces/<namespace>/rayservegraphs/<name>\\n<body>

`<t>` as sent in the header (decimal, no sign, no leading zeros); the middle line is the object's
path as the URL (and a CloudEvent's `subject`) spells it; `<body>` is the request body as sent,
often empty. From a shell:

    T=$(date +%s)
    MAC=$({ printf '%s\\nnamespaces/%s/rayservegraphs/%s\\n' "$T" "$NS" "$NAME"
            printf %s "$BODY"; } | openssl dgst -sha256 -hmac "$SECRET" -r | cut -d' ' -f1)
    curl -X POST -H "Ray-Operator-Signature: t=$T,v1=$MAC" --data "$BODY" "$URL"

`X-Signature-256: sha256=<hex>` (GitHub's format; GitHub's header name `X-Hub-Signature-256`
too) is the HMAC-SHA256 of the body alone. It is accepted only for CloudEvents, whose body holds
the time and the object: its `time` attribute (RFC 3339, required when signed this way) and its
`subject`. On the refresh route it would prove nothing about when or what, and is refused.

A signature is accepted when its time is within `TOLERANCE_SECONDS` of the operator's clock,
either way (senders' clocks are ahead or behind), and when its MAC was not accepted for the same
object before: `ReplayMemory` keeps each accepted MAC until its time leaves the window, from
then on the window alone refuses it. The memory is bounded, and an attacker cannot grow it:

- only MACs that verified are remembered, so only a holder of an object's secret adds to it;
- per object at most `MAX_PER_OBJECT`: beyond, the oldest is forgotten and the object's floor
  rises to its time, so whatever was signed at or before that time is refused (never replayed);
- per namespace at most `MAX_PER_NAMESPACE` and in total `MAX_TOTAL`: beyond, a new signature is
  refused (`ReplayMemoryFull`, 429) until entries expire; a tenant fills its own namespace's
  share only, so another tenant's refreshes need 16 full namespaces to be refused;
- expired entries are dropped as their object is touched, and all of them at most once a second
  when a bound is reached (so a caller at the bound cannot make every request sweep it all).

The memory is per process: behind a Service of R replicas a captured request may be accepted once
by each of them within its window (each acceptance a coalesced annotation write; the controller's
refresh floor bounds the fetches they cause).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import hashlib
import hmac
import re
import time
from collections.abc import Callable

REFRESH_SIGNATURE_HEADER = "Ray-Operator-Signature"
BODY_SIGNATURE_HEADER = "X-Signature-256"
GITHUB_BODY_SIGNATURE_HEADER = "X-Hub-Signature-256"
"""GitHub's name for the body signature (accepted on CloudEvents, whose body carries time)."""
TOLERANCE_SECONDS = 300
"""How far a signature's time may be from the operator's clock, in either direction."""
MAX_PER_OBJECT = 32
MAX_PER_NAMESPACE = 1024
MAX_TOTAL = 16 * MAX_PER_NAMESPACE
SWEEP_INTERVAL_SECONDS = 1.0
FULL_RETRY_AFTER_SECONDS = 30
_REFRESH_SIGNATURE_RE = re.compile(r"^t=(?P<t>[1-9][0-9]{0,11}),v1=(?P<mac>[0-9a-fA-F]{64})$")
_BODY_SIGNATURE_RE = re.compile(r"^sha256=(?P<mac>[0-9a-fA-F]{64})$", re.IGNORECASE)
_MAX_TIME_LENGTH = 64


@dataclasses.dataclass(frozen=True, slots=True)
class Signature:
    """A presented signature: its MAC, the time it claims, and the bytes it must cover."""

    mac: bytes
    """The 32 bytes of the HMAC-SHA256 as presented."""
    signed_at: int
    """Unix seconds the signed material states (the `t=` of the header, or a CloudEvent's
    `time` rounded down)."""
    message: bytes = dataclasses.field(repr=False)
    """What the MAC must be the HMAC of."""

    def verifies(self, secret: bytes) -> bool:
        """Whether the MAC is `message`'s under `secret` (constant-time comparison)."""
        expected = hmac.new(secret, self.message, hashlib.sha256).digest()
        return bool(secret) and hmac.compare_digest(self.mac, expected)


def object_path(namespace: str, name: str) -> str:
    """`namespaces/<namespace>/rayservegraphs/<name>`: the object as the signature names it."""
    return f"namespaces/{namespace}/rayservegraphs/{name}"


def refresh_message(signed_at: int, *, namespace: str, name: str, body: bytes) -> bytes:
    """The exact bytes `Ray-Operator-Signature`'s `v1` is the HMAC of."""
    return f"{signed_at}\n{object_path(namespace, name)}\n".encode("ascii") + body


def refresh_signature(header: str, *, namespace: str, name: str, body: bytes) -> Signature | None:
    """The `Ray-Operator-Signature` in `header` for this object and body; None if malformed."""
    match = _REFRESH_SIGNATURE_RE.match(header.strip().replace(" ", ""))
    if match is None:
        return None
    signed_at = int(match["t"])
    message = refresh_message(signed_at, namespace=namespace, name=name, body=body)
    return Signature(bytes.fromhex(match["mac"]), signed_at, message)


def sign_refresh(secret: bytes, *, namespace: str, name: str, body: bytes = b"", at: int) -> str:
    """The `Ray-Operator-Signature` value a sender puts on a request (for clients and tests)."""
    message = refresh_message(at, namespace=namespace, name=name, body=body)
    return f"t={at},v1={hmac.new(secret, message, hashlib.sha256).hexdigest()}"


def body_signature(header: str, *, body: bytes, signed_at: int) -> Signature | None:
    """The `X-Signature-256` in `header` over `body`, whose own time is `signed_at`; None if
    malformed."""
    match = _BODY_SIGNATURE_RE.match(header.strip())
    if match is None:
        return None
    return Signature(bytes.fromhex(match["mac"]), signed_at, body)


def sign_body(body: bytes, *, secret: bytes) -> str:
    """The `X-Signature-256` value of `body` (for clients and tests)."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def is_refresh_signature(header: str) -> bool:
    """Whether `header` is a well-formed `t=<unix seconds>,v1=<hex>` (not whether it verifies)."""
    return _REFRESH_SIGNATURE_RE.match(header.strip().replace(" ", "")) is not None


def is_body_signature(header: str) -> bool:
    """Whether `header` is a well-formed `sha256=<hex>` (not whether it verifies)."""
    return _BODY_SIGNATURE_RE.match(header.strip()) is not None


def unix_seconds_of(value: object) -> int | None:
    """An RFC 3339 time with an offset (a CloudEvent's `time`) in Unix seconds, rounded down;
    None when it is not one."""
    if not isinstance(value, str) or not value or len(value) > _MAX_TIME_LENGTH:
        return None
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if moment.tzinfo is None or "T" not in value.upper():
        return None  # a date alone or a local time names no instant
    return int(moment.timestamp() // 1)


def within_window(signed_at: int, *, now: float, tolerance: float = TOLERANCE_SECONDS) -> bool:
    """Whether a signature made at `signed_at` may still (or already) be accepted at `now`."""
    return abs(now - signed_at) <= tolerance


class Replayed(Exception):  # noqa: N818 (an outcome: the request was seen)
    """The signature was accepted before for this object (or is older than what it forgot)."""


class ReplayMemoryFull(Exception):  # noqa: N818 (an outcome: refused for now)
    """The namespace's share or the whole memory is full of signatures still in their window."""

    retry_after = FULL_RETRY_AFTER_SECONDS


@dataclasses.dataclass(slots=True)
class _Remembered:
    seen: dict[bytes, int] = dataclasses.field(default_factory=dict)
    """Accepted MAC → the time it was signed at."""
    floor: int | None = None
    """Signatures made at or before it are refused: MACs of that age had to be forgotten."""

    @property
    def weight(self) -> int:
        """What the record costs in the bounds: its MACs, or 1 for a floor left alone (a floor
        is older than every MAC kept beside it, so it expires first)."""
        return max(len(self.seen), self.floor is not None)


class ReplayMemory:
    """The signatures accepted within the window, per object; bounded (see the module)."""

    def __init__(
        self,
        *,
        tolerance: float = TOLERANCE_SECONDS,
        per_object: int = MAX_PER_OBJECT,
        per_namespace: int = MAX_PER_NAMESPACE,
        total: int = MAX_TOTAL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._tolerance = tolerance
        self._per_object = per_object
        self._per_namespace = per_namespace
        self._total_bound = total
        self._clock = clock
        self._objects: dict[tuple[str, str], _Remembered] = {}
        self._namespace_weights: collections.Counter[str] = collections.Counter()
        self._total = 0
        self._last_sweep = float("-inf")

    def __len__(self) -> int:
        """Entries held (MACs and floors), across all objects."""
        return self._total

    def admit(self, namespace: str, name: str, signature: Signature) -> None:
        """Remember `signature` for the object; `Replayed` or `ReplayMemoryFull` if refused.

        Call it only for a signature that verified, and `release` it if the request then fails
        (so the sender's retry is not taken for a replay)."""
        now = self._clock()
        key = (namespace, name)
        record = self._expire(key, now)
        if record is not None and signature.mac in record.seen:
            raise Replayed("this signed request was already accepted")
        if record is not None and record.floor is not None and signature.signed_at <= record.floor:
            raise Replayed("signed no later than a request this object's memory had to forget")
        if record is None or len(record.seen) < self._per_object:
            self._make_room(namespace, now)
            record = self._objects.setdefault(key, _Remembered())
        before = record.weight
        if len(record.seen) >= self._per_object:
            self._forget_oldest(record)
        record.seen[signature.mac] = signature.signed_at
        self._charge(namespace, record.weight - before)

    def release(self, namespace: str, name: str, signature: Signature) -> None:
        """Forget an admitted signature whose request failed after all."""
        key = (namespace, name)
        record = self._objects.get(key)
        if record is None or record.seen.get(signature.mac) != signature.signed_at:
            return
        before = record.weight
        del record.seen[signature.mac]
        self._charge(namespace, record.weight - before)
        if not record.weight:
            del self._objects[key]

    def _expire(self, key: tuple[str, str], now: float) -> _Remembered | None:
        """The object's record without what left the window (None when nothing is left)."""
        record = self._objects.get(key)
        if record is None:
            return None
        before = record.weight
        horizon = now - self._tolerance
        for mac in [mac for mac, signed_at in record.seen.items() if signed_at < horizon]:
            del record.seen[mac]
        if record.floor is not None and record.floor < horizon:
            record.floor = None
        self._charge(key[0], record.weight - before)
        if not record.weight:
            del self._objects[key]
            return None
        return record

    @staticmethod
    def _forget_oldest(record: _Remembered) -> None:
        """Make room in a full record (its weight stays): its oldest MAC goes, and the floor
        rises to that MAC's time so that the forgotten request is still refused."""
        oldest = min(record.seen, key=record.seen.__getitem__)
        signed_at = record.seen.pop(oldest)
        record.floor = signed_at if record.floor is None else max(record.floor, signed_at)

    def _make_room(self, namespace: str, now: float) -> None:
        if not self._full(namespace):
            return
        if now - self._last_sweep >= SWEEP_INTERVAL_SECONDS:
            self._last_sweep = now
            for key in list(self._objects):
                self._expire(key, now)
        if self._full(namespace):
            raise ReplayMemoryFull("too many signed requests within the window")

    def _full(self, namespace: str) -> bool:
        return (
            self._namespace_weights[namespace] >= self._per_namespace
            or self._total >= self._total_bound
        )

    def _charge(self, namespace: str, delta: int) -> None:
        if not delta:
            return
        self._total += delta
        self._namespace_weights[namespace] += delta
        if self._namespace_weights[namespace] <= 0:
            del self._namespace_weights[namespace]


__all__ = [
    "BODY_SIGNATURE_HEADER",
    "GITHUB_BODY_SIGNATURE_HEADER",
    "REFRESH_SIGNATURE_HEADER",
    "TOLERANCE_SECONDS",
    "ReplayMemory",
    "ReplayMemoryFull",
    "Replayed",
    "Signature",
    "body_signature",
    "is_body_signature",
    "is_refresh_signature",
    "object_path",
    "refresh_message",
    "refresh_signature",
    "sign_body",
    "sign_refresh",
    "unix_seconds_of",
    "within_window",
]
