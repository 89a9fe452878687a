"""What `parse_schedule` accepts and refuses: robfig/cron v3's ParseStandard, word for word.

Each accepted form is shown by the activations it gives in UTC; each refusal by its message,
which is robfig's own (users of KubeRay see the same), except for the checks KubeRay and we add
before robfig: length, TZ in the schedule, empty schedule, the time zone.
"""

from __future__ import annotations

import datetime

import pytest
from ray_operator.cron import MAX_SCHEDULE_LENGTH, InvalidScheduleError, parse_schedule

START = datetime.datetime(2024, 5, 5, 10, 7, tzinfo=datetime.UTC)  # a Sunday


def refusal_of(schedule: str, *, time_zone: str | None = "UTC") -> str:
    """The message `parse_schedule` refuses `schedule` with."""
    with pytest.raises(InvalidScheduleError) as refused:
        parse_schedule(schedule, time_zone=time_zone)
    return str(refused.value)


def activations(schedule: str, count: int = 4, *, start: datetime.datetime = START) -> list[str]:
    """The next `count` activations after `start`, in UTC, as "MM-DD HH:MM" (or fewer: none)."""
    parsed = parse_schedule(schedule, time_zone="UTC")
    found: list[str] = []
    moment: datetime.datetime | None = start
    for _ in range(count):
        assert moment is not None
        moment = parsed.next_after(moment)
        if moment is None:
            break
        found.append(moment.strftime("%m-%d %H:%M"))
    return found


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ("* * * * *", ["05-05 10:08", "05-05 10:09", "05-05 10:10"]),
        ("? * * * *", ["05-05 10:08", "05-05 10:09", "05-05 10:10"]),
        ("9 * * * *", ["05-05 10:09", "05-05 11:09", "05-05 12:09"]),
        ("8-10 * * * *", ["05-05 10:08", "05-05 10:09", "05-05 10:10"]),
        ("*/20 * * * *", ["05-05 10:20", "05-05 10:40", "05-05 11:00"]),
        ("5/20 * * * *", ["05-05 10:25", "05-05 10:45", "05-05 11:05"]),
        ("0-30/15 * * * *", ["05-05 10:15", "05-05 10:30", "05-05 11:00"]),
        ("50,9,30 * * * *", ["05-05 10:09", "05-05 10:30", "05-05 10:50"]),
        ("1,,2 * * * *", ["05-05 11:01", "05-05 11:02", "05-05 12:01"]),
        ("*-5 * * * *", ["05-05 10:08", "05-05 10:09", "05-05 10:10"]),
        ("+9 * * * *", ["05-05 10:09", "05-05 11:09", "05-05 12:09"]),
        ("0 0 * jun-AUG *", ["06-01 00:00", "06-02 00:00", "06-03 00:00"]),
        ("0 0 * * Sat", ["05-11 00:00", "05-18 00:00", "05-25 00:00"]),
        ("0 0 * * 0", ["05-12 00:00", "05-19 00:00", "05-26 00:00"]),
    ],
)
def test_each_syntax_element_selects_its_values(schedule: str, expected: list[str]) -> None:
    assert activations(schedule, 3) == expected


@pytest.mark.parametrize(
    ("descriptor", "expected"),
    [
        ("@yearly", ["01-01 00:00", "01-01 00:00"]),
        ("@annually", ["01-01 00:00", "01-01 00:00"]),
        ("@monthly", ["06-01 00:00", "07-01 00:00"]),
        ("@weekly", ["05-12 00:00", "05-19 00:00"]),
        ("@daily", ["05-06 00:00", "05-07 00:00"]),
        ("@midnight", ["05-06 00:00", "05-07 00:00"]),
        ("@hourly", ["05-05 11:00", "05-05 12:00"]),
        ("@every 90m", ["05-05 11:37", "05-05 13:07"]),
        ("@every 1h30m", ["05-05 11:37", "05-05 13:07"]),
    ],
)
def test_each_descriptor_is_its_schedule(descriptor: str, expected: list[str]) -> None:
    assert activations(descriptor, 2) == expected


def test_names_of_months_and_weekdays_ignore_case() -> None:
    assert activations("0 0 * JuL mOn", 2) == activations("0 0 * 7 1", 2)


def test_every_counts_from_the_moment_truncated_to_the_second() -> None:
    start = datetime.datetime(2024, 5, 5, 10, 7, 30, 500_000, tzinfo=datetime.UTC)
    following = parse_schedule("@every 90m", time_zone="UTC").next_after(start)
    assert following == datetime.datetime(2024, 5, 5, 11, 37, 30, tzinfo=datetime.UTC)


