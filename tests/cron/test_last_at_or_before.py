"""`last_at_or_before`: the most recent activation missed during downtime, without replaying
every activation in between."""

from __future__ import annotations

import datetime
import random
from zoneinfo import ZoneInfo

import pytest
import ray_operator.cron.schedule
from ray_operator.cron import CronSchedule, parse_schedule

from tests.cron.robfig_cases import load_cases

UTC = datetime.UTC


def replayed(
    schedule: CronSchedule, moment: datetime.datetime, *, since: datetime.datetime
) -> datetime.datetime | None:
    """The answer by definition: step `next_after` from `since` while it stays <= `moment`."""
    latest = None
    candidate = schedule.next_after(since)
    while candidate is not None and candidate <= moment:
        latest = candidate
        candidate = schedule.next_after(candidate)
    return latest


def random_windows(count: int) -> list[tuple[str, str, datetime.datetime, datetime.datetime]]:
    """(schedule, zone, since, moment) from the robfig cases' schedules, with windows of up to 200
    activations ending anywhere (between activations, on one, past a never-again)."""
    rng = random.Random(20261126)
    parsed = [case for case in load_cases() if not case.error]
    windows = []
    for case in rng.sample(parsed, count):
        schedule = parse_schedule(case.schedule, time_zone=case.zone)
        horizon = case.start + datetime.timedelta(seconds=rng.randint(1, 90 * 86400))
        last = case.start
        for _ in range(200):
            candidate = schedule.next_after(last)
            if candidate is None or candidate > horizon:
                break
            last = candidate
        moment = min(horizon, last + datetime.timedelta(seconds=rng.randint(0, 7200)))
        windows.append((case.schedule, case.zone, case.start, moment))
    return windows


