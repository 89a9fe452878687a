"""Regenerate ../robfig_cases.json: robfig/cron's own answers for hand-picked and random cases.

    cd tests/cron/oracle && python make_cases.py

Needs Go (the module proxy fetches github.com/robfig/cron/v3 v3.0.1, pinned by go.sum) and the
system's zone data; the tests only read the JSON, so they do not. The random cases come from a
fixed seed, so regenerating gives the same file unless robfig, Go or the zone data changed.
"""

from __future__ import annotations

import datetime
import json
import pathlib
import random
import subprocess
import zoneinfo
from typing import Any

HERE = pathlib.Path(__file__).parent
OUTPUT = HERE.parent / "robfig_cases.json"
SEED = 20261126
RANDOM_CASES = 400
NEAR_TRANSITION_CASES = 200
STEPS = 6

ZONES = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Asia/Kolkata",
    "Asia/Taipei",
    "Australia/Lord_Howe",  # a 30-minute DST shift
    "America/Sao_Paulo",  # DST began at midnight until 2019
    "America/Santiago",  # DST changes at midnight
    "Pacific/Chatham",  # UTC+12:45 / +13:45
    "Africa/Casablanca",  # DST suspended every Ramadan
    "Asia/Tehran",
]

# (schedule, zone, start): the syntax, the descriptors and the transitions worth naming.
HAND_PICKED: list[tuple[str, str, str]] = [
    ("* * * * *", "UTC", "2024-01-01T00:00:00Z"),
    ("* * * * *", "UTC", "2024-01-01T00:00:59.999999Z"),
    ("*/15 * * * *", "UTC", "2024-05-05T10:07:00Z"),
    ("5/20 * * * *", "UTC", "2024-05-05T10:07:00Z"),
    ("10-40/10 3 * * *", "UTC", "2024-05-05T10:07:00Z"),
    ("0 0 1,15 * *", "UTC", "2024-05-05T10:07:00Z"),
    ("0 12 * JAN,jul *", "UTC", "2024-05-05T10:07:00Z"),
    ("0 12 * * MON-fri", "UTC", "2024-05-05T10:07:00Z"),
    ("0 12 ? * sun", "UTC", "2024-05-05T10:07:00Z"),
    ("0 9 13 * 5", "UTC", "2024-01-01T00:00:00Z"),  # the 13th or any Friday
    ("0 9 13 * *", "UTC", "2024-01-01T00:00:00Z"),
    ("0 9 * * 5", "UTC", "2024-01-01T00:00:00Z"),
    ("0 9 */2 * 5", "UTC", "2024-01-01T00:00:00Z"),  # a stepped star is no star: OR
    ("0 9 */1 * 5", "UTC", "2024-01-01T00:00:00Z"),  # a step of 1 keeps the star: AND
    ("0 9 1-31 * 5", "UTC", "2024-01-01T00:00:00Z"),  # not a star: OR
    ("0 0 29 2 *", "UTC", "2024-03-01T00:00:00Z"),
    ("0 0 29 2 *", "Europe/Berlin", "2023-01-01T00:00:00Z"),
    ("0 0 30 2 *", "UTC", "2024-01-01T00:00:00Z"),
    ("0 0 29 2 *", "UTC", "2096-03-01T00:00:00Z"),  # 2104 is past robfig's five years
    ("0 0 29 2 *", "UTC", "2098-12-31T23:59:59Z"),
    ("0 0 31 4,6,9,11 *", "UTC", "2024-01-01T00:00:00Z"),
    ("0 0 31 * *", "UTC", "2024-01-01T00:00:00Z"),
    ("0 0 , * *", "UTC", "2024-01-01T00:00:00Z"),
    ("@yearly", "UTC", "2024-05-05T10:07:00Z"),
    ("@annually", "Asia/Taipei", "2024-05-05T10:07:00Z"),
    ("@monthly", "Asia/Kolkata", "2024-05-05T10:07:00Z"),
    ("@weekly", "Europe/Berlin", "2024-05-05T10:07:00Z"),
    ("@daily", "America/New_York", "2024-03-08T10:07:00Z"),
    ("@midnight", "America/New_York", "2024-11-01T10:07:00Z"),
    ("@hourly", "America/New_York", "2024-03-10T05:30:00Z"),
    ("@hourly", "America/New_York", "2024-11-03T04:30:00Z"),
    ("@every 90m", "UTC", "2024-05-05T10:07:30.5Z"),
    ("@every 1h30m", "America/New_York", "2024-03-10T05:00:00Z"),
    ("@every 1.5s", "UTC", "2024-05-05T10:07:30.25Z"),
    ("@every 10ms", "UTC", "2024-05-05T10:07:30.25Z"),
    ("@every -5m", "UTC", "2024-05-05T10:07:30.25Z"),
    ("@every 0", "UTC", "2024-05-05T10:07:30Z"),
    ("@every 36h", "Asia/Kolkata", "2024-05-05T10:07:30Z"),
    ("@every 1.00000000001h", "UTC", "2024-05-05T10:07:30Z"),
    ("@every 2562047h", "UTC", "2024-05-05T10:07:30Z"),
    # New York: 02:00-03:00 skipped on 2024-03-10, 01:00-02:00 repeated on 2024-11-03.
    ("30 2 * * *", "America/New_York", "2024-03-08T00:00:00Z"),
    ("0 2 * * *", "America/New_York", "2024-03-08T00:00:00Z"),
    ("0 3 * * *", "America/New_York", "2024-03-08T00:00:00Z"),
    ("30 1 * * *", "America/New_York", "2024-11-01T00:00:00Z"),
    ("30 1 * * *", "America/New_York", "2024-11-03T05:30:00Z"),
    ("30 1 * * *", "America/New_York", "2024-11-03T05:45:00Z"),
    ("*/20 1-2 * * *", "America/New_York", "2024-11-03T04:00:00Z"),
    ("*/20 * * * *", "America/New_York", "2024-03-10T06:30:00Z"),
    ("0 * * * *", "America/New_York", "2024-11-03T05:59:59Z"),
    ("0 1,3 * * *", "America/New_York", "2024-11-03T05:10:00Z"),
    # Berlin: 02:00-03:00 skipped on 2024-03-31, repeated on 2024-10-27.
    ("30 2 * * *", "Europe/Berlin", "2024-03-29T00:00:00Z"),
    ("30 2 * * *", "Europe/Berlin", "2024-10-25T00:00:00Z"),
    ("*/30 2 * * *", "Europe/Berlin", "2024-10-27T00:00:00Z"),
    ("0 2 31 3 *", "Europe/Berlin", "2024-01-01T00:00:00Z"),
    ("0 */2 * * *", "Europe/Berlin", "2024-10-26T22:00:00Z"),
    ("15 3 * * 0", "Europe/Berlin", "2024-03-30T00:00:00Z"),
    # Half-hour and no-DST zones.
    ("0 0 * * *", "Asia/Kolkata", "2024-06-30T18:00:00Z"),
    ("30 5 1 * *", "Asia/Kolkata", "2024-06-30T18:00:00Z"),
    ("0 9 * * 1-5", "Asia/Taipei", "2024-12-31T20:00:00Z"),
    ("0 0 1 1 *", "Asia/Taipei", "2024-12-31T15:59:59Z"),
    # Midnight that does not exist (Sao Paulo 2018-11-04, Santiago's changes at 24:00).
    ("0 0 * * *", "America/Sao_Paulo", "2018-11-02T00:00:00Z"),
    ("30 0 4 11 *", "America/Sao_Paulo", "2018-11-01T00:00:00Z"),
    ("0 0 * * *", "America/Santiago", "2024-09-06T00:00:00Z"),
    ("0 0 * * *", "America/Santiago", "2024-04-05T00:00:00Z"),
    ("0 * * * *", "Australia/Lord_Howe", "2024-10-05T14:00:00Z"),
    ("*/15 * * * *", "Australia/Lord_Howe", "2024-04-06T14:00:00Z"),
    ("45 2 * * *", "Pacific/Chatham", "2024-09-28T00:00:00Z"),
    ("0 2 * * *", "Africa/Casablanca", "2025-02-20T00:00:00Z"),
]

