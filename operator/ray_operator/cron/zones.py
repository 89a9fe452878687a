"""Time zones as Go finds them: `time.LoadLocation` for a schedule's `spec.timeZone` and
`time.Local` for a schedule without one.

The only I/O of the cron package: reading time-zone data through `zoneinfo`, and for the local
zone the file TZ names or /etc/localtime.
"""

from __future__ import annotations

import datetime
import os
import zoneinfo


class ZoneError(ValueError):
    """A zone name Go's time.LoadLocation refuses; str() is Go's message (`time: ...`)."""


def load_location(name: str) -> datetime.tzinfo:
    """Go's time.LoadLocation of a non-empty name: "Local", "UTC" or an IANA name."""
    if name == "Local":
        return local_zone()
    if name == "UTC":
        return datetime.UTC
    if ".." in name or name[0] in "/\\":
        raise ZoneError("time: invalid location name")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ZoneError(f"unknown time zone {name}") from None


def local_zone() -> datetime.tzinfo:
    """Go's time.Local: TZ names a zone (empty: UTC), else /etc/localtime, else UTC."""
    name = os.environ.get("TZ")
    if name is not None:
        name = name.removeprefix(":")
        if name in ("", "UTC"):
            return datetime.UTC
        try:
            if name.startswith("/"):
                with open(name, "rb") as data:
                    return zoneinfo.ZoneInfo.from_file(data, key="Local")
            return zoneinfo.ZoneInfo(name)
        except (OSError, ValueError):
            return datetime.UTC
    try:
        with open("/etc/localtime", "rb") as data:
            return zoneinfo.ZoneInfo.from_file(data, key="Local")
    except (OSError, ValueError):
        return datetime.UTC
