"""`/exec/{namespace}/{pod}/{container}`: run a command in a local Pod over SPDY with
Kubernetes' remote-command protocol (`v4.channel.k8s.io`; `v5` is the same over SPDY), as
`kubectl exec` reaches a kubelet.

The client opens one stream per channel, each named by its `streamtype` header: `error`, then
`stdin`, `stdout`, `stderr` (not with a TTY) and `resize` (with a TTY), as the query asked. Once
all are open the command runs; its output goes to `stdout`/`stderr` (a TTY's both to `stdout`),
`stdin` feeds it, `resize` carries `{"Width": .., "Height": ..}` for the TTY. At the end the
`error` stream carries a `Status`: Success, or Failure with reason `NonZeroExitCode` and the exit
code as its `ExitCode` cause (kubectl exits with it), or the reason the command could not run.

The command runs as the Pod's process does: its environment and working directory, and inside
its namespaces once the agent gives the Pod some (`command_in_pod`, the one place that decides).
When the client goes away the command's process group is ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import pty
import signal
import struct
import termios
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ray_operator.localray.kubelet.http import BadRequestError, Request
from ray_operator.localray.kubelet.session import SpdySession, SpdyStream
from ray_operator.localray.sandbox import enter_argv, network_argv
from ray_operator.localray.views import LocalContainer

logger = logging.getLogger(__name__)

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
MAX_COMMAND_ARGS = 1024
MAX_COMMAND_BYTES = 128 << 10
KILL_GRACE_SECONDS = 2.0
READ_BYTES = 32 << 10
FIRST_SIZE_WAIT_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class ExecOptions:
    command: tuple[str, ...]
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool

    @property
    def stream_types(self) -> frozenset[str]:
        """The streams the client opens for these options."""
        wanted = {"error"}
        wanted |= {"stdin"} if self.stdin else set()
        wanted |= {"stdout"} if self.stdout else set()
        wanted |= {"stderr"} if self.stderr and not self.tty else set()
        wanted |= {"resize"} if self.tty else set()
        return frozenset(wanted)


def exec_options(request: Request) -> ExecOptions:
    """The query's command and channels (the API server writes `input`, `output`, `error`,
    `tty` as "1"); BadRequestError when no command or no channel is asked for."""
    command = tuple(request.query.get("command", []))
    if not command or not command[0]:
        raise BadRequestError("no command to run: give one after `--`")
    if len(command) > MAX_COMMAND_ARGS or sum(len(arg) for arg in command) > MAX_COMMAND_BYTES:
        raise BadRequestError(
            f"command over {MAX_COMMAND_ARGS} arguments or {MAX_COMMAND_BYTES} bytes"
        )
    options = ExecOptions(
        command=command,
        stdin=request.flag("input"),
        stdout=request.flag("output"),
        stderr=request.flag("error"),
        tty=request.flag("tty"),
    )
    if not (options.stdin or options.stdout or options.stderr):
        raise BadRequestError("you must specify at least one of stdin, stdout, stderr")
    return options


def command_in_pod(container: LocalContainer, command: Sequence[str]) -> list[str]:
    """The argv that runs `command` as a process of the Pod: the Pod's own user and mount
    namespaces when the agent made some (its volumes at their mount paths); on a loopback of its
    own where its Pod ports answer when the Pod has `loopback_ports`; else as given.
    Working directory and environment are the caller's (`container.working_dir`, `env`)."""
    if container.namespace_pid is not None:
        return enter_argv(container.namespace_pid, container.working_dir, command)
    if container.loopback_ports:
        return network_argv(container.ports, command)
    return list(command)


