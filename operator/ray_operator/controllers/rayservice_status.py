"""Writing a RayService's status (computed purely by `status/rayservice`), and the Events that
go with it: the status patched only when `status_changed` says so, with `lastUpdateTime`; the
Warning of an invalid spec; the Warning KubeRay records when a RayService has just timed out
initializing (`ray.io/initializing-timeout`).

Both upgrade paths use it: the zero-downtime upgrade of the controller and the incremental one.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ray_operator.controllers import status_writer
from ray_operator.runtime.controller import Result
from ray_operator.spec.kinds import RAY_SERVICE, ObjectKey
from ray_operator.status import rayservice as rules

if TYPE_CHECKING:
    from ray_io.v1_views import RayService

    from ray_operator.runtime.client import KubeClient
    from ray_operator.runtime.events import EventRecorder

logger = logging.getLogger(__name__)

Object = Mapping[str, Any]
JSON = dict[str, Any]

SERVICE_STATUS_ENTRIES = ("activeServiceStatus", "pendingServiceStatus")
"""Objects inside the status that a merge patch would merge: what vanished inside them is named
too."""


class RayServiceStatusWriter:
    """Writes RayServices' status and tells its news; one per RayService controller."""

    def __init__(
        self,
        *,
        client: KubeClient,
        events: EventRecorder,
        clock: Callable[[], datetime.datetime],
    ) -> None:
        self._client = client
        self._events = events
        self._now = clock

    async def write_status(self, rayservice: RayService, old: JSON, new: JSON) -> None:
        """The status patched when `status_changed(old, new)` says so."""
        if not rules.status_changed(old, new):
            return
        new["lastUpdateTime"] = self._now().strftime("%Y-%m-%dT%H:%M:%SZ")
        # A Conflict (a stale cache: say, one that would choose a second pending cluster name)
        # is retried from fresh data.
        written = await status_writer.write_status(
            self._client, RAY_SERVICE, rayservice, old, new, nested=SERVICE_STATUS_ENTRIES
        )
        if written:
            status_writer.record_pods_waiting_news(self._events, rayservice, old, new)

    async def report_invalid_spec(
        self, rayservice: RayService, status: JSON, message: str
    ) -> Result:
        """A Warning event and the status KubeRay gives an invalid spec; nothing is retried."""
        self._events.record(
            rayservice, reason="InvalidRayServiceSpec", message=message, type="Warning"
        )
        new = rules.invalid_status(
            status,
            message,
            now=self._now(),
            generation=int(rayservice["metadata"].get("generation") or 0),
        )
        await self.write_status(rayservice, status, new)
        return Result()

    def report_initializing_timeout(self, rayservice: RayService, old: Object, new: Object) -> None:
        """The Warning KubeRay records when the status has just timed out initializing."""
        if rules.initializing_timed_out(old) or not rules.initializing_timed_out(new):
            return
        timeout = rules.initializing_timeout(rayservice) or 0.0
        spent = rules.initializing_for(list(old.get("conditions") or []), now=self._now())
        logger.info("%s: initializing timeout exceeded", ObjectKey.of(rayservice))
        self._events.record(
            rayservice,
            reason="RayServiceInitializingTimeout",
            message=f"RayService initializing timeout exceeded after "
            f"{rules.go_duration(spent or timeout)} "
            f"(configured timeout: {rules.go_duration(timeout)})",
            type="Warning",
        )
