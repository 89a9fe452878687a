"""When a schedule fires, in its zone, across the calendar's awkward days.

The expectations are written as wall-clock times with their offsets, as a user would check them;
they were confirmed against robfig/cron v3.0.1 (the same cases are in robfig_cases.json, which
test_agrees_with_robfig.py replays). Where robfig surprises, the comment says so: KubeRay fires
there too, and we must fire at the same instant.
"""

from __future__ import annotations

import datetime

import pytest
from ray_operator.cron import parse_schedule


def following(schedule: str, zone: str, start: str, count: int) -> list[str]:
    """The next `count` activations after `start` (ISO 8601), as ISO 8601 in the zone."""
    parsed = parse_schedule(schedule, time_zone=zone)
    moment: datetime.datetime | None = datetime.datetime.fromisoformat(start)
    found: list[str] = []
    for _ in range(count):
        assert moment is not None
        moment = parsed.next_after(moment)
        if moment is None:
            break
        found.append(moment.isoformat())
    return found


@pytest.mark.parametrize(
    ("schedule", "zone", "start", "expected"),
    [
        # New York springs forward at 02:00 on 2024-03-10: 02:xx does not exist that day, and
        # robfig does not fire a 02:xx schedule at all then (cron would at 03:00).
        (
            "30 2 * * *",
            "America/New_York",
            "2024-03-09T03:00:00-05:00",
            ["2024-03-11T02:30:00-04:00"],
        ),
        (
            "@hourly",
            "America/New_York",
            "2024-03-10T00:30:00-05:00",
            ["2024-03-10T01:00:00-05:00", "2024-03-10T03:00:00-04:00"],
        ),
        # It falls back at 02:00 on 2024-11-03: 01:xx happens twice, and robfig fires in both.
        (
            "30 1 * * *",
            "America/New_York",
            "2024-11-02T12:00:00-04:00",
            ["2024-11-03T01:30:00-04:00", "2024-11-03T01:30:00-05:00", "2024-11-04T01:30:00-05:00"],
        ),
        (
            "0 * * * *",
            "America/New_York",
            "2024-11-03T00:30:00-04:00",
            ["2024-11-03T01:00:00-04:00", "2024-11-03T01:00:00-05:00", "2024-11-03T02:00:00-05:00"],
        ),
        # Berlin: 02:xx skipped on 2024-03-31, repeated on 2024-10-27.
        (
            "30 2 * * *",
            "Europe/Berlin",
            "2024-03-30T12:00:00+01:00",
            ["2024-04-01T02:30:00+02:00"],
        ),
        (
            "0 */2 * * *",
            "Europe/Berlin",
            "2024-10-27T01:00:00+02:00",
            ["2024-10-27T02:00:00+02:00", "2024-10-27T02:00:00+01:00", "2024-10-27T04:00:00+01:00"],
        ),
        # Chatham springs forward 02:45 -> 03:45: Go's time.Date puts the missing 02:45 at 03:45.
        (
            "45 2 * * *",
            "Pacific/Chatham",
            "2024-09-29T00:00:00+12:45",
            ["2024-09-29T03:45:00+13:45", "2024-09-30T02:45:00+13:45"],
        ),
        # Sao Paulo's DST began at midnight (2018-11-04 00:00 -> 01:00): @daily skips that day.
        (
            "0 0 * * *",
            "America/Sao_Paulo",
            "2018-11-02T12:00:00-03:00",
            ["2018-11-03T00:00:00-03:00", "2018-11-05T00:00:00-02:00"],
        ),
        # A 30-minute offset and a zone without DST.
        (
            "0 0 1 * *",
            "Asia/Kolkata",
            "2024-06-30T23:59:59+05:30",
            ["2024-07-01T00:00:00+05:30", "2024-08-01T00:00:00+05:30"],
        ),
        (
            "0 9 * * 1-5",
            "Asia/Taipei",
            "2025-01-03T09:00:00+08:00",
            ["2025-01-06T09:00:00+08:00", "2025-01-07T09:00:00+08:00"],
        ),
        # Leap days only.
        (
            "0 0 29 2 *",
            "UTC",
            "2024-03-01T00:00:00+00:00",
            ["2028-02-29T00:00:00+00:00", "2032-02-29T00:00:00+00:00"],
        ),
        # Both day fields restricted: either matches (the 13th, or a Friday).
        (
            "0 9 13 * 5",
            "UTC",
            "2024-01-01T00:00:00+00:00",
            ["2024-01-05T09:00:00+00:00", "2024-01-12T09:00:00+00:00", "2024-01-13T09:00:00+00:00"],
        ),
        # A star in either makes both required: `*/1` keeps the star, `*/2` does not.
        (
            "0 9 */1 * 5",
            "UTC",
            "2024-01-01T00:00:00+00:00",
            ["2024-01-05T09:00:00+00:00", "2024-01-12T09:00:00+00:00"],
        ),
        (
            "0 9 */2 * 5",
            "UTC",
            "2024-01-01T00:00:00+00:00",
            ["2024-01-01T09:00:00+00:00", "2024-01-03T09:00:00+00:00", "2024-01-05T09:00:00+00:00"],
        ),
        # @every ignores the zone's clock: 90 minutes of elapsed time, across the DST change.
        (
            "@every 90m",
            "America/New_York",
            "2024-03-10T00:30:00-05:00",
            ["2024-03-10T03:00:00-04:00", "2024-03-10T04:30:00-04:00"],
        ),
    ],
)
def test_activations_follow_the_zones_clock_as_robfig_does(
    schedule: str, zone: str, start: str, expected: list[str]
) -> None:
    assert following(schedule, zone, start, len(expected)) == expected


@pytest.mark.parametrize("schedule", ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 , * *"])
def test_a_schedule_that_never_fires_has_no_next_activation(schedule: str) -> None:
    start = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    assert parse_schedule(schedule, time_zone="UTC").next_after(start) is None


def test_the_search_gives_up_after_five_calendar_years_as_robfig_does() -> None:
    # 2100 is no leap year: after 2096 the next 29 February is in 2104. robfig searches up to the
    # end of the starting year + 5, so from 2096 it finds nothing, and from 2099 it finds 2104.
    leap_days = parse_schedule("0 0 29 2 *", time_zone="UTC")
    assert leap_days.next_after(datetime.datetime(2096, 3, 1, tzinfo=datetime.UTC)) is None
    assert leap_days.next_after(datetime.datetime(2099, 1, 1, tzinfo=datetime.UTC)) == (
        datetime.datetime(2104, 2, 29, tzinfo=datetime.UTC)
    )


def test_the_activation_reads_as_the_zones_wall_clock_and_offset() -> None:
    start = datetime.datetime(2024, 5, 5, tzinfo=datetime.UTC)
    found = parse_schedule("0 9 * * *", time_zone="Asia/Taipei").next_after(start)
    assert found is not None
    assert found.isoformat() == "2024-05-05T09:00:00+08:00"
    assert found.tzname() == "CST"


def test_the_two_activations_of_a_repeated_hour_compare_as_the_instants_they_are() -> None:
    # With ZoneInfo as tzinfo Python would call these equal (same wall clock, fold ignored), and
    # the second unequal to its own instant in UTC.
    schedule = parse_schedule("30 1 * * *", time_zone="America/New_York")
    first = schedule.next_after(datetime.datetime(2024, 11, 3, tzinfo=datetime.UTC))
    assert first is not None
    second = schedule.next_after(first)
    assert second is not None
    assert first < second
    assert second == datetime.datetime(2024, 11, 3, 6, 30, tzinfo=datetime.UTC)
