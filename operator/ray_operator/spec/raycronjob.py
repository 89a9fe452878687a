"""How KubeRay names and marks the RayJobs of a RayCronJob, so a switch creates nothing twice:
each is named `<cron job>-<scheduled time in minutes since the epoch>`, labelled
`ray.io/cronjob-name` and annotated `ray.io/cronjob-scheduled-timestamp`.
"""

from __future__ import annotations

import datetime
from typing import Final

CRONJOB_NAME_LABEL: Final = "ray.io/cronjob-name"
SCHEDULED_TIMESTAMP_ANNOTATION: Final = "ray.io/cronjob-scheduled-timestamp"


def rayjob_name(cron_name: str, scheduled: datetime.datetime) -> str:
    """KubeRay's name for the RayJob of one scheduled time (`getRayJobName`)."""
    return f"{cron_name}-{int(scheduled.timestamp()) // 60}"