@pytest.mark.parametrize("duration", ["10ms", "0", "-5m", "999999us"])
def test_every_shorter_than_a_second_is_every_second(duration: str) -> None:
    start = datetime.datetime(2024, 5, 5, 10, 7, 30, 250_000, tzinfo=datetime.UTC)
    following = parse_schedule(f"@every {duration}", time_zone="UTC").next_after(start)
    assert following == datetime.datetime(2024, 5, 5, 10, 7, 31, tzinfo=datetime.UTC)


def test_every_drops_the_fraction_of_a_second() -> None:
    start = datetime.datetime(2024, 5, 5, 10, 7, 30, tzinfo=datetime.UTC)
    following = parse_schedule("@every 2.9s", time_zone="UTC").next_after(start)
    assert following == datetime.datetime(2024, 5, 5, 10, 7, 32, tzinfo=datetime.UTC)


def test_a_field_of_only_commas_matches_nothing() -> None:
    assert activations("0 , * * *") == []


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        (" @daily", "expected exactly 5 fields, found 1: [@daily]"),
        ("@daily ", "unrecognized descriptor: @daily "),
    ],
)
def test_a_descriptor_with_surrounding_space_is_refused_even_with_a_zone(
    schedule: str, message: str
) -> None:
    # KubeRay validates the schedule alone, before it parses "TZ=<zone> <schedule>" (which robfig
    # would trim).
    assert refusal_of(schedule, time_zone="Europe/Berlin") == f"invalid cron schedule: {message}"


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ("* * * *", "expected exactly 5 fields, found 4: [* * * *]"),
        ("0 * * * * *", "expected exactly 5 fields, found 6: [0 * * * * *]"),
        ("   ", "expected exactly 5 fields, found 0: []"),
        ("60 * * * *", "end of range (60) above maximum (59): 60"),
        ("* 24 * * *", "end of range (24) above maximum (23): 24"),
        ("* * 0 * *", "beginning of range (0) below minimum (1): 0"),
        ("* * 32 * *", "end of range (32) above maximum (31): 32"),
        ("* * * 13 *", "end of range (13) above maximum (12): 13"),
        ("* * * * 7", "end of range (7) above maximum (6): 7"),
        ("5-1 * * * *", "beginning of range (5) beyond end of range (1): 5-1"),
        ("*/0 * * * *", "step of range should be a positive number: */0"),
        ("*/-1 * * * *", "negative number (-1) not allowed: -1"),
        ("1-2-3 * * * *", "too many hyphens: 1-2-3"),
        ("1/2/3 * * * *", "too many slashes: 1/2/3"),
        ("x * * * *", 'failed to parse int from x: strconv.Atoi: parsing "x": invalid syntax'),
        ("-1 * * * *", 'failed to parse int from : strconv.Atoi: parsing "": invalid syntax'),
        ("٣ * * * *", 'failed to parse int from ٣: strconv.Atoi: parsing "٣": invalid syntax'),
        (
            "99999999999999999999 * * * *",
            "failed to parse int from 99999999999999999999: strconv.Atoi: parsing "
            '"99999999999999999999": value out of range',
        ),
        (
            "* * * foo *",
            'failed to parse int from foo: strconv.Atoi: parsing "foo": invalid syntax',
        ),
        (
            "* * * * monday",
            'failed to parse int from monday: strconv.Atoi: parsing "monday": invalid syntax',
        ),
        (
            "* * * */jan *",
            'failed to parse int from jan: strconv.Atoi: parsing "jan": invalid syntax',
        ),
        ("@Daily", "unrecognized descriptor: @Daily"),
        ("@reboot", "unrecognized descriptor: @reboot"),
        (
            "@every 1x",
            'failed to parse duration @every 1x: time: unknown unit "x" in duration "1x"',
        ),
        ("@every 1", 'failed to parse duration @every 1: time: missing unit in duration "1"'),
        ("@every .s", 'failed to parse duration @every .s: time: invalid duration ".s"'),
        (
            "@every 9999999999h",
            'failed to parse duration @every 9999999999h: time: invalid duration "9999999999h"',
        ),
    ],
)
def test_a_malformed_schedule_is_refused_with_robfigs_message(schedule: str, message: str) -> None:
    # KubeRay's words around robfig's.
    assert refusal_of(schedule) == f"invalid cron schedule: {message}"


