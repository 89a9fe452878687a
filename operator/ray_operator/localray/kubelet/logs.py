"""`GET /containerLogs/{namespace}/{pod}/{container}`: a local container's output file, as a
kubelet serves a container's log (`kubectl logs`, with `-f`, `--tail`, `--limit-bytes`).

The file holds what the process wrote, without the times it wrote it, so `--timestamps`,
`--since` and `--since-time` are refused with a message saying so rather than ignored; the
file of an earlier run is not kept, so neither is `--previous`.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ray_operator.localray.kubelet.http import BadRequestError, Request, respond
from ray_operator.localray.views import LocalContainer, LocalPods

FOLLOW_POLL_SECONDS = 0.2
READ_BYTES = 64 << 10
UNSUPPORTED = {
    "timestamps": "--timestamps (the local log file holds no write times)",
    "sinceSeconds": "--since (the local log file holds no write times)",
    "sinceTime": "--since-time (the local log file holds no write times)",
    "previous": "--previous (a local process keeps no earlier run's log)",
}
BOOLEAN_OPTIONS = ("timestamps", "previous")


@dataclass(frozen=True, slots=True)
class LogOptions:
    follow: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None


def log_options(request: Request) -> LogOptions:
    """The query's options; BadRequestError for a malformed or an unsupported one."""
    for name, what in UNSUPPORTED.items():
        asked = request.flag(name) if name in BOOLEAN_OPTIONS else name in request.query
        if asked:
            raise BadRequestError(f"ray-operator dev's local Pods do not support {what}")
    return LogOptions(
        follow=request.flag("follow"),
        tail_lines=_natural(request, "tailLines", minimum=0),
        limit_bytes=_natural(request, "limitBytes", minimum=1),
    )


def _natural(request: Request, name: str, *, minimum: int) -> int | None:
    values = request.query.get(name)
    if not values:
        return None
    try:
        value = int(values[-1])
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise BadRequestError(f"{name} must be an integer of at least {minimum}: {values[-1]!r}")
    return value


async def serve_logs(
    request: Request,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    pods: LocalPods,
    container: LocalContainer,
) -> None:
    """Answer 200 and stream the log; with `follow`, until the container is gone or the API
    server hangs up."""
    options = log_options(request)
    with _open_log(container.log_path) as log:
        log.seek(_tail_offset(log, options.tail_lines))
        await respond(writer, 200, length=False)
        budget = options.limit_bytes
        hung_up = asyncio.ensure_future(reader.read(1))
        try:
            while budget is None or budget > 0:
                data = log.read(READ_BYTES if budget is None else min(READ_BYTES, budget))
                if data:
                    writer.write(data)
                    await writer.drain()
                    budget = None if budget is None else budget - len(data)
                    continue
                if not options.follow or hung_up.done() or not _still_runs(pods, container):
                    break
                await asyncio.wait([hung_up], timeout=FOLLOW_POLL_SECONDS)
        finally:
            hung_up.cancel()


def _open_log(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except FileNotFoundError:
        # Started but has written nothing yet: the same as an empty log.
        return Path(os.devnull).open("rb")


def _still_runs(pods: LocalPods, container: LocalContainer) -> bool:
    now = pods.container(container.namespace, container.pod, container.container)
    return now is not None and now.pod_uid == container.pod_uid and now.running


def _tail_offset(log: BinaryIO, lines: int | None) -> int:
    """Where the last `lines` lines of the file start (0: all of it)."""
    if lines is None:
        return 0
    end = log.seek(0, os.SEEK_END)
    if lines == 0:
        return end
    position, newlines = end, 0
    while position > 0:
        start = max(0, position - READ_BYTES)
        log.seek(start)
        block = log.read(position - start)
        for index in range(len(block) - 1, -1, -1):
            if block[index] != 0x0A:
                continue
            if start + index == end - 1:
                continue  # the last line's own newline: a last line without one counts too
            newlines += 1
            if newlines == lines:
                return start + index + 1
        position = start
    return 0
