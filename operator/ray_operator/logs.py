"""Logging setup: one line per decision, prefixed by the object it is about; text or JSON.

The worker loop runs each reconcile inside `about(key)`, which sets a context variable; the
formatters prefix every record logged in that context (including tasks the reconcile starts) with
`namespace/name: ` — the habit of the legacy Python Ray operator, which prefixed by cluster name.
Controllers therefore just `logger.info("creating head pod")`. Code outside a reconcile passes
`extra={"object": "ns/name"}` or writes the prefix itself.

JSON lines carry `time`, `level`, `logger`, `object` (when known), `message` and `exc_info`.
Plain lines are the legacy operator's habit kept for its users' scripts: the object's name first
(`example-cluster: INFO ray_operator.x [ns]: message`, so `grep ^example-cluster:` finds a
cluster's lines) and no timestamp (`kubectl logs --timestamps` adds the kubelet's).
Nothing here inspects messages: keeping secrets out of them is the caller's rule.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime

# A ContextVar is not shared mutable state: each task sees the value of its own context.
_CURRENT_OBJECT: ContextVar[str | None] = ContextVar("ray_operator_current_object", default=None)


@contextlib.contextmanager
def about(obj: object) -> Iterator[None]:
    """Within this block, log lines are about `obj` (printed with `str(obj)`: `namespace/name`)."""
    token = _CURRENT_OBJECT.set(str(obj))
    try:
        yield
    finally:
        _CURRENT_OBJECT.reset(token)


def _object_of(record: logging.LogRecord) -> str | None:
    explicit = getattr(record, "object", None)
    return str(explicit) if explicit is not None else _CURRENT_OBJECT.get()


class TextFormatter(logging.Formatter):
    """`2026-01-01T00:00:00.000Z INFO ray_operator.x: ns/name: message`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return _timestamp(record)

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802
        obj = _object_of(record)
        if obj is not None and not record.message.startswith(f"{obj}:"):
            record.message = f"{obj}: {record.message}"
        return super().formatMessage(record)


class PlainFormatter(logging.Formatter):
    """`example-cluster: INFO ray_operator.x [ns]: message`; `INFO ray_operator.x: message` for
    lines about no object."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s%(where)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802
        obj = _object_of(record)
        if obj is None:
            record.where = ""
            return super().formatMessage(record)
        namespace, _, name = obj.rpartition("/")
        # Lines that name their object themselves (`ns/name: ...`) would name it twice.
        record.message = record.message.removeprefix(f"{obj}: ")
        record.where = f" [{namespace}]" if namespace else ""
        return f"{name}: {super().formatMessage(record)}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log pipelines."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
        }
        obj = _object_of(record)
        if obj is not None:
            entry["object"] = obj
        entry["message"] = record.getMessage()
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


FORMATTERS: dict[str, type[logging.Formatter]] = {
    "text": TextFormatter,
    "json": JsonFormatter,
    "plain": PlainFormatter,
}


def configure_logging(*, log_format: str, level: str) -> None:
    """Route all logging to stderr in `log_format` (`text`, `json` or `plain`) at `level`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(FORMATTERS[log_format]())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp logs every probe request at INFO; keep the operator's own lines readable.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
