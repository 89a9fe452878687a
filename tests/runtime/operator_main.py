"""`ray-operator run` with the test-only `MarkingController` plugged in (run as a subprocess).

Same settings, flags and `app.run` as the real command; only the controller list differs.
"""

from __future__ import annotations

import argparse
import sys

from ray_operator.app import run
from ray_operator.settings import add_run_arguments, settings_from_args

from tests.runtime.controllers import MarkingController


def main() -> int:
    parser = argparse.ArgumentParser(prog="ray-operator run (test controllers)")
    add_run_arguments(parser)
    return run(settings_from_args(parser.parse_args()), controllers=[MarkingController])


if __name__ == "__main__":
    sys.exit(main())
