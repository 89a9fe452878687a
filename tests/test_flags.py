"""Specification: every flag is declared once, in one `ray_operator.flags.Flag` table, and the
settings dataclasses have no field a flag fills without its entry (nor an entry without a field).

`settings.RUN_FLAGS` fills `Settings`, `webhooks.options.WEBHOOK_FLAGS` fills `WebhookOptions`,
`cli.DEV_FLAGS` fills nothing (`dev` reads them itself). A flag spelled a second time (another
argparse argument, a field filled by hand) fails here.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable

from ray_operator import cli
from ray_operator.flags import Flag
from ray_operator.settings import RUN_FLAGS, Settings
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