async def serve_exec(
    session: SpdySession,
    *,
    options: ExecOptions,
    container: LocalContainer,
    stream_creation_timeout: float,
) -> None:
    """Wait for the client's streams, run the command, report its end on the error stream."""
    streams = await _await_streams(session, options.stream_types, stream_creation_timeout)
    if streams is None:
        return
    for stream in streams.values():
        if stream.headers.get("streamtype") in ("error", "stdout", "stderr"):
            stream.discard()
    try:
        status = await _run(session, streams, options=options, container=container)
    except OSError as error:
        # Named here: the event loop's error may not carry the file name.
        reason = f"exec {options.command[0]!r}: {error.strerror or error}"
        status = _failure(f"error executing command in container: {reason}", reason="InternalError")
    await streams["error"].write(json.dumps(status).encode())
    for stream in streams.values():
        await stream.close()


async def _await_streams(
    session: SpdySession, wanted: frozenset[str], seconds: float
) -> dict[str, SpdyStream] | None:
    """The client's streams by type, once all `wanted` are open; None when they are not in time
    (the connection is closed: the client gave up or never speaks the protocol)."""
    streams: dict[str, SpdyStream] = {}

    async def gather() -> None:
        while set(streams) != wanted:
            stream = await session.accept()
            if stream is None:
                raise ConnectionError("the connection ended before every stream was opened")
            kind = stream.headers.get("streamtype", "")
            if kind not in wanted or kind in streams:
                await stream.reset()
                continue
            streams[kind] = stream

    try:
        await asyncio.wait_for(gather(), seconds)
    except (TimeoutError, ConnectionError) as error:
        logger.info("kubelet endpoint: exec streams not opened: %r", error)
        return None
    return streams


async def _run(
    session: SpdySession,
    streams: dict[str, SpdyStream],
    *,
    options: ExecOptions,
    container: LocalContainer,
) -> dict[str, Any]:
    argv = command_in_pod(container, options.command)
    cwd = container.working_dir if container.namespace_pid is None else None
    if options.tty:
        return await _run_in_terminal(session, streams, argv, container=container, cwd=cwd)
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=dict(container.env),
        cwd=cwd,
        stdin=asyncio.subprocess.PIPE if options.stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE if options.stdout else asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE if options.stderr else asyncio.subprocess.DEVNULL,
        start_new_session=True,
    )
    output = []
    if process.stdout is not None:
        output.append(asyncio.ensure_future(_pump_out(process.stdout, streams["stdout"])))
    if process.stderr is not None:
        output.append(asyncio.ensure_future(_pump_out(process.stderr, streams["stderr"])))
    feeding = []
    if process.stdin is not None:
        feeding.append(asyncio.ensure_future(_pump_in(streams["stdin"], process.stdin)))
    return await _supervise(session, process, output=output, input=feeding)


async def _supervise(
    session: SpdySession,
    process: asyncio.subprocess.Process,
    *,
    output: Sequence[asyncio.Future[None]],
    input: Sequence[asyncio.Future[None]],
) -> dict[str, Any]:
    """Wait for the command's end (or the client's), end what it left running in its group,
    let its last output through; its exit status."""
    ended = asyncio.ensure_future(process.wait())
    client_gone = asyncio.ensure_future(session.closed.wait())
    try:
        await asyncio.wait([ended, client_gone], return_when=asyncio.FIRST_COMPLETED)
        if not ended.done():
            await _end_group(process, grace=KILL_GRACE_SECONDS)
        else:
            # Its output may still be in flight; what it left behind gets no say in it.
            await asyncio.wait(output, timeout=KILL_GRACE_SECONDS)
            await _end_group(process, grace=0)
        await asyncio.wait(output, timeout=KILL_GRACE_SECONDS)
    finally:
        client_gone.cancel()
        for task in [*input, *output]:
            task.cancel()
        await _end_group(process, grace=0)
    return _exit_status(await ended)


async def _pump_out(source: asyncio.StreamReader, stream: SpdyStream) -> None:
    while data := await source.read(READ_BYTES):
        await stream.write(data)


