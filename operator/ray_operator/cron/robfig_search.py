"""robfig/cron v3's `SpecSchedule.Next`: from a Unix second, the first activation of a rule of
five fields, found the way robfig's search walks the calendar (month, day, hour, minute, second,
wrapping back to the larger fields), through daylight-saving transitions with Go's `time.Date`
(`wall_clock.go_date`), giving up after five years.

Bounds: a search visits at most about 5 x 366 days, never minute by minute over years; a rule
that can never match is answered at once.
"""

from __future__ import annotations

import dataclasses
import datetime

from ray_operator.cron.rules import STAR_BIT, FieldRule
from ray_operator.cron.wall_clock import go_date, wall_time

_SEARCH_YEARS = 5
"""robfig gives up (returns Go's zero time) when no activation is found within five years."""

# Python's datetime ends at year 9999; a search must be able to look five years past its start.
_LAST_SEARCHABLE_YEAR = datetime.MAXYEAR - 1


def _day_matches(rule: FieldRule, wall: datetime.datetime) -> bool:
    by_month_day = bool(rule.days_of_month >> wall.day & 1)
    by_week_day = bool(rule.days_of_week >> _go_weekday(wall) & 1)
    if (rule.days_of_month | rule.days_of_week) & STAR_BIT:
        return by_month_day and by_week_day
    return by_month_day or by_week_day


def _go_weekday(wall: datetime.datetime) -> int:
    """Sunday is 0, as in Go and cron; Python's Monday is 0."""
    return (wall.weekday() + 1) % 7


def _can_never_match(rule: FieldRule) -> bool:
    """A field whose list was only commas ("0 , * * *") matches nothing; robfig would walk five
    years minute by minute to find that out, so we answer at once (the same answer: none)."""
    if not rule.minutes or not rule.hours or not rule.months & ~STAR_BIT:
        return True
    day_bits = (rule.days_of_month & ~STAR_BIT, rule.days_of_week & ~STAR_BIT)
    if (rule.days_of_month | rule.days_of_week) & STAR_BIT:
        return not all(day_bits)
    return not any(day_bits)


@dataclasses.dataclass
class _Walk:
    """The state of one robfig search: the current instant and whether a field has moved yet
    (the first move of a field resets the smaller ones to their start). Each `find_*` returns
    True when its field rolled over."""

    rule: FieldRule
    zone: datetime.tzinfo
    unix: int
    moved: bool = False

    @property
    def wall(self) -> datetime.datetime:
        return wall_time(self.unix, self.zone)

    def reset(self, *, day: bool, hour: bool) -> None:
        """On the first move, go back to the start of the current month, day or hour."""
        if self.moved:
            return
        self.moved = True
        wall = self.wall
        self.unix = go_date(
            self.zone,
            wall.year,
            wall.month,
            wall.day if day else 1,
            wall.hour if hour else 0,
            0,
            0,
        )

    def find_month(self) -> bool:
        while not self.rule.months >> self.wall.month & 1:
            self.reset(day=False, hour=False)
            wall = self.wall
            self.unix = go_date(
                self.zone, wall.year, wall.month + 1, wall.day, wall.hour, wall.minute, wall.second
            )
            if self.wall.month == 1:
                return True
        return False

    def find_day(self) -> bool:
        while not _day_matches(self.rule, self.wall):
            self.reset(day=True, hour=False)
            wall = self.wall
            self.unix = go_date(
                self.zone, wall.year, wall.month, wall.day + 1, wall.hour, wall.minute, wall.second
            )
            # robfig's fix for a midnight moved by a transition: back to hour 0 of that day, or
            # forward to the next one when the clock landed in the previous evening.
            hour = self.wall.hour
            if hour > 12:
                self.unix += (24 - hour) * 3600
            elif hour:
                self.unix -= hour * 3600
            if self.wall.day == 1:
                return True
        return False

    def find_hour(self) -> bool:
        while not self.rule.hours >> self.wall.hour & 1:
            self.reset(day=True, hour=True)
            self.unix += 3600
            if self.wall.hour == 0:
                return True
        return False

    def find_minute(self) -> bool:
        while not self.rule.minutes >> self.wall.minute & 1:
            if not self.moved:
                self.moved = True
                self.unix -= self.unix % 60
            self.unix += 60
            if self.wall.minute == 0:
                return True
        return False

    def find_second(self) -> bool:
        # ParseStandard fixes the seconds field at 0.
        while self.wall.second != 0:
            self.moved = True
            self.unix += 1
            if self.wall.second == 0:
                return True
        return False


def next_activation(rule: FieldRule, zone: datetime.tzinfo, start: int) -> int | None:
    """robfig's SpecSchedule.Next from Unix second `start` (inclusive), or None after five years."""
    if _can_never_match(rule):
        return None
    walk = _Walk(rule, zone, start)
    year_limit = walk.wall.year + _SEARCH_YEARS
    if year_limit > _LAST_SEARCHABLE_YEAR:
        # Years past 9999 are beyond Python's datetime; a controller never asks that far.
        return None
    while walk.wall.year <= year_limit:
        # Each step moves its field to a value that matches, or reports that the field rolled
        # over (robfig's `goto WRAP`), after which the larger fields must be checked again.
        wrapped = (
            walk.find_month()
            or walk.find_day()
            or walk.find_hour()
            or walk.find_minute()
            or walk.find_second()
        )
        if not wrapped:
            return walk.unix
    return None
