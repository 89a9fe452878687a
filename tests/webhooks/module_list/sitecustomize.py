"""Loaded by Python at start-up when this directory is on PYTHONPATH (test_lean_start.py): on
SIGUSR1, write the names of every module in `sys.modules` to $MODULE_LIST_FILE, one per line.

This lets a test read which modules the real `ray-operator run` holds, without changing its
command (`PYTHONPROFILEIMPORTTIME` would not do: it misses `importlib.import_module`).
"""

import os
import signal
import sys
from pathlib import Path


def _write_module_list(signum: int, frame: object) -> None:
    target = Path(os.environ["MODULE_LIST_FILE"])
    partial = target.with_suffix(".partial")
    partial.write_text("\n".join(sorted(sys.modules)) + "\n")
    partial.replace(target)  # the reader never sees half a list


if os.environ.get("MODULE_LIST_FILE"):
    signal.signal(signal.SIGUSR1, _write_module_list)
