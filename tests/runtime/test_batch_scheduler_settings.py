"""Specification: `--batch-scheduler` takes KubeRay's four names (or RAY_OPERATOR_BATCH_SCHEDULER),
refuses any other at start with the known names, and KubeRay's deprecated
`--enable-batch-scheduler` means volcano but not together with `--batch-scheduler`."""

from __future__ import annotations

import argparse

import pytest
from ray_operator.cli import main
from ray_operator.settings import Settings, add_run_arguments, settings_from_args


def parse(*argv: str) -> Settings:
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    return settings_from_args(parser.parse_args(argv))


def test_no_batch_scheduler_by_default() -> None:
    assert parse().batch_scheduler == ""


@pytest.mark.parametrize("name", ["volcano", "yunikorn", "scheduler-plugins", "kai-scheduler"])
def test_each_of_kuberays_schedulers_is_accepted(name: str) -> None:
    assert parse(f"--batch-scheduler={name}").batch_scheduler == name


def test_the_environment_variable_stands_in_for_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_OPERATOR_BATCH_SCHEDULER", "yunikorn")
    assert parse().batch_scheduler == "yunikorn"


def test_an_unknown_scheduler_is_refused_at_start_with_the_known_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--batch-scheduler=slurm"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "unknown batch scheduler 'slurm'" in error
    assert "volcano, yunikorn, scheduler-plugins, kai-scheduler" in error


def test_the_deprecated_enable_flag_means_volcano() -> None:
    assert parse("--enable-batch-scheduler").batch_scheduler == "volcano"


def test_both_flags_at_once_are_refused_as_kuberay_refuses_them() -> None:
    with pytest.raises(SystemExit, match="use --batch-scheduler only"):
        main(["run", "--enable-batch-scheduler", "--batch-scheduler=yunikorn"])
