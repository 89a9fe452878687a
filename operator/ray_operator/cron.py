"""Cron schedules of RayCronJob, with the semantics of robfig/cron v3 that KubeRay uses.

KubeRay parses `spec.schedule` with `cron.ParseStandard` of github.com/robfig/cron/v3 (v3.0.1),
prefixed with `TZ=<spec.timeZone> ` when a zone is given, and asks the schedule's `Next` when to
fire. A RayCronJob must fire at the same instants under us, so this module reproduces that
library's behaviour rather than any other cron's: five fields (minute, hour, day of month, month,
day of week), `*` and `?`, ranges, steps, lists, JAN-DEC and SUN-SAT in any case, the descriptors
(`@daily`, `@every 90m`, …), the day-of-month/day-of-week rule (either may match when neither is a
star), and, where it matters most, the way its search walks the calendar through daylight-saving
transitions and gives up after five years. Go's `time.Date` resolves a wall-clock time that does
not exist or exists twice differently from Python's `fold`, so the walk is done on Unix seconds
with Go's resolution rule (`_go_date`).

Pure: no I/O except reading time-zone data through `zoneinfo` (and, for a schedule without a
zone, the process's own zone from TZ or /etc/localtime, as Go's `time.Local` does). The
expected answers in tests/cron/robfig_cases.json come from robfig/cron itself.

Bounds: a schedule of more than 1024 characters is refused; parsing is linear in its length; a
search visits at most about 5 x 366 days (robfig's five-year limit), never minute by minute over
years; `last_at_or_before` bisects instead of replaying every missed activation, except over the
28 hours around the zone's last clock change, where it steps as `next_after` would (at most
1,680 steps, for an every-minute schedule).

Results are aware datetimes with a fixed offset (the zone's at that instant), not the ZoneInfo:
see `_instant` for why.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
import zoneinfo
from collections.abc import Callable

__all__ = ["MAX_SCHEDULE_LENGTH", "CronSchedule", "InvalidScheduleError", "parse_schedule"]

MAX_SCHEDULE_LENGTH = 1024
"""Longest schedule accepted: it comes from users, and no sensible schedule is longer."""

_SEARCH_YEARS = 5
"""robfig gives up (returns Go's zero time) when no activation is found within five years."""

# robfig marks a field written as `*` or `?` (and not stepped by more than one) with this bit;
# only the day fields look at it, for the day-of-month/day-of-week rule.
_STAR_BIT = 1 << 63

# Go's unicode.IsSpace, which strings.Fields and strings.TrimSpace split and trim on; Python's
# str.split() also splits on U+001C..U+001F, which Go does not.
_GO_SPACES = (
    "\t\n\v\f\r \x85\xa0\u1680"
    + "".join(map(chr, range(0x2000, 0x200B)))
    + ("\u2028\u2029\u202f\u205f\u3000")
)
_GO_SPACE_RUN = re.compile(f"[{re.escape(_GO_SPACES)}]+")
_GO_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_INT64_MAX = (1 << 63) - 1
_UNIX_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()
_UNIX_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_ONE_SECOND = datetime.timedelta(seconds=1)
# Python's datetime ends at year 9999; a search must be able to look five years past its start.
_LAST_SEARCHABLE_YEAR = datetime.MAXYEAR - 1


class InvalidScheduleError(ValueError):
    """A schedule or time zone that cannot be used; str() is a message naming what is wrong,
    for users."""


class _RobfigError(Exception):
    """robfig's parse error, worded as robfig words it (KubeRay prefixes it)."""


@dataclasses.dataclass(frozen=True)
class _Bounds:
    low: int
    high: int
    names: dict[str, int] = dataclasses.field(default_factory=dict)


_MINUTES = _Bounds(0, 59)
_HOURS = _Bounds(0, 23)
_DAYS_OF_MONTH = _Bounds(1, 31)
_MONTHS = _Bounds(
    1,
    12,
    {
        name: number
        for number, name in enumerate(
            ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
            start=1,
        )
    },
)
_DAYS_OF_WEEK = _Bounds(
    0, 6, {name: n for n, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
)


def _all_of(bounds: _Bounds) -> int:
    return (1 << (bounds.high + 1)) - (1 << bounds.low) | _STAR_BIT


@dataclasses.dataclass(frozen=True)
class _FieldRule:
    """Bit sets of the values each field accepts (bit n set: value n matches); seconds are 0."""

    minutes: int
    hours: int
    days_of_month: int
    months: int
    days_of_week: int


@dataclasses.dataclass(frozen=True)
class _EveryRule:
    """`@every <duration>`: a fixed delay in whole seconds after the moment asked about."""

    seconds: int


# The descriptors, exactly as robfig spells them (case matters: `@Daily` is refused).
_MIDNIGHT = (1 << 0, 1 << 0)
_DESCRIPTORS: dict[str, _FieldRule] = {
    "@yearly": _FieldRule(*_MIDNIGHT, 1 << 1, 1 << 1, _all_of(_DAYS_OF_WEEK)),
    "@monthly": _FieldRule(*_MIDNIGHT, 1 << 1, _all_of(_MONTHS), _all_of(_DAYS_OF_WEEK)),
    "@weekly": _FieldRule(*_MIDNIGHT, _all_of(_DAYS_OF_MONTH), _all_of(_MONTHS), 1 << 0),
    "@daily": _FieldRule(
        *_MIDNIGHT, _all_of(_DAYS_OF_MONTH), _all_of(_MONTHS), _all_of(_DAYS_OF_WEEK)
    ),
    "@hourly": _FieldRule(
        1 << 0,
        _all_of(_HOURS),
        _all_of(_DAYS_OF_MONTH),
        _all_of(_MONTHS),
        _all_of(_DAYS_OF_WEEK),
    ),
}
_DESCRIPTORS["@annually"] = _DESCRIPTORS["@yearly"]
_DESCRIPTORS["@midnight"] = _DESCRIPTORS["@daily"]
_EVERY_PREFIX = "@every "


@dataclasses.dataclass(frozen=True)
class CronSchedule:
    """A parsed schedule and the zone its wall-clock fields are read in."""

    zone: datetime.tzinfo
    _rule: _FieldRule | _EveryRule

    def next_after(self, moment: datetime.datetime) -> datetime.datetime | None:
        """The first activation strictly after `moment` (an aware datetime; the result is aware,
        in the schedule's zone, as a fixed offset so that it compares as an instant), or None
        when there is none within robfig's five-year search limit (e.g. "0 0 30 2 *")."""
        start = _unix_seconds(moment) + 1
        found = self._first_at_or_after(start)
        return None if found is None else _instant(found, self.zone)

    def last_at_or_before(
        self, moment: datetime.datetime, *, since: datetime.datetime
    ) -> datetime.datetime | None:
        """The latest activation in (since, moment], or None: the answer stepping `next_after`
        from `since` would reach, found in O(log(moment - since)) searches plus, when the zone
        changed its clocks within 400 days before `moment`, steps over the 28 hours around that
        change."""
        if isinstance(self._rule, _EveryRule):
            return self._last_every(self._rule, moment, since=since)
        # Activations are whole seconds, so one is <= `moment` exactly when it is <= this.
        latest = _unix_seconds(moment)
        first = self._first_at_or_after(_unix_seconds(since) + 1)
        if first is None or first > latest:
            return None
        change = _last_offset_change(self.zone, after=first, until=latest)
        if change is None:
            found = _last_start_not_after(self._first_at_or_after, first, latest)
        else:
            found = self._last_across_change(first, latest, change)
        return _instant(found, self.zone)

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
        if isinstance(self._rule, _EveryRule):
            # Next() of @every adds the delay to the moment truncated to the second.
            return start - 1 + self._rule.seconds
        return _search(self._rule, self.zone, start)

    def _last_every(
        self, rule: _EveryRule, moment: datetime.datetime, *, since: datetime.datetime
    ) -> datetime.datetime | None:
        # Stepping from `since` visits floor(since) + k * delay for k = 1, 2, …
        base = _unix_seconds(since)
        steps = (_unix_seconds(moment) - base) // rule.seconds
        if steps < 1:
            return None
        return _instant(base + steps * rule.seconds, self.zone)


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
# before it to past the same wall-clock hour a day later.
_BEFORE_CHANGE = 2 * 3600
_AFTER_CHANGE = 26 * 3600
_OFFSET_SAMPLE = 6 * 3600
# Changes further back than this before `moment` no longer matter: the steps since then have met
# every activation a fresh search meets, or the schedule fires less than yearly.
_CHANGE_LOOK_BACK = 400 * 86400


def _last_offset_change(zone: datetime.tzinfo, *, after: int, until: int) -> int | None:
    """The first second of `zone`'s last UTC offset change in (after, until], or None; looks
    back at most `_CHANGE_LOOK_BACK`, sampling the offset every six hours (no zone changes twice
    in six hours), then bisecting to the second."""
    floor = max(after - 86400, until - _CHANGE_LOOK_BACK)
    later = until
    later_offset = _offset(later, zone)
    while later > floor:
        earlier = later - _OFFSET_SAMPLE
        earlier_offset = _offset(earlier, zone)
        if earlier_offset != later_offset:
            return _first_second_of_offset(zone, earlier, later)
        later, later_offset = earlier, earlier_offset
    return None


def _first_second_of_offset(zone: datetime.tzinfo, before: int, at: int) -> int:
    """The second in (before, at] from which `zone` has the offset it has at `at`."""
    offset = _offset(at, zone)
    while at - before > 1:
        middle = (before + at) // 2
        if _offset(middle, zone) == offset:
            at = middle
        else:
            before = middle
    return at


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
        rule = _parse_rule(schedule)
    except _RobfigError as error:
        raise InvalidScheduleError(f"invalid cron schedule: {error}") from None
    zone = _process_local_zone() if time_zone is None else _load_zone(time_zone)
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
    if name == "Local":
        return _process_local_zone()
    if name == "UTC":
        return datetime.UTC
    if ".." in name or name[0] in "/\\":
        raise InvalidScheduleError("invalid time zone: time: invalid location name")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidScheduleError(f"invalid time zone: unknown time zone {name}") from None


def _process_local_zone() -> datetime.tzinfo:
    """Go's time.Local: TZ names a zone (empty: UTC), else /etc/localtime, else UTC."""
    name = os.environ.get("TZ")
    if name is not None:
        name = name.removeprefix(":")
        if name in ("", "UTC"):
            return datetime.UTC
        try:
            if name.startswith("/"):
                with open(name, "rb") as data:
                    return zoneinfo.ZoneInfo.from_file(data, key="Local")
            return zoneinfo.ZoneInfo(name)
        except (OSError, ValueError):
            return datetime.UTC
    try:
        with open("/etc/localtime", "rb") as data:
            return zoneinfo.ZoneInfo.from_file(data, key="Local")
    except (OSError, ValueError):
        return datetime.UTC


def _parse_rule(spec: str) -> _FieldRule | _EveryRule:
    if spec == "":
        raise _RobfigError("empty spec string")
    if spec.startswith("@"):
        return _parse_descriptor(spec)
    fields = [field for field in _GO_SPACE_RUN.split(spec) if field]
    if len(fields) != 5:
        raise _RobfigError(f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]")
    return _FieldRule(
        minutes=_parse_field(fields[0], _MINUTES),
        hours=_parse_field(fields[1], _HOURS),
        days_of_month=_parse_field(fields[2], _DAYS_OF_MONTH),
        months=_parse_field(fields[3], _MONTHS),
        days_of_week=_parse_field(fields[4], _DAYS_OF_WEEK),
    )


def _parse_descriptor(spec: str) -> _FieldRule | _EveryRule:
    if spec in _DESCRIPTORS:
        return _DESCRIPTORS[spec]
    if spec.startswith(_EVERY_PREFIX):
        nanoseconds = _parse_go_duration(spec[len(_EVERY_PREFIX) :], spec)
        # robfig: under a second becomes a second; the fraction of a second is dropped.
        return _EveryRule(seconds=max(nanoseconds, 1_000_000_000) // 1_000_000_000)
    raise _RobfigError(f"unrecognized descriptor: {spec}")


def _parse_field(field: str, bounds: _Bounds) -> int:
    """The bits of a comma-separated list; empty items are skipped, as robfig does (so "," is a
    valid field that matches nothing)."""
    bits = 0
    for item in field.split(","):
        if item:
            bits |= _parse_range(item, bounds)
    return bits


def _parse_range(item: str, bounds: _Bounds) -> int:
    """`*`, `?`, `n`, `a-b`, each optionally `/step`; `n/step` means `n-high/step`."""
    range_and_step = item.split("/")
    low_and_high = range_and_step[0].split("-")
    star = 0
    if low_and_high[0] in ("*", "?"):
        # robfig ignores whatever follows a star's hyphen ("*-5" is "*").
        start, end, star = bounds.low, bounds.high, _STAR_BIT
    else:
        start = _parse_int_or_name(low_and_high[0], bounds)
        if len(low_and_high) > 2:
            raise _RobfigError(f"too many hyphens: {item}")
        end = start if len(low_and_high) == 1 else _parse_int_or_name(low_and_high[1], bounds)
    if len(range_and_step) > 2:
        raise _RobfigError(f"too many slashes: {item}")
    step = 1
    if len(range_and_step) == 2:
        step = _parse_go_int(range_and_step[1])
        if len(low_and_high) == 1:
            end = bounds.high
        if step > 1:
            star = 0
    _check_range(item, bounds, start=start, end=end, step=step)
    return _bits(start, end, step) | star


def _check_range(item: str, bounds: _Bounds, *, start: int, end: int, step: int) -> None:
    if start < bounds.low:
        raise _RobfigError(f"beginning of range ({start}) below minimum ({bounds.low}): {item}")
    if end > bounds.high:
        raise _RobfigError(f"end of range ({end}) above maximum ({bounds.high}): {item}")
    if start > end:
        raise _RobfigError(f"beginning of range ({start}) beyond end of range ({end}): {item}")
    if step == 0:
        raise _RobfigError(f"step of range should be a positive number: {item}")


def _bits(start: int, end: int, step: int) -> int:
    # Fields span at most 60 values, so this is at most 60 iterations whatever the step.
    bits = 0
    for value in range(start, end + 1, step):
        bits |= 1 << value
    return bits


def _parse_int_or_name(text: str, bounds: _Bounds) -> int:
    named = bounds.names.get(text.lower())
    return named if named is not None else _parse_go_int(text)


def _parse_go_int(text: str) -> int:
    """Go's strconv.Atoi (ASCII digits, an optional sign, int64), then robfig's refusal of
    negative numbers."""
    if not _GO_INT.fullmatch(text):
        raise _RobfigError(
            f"failed to parse int from {text}:"
            f" strconv.Atoi: parsing {_go_quote(text)}: invalid syntax"
        )
    number = int(text)
    if not -_INT64_MAX - 1 <= number <= _INT64_MAX:
        raise _RobfigError(
            f"failed to parse int from {text}: strconv.Atoi: parsing {_go_quote(text)}: "
            "value out of range"
        )
    if number < 0:
        raise _RobfigError(f"negative number ({number}) not allowed: {text}")
    return number


def _go_quote(text: str) -> str:
    """Close to strconv.Quote, for messages: printable characters as they are, others escaped."""
    escaped = []
    for character in text:
        if character in '"\\':
            escaped.append("\\" + character)
        elif character.isprintable():
            escaped.append(character)
        elif ord(character) < 0x80:
            escaped.append(f"\\x{ord(character):02x}")
        elif ord(character) <= 0xFFFF:
            escaped.append(f"\\u{ord(character):04x}")
        else:
            escaped.append(f"\\U{ord(character):08x}")
    return '"' + "".join(escaped) + '"'


_DURATION_UNITS = {
    b"ns": 1,
    b"us": 1_000,
    "µs".encode(): 1_000,  # U+00B5 MICRO SIGN
    "μs".encode(): 1_000,  # U+03BC GREEK SMALL LETTER MU
    b"ms": 1_000_000,
    b"s": 1_000_000_000,
    b"m": 60 * 1_000_000_000,
    b"h": 3600 * 1_000_000_000,
}
_DIGITS = re.compile(rb"[0-9]*")
_UNIT = re.compile(rb"[^.0-9]*")


def _parse_go_duration(text: str, spec: str) -> int:
    """Go's time.ParseDuration in nanoseconds (bytes, like Go), with robfig's error message."""

    def refuse(problem: str) -> _RobfigError:
        return _RobfigError(f"failed to parse duration {spec}: time: {problem} {_go_quote(text)}")

    rest = text.encode()
    negative = rest[:1] == b"-"
    if rest[:1] in (b"-", b"+"):
        rest = rest[1:]
    if rest == b"0":
        return 0
    if not rest:
        raise refuse("invalid duration")
    total = 0
    while rest:
        value, rest = _duration_term(rest, refuse)
        total += value
        if total > 1 << 63:
            raise refuse("invalid duration")
    if negative:
        return -total
    if total > _INT64_MAX:
        raise refuse("invalid duration")
    return total


def _duration_term(rest: bytes, refuse: Callable[[str], _RobfigError]) -> tuple[int, bytes]:
    """One `<digits>[.<digits>]<unit>` of a Go duration: its nanoseconds and what follows it."""
    if not (rest[:1] == b"." or rest[:1].isdigit()):
        raise refuse("invalid duration")
    whole_digits = _DIGITS.match(rest)
    assert whole_digits is not None
    whole_text = whole_digits.group()
    rest = rest[len(whole_text) :]
    whole = int(whole_text) if whole_text else 0
    if whole > 1 << 63:
        raise refuse("invalid duration")
    fraction, scale, fraction_digits = 0, 1.0, b""
    if rest[:1] == b".":
        fraction_match = _DIGITS.match(rest, 1)
        assert fraction_match is not None
        fraction_digits = fraction_match.group()
        rest = rest[1 + len(fraction_digits) :]
        fraction, scale = _go_leading_fraction(fraction_digits)
    if not whole_text and not fraction_digits:
        raise refuse("invalid duration")
    unit_match = _UNIT.match(rest)
    assert unit_match is not None
    unit_text = unit_match.group()
    if not unit_text:
        raise refuse("missing unit in duration")
    rest = rest[len(unit_text) :]
    unit = _DURATION_UNITS.get(unit_text)
    if unit is None:
        raise refuse(f"unknown unit {_go_quote(unit_text.decode(errors='replace'))} in duration")
    if whole > (1 << 63) // unit:
        raise refuse("invalid duration")
    value = whole * unit
    if fraction > 0:
        # Go computes the fraction in float64; the same arithmetic gives the same nanoseconds.
        value += int(float(fraction) * (float(unit) / scale))
        if value > 1 << 63:
            raise refuse("invalid duration")
    return value, rest


def _go_leading_fraction(digits: bytes) -> tuple[int, float]:
    """Go keeps the fraction's digits while they fit an int64 and ignores the rest."""
    fraction, scale = 0, 1.0
    for digit in digits:
        if fraction > _INT64_MAX // 10:
            break
        candidate = fraction * 10 + digit - ord("0")
        if candidate > 1 << 63:
            break
        fraction, scale = candidate, scale * 10
    return fraction, scale


# --- The search -------------------------------------------------------------------------------


def _unix_seconds(moment: datetime.datetime) -> int:
    """The Unix second `moment` falls in (floor), exactly, without floating point."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"an aware datetime is needed, not {moment!r}")
    return (moment - _UNIX_EPOCH) // _ONE_SECOND


def _instant(unix: int, zone: datetime.tzinfo) -> datetime.datetime:
    """Unix second `unix` as the zone's wall clock with the offset in force then, fixed.

    Not the zone itself as tzinfo: Python compares two datetimes of the same ZoneInfo by wall
    clock, ignoring `fold`, so the two 01:30 of a fall-back night would be equal, and it makes
    `==` false between an ambiguous time and any other zone (PEP 495). An activation compared
    with a lastScheduleTime read back in UTC must compare as the instant it is.
    """
    wall = _wall(unix, zone)
    offset = wall.utcoffset()
    assert offset is not None
    name = wall.tzname()
    fixed = datetime.timezone(offset) if name is None else datetime.timezone(offset, name)
    return wall.replace(tzinfo=fixed, fold=0)


def _wall(unix: int, zone: datetime.tzinfo) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(unix, zone)


def _offset(unix: int, zone: datetime.tzinfo) -> int:
    offset = _wall(unix, zone).utcoffset()
    assert offset is not None
    return offset // _ONE_SECOND


def _go_date(
    zone: datetime.tzinfo, year: int, month: int, day: int, hour: int, minute: int, second: int
) -> int:
    """Go's time.Date: fields may overflow (day 32 is the next month's first); a wall-clock time
    skipped or repeated by a transition is resolved with the offset in force at that wall time
    read as UTC, corrected once, which is not Python's fold=0 (Go puts 02:30 of a spring-forward
    night at 01:30 standard time, Python at 03:30 daylight time)."""
    year += (month - 1) // 12
    month = (month - 1) % 12 + 1
    days = datetime.date(year, month, 1).toordinal() - _UNIX_EPOCH_ORDINAL + day - 1
    local = days * 86400 + hour * 3600 + minute * 60 + second
    return local - _offset(local - _offset(local, zone), zone)


def _day_matches(rule: _FieldRule, wall: datetime.datetime) -> bool:
    by_month_day = bool(rule.days_of_month >> wall.day & 1)
    by_week_day = bool(rule.days_of_week >> _go_weekday(wall) & 1)
    if (rule.days_of_month | rule.days_of_week) & _STAR_BIT:
        return by_month_day and by_week_day
    return by_month_day or by_week_day


def _go_weekday(wall: datetime.datetime) -> int:
    """Sunday is 0, as in Go and cron; Python's Monday is 0."""
    return (wall.weekday() + 1) % 7


def _can_never_match(rule: _FieldRule) -> bool:
    """A field whose list was only commas ("0 , * * *") matches nothing; robfig would walk five
    years minute by minute to find that out, so we answer at once (the same answer: none)."""
    if not rule.minutes or not rule.hours or not rule.months & ~_STAR_BIT:
        return True
    day_bits = (rule.days_of_month & ~_STAR_BIT, rule.days_of_week & ~_STAR_BIT)
    if (rule.days_of_month | rule.days_of_week) & _STAR_BIT:
        return not all(day_bits)
    return not any(day_bits)


@dataclasses.dataclass
class _Walk:
    """The state of one robfig search: the current instant and whether a field has moved yet
    (the first move of a field resets the smaller ones to their start). Each `find_*` returns
    True when its field rolled over."""

    rule: _FieldRule
    zone: datetime.tzinfo
    unix: int
    moved: bool = False

    @property
    def wall(self) -> datetime.datetime:
        return _wall(self.unix, self.zone)

    def reset(self, *, day: bool, hour: bool) -> None:
        """On the first move, go back to the start of the current month, day or hour."""
        if self.moved:
            return
        self.moved = True
        wall = self.wall
        self.unix = _go_date(
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
            self.unix = _go_date(
                self.zone, wall.year, wall.month + 1, wall.day, wall.hour, wall.minute, wall.second
            )
            if self.wall.month == 1:
                return True
        return False

    def find_day(self) -> bool:
        while not _day_matches(self.rule, self.wall):
            self.reset(day=True, hour=False)
            wall = self.wall
            self.unix = _go_date(
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


def _search(rule: _FieldRule, zone: datetime.tzinfo, start: int) -> int | None:
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