def test_the_first_bad_field_is_the_one_named() -> None:
    assert refusal_of("* 24 0 * *") == (
        "invalid cron schedule: end of range (24) above maximum (23): 24"
    )


def test_an_empty_schedule_is_refused() -> None:
    assert refusal_of("") == "invalid cron schedule: empty spec string"


@pytest.mark.parametrize("schedule", ["TZ=UTC 0 * * * *", "CRON_TZ=Asia/Taipei 0 * * * *"])
def test_a_zone_in_the_schedule_is_refused_for_spec_time_zone(schedule: str) -> None:
    assert refusal_of(schedule, time_zone=None) == (
        "cannot use TZ or CRON_TZ in schedule, use timeZone field instead"
    )


def test_a_schedule_at_the_length_limit_is_parsed_and_one_longer_is_refused() -> None:
    # The trailing comma is an empty list item, which robfig skips.
    longest = "0 0 1 1 " + ",".join(["1"] * 508) + ","
    assert len(longest) == MAX_SCHEDULE_LENGTH
    assert parse_schedule(longest, time_zone="UTC").next_after(START) is not None
    assert refusal_of(longest + "1") == (
        "schedule is 1025 characters long; at most 1024 are allowed"
    )


def test_a_list_as_long_as_allowed_parses_into_its_values() -> None:
    # 500 items (about the most 1024 characters hold), each setting its bit in the field's mask.
    many = ",".join(["5"] * 500)
    assert activations(f"{many} * * * *", 2) == ["05-05 11:05", "05-05 12:05"]


def test_a_list_of_ten_thousand_items_is_refused_by_its_length() -> None:
    refusal = refusal_of(",".join(["5"] * 10_000) + " * * * *")
    assert refusal == "schedule is 20007 characters long; at most 1024 are allowed"


@pytest.mark.parametrize(
    ("zone", "message"),
    [
        ("Mars/Olympus", "invalid time zone: unknown time zone Mars/Olympus"),
        ("america/new_york", "invalid time zone: unknown time zone america/new_york"),
        ("../etc/passwd", "invalid time zone: time: invalid location name"),
        ("/etc/localtime", "invalid time zone: time: invalid location name"),
    ],
)
def test_an_unknown_time_zone_is_refused_by_name(zone: str, message: str) -> None:
    assert refusal_of("0 0 * * *", time_zone=zone) == message


def test_an_empty_time_zone_is_refused() -> None:
    assert refusal_of("0 0 * * *", time_zone="") == (
        "timeZone must not be empty string, omit the field to use the local time zone of the"
        " operator"
    )


def test_the_schedule_is_checked_before_the_zone_as_kuberay_does() -> None:
    assert refusal_of("x", time_zone="Mars/Olympus").startswith("invalid cron schedule:")


def test_local_is_the_process_zone_as_in_go(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    following = parse_schedule("0 0 * * *", time_zone="Local").next_after(START)
    assert following == datetime.datetime(2024, 5, 5, 18, 30, tzinfo=datetime.UTC)


def test_without_a_zone_the_schedule_reads_the_zone_named_by_tz(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TZ", "Asia/Kolkata")
    following = parse_schedule("0 0 * * *").next_after(START)
    assert following == datetime.datetime(2024, 5, 5, 18, 30, tzinfo=datetime.UTC)


def test_without_a_zone_an_empty_tz_means_utc_as_in_go(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "")
    following = parse_schedule("0 0 * * *").next_after(START)
    assert following == datetime.datetime(2024, 5, 6, tzinfo=datetime.UTC)


def test_a_naive_moment_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="aware"):
        parse_schedule("0 0 * * *", time_zone="UTC").next_after(datetime.datetime(2024, 1, 1))


def test_fields_are_separated_by_any_go_whitespace() -> None:
    assert activations("9\t*\u3000* * *", 1) == ["05-05 10:09"]


def test_a_control_character_python_would_split_on_is_no_separator_for_go() -> None:
    # Python's str.split() splits on U+001C; Go's strings.Fields does not.
    assert refusal_of("0\x1c0 * * *") == (
        "invalid cron schedule: expected exactly 5 fields, found 4: [0\x1c0 * * *]"
    )


@pytest.mark.parametrize("micro", ["us", "µs", "μs"])
def test_every_accepts_go_spellings_of_microseconds(micro: str) -> None:
    start = datetime.datetime(2024, 5, 5, 10, 7, 30, tzinfo=datetime.UTC)
    schedule = parse_schedule(f"@every 2000000{micro}", time_zone="UTC")
    assert schedule.next_after(start) == start + datetime.timedelta(seconds=2)