async def _pump_in(stream: SpdyStream, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await stream.read():
            sink.write(data)
            await sink.drain()
        sink.close()


async def _run_in_terminal(
    session: SpdySession,
    streams: dict[str, SpdyStream],
    argv: list[str],
    *,
    container: LocalContainer,
    cwd: str | None,
) -> dict[str, Any]:
    """The command on a pseudo-terminal: its output (both streams) to stdout, stdin to it,
    resize messages to the terminal's size."""
    controller, terminal = pty.openpty()
    # kubectl sends its terminal's size first thing: a command that asks for it at once (a
    # shell's prompt, `stty size`) should see it, so wait a moment for it before starting.
    with contextlib.suppress(TimeoutError):
        first_size = await asyncio.wait_for(streams["resize"].read(), FIRST_SIZE_WAIT_SECONDS)
        _apply_sizes(first_size.decode(errors="replace"), controller)
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            env=dict(container.env),
            cwd=cwd,
            stdin=terminal,
            stdout=terminal,
            stderr=terminal,
            start_new_session=True,
        )
    except OSError:
        os.close(controller)
        raise
    finally:
        os.close(terminal)
    os.set_blocking(controller, False)
    feeding = [asyncio.ensure_future(_resize(streams["resize"], controller))]
    if "stdin" in streams:
        feeding.append(asyncio.ensure_future(_terminal_in(streams["stdin"], controller)))
    output = []
    if "stdout" in streams:
        output.append(asyncio.ensure_future(_terminal_out(controller, streams["stdout"])))
    try:
        return await _supervise(session, process, output=output, input=feeding)
    finally:
        os.close(controller)


async def _terminal_out(controller: int, stream: SpdyStream) -> None:
    loop = asyncio.get_running_loop()
    readable = asyncio.Event()
    loop.add_reader(controller, readable.set)
    try:
        while True:
            await readable.wait()
            readable.clear()
            try:
                data = os.read(controller, READ_BYTES)
            except BlockingIOError:
                continue
            except OSError:  # EIO: every process holding the terminal ended
                return
            if not data:
                return
            await stream.write(data)
    finally:
        loop.remove_reader(controller)


async def _terminal_in(stream: SpdyStream, controller: int) -> None:
    with contextlib.suppress(OSError):
        while data := await stream.read():
            _write_all(controller, data)
        _write_all(controller, b"\x04")  # end of input: Ctrl-D


def _write_all(controller: int, data: bytes) -> None:
    # A terminal's input buffer holds what a person types; a paste larger than it is cut.
    with contextlib.suppress(BlockingIOError):
        os.write(controller, data)


async def _resize(stream: SpdyStream, controller: int) -> None:
    """Apply each `{"Width": w, "Height": h}` the client sends (one JSON object per message,
    several possibly in one read)."""
    pending = ""
    while data := await stream.read():
        pending = _apply_sizes((pending + data.decode(errors="replace"))[-4096:], controller)


def _apply_sizes(text: str, controller: int) -> str:
    """Apply every complete size message in `text`; what is left of an incomplete one."""
    decoder = json.JSONDecoder()
    while text.strip():
        try:
            size, end = decoder.raw_decode(text.lstrip())
        except json.JSONDecodeError:
            break
        text = text.lstrip()[end:]
        if isinstance(size, dict):
            _set_terminal_size(controller, size)
    return text


def _set_terminal_size(controller: int, size: dict[str, Any]) -> None:
    width, height = size.get("Width"), size.get("Height")
    sizes = (width, height)
    if all(isinstance(value, int) and 0 < value < 65536 for value in sizes):
        fcntl.ioctl(controller, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))


async def _end_group(process: asyncio.subprocess.Process, *, grace: float) -> None:
    """End every process left in the command's session (it ran in one of its own): SIGTERM and
    `grace` seconds for the command itself, then SIGKILL to the whole group."""
    if grace > 0 and process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), grace)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _exit_status(code: int) -> dict[str, Any]:
    if code == 0:
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    # A signal's end reads as 128 + the signal, as a shell and the container runtimes say.
    exit_code = code if code > 0 else 128 - code
    status = _failure(
        f"command terminated with non-zero exit code: exit status {exit_code}",
        reason="NonZeroExitCode",
    )
    status["details"] = {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]}
    return status


def _failure(message: str, *, reason: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