# Schedules robfig refuses, to hold our messages to its words.
INVALID = [
    "* * * *",
    "* * * * * *",
    "   ",
    "60 * * * *",
    "* 24 * * *",
    "* * 0 * *",
    "* * 32 * *",
    "* * * 0 *",
    "* * * 13 *",
    "* * * * 7",
    "5-1 * * * *",
    "*/0 * * * *",
    "5/0 * * * *",
    "*/-1 * * * *",
    "1-2-3 * * * *",
    "1/2/3 * * * *",
    "x * * * *",
    "-1 * * * *",
    "99999999999999999999 * * * *",
    "* * * foo *",
    "* * * * monday",
    "* * * */jan *",
    "@Daily",
    "@reboot",
    "@every",
    "@every ",
    "@every 1x",
    "@every 1",
    "@every .s",
    "@every 1h 30m",
    "@every 9999999999h",
    "1,x * * * *",
    "** * * * *",
    "+5 * * * *",
    " @daily",
    "@daily ",
]


def random_field(rng: random.Random, low: int, high: int, names: list[str]) -> str:
    return ",".join(random_item(rng, low, high, names) for _ in range(rng.choice((1, 1, 1, 2, 3))))


def random_item(rng: random.Random, low: int, high: int, names: list[str]) -> str:
    def value() -> str:
        number = rng.randint(low, high)
        if names and rng.random() < 0.3:
            name = names[number - low]
            return rng.choice((name, name.upper(), name.title()))
        return str(number)

    kind = rng.choice(("star", "star", "value", "range", "step", "star-step", "value-step", "?"))
    if kind == "star":
        return "*"
    if kind == "?":
        return "?"
    if kind == "value":
        return value()
    if kind == "star-step":
        return f"*/{rng.randint(1, high - low + 1)}"
    if kind == "value-step":
        return f"{value()}/{rng.randint(1, high - low + 1)}"
    first, second = sorted((rng.randint(low, high), rng.randint(low, high)))
    if kind == "range":
        return f"{first}-{second}"
    return f"{first}-{second}/{rng.randint(1, high - low + 1)}"


MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
WEEKDAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]


def random_schedule(rng: random.Random) -> str:
    if rng.random() < 0.08:
        return rng.choice(["@yearly", "@monthly", "@weekly", "@daily", "@hourly"])
    return " ".join(
        (
            random_field(rng, 0, 59, []),
            random_field(rng, 0, 23, []),
            random_field(rng, 1, 31, []),
            random_field(rng, 1, 12, MONTHS),
            random_field(rng, 0, 6, WEEKDAYS),
        )
    )


def random_start(rng: random.Random) -> str:
    seconds = rng.randint(
        int(datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC).timestamp()),
        int(datetime.datetime(2030, 12, 31, tzinfo=datetime.UTC).timestamp()),
    )
    if rng.random() < 0.5:
        seconds -= seconds % rng.choice((60, 3600, 86400))
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    if rng.random() < 0.2:
        moment += datetime.timedelta(microseconds=rng.randint(1, 999_999))
    return moment.isoformat().replace("+00:00", "Z")


def transitions(zone: str) -> list[datetime.datetime]:
    """The hours in 2024-2030 at which `zone` changes its UTC offset."""
    tz = zoneinfo.ZoneInfo(zone)
    hour = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    found = []
    while hour.year <= 2030:
        following = hour + datetime.timedelta(hours=1)
        if hour.astimezone(tz).utcoffset() != following.astimezone(tz).utcoffset():
            found.append(following)
        hour = following
    return found


def near_transition(
    rng: random.Random, changes: dict[str, list[datetime.datetime]]
) -> tuple[str, str]:
    """A zone, and a moment within a day before one of its offset changes: where robfig's walk
    is most peculiar."""
    zone = rng.choice(sorted(changes))
    moment = rng.choice(changes[zone]) - datetime.timedelta(seconds=rng.randint(0, 86400))
    return zone, moment.isoformat().replace("+00:00", "Z")


def dense_schedule(rng: random.Random) -> str:
    """A schedule firing at least daily, so that its next activations meet the transition."""
    minute = rng.choice(["*", "*/15", "*/20", "0", "30", "45", "0,30", "5-10", "*/7"])
    hour = rng.choice(["*", "*", "0", "1", "2", "3", "1-3", "*/2", "0,2", "2/5", "23"])
    return f"{minute} {hour} * * *"


def cases() -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    picked = [
        {"schedule": schedule, "zone": zone, "start": start, "count": STEPS}
        for schedule, zone, start in HAND_PICKED
    ]
    invalid = [
        {"schedule": schedule, "zone": "UTC", "start": "2024-01-01T00:00:00Z", "count": 0}
        for schedule in INVALID
    ]
    generated = [
        {
            "schedule": random_schedule(rng),
            "zone": rng.choice(ZONES),
            "start": random_start(rng),
            "count": STEPS,
        }
        for _ in range(RANDOM_CASES)
    ]
    changes = {zone: found for zone in ZONES if (found := transitions(zone))}
    near = []
    for _ in range(NEAR_TRANSITION_CASES):
        zone, start = near_transition(rng, changes)
        near.append({"schedule": dense_schedule(rng), "zone": zone, "start": start, "count": 8})
    return picked + invalid + generated + near


def main() -> None:
    answers = subprocess.run(
        ["go", "run", "."],
        cwd=HERE,
        input=json.dumps(cases()),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    OUTPUT.write_text(json.dumps(json.loads(answers), indent=1) + "\n")


if __name__ == "__main__":
    main()
