"""Unix seconds and a zone's wall clock, with Go's rules: the instants a schedule's search walks
on, the offset in force, Go's `time.Date` (which resolves a wall-clock time that does not exist
or exists twice differently from Python's `fold`), and where a zone last changed its clocks.

Results are aware datetimes with a fixed offset (the zone's at that instant), not the ZoneInfo:
see `instant` for why.
"""

from __future__ import annotations

import datetime

_UNIX_EPOCH_ORDINAL = datetime.date(1970, 1, 1).toordinal()
_UNIX_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_ONE_SECOND = datetime.timedelta(seconds=1)
_OFFSET_SAMPLE = 6 * 3600
# Changes further back than this before `moment` no longer matter: the steps since then have met
# every activation a fresh search meets, or the schedule fires less than yearly.
_CHANGE_LOOK_BACK = 400 * 86400


def unix_seconds(moment: datetime.datetime) -> int:
    """The Unix second `moment` falls in (floor), exactly, without floating point."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"an aware datetime is needed, not {moment!r}")
    return (moment - _UNIX_EPOCH) // _ONE_SECOND


def instant(unix: int, zone: datetime.tzinfo) -> datetime.datetime:
    """Unix second `unix` as the zone's wall clock with the offset in force then, fixed.

    Not the zone itself as tzinfo: Python compares two datetimes of the same ZoneInfo by wall
    clock, ignoring `fold`, so the two 01:30 of a fall-back night would be equal, and it makes
    `==` false between an ambiguous time and any other zone (PEP 495). An activation compared
    with a lastScheduleTime read back in UTC must compare as the instant it is.
    """
    wall = wall_time(unix, zone)
    offset = wall.utcoffset()
    assert offset is not None
    name = wall.tzname()
    fixed = datetime.timezone(offset) if name is None else datetime.timezone(offset, name)
    return wall.replace(tzinfo=fixed, fold=0)


def wall_time(unix: int, zone: datetime.tzinfo) -> datetime.datetime:
    """Unix second `unix` on the zone's wall clock (the ZoneInfo as tzinfo)."""
    return datetime.datetime.fromtimestamp(unix, zone)


def utc_offset(unix: int, zone: datetime.tzinfo) -> int:
    """The zone's UTC offset at Unix second `unix`, in seconds."""
    offset = wall_time(unix, zone).utcoffset()
    assert offset is not None
    return offset // _ONE_SECOND


def go_date(
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
    return local - utc_offset(local - utc_offset(local, zone), zone)


def last_offset_change(zone: datetime.tzinfo, *, after: int, until: int) -> int | None:
    """The first second of `zone`'s last UTC offset change in (after, until], or None; looks
    back at most `_CHANGE_LOOK_BACK`, sampling the offset every six hours (no zone changes twice
    in six hours), then bisecting to the second."""
    floor = max(after - 86400, until - _CHANGE_LOOK_BACK)
    later = until
    later_offset = utc_offset(later, zone)
    while later > floor:
        earlier = later - _OFFSET_SAMPLE
        earlier_offset = utc_offset(earlier, zone)
        if earlier_offset != later_offset:
            return _first_second_of_offset(zone, earlier, later)
        later, later_offset = earlier, earlier_offset
    return None


def _first_second_of_offset(zone: datetime.tzinfo, before: int, at: int) -> int:
    """The second in (before, at] from which `zone` has the offset it has at `at`."""
    offset = utc_offset(at, zone)
    while at - before > 1:
        middle = (before + at) // 2
        if utc_offset(middle, zone) == offset:
            at = middle
        else:
            before = middle
    return at
