"""JSON a user writes inside a string field, read with a nesting bound of our own.

Who calls: the readers of `RayJob.spec.entrypointResources`, the `resources` start parameter and
the legacy `ray start --resources` flag — each wants a flat object of amounts.

Python's json recurses once per nesting level and stops at the interpreter's recursion limit: a
RecursionError at about a thousand levels by default, further in a process that raised the limit
(hypothesis does, around the tests it runs). A bound that moves with the process is no bound to
document, and the value it lets through is walked again later (hashes, messages, Ray's own
decoder). So `loads` counts the nesting first, in one linear pass that recurses nowhere, and
refuses text nested deeper than `MAX_DEPTH` before decoding it. Go's encoding/json, which KubeRay
decodes these fields with, stops at 10,000; what a Ray user writes here nests two levels deep.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 32
"""Most arrays and objects nested in one another."""

# A whole JSON string (its brackets are text, not structure), or one bracket.
_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


class JsonTooDeepError(ValueError):
    """The text nests arrays and objects deeper than `MAX_DEPTH`."""


def nesting_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in `text` (brackets inside strings do not
    count); linear in the text, whatever it holds."""
    depth = deepest = 0
    for match in _STRUCTURE.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


def loads(text: str) -> Any:
    """`json.loads(text)`, refused with `JsonTooDeepError` (a ValueError, as any text json
    cannot read) when nested deeper than `MAX_DEPTH`."""
    if nesting_depth(text) > MAX_DEPTH:
        raise JsonTooDeepError(f"nested deeper than {MAX_DEPTH} levels")
    return json.loads(text)
