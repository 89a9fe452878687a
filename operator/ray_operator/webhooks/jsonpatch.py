"""The RFC 6902 JSON Patch that turns one JSON document into another (what a mutating webhook
returns). Maps are diffed key by key; lists and scalars are replaced whole, which is all the
defaulting needs and keeps every patch valid whatever the lists hold.
"""

from __future__ import annotations

from typing import Any

Operation = dict[str, Any]


def json_patch(before: Any, after: Any) -> list[Operation]:
    """Operations (add/remove/replace) that make `before` equal to `after`."""
    return list(_diff(before, after, ""))


def _diff(before: Any, after: Any, path: str) -> list[Operation]:
    if isinstance(before, dict) and isinstance(after, dict):
        operations: list[Operation] = []
        for key in before:
            if key not in after:
                operations.append({"op": "remove", "path": f"{path}/{_escape(key)}"})
        for key, value in after.items():
            child = f"{path}/{_escape(key)}"
            if key not in before:
                operations.append({"op": "add", "path": child, "value": value})
            else:
                operations.extend(_diff(before[key], value, child))
        return operations
    if _same(before, after):
        return []
    return [{"op": "replace", "path": path, "value": after}]


def _same(before: Any, after: Any) -> bool:
    # In Python True == 1 and 1 == 1.0; in JSON they are different documents.
    return type(before) is type(after) and bool(before == after)


def _escape(key: Any) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")
