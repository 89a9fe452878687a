"""The RayJob a RayCronJob creates for one scheduled time, as KubeRay builds it
(`constructRayJob`): named `<cron job>-<minutes since the epoch>`, labelled with the cron job's
name, annotated with the scheduled time, controlled by the cron job, its spec the jobTemplate.
Pure: no I/O.
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Mapping
from typing import Any

from ray_operator.builders.rayjob import owner_reference
from ray_operator.spec.raycronjob import (
    CRONJOB_NAME_LABEL,
    SCHEDULED_TIMESTAMP_ANNOTATION,
    rayjob_name,
)
from ray_operator.spec.times import format_time

JSON = dict[str, Any]


def build_scheduled_rayjob(cron: Mapping[str, Any], scheduled: datetime.datetime) -> JSON:
    """The RayJob of `cron` for the scheduled time `scheduled`."""
    metadata = cron["metadata"]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {
            "name": rayjob_name(metadata["name"], scheduled),
            "namespace": metadata["namespace"],
            "labels": {CRONJOB_NAME_LABEL: metadata["name"]},
            "annotations": {SCHEDULED_TIMESTAMP_ANNOTATION: format_time(scheduled)},
            "ownerReferences": [owner_reference(cron)],
        },
        "spec": copy.deepcopy(dict((cron.get("spec") or {}).get("jobTemplate") or {})),
    }
