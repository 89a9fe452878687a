"""Specification: every flag is declared once, in one `ray_operator.flags.Flag` table, and the
settings dataclasses have no field a flag fills without its entry (nor an entry without a field);
a flag's `RAY_OPERATOR_<FLAG>` twin stands in for it only when the flag is not given, and a bad
value there is refused as argparse refuses a bad flag, by the command that uses it only.

`settings.RUN_FLAGS` fills `Settings`, `webhooks.options.WEBHOOK_FLAGS` fills `WebhookOptions`,
`cli.DEV_FLAGS` fills nothing (`dev` reads them itself). A flag spelled a second time (another
argparse argument, a field filled by hand) fails here.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import Counter
from collections.abc import Iterable

import pytest
from ray_operator import cli
from ray_operator.flags import Flag
from ray_operator.settings import RUN_FLAGS, Settings, settings_from_args
from ray_operator.webhooks.options import WEBHOOK_FLAGS, WebhookOptions

WEBHOOK_FIELDS_NO_FLAG_FILLS = {
    "port",  # Settings.webhook_port: --webhook-port, a flag of RUN_FLAGS
    "validating_configuration",
    "mutating_configuration",
    "namespace_selector",
    "timeout_seconds",
    "certificate_validity",
    "ca_validity",
    "check_interval",
}


def fields_out_of_step(
    options: type, flags: Iterable[Flag], *, not_from_flags: Iterable[str] = ()
) -> list[str]:
    """What keeps `options`' fields and `flags` from being one entry per field filled by a
    flag: fields filled twice, flags filling no field of `options`, fields no flag fills."""
    filled = Counter(flag.field for flag in flags if flag.field is not None)
    fields = {field.name for field in dataclasses.fields(options)} - set(not_from_flags)
    return sorted(
        [f"{name} is filled by {count} flags" for name, count in filled.items() if count > 1]
        + [f"{name} is no field" for name in filled.keys() - fields]
        + [f"{name} is filled by no flag" for name in fields - filled.keys()]
    )


def test_each_settings_field_has_exactly_one_run_flag_and_each_run_flag_a_field() -> None:
    assert fields_out_of_step(Settings, RUN_FLAGS) == []


def test_only_the_deprecated_batch_scheduler_switch_fills_no_settings_field() -> None:
    # chosen_batch_scheduler folds it into `batch_scheduler`, which --batch-scheduler fills.
    assert [flag.name for flag in RUN_FLAGS if flag.field is None] == ["enable-batch-scheduler"]


def test_every_webhook_options_field_from_a_flag_has_exactly_one_webhook_flag() -> None:
    assert (
        fields_out_of_step(
            WebhookOptions, WEBHOOK_FLAGS, not_from_flags=WEBHOOK_FIELDS_NO_FLAG_FILLS
        )
        == []
    )


def test_a_field_filled_by_a_second_flag_or_by_none_is_found() -> None:
    second = Flag("lease-name-again", field="lease_name", help="a second spelling")
    assert fields_out_of_step(Settings, [*RUN_FLAGS, second]) == ["lease_name is filled by 2 flags"]
    without = [flag for flag in RUN_FLAGS if flag.name != "watch-timeout"]
    assert fields_out_of_step(Settings, without) == ["watch_timeout is filled by no flag"]
    stray = Flag("stray", help="fills nothing Settings has")
    assert fields_out_of_step(Settings, [*RUN_FLAGS, stray]) == ["stray is no field"]


def test_no_flag_name_or_environment_variable_is_declared_twice_across_the_tables() -> None:
    every = [*RUN_FLAGS, *WEBHOOK_FLAGS, *cli.DEV_FLAGS]
    names = Counter(flag.name for flag in every)
    twins = Counter(flag.environment for flag in every if flag.environment is not None)
    assert [name for name, count in names.items() if count > 1] == []
    assert [twin for twin, count in twins.items() if count > 1] == []


EVERY_FLAG = (*RUN_FLAGS, *WEBHOOK_FLAGS, *cli.DEV_FLAGS)
REPEATABLE_RUN_FLAGS = [flag for flag in RUN_FLAGS if flag.repeatable]


def parse_run(*argv: str) -> argparse.Namespace:
    """`ray-operator run`'s arguments as `ray-operator` parses them (twins from os.environ)."""
    args: argparse.Namespace = cli._build_parser().parse_args(["run", *argv])
    return args