@pytest.mark.parametrize(("text", "zone", "since", "moment"), random_windows(150))
def test_last_at_or_before_is_what_replaying_next_after_finds(
    text: str, zone: str, since: datetime.datetime, moment: datetime.datetime
) -> None:
    schedule = parse_schedule(text, time_zone=zone)
    assert schedule.last_at_or_before(moment, since=since) == replayed(
        schedule, moment, since=since
    )


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every robfig search `last_at_or_before` makes, counted."""
    made: list[object] = []
    search = ray_operator.cron.schedule.next_activation

    def counted(*args: object) -> object:
        made.append(args)
        return search(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(ray_operator.cron.schedule, "next_activation", counted)
    return made


def test_ten_years_of_every_minute_take_a_few_dozen_searches(searches: list[object]) -> None:
    schedule = parse_schedule("* * * * *", time_zone="UTC")
    since = datetime.datetime(2024, 1, 1, tzinfo=UTC)
    moment = datetime.datetime(2034, 5, 5, 10, 3, 7, 250_000, tzinfo=UTC)
    assert schedule.last_at_or_before(moment, since=since) == datetime.datetime(
        2034, 5, 5, 10, 3, tzinfo=UTC
    )
    # Bisection over ten years of seconds (about 2^28.3): one search per halving, plus the first.
    assert len(searches) <= 32


def test_after_a_clock_change_the_day_after_it_is_stepped_and_no_more(
    searches: list[object],
) -> None:
    schedule = parse_schedule("* * * * *", time_zone="Europe/Berlin")
    since = datetime.datetime(2024, 1, 1, tzinfo=UTC)
    moment = datetime.datetime(2034, 5, 5, 10, 3, 7, tzinfo=UTC)
    assert schedule.last_at_or_before(moment, since=since) == datetime.datetime(
        2034, 5, 5, 10, 3, tzinfo=UTC
    )
    # Berlin changed its clocks on 2034-03-26: the 28 hours around it are stepped minute by
    # minute, the years before and the weeks after are bisected.
    assert 28 * 60 <= len(searches) <= 28 * 60 + 3 * 32


def test_every_is_answered_by_arithmetic_over_any_window() -> None:
    schedule = parse_schedule("@every 90m", time_zone="UTC")
    since = datetime.datetime(2024, 1, 1, 0, 0, 30, 500_000, tzinfo=UTC)
    moment = datetime.datetime(2034, 1, 1, tzinfo=UTC)
    latest = schedule.last_at_or_before(moment, since=since)
    assert latest is not None
    # Activations are since (truncated to the second) + k * 90 minutes.
    assert (latest - since.replace(microsecond=0)) % datetime.timedelta(minutes=90) == (
        datetime.timedelta(0)
    )
    assert latest <= moment < latest + datetime.timedelta(minutes=90)


@pytest.mark.parametrize("text", ["@every 90m", "0 * * * *"])
def test_nothing_is_missed_when_the_window_holds_no_activation(text: str) -> None:
    schedule = parse_schedule(text, time_zone="UTC")
    since = datetime.datetime(2024, 1, 1, 10, 0, tzinfo=UTC)
    assert schedule.last_at_or_before(since + datetime.timedelta(minutes=59), since=since) is None
    assert schedule.last_at_or_before(since, since=since) is None
    assert schedule.last_at_or_before(since - datetime.timedelta(days=1), since=since) is None


def test_an_activation_at_since_is_not_missed_again() -> None:
    schedule = parse_schedule("0 * * * *", time_zone="UTC")
    since = datetime.datetime(2024, 1, 1, 10, 0, tzinfo=UTC)
    moment = datetime.datetime(2024, 1, 1, 11, 0, tzinfo=UTC)
    assert schedule.last_at_or_before(moment, since=since) == moment


def test_a_schedule_that_never_fires_has_missed_nothing() -> None:
    schedule = parse_schedule("0 0 30 2 *", time_zone="UTC")
    since = datetime.datetime(2024, 1, 1, tzinfo=UTC)
    assert schedule.last_at_or_before(since + datetime.timedelta(days=3650), since=since) is None


def transitions(zone: str, year: int) -> list[datetime.datetime]:
    """The instants (to the hour) at which `zone` changes its offset during `year`."""
    tz = ZoneInfo(zone)
    hour = datetime.datetime(year, 1, 1, tzinfo=UTC)
    found = []
    while hour.year == year:
        following = hour + datetime.timedelta(hours=1)
        if hour.astimezone(tz).utcoffset() != following.astimezone(tz).utcoffset():
            found.append(following)
        hour = following
    return found


DST_ZONES = [
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Chatham",
]
NEAR_TRANSITIONS = [
    (zone, transition)
    for zone in DST_ZONES
    for year in (2025,)
    for transition in transitions(zone, year)
]


@pytest.mark.parametrize(
    "text",
    [
        "*/30 * * * *",
        "30 1 * * *",
        "0 2 * * *",
        "15 2 * * *",
        "0 0 * * *",
        "@hourly",
        # Where robfig's steps skip what a fresh search finds (Lord Howe, Chatham).
        "*/20 1 * * *",
        "*/20 3 * * *",
        "0,30 2,3 * * *",
    ],
)
def test_last_at_or_before_is_replaying_next_after_around_every_dst_transition(text: str) -> None:
    assert len(NEAR_TRANSITIONS) == 10
    for zone, transition in NEAR_TRANSITIONS:
        schedule = parse_schedule(text, time_zone=zone)
        since = transition - datetime.timedelta(days=1, minutes=7)
        for minutes in range(-180, 27 * 60, 50):
            moment = transition + datetime.timedelta(minutes=minutes)
            expected = replayed(schedule, moment, since=since)
            assert schedule.last_at_or_before(moment, since=since) == expected, (zone, moment)


def test_where_robfigs_steps_go_round_in_a_circle_the_latest_instant_of_it_is_the_answer() -> None:
    # On Chatham's fall-back night robfig's Next from 03:30+13:45 returns 02:45+12:45, and from
    # there 03:00+13:45, an hour earlier: its steps repeat these four instants for ever (the
    # oracle shows it). We step as robfig does, so next_after repeats them too; last_at_or_before
    # stops where the steps turn back.
    schedule = parse_schedule("*/15 3 * * *", time_zone="Pacific/Chatham")
    since = datetime.datetime(2024, 4, 6, 3, 2, 29, tzinfo=UTC)
    steps = []
    moment: datetime.datetime | None = since
    for _ in range(5):
        assert moment is not None
        moment = schedule.next_after(moment)
        assert moment is not None
        steps.append(moment.astimezone(UTC).strftime("%H:%M"))
    assert steps == ["13:15", "13:30", "13:45", "14:00", "13:15"]
    latest = schedule.last_at_or_before(datetime.datetime(2024, 4, 7, tzinfo=UTC), since=since)
    assert latest == datetime.datetime(2024, 4, 6, 14, 0, tzinfo=UTC)
