"""URLs fit to show: what logs, Events and status may say about an address a user gave us."""

from __future__ import annotations

from yarl import URL


def shown_url(url: str | URL) -> str:
    """The URL without userinfo, query and fragment (where tokens hide): what logs, Events and
    the status show."""
    parsed = url if isinstance(url, URL) else URL(url)
    return str(parsed.with_user(None).with_query(None).with_fragment(None))
