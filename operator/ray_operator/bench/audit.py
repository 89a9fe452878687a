"""What one client asked of the API server, read from kube-apiserver's audit log.

`apiserver_request_total` has no user label, so a benchmark that must work for any operator gives
the operator under test its own client certificate and follows the audit log (JSON lines, one per
completed request: `LocalControlPlane(audit_users=...)`) to count that user's requests by verb and
resource, and to tell when it has gone quiet. Lease traffic (leader election: reads and renewals
of `leases`) goes on at rest by design and is kept apart everywhere here.

A request is placed in time by `requestReceivedTimestamp`, when the operator sent it. A watch is
logged only when it ends, so a watch still open is not counted yet, and one that ends now (the
API server closes watches every 5-10 min) does not make a quiet operator look busy.

    log = AuditLog(control_plane.audit_log, user="operator-under-test")
    counts = RequestCounts.of(log.read_new())            # everything so far
    counts.describe()   # "create pods 4000, patch rayclusters/status 1000; leases: update 40"
"""

from __future__ import annotations

import datetime
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LEASES = "leases"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One completed request of one user."""

    verb: str
    resource: str
    """`objectRef.resource`, with its subresource as in `rayclusters/status`; "" for non-resource
    URLs such as /version."""
    received: float
    """`requestReceivedTimestamp`, in seconds since the epoch (as `time.time()`)."""
    code: int

    @property
    def is_lease(self) -> bool:
        return self.resource == LEASES

    @property
    def is_write(self) -> bool:
        return self.verb in WRITE_VERBS

    @classmethod
    def parse(cls, line: str | bytes, *, user: str) -> AuditEvent | None:
        """The event on one audit-log line, or None when it is another user's (or not a line
        of the log at all: a half-written last line)."""
        try:
            entry: Mapping[str, Any] = json.loads(line)
        except ValueError:
            return None
        if (entry.get("user") or {}).get("username") != user:
            return None
        reference = entry.get("objectRef") or {}
        resource = str(reference.get("resource") or "")
        if reference.get("subresource"):
            resource = f"{resource}/{reference['subresource']}"
        return cls(
            verb=str(entry.get("verb") or ""),
            resource=resource,
            received=_epoch_seconds(str(entry["requestReceivedTimestamp"])),
            code=int((entry.get("responseStatus") or {}).get("code") or 0),
        )


class AuditLog:
    """Follows one audit-log file and keeps the events of one user, in the order written."""

    def __init__(self, path: Path, *, user: str) -> None:
        self.path = path
        self.user = user
        self.events: list[AuditEvent] = []
        self._offset = 0

    def read_new(self) -> list[AuditEvent]:
        """Read what was appended since the last call; every event of the user so far."""
        if not self.path.exists():
            return self.events
        with self.path.open("rb") as file:
            file.seek(self._offset)
            chunk = file.read()
        # A line the API server is still writing has no newline yet: leave it for the next call.
        complete = chunk[: chunk.rfind(b"\n") + 1]
        self._offset += len(complete)
        for line in complete.splitlines():
            event = AuditEvent.parse(line, user=self.user)
            if event is not None:
                self.events.append(event)
        return self.events

    def between(self, start: float, end: float | None = None) -> list[AuditEvent]:
        """The events (read so far) sent in [start, end], times as `time.time()`."""
        return [
            event
            for event in self.read_new()
            if event.received >= start and (end is None or event.received <= end)
        ]


def last_activity(events: Iterable[AuditEvent]) -> float | None:
    """When the last request besides lease traffic was sent (None: there was none)."""
    return max((event.received for event in events if not event.is_lease), default=None)


def quiet_since(events: Iterable[AuditEvent], *, after: float, now: float) -> float:
    """Seconds the client has sent nothing but lease requests, counted from `after` at most."""
    last = last_activity(events)
    return now - max(after, last if last is not None else after)


@dataclass(frozen=True, slots=True)
class RequestCounts:
    """Requests counted by (verb, resource), lease traffic apart."""

    requests: Mapping[tuple[str, str], int] = field(default_factory=dict)
    leases: Mapping[str, int] = field(default_factory=dict)
    """Lease requests by verb."""

    @classmethod
    def of(cls, events: Iterable[AuditEvent]) -> RequestCounts:
        requests: Counter[tuple[str, str]] = Counter()
        leases: Counter[str] = Counter()
        for event in events:
            if event.is_lease:
                leases[event.verb] += 1
            else:
                requests[event.verb, event.resource] += 1
        return cls(dict(requests), dict(leases))

    @property
    def total(self) -> int:
        """Requests besides lease traffic."""
        return sum(self.requests.values())

    @property
    def lease_total(self) -> int:
        return sum(self.leases.values())

    @property
    def writes(self) -> int:
        """Writes besides lease renewals (creates, updates, patches and deletes)."""
        return sum(n for (verb, _), n in self.requests.items() if verb in WRITE_VERBS)

    def only_writes(self) -> RequestCounts:
        """The writes among these requests (leases left out)."""
        return RequestCounts(
            {key: n for key, n in self.requests.items() if key[0] in WRITE_VERBS}, {}
        )

    def describe(self) -> str:
        """e.g. "create pods 4, patch rayclusters/status 1; leases: get 1, update 12"."""
        ordered = sorted(self.requests.items(), key=lambda item: (-item[1], item[0]))
        text = ", ".join(
            f"{verb} {resource or '(no resource)'} {n}" for (verb, resource), n in ordered
        )
        text = text or "none"
        if self.leases:
            text += "; leases: " + ", ".join(
                f"{verb} {n}" for verb, n in sorted(self.leases.items())
            )
        return text


def _epoch_seconds(timestamp: str) -> float:
    # e.g. "2026-11-26T15:50:01.123456Z"; fromisoformat reads the Z from Python 3.11 on.
    return datetime.datetime.fromisoformat(timestamp).timestamp()
