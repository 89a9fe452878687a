"""What a conversion reports besides its result: warnings (something was changed or dropped) and
problems (the legacy object cannot be converted), each with the legacy field's path.

Readers of legacy fields take a `Findings` and add to it instead of raising at the first bad
field, so that one run names every problem of a document.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

# Messages quote a value only this far: a legacy object may hold megabytes in one field.
_SHOWN_VALUE_LENGTH = 60

# Findings end up in Events, the status and logs, which must never carry a secret: the value of
# a flag such as `--redis-password` is never quoted.
_SECRET_NAME = re.compile(r"password|passwd|token|secret", re.IGNORECASE)
_SECRET_FLAG_VALUE = re.compile(
    r"""(--?[\w.-]*(?:password|passwd|token|secret)[\w.-]*)(=|\s+)("[^"]*"|'[^']*'|\S+)""",
    re.IGNORECASE,
)
HIDDEN = "<hidden>"


@dataclass(frozen=True)
class _FieldMessage:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(frozen=True)
class ConversionWarning(_FieldMessage):
    """A legacy field that was changed or dropped on the way to ray.io/v1."""


@dataclass(frozen=True)
class ConversionProblem(_FieldMessage):
    """A legacy field that makes the object impossible to convert."""


@dataclass
class Findings:
    """The warnings and problems of one conversion, in the order they were found."""

    problems: list[ConversionProblem] = field(default_factory=list)
    warnings: list[ConversionWarning] = field(default_factory=list)

    def problem(self, path: str, message: str) -> None:
        self.problems.append(ConversionProblem(_one_line(path), _one_line(message)))

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(ConversionWarning(_one_line(path), _one_line(message)))


def _one_line(text: str) -> str:
    """Each finding is one line of output: line breaks in user text are written escaped."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


def is_secret_name(name: str) -> bool:
    """Whether a flag or field of this name holds a secret (a password, a token)."""
    return bool(_SECRET_NAME.search(name))


def redact(text: str) -> str:
    """`text` with the value of every secret-named flag (`--redis-password=…`) hidden."""
    return _SECRET_FLAG_VALUE.sub(lambda match: f"{match[1]}{match[2]}{HIDDEN}", text)


def show(value: Any) -> str:
    """`value` as a message quotes it: JSON, secrets hidden, cut short when long."""
    if isinstance(value, float) and not math.isfinite(value):
        text = str(value)
    elif isinstance(value, str):
        text = json.dumps(redact(value), ensure_ascii=False)
    elif isinstance(value, int | float | bool) or value is None:
        text = json.dumps(value, ensure_ascii=False)
    else:
        # Never the full content of a list or an object: only what it is.
        text = f"a {type(value).__name__}" if not isinstance(value, dict) else "an object"
    return shorten(text)


def shorten(text: str) -> str:
    """`text` cut short for a message when long."""
    if len(text) > _SHOWN_VALUE_LENGTH:
        return text[:_SHOWN_VALUE_LENGTH] + "…"
    return text
