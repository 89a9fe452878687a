"""Our schedules against robfig/cron v3.0.1 itself, on every case of robfig_cases.json.

The file holds robfig's answers (parse errors, and the activations stepping `Next` gives) for
hand-picked schedules (syntax, descriptors, DST transitions in several zones, leap days,
never-firing schedules), 400 random ones across zones and 2024-2030, and 200 daily-or-denser
ones starting within a day before a clock change. To regenerate it after changing the cases
(needs Go; the tests themselves do not):

    cd tests/cron/oracle && python make_cases.py
"""

from __future__ import annotations

import datetime

import pytest
from ray_operator.cron import InvalidScheduleError, parse_schedule

from tests.cron.robfig_cases import RobfigCase, load_cases

CASES = load_cases()
PARSED = [case for case in CASES if not case.error]
REFUSED = [case for case in CASES if case.error]
ONE_SECOND = datetime.timedelta(seconds=1)


def test_the_cases_cover_what_they_claim() -> None:
    # A regenerated file that lost its cases would make every test below pass vacuously.
    assert len(PARSED) >= 650
    assert len(REFUSED) >= 30
    assert any(len(case.activations) < case.steps for case in PARSED)


@pytest.mark.parametrize("case", PARSED, ids=lambda case: case.name)
def test_stepping_next_after_gives_robfigs_activations(case: RobfigCase) -> None:
    schedule = parse_schedule(case.schedule, time_zone=case.zone)
    found: list[datetime.datetime] = []
    moment: datetime.datetime | None = case.start
    for _ in range(case.steps):
        assert moment is not None
        moment = schedule.next_after(moment)
        if moment is None:
            break
        found.append(moment)
    assert tuple(found) == case.activations


@pytest.mark.parametrize("case", REFUSED, ids=lambda case: case.name)
def test_a_schedule_robfig_refuses_is_refused_with_its_message(case: RobfigCase) -> None:
    with pytest.raises(InvalidScheduleError) as refused:
        parse_schedule(case.schedule, time_zone=case.zone)
    assert str(refused.value) == f"invalid cron schedule: {case.error}"


@pytest.mark.parametrize("case", PARSED, ids=lambda case: case.name)
def test_last_at_or_before_finds_robfigs_latest_activation(case: RobfigCase) -> None:
    schedule = parse_schedule(case.schedule, time_zone=case.zone)
    previous = None
    for activation in case.activations:
        # Just before an activation, the latest is the one before it; at it, itself.
        assert schedule.last_at_or_before(activation - ONE_SECOND, since=case.start) == previous
        assert schedule.last_at_or_before(activation, since=case.start) == activation
        previous = activation
