"""Cron schedules of RayCronJob, with the semantics of robfig/cron v3 that KubeRay uses.

KubeRay parses `spec.schedule` with `cron.ParseStandard` of github.com/robfig/cron/v3 (v3.0.1),
prefixed with `TZ=<spec.timeZone> ` when a zone is given, and asks the schedule's `Next` when to
fire. A RayCronJob must fire at the same instants under us, so this package reproduces that
library's behaviour rather than any other cron's, where it matters most in the way its search
walks the calendar through daylight-saving transitions and gives up after five years.

The package, from the entry point down:

- `schedule`: `parse_schedule` (KubeRay's checks and messages) and `CronSchedule` (`next_after`,
  and `last_at_or_before`, which bisects instead of replaying every missed activation);
- `robfig_parser`: the schedule's text into a rule (`rules`: five fields' bit sets, or `@every`'s
  delay), through Go's `strconv.Atoi` and `time.ParseDuration` (`go_parsing`);
- `robfig_search`: robfig's `Next`, walking the calendar on Unix seconds with Go's `time.Date`
  (`wall_clock`), since Go resolves a wall-clock time that does not exist or exists twice
  differently from Python's `fold`;
- `zones`: Go's `time.LoadLocation` and `time.Local`.

Pure: no I/O except reading time-zone data through `zoneinfo` (and, for a schedule without a
zone, the process's own zone from TZ or /etc/localtime, as Go's `time.Local` does). The
expected answers in tests/cron/robfig_cases.json come from robfig/cron itself.

Bounds: a schedule of more than 1024 characters is refused; parsing is linear in its length; a
search visits at most about 5 x 366 days (robfig's five-year limit), never minute by minute over
years.
"""

from ray_operator.cron.schedule import (
    MAX_SCHEDULE_LENGTH,
    CronSchedule,
    InvalidScheduleError,
    parse_schedule,
)

__all__ = ["MAX_SCHEDULE_LENGTH", "CronSchedule", "InvalidScheduleError", "parse_schedule"]
