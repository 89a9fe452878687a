"""CPU time of a piece of work, for tests that a hostile input is refused without heavy work.

Wall time counts whatever else the machine runs; this thread's CPU time does not. A garbage
collection pass is paid by whichever allocation triggers it, so late in a long suite one tiny
parse can be billed 60 ms for objects other tests left behind; collection is held off while
measuring so the figure is the work's own.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager


class CpuTime:
    seconds: float = 0.0


@contextmanager
def cpu_time() -> Iterator[CpuTime]:
    measured = CpuTime()
    collecting = gc.isenabled()
    gc.disable()
    started = time.thread_time()
    try:
        yield measured
    finally:
        measured.seconds = time.thread_time() - started
        if collecting:
            gc.enable()