@pytest.mark.parametrize(
    ("variable", "value", "flag", "says"),
    [
        ("RAY_OPERATOR_MAX_CONCURRENT_RECONCILES", "abc", "--max-concurrent-reconciles", "'abc'"),
        ("RAY_OPERATOR_MAX_CONCURRENT_RECONCILES", "0", "--max-concurrent-reconciles", "least 1"),
        ("RAY_OPERATOR_LEASE_DURATION", "soon", "--lease-duration", "invalid float value: 'soon'"),
        ("RAY_OPERATOR_SERVE_GRAPH_EVENTS_PORT", "70000", "--serve-graph-events-port", "65535"),
        ("RAY_OPERATOR_LEADER_ELECT", "maybe", "--leader-elect", "not a boolean: 'maybe'"),
        ("RAY_OPERATOR_WEBHOOKS", "perhaps", "--webhooks", "not a boolean: 'perhaps'"),
        ("RAY_OPERATOR_LOG_FORMAT", "xml", "--log-format", "invalid choice: 'xml'"),
        ("RAY_OPERATOR_METRICS_AUTH", "tls", "--metrics-auth", "must be one of"),
        ("RAY_OPERATOR_FEATURE_GATES", "Foo=true", "--feature-gates", "unknown feature gate"),
        ("RAY_OPERATOR_BATCH_SCHEDULER", "slurm", "--batch-scheduler", "'slurm'"),
    ],
)
def test_a_bad_environment_value_is_refused_as_argparse_refuses_a_bad_flag_naming_both(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    flag: str,
    says: str,
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SystemExit) as exit_info:
        parse_run()
    assert exit_info.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith(f"ray-operator run: error: argument {flag}")
    assert f"from {variable}: " in error
    assert says in error


def test_a_bad_environment_value_is_no_error_for_a_command_without_its_flag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for flag in EVERY_FLAG:
        if flag.environment is not None:
            monkeypatch.setenv(flag.environment, "not a value of any flag")
    args = cli._build_parser().parse_args(["convert", "cluster.yaml"])
    assert args.file == "cluster.yaml"


def test_a_flag_given_on_the_command_line_leaves_its_bad_environment_value_unread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RAY_OPERATOR_MAX_CONCURRENT_RECONCILES", "abc")
    monkeypatch.setenv("RAY_OPERATOR_LEADER_ELECT", "maybe")
    settings = settings_from_args(
        parse_run("--max-concurrent-reconciles", "3", "--no-leader-elect")
    )
    assert (settings.max_concurrent_reconciles, settings.leader_elect) == (3, False)


def test_feature_gates_flags_add_to_the_environments_so_a_bad_one_there_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RAY_OPERATOR_FEATURE_GATES", "Foo=true")
    with pytest.raises(SystemExit) as exit_info:
        parse_run("--feature-gates", "RayCronJob=false")
    assert exit_info.value.code == 2
    assert "from RAY_OPERATOR_FEATURE_GATES: unknown feature gate 'Foo'" in capsys.readouterr().err


def run_field_with_twin(flag: Flag, twin: str, *argv: str) -> object:
    """The `Settings` field `flag` fills, its environment twin set to `twin`."""
    assert flag.environment is not None
    assert flag.field is not None
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv(flag.environment, twin)
        return getattr(settings_from_args(parse_run(*argv)), flag.field)


@pytest.mark.parametrize("flag", REPEATABLE_RUN_FLAGS, ids=lambda flag: flag.name)
def test_a_repeatable_flag_given_replaces_its_environment_list(flag: Flag) -> None:
    given = run_field_with_twin(
        flag, "from-environment.example,second.example", flag.option, "from-command-line.example"
    )
    assert given == ("from-command-line.example",)


@pytest.mark.parametrize("flag", REPEATABLE_RUN_FLAGS, ids=lambda flag: flag.name)
def test_a_repeatable_flag_not_given_takes_its_environment_list(flag: Flag) -> None:
    not_given = run_field_with_twin(flag, "from-environment.example, second.example")
    assert not_given == ("from-environment.example", "second.example")
