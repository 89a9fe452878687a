"""What one step of the RayJob state machine decides (`Step`), and how often a live RayJob is
looked at (`REQUEUE_SECONDS`): shared by the controller (`rayjob.py`) and the step helpers beside
it (`rayjob_dashboard.py`, `rayjob_cleanup.py`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JSON = dict[str, Any]

# KubeRay's RayJobDefaultRequeueDuration: how often a live RayJob looks at its Ray job.
REQUEUE_SECONDS = 3.0


@dataclass(frozen=True, slots=True)
class Step:
    """What one state's step decided: the next status (None: leave it) and when to look again."""

    status: JSON | None
    requeue_after: float | None = REQUEUE_SECONDS
