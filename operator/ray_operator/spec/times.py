"""Times as the Kubernetes API writes them: RFC 3339 in UTC, to the second."""

from __future__ import annotations

import datetime


def format_time(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
