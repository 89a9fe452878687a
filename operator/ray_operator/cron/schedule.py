"""A RayCronJob's schedule: `parse_schedule` checks and parses `spec.schedule` and
`spec.timeZone` as KubeRay does, and `CronSchedule` answers when it fires.

`next_after` is robfig's `Next`; `last_at_or_before` (the latest activation missed during a
downtime) bisects instead of replaying every missed activation, except over the 28 hours around
the zone's last clock change, where it steps as `next_after` would (at most 1,680 steps, for an
every-minute schedule).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable

from ray_operator.cron.robfig_parser import RobfigError, parse_rule
from ray_operator.cron.robfig_search import next_activation
from ray_operator.cron.rules import EveryRule, Rule
from ray_operator.cron.wall_clock import instant, last_offset_change, unix_seconds
from ray_operator.cron.zones import ZoneError, load_location, local_zone

MAX_SCHEDULE_LENGTH = 1024
"""Longest schedule accepted: it comes from users, and no sensible schedule is longer."""


class InvalidScheduleError(ValueError):
    """A schedule or time zone that cannot be used; str() is a message naming what is wrong,
    for users."""


@dataclasses.dataclass(frozen=True)
class CronSchedule:
    """A parsed schedule and the zone its wall-clock fields are read in."""

    zone: datetime.tzinfo
    _rule: Rule

    def next_after(self, moment: datetime.datetime) -> datetime.datetime | None:
        """The first activation strictly after `moment` (an aware datetime; the result is aware,
        in the schedule's zone, as a fixed offset so that it compares as an instant), or None
        when there is none within robfig's five-year search limit (e.g. "0 0 30 2 *")."""
        start = unix_seconds(moment) + 1
        found = self._first_at_or_after(start)
        return None if found is None else instant(found, self.zone)

    def last_at_or_before(
        self, moment: datetime.datetime, *, since: datetime.datetime
    ) -> datetime.datetime | None:
        """The latest activation in (since, moment], or None: the answer stepping `next_after`
        from `since` would reach, found in O(log(moment - since)) searches plus, when the zone
        changed its clocks within 400 days before `moment`, steps over the 28 hours around that
        change."""
        if isinstance(self._rule, EveryRule):
            return self._last_every(self._rule, moment, since=since)
        # Activations are whole seconds, so one is <= `moment` exactly when it is <= this.
        latest = unix_seconds(moment)
        first = self._first_at_or_after(unix_seconds(since) + 1)
        if first is None or first > latest:
            return None
        change = last_offset_change(self.zone, after=first, until=latest)
        if change is None:
            found = _last_start_not_after(self._first_at_or_after, first, latest)
        else:
            found = self._last_across_change(first, latest, change)
        return instant(found, self.zone)

    def _last_across_change(self, first: int, latest: int, change: int) -> int:
        """Bisect up to the offset change, step through the day after it as `next_after` would,
        bisect the rest.

        After a clock change robfig's steps can skip activations a fresh search would find
        (Lord Howe, 2030-10-06: after firing at 02:40+11:00, `*/20 1 * * *` next fires at 01:40
        the next day, not 01:00), so only stepping gives the answer stepping gives. Far from a
        change, every activation is stepped on, and bisection finds the same one.
        """
        start, end = change - _BEFORE_CHANGE, change + _AFTER_CHANGE
        current = first
        if first < start:
            current = _last_start_not_after(self._first_at_or_after, first, min(start, latest))
        while current <= end:
            following = self._first_at_or_after(current + 1)
            if following is None or following > latest:
                return current
            if following <= current:
                # robfig's steps go round in a circle here (Chatham, 2024-04-07: `*/15 3 * * *`
                # fires 03:00, 03:15, 03:30 +13:45, 02:45 +12:45, then 03:00 +13:45 again, for
                # ever); the latest instant of the circle is the answer.
                return current
            current = following
        return _last_start_not_after(self._first_at_or_after, current, latest)

    def _first_at_or_after(self, start: int) -> int | None:
        """The activation a robfig search beginning at Unix second `start` finds, or None."""
        if isinstance(self._rule, EveryRule):
            # Next() of @every adds the delay to the moment truncated to the second.
            return start - 1 + self._rule.seconds
        return next_activation(self._rule, self.zone, start)

    def _last_every(
        self, rule: EveryRule, moment: datetime.datetime, *, since: datetime.datetime
    ) -> datetime.datetime | None:
        # Stepping from `since` visits floor(since) + k * delay for k = 1, 2, …
        base = unix_seconds(since)
        steps = (unix_seconds(moment) - base) // rule.seconds
        if steps < 1:
            return None
        return instant(base + steps * rule.seconds, self.zone)


def _last_start_not_after(
    first_at_or_after: Callable[[int], int | None], first: int, latest: int
) -> int:
    """Bisect for the last activation <= `latest`, knowing `first` is one.

    A search started anywhere in (a, b] for consecutive activations a < b finds b, so the last
    activation is what a search started at the last second whose search ends <= `latest` finds.
    robfig bends that premise right after a clock goes back: a search started in the repeated
    wall-clock stretch can return an activation before its start (Chatham, 2028-04-02: from
    02:50+12:45 it returns 03:00+13:45, an hour earlier). `_forward` follows such a result on to
    the first activation at or after the start, as stepping `next_after` would.
    """
    good, bad = first, latest + 1
    while bad - good > 1:
        middle = (good + bad) // 2
        found = _forward(first_at_or_after, middle)
        if found is not None and found <= latest:
            good = found
        else:
            bad = middle
    return good


# Where robfig's steps may differ from fresh searches around an offset change: from shortly

# Where robfig's steps may differ from fresh searches around an offset change: from shortly
# before it to past the same wall-clock hour a day later.
_BEFORE_CHANGE = 2 * 3600
_AFTER_CHANGE = 26 * 3600


# Enough to step through every activation of a repeated hour (60 for `* * * * *`), with margin.
_MOST_STEPS_BACK_TO_START = 256


def _forward(first_at_or_after: Callable[[int], int | None], start: int) -> int | None:
    """The first activation at or after `start` on the path robfig's search takes from `start`."""
    found = first_at_or_after(start)
    for _ in range(_MOST_STEPS_BACK_TO_START):
        if found is None or found >= start:
            return found
        following = first_at_or_after(found + 1)
        if following is not None and following <= found:
            return None  # robfig would loop here; no activation to offer.
        found = following
    return None


def parse_schedule(schedule: str, *, time_zone: str | None = None) -> CronSchedule:
    """robfig/cron v3 ParseStandard semantics; `time_zone` an IANA name (None: the local zone of the
    process). Raises InvalidScheduleError (a schedule containing TZ= or CRON_TZ= is refused with a
    message telling to use spec.timeZone, as KubeRay does; an unknown zone or an empty string
    is refused by name).

    Checks in KubeRay's order (ValidateRayCronJobSpec) with its messages: TZ in the schedule, the
    schedule alone (so " @daily" is refused although "TZ=UTC  @daily" would parse), the zone.
    """
    if len(schedule) > MAX_SCHEDULE_LENGTH:
        raise InvalidScheduleError(
            f"schedule is {len(schedule)} characters long;"
            f" at most {MAX_SCHEDULE_LENGTH} are allowed"
        )
    if "TZ" in schedule:
        raise InvalidScheduleError(
            "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
        )
    try:
        rule = parse_rule(schedule)
    except RobfigError as error:
        raise InvalidScheduleError(f"invalid cron schedule: {error}") from None
    zone = local_zone() if time_zone is None else _load_zone(time_zone)
    # KubeRay then parses "TZ=<zone> <schedule>": robfig trims the schedule, which changes
    # nothing for one that parsed untrimmed.
    return CronSchedule(zone, rule)


def _load_zone(name: str) -> datetime.tzinfo:
    """Go's time.LoadLocation, with KubeRay's refusal of an empty name."""
    if name == "":
        raise InvalidScheduleError(
            "timeZone must not be empty string, omit the field to use the local time zone of"
            " the operator"
        )
    try:
        return load_location(name)
    except ZoneError as error:
        raise InvalidScheduleError(f"invalid time zone: {error}") from None
