"""RayCronJob rules, KubeRay's (`ValidateRayCronJobSpec`): a name short enough for the RayJobs
it names after itself, a schedule robfig/cron accepts without a TZ prefix, a time zone that
exists, and a jobTemplate that is a valid RayJob spec (checked with the RayJob rules on a
stand-in RayJob, its paths moved under `spec.jobTemplate`).
"""

from __future__ import annotations

import dataclasses

from ray_operator.cron import InvalidScheduleError, parse_schedule
from ray_operator.spec.raycluster import JSON, ClusterLike
from ray_operator.validation.embedded import MAX_OWNER_NAME_LENGTH, owner_name_errors
from ray_operator.validation.errors import FieldError, invalid, shown, too_long
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.raycluster import read_only_manifest
from ray_operator.validation.rayjob import validate_rayjob

# A RayJob of a RayCronJob is named `<cron job>-<minutes since the epoch>` (up to 10 digits):
# KubeRay's MaxRayCronJobNameLength.
MAX_CRON_JOB_NAME_LENGTH = MAX_OWNER_NAME_LENGTH - 11
# Any schedule: the zone is checked on its own, so its error names spec.timeZone.
_ANY_SCHEDULE = "0 0 * * *"
# A stand-in RayJob name that passes the RayJob name rules; errors about it are not the user's.
_STAND_IN_NAME = "cron-job-template"


def validate_raycronjob(
    cron: ClusterLike, *, limits: ClusterLimits = DEFAULT_LIMITS
) -> list[FieldError]:
    """Every violation in the RayCronJob's name and spec; empty when it is valid."""
    manifest = read_only_manifest(cron)
    spec = manifest.get("spec") or {}
    return [
        *_name_errors(manifest),
        *_schedule_errors(spec),
        *_time_zone_errors(spec),
        *_job_template_errors(manifest, limits=limits),
    ]


def _name_errors(manifest: JSON) -> list[FieldError]:
    name = str((manifest.get("metadata") or {}).get("name", ""))
    errors = [error for error in owner_name_errors(manifest) if error.reason != "FieldValueTooLong"]
    if len(name) > MAX_CRON_JOB_NAME_LENGTH:
        errors.insert(0, too_long("metadata.name", shown(name), MAX_CRON_JOB_NAME_LENGTH))
    return errors


def _schedule_errors(spec: JSON) -> list[FieldError]:
    schedule = spec.get("schedule")
    if not isinstance(schedule, str):
        return []  # the CRD schema requires a string
    if "TZ" in schedule:
        detail = "cannot use TZ or CRON_TZ in schedule, use the timeZone field instead"
        return [invalid("spec.schedule", shown(schedule), detail)]
    try:
        parse_schedule(schedule, time_zone=None)
    except InvalidScheduleError as error:
        return [invalid("spec.schedule", shown(schedule), str(error))]
    return []


def _time_zone_errors(spec: JSON) -> list[FieldError]:
    zone = spec.get("timeZone")
    if zone is None:
        return []
    try:
        parse_schedule(_ANY_SCHEDULE, time_zone=str(zone))
    except InvalidScheduleError as error:
        return [invalid("spec.timeZone", shown(zone), str(error))]
    return []


def _job_template_errors(manifest: JSON, *, limits: ClusterLimits) -> list[FieldError]:
    template = (manifest.get("spec") or {}).get("jobTemplate")
    if not isinstance(template, dict):
        return []
    # The RayJobs get none of the RayCronJob's annotations (as in KubeRay), so neither does the
    # stand-in: annotation-driven RayJob rules see what the real RayJobs will carry.
    stand_in = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        # The RayJobs' namespace: the operator-identity rule applies in one namespace only.
        "metadata": {
            "name": _STAND_IN_NAME,
            "namespace": (manifest.get("metadata") or {}).get("namespace") or "",
        },
        "spec": template,
    }
    return [
        dataclasses.replace(error, field=error.field.replace("spec.", "spec.jobTemplate.", 1))
        for error in validate_rayjob(stand_in, limits=limits)
        if error.field.startswith("spec")
    ]
