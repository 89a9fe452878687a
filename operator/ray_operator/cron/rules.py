"""What a parsed schedule is: the values each field accepts (`FieldRule`) or `@every`'s delay
(`EveryRule`), as robfig/cron v3 represents them. Values only, no behaviour."""

from __future__ import annotations

import dataclasses

# robfig marks a field written as `*` or `?` (and not stepped by more than one) with this bit;
# only the day fields look at it, for the day-of-month/day-of-week rule.
STAR_BIT = 1 << 63


@dataclasses.dataclass(frozen=True)
class FieldRule:
    """Bit sets of the values each field accepts (bit n set: value n matches); seconds are 0."""

    minutes: int
    hours: int
    days_of_month: int
    months: int
    days_of_week: int


@dataclasses.dataclass(frozen=True)
class EveryRule:
    """`@every <duration>`: a fixed delay in whole seconds after the moment asked about."""

    seconds: int


Rule = FieldRule | EveryRule
"""A parsed schedule: five fields, or a fixed delay."""
