"""Processes the local Ray agent starts: each in a session (process group) of its own, so
stopping one ends everything it started (raylet, GCS, dashboard, Ray workers, job drivers).

`ray start --block` drains its node through the GCS when it gets SIGTERM, which waits out a GCS
time-out when the GCS is stopping too; so a stop is SIGTERM to the whole group, a short grace,
then SIGKILL to what is left. Ray keeps no state a local node needs to save.

Every started group is recorded in a small file, so a run that died without stopping them (the
operator was killed) has its leftovers ended by the next start (`end_leftovers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

from ray_operator.localcluster.processes import process_start_time

logger = logging.getLogger(__name__)

STOP_GRACE_SECONDS = 3.0


class LocalProcess:
    """One command run in its own process group, its output appended to `log_path`."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        records: ProcessRecords | None = None,
    ) -> None:
        self.argv = tuple(argv)
        self._env = dict(env)
        self._cwd = cwd
        self.log_path = log_path
        self._records = records
        self._process: asyncio.subprocess.Process | None = None

    @property
    def env(self) -> Mapping[str, str]:
        """The environment the process was started with."""
        return self._env

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def returncode(self) -> int | None:
        return None if self._process is None else self._process.returncode

    async def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._cwd.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._process = await asyncio.create_subprocess_exec(
                *self.argv,
                env=self._env,
                cwd=self._cwd,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        if self._records is not None:
            self._records.add(self._process.pid)

    async def wait(self) -> int:
        if self._process is None:
            raise RuntimeError("the process was not started")
        return await self._process.wait()

    async def stop(self, *, grace: float = STOP_GRACE_SECONDS) -> None:
        """SIGTERM to the group, then SIGKILL to what is left after `grace` seconds."""
        process = self._process
        if process is None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), timeout=grace)
        # Children of the group outlive its leader: always end the group, not only the leader.
        _signal_group(process.pid, signal.SIGKILL)
        await process.wait()
        if self._records is not None:
            self._records.remove(process.pid)

    def tail(self, lines: int = 5) -> str:
        """The last lines of the log (for an Event saying why a process ended)."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 4096))
                text = log.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-lines:])


class ProcessRecords:
    """Process groups started and not yet stopped, kept in a file across runs."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._groups: dict[int, int | None] = {}

    def add(self, pid: int) -> None:
        self._groups[pid] = process_start_time(pid)
        self._save()

    def remove(self, pid: int) -> None:
        self._groups.pop(pid, None)
        self._save()

    def end_leftovers(self) -> int:
        """SIGKILL the groups a previous run recorded and never stopped; how many there were.

        A group counts only while its leader has the recorded start time, so a reused pid is
        never signalled."""
        try:
            recorded = json.loads(self._path.read_text())
        except (OSError, ValueError):
            return 0
        ended = 0
        for pid_text, started in dict(recorded).items():
            pid = int(pid_text)
            if started is not None and process_start_time(pid) == started:
                _signal_group(pid, signal.SIGKILL)
                ended += 1
        self._save()
        return ended

    def _save(self) -> None:
        # Only a later run's cleanup depends on the file: failing to write it stops nothing.
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._path.write_text(json.dumps({str(pid): t for pid, t in self._groups.items()}))
        except OSError as error:
            logger.warning("cannot record local Ray processes in %s: %s", self._path, error)


def _signal_group(pid: int, signum: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)
