"""Settings as `ray-operator run` makes them from its flags."""

from __future__ import annotations

import argparse

from ray_operator.settings import Settings, add_run_arguments, settings_from_args


def parse(*argv: str) -> Settings:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_run_arguments(parser)
    return settings_from_args(parser.parse_args(argv))
