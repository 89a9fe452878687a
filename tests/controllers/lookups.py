"""What the controller tests read back through kubectl: one object by name (or None while it does
not exist), the wait until it exists, and the Events of one reason."""

from __future__ import annotations

from typing import Any

from tests.controllers.conftest import Harness


async def named_or_none(harness: Harness, resource: str, name: str) -> dict[str, Any] | None:
    """The `resource` (as kubectl names it: `pvc`, `ingress`) called `name`, or None."""
    listed = await harness.get_json(resource, "--field-selector", f"metadata.name={name}")
    items: list[dict[str, Any]] = listed["items"]
    return items[0] if items else None


async def eventually_named(
    harness: Harness, resource: str, name: str, *, what: str
) -> dict[str, Any]:
    """The `resource` called `name`, once it exists."""

    async def check() -> dict[str, Any] | None:
        return await named_or_none(harness, resource, name)

    found: dict[str, Any] = await harness.eventually(check, what=what)
    return found


async def events_with_reason(harness: Harness, reason: str) -> list[dict[str, Any]]:
    """The namespace's Events of `reason`."""
    listed = await harness.get_json("events", "--field-selector", f"reason={reason}")
    items: list[dict[str, Any]] = listed["items"]
    return items
