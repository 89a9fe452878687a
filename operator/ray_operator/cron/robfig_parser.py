"""robfig/cron v3's `ParseStandard`: a schedule's text into a rule (`rules.py`).

Five fields (minute, hour, day of month, month, day of week), `*` and `?`, ranges, steps, lists,
JAN-DEC and SUN-SAT in any case, and the descriptors (`@daily`, `@every 90m`, …), refused with
robfig's own messages (KubeRay prefixes them).

Bounds: linear in the length of the text; a field's bits are at most 60 values whatever the step.
"""

from __future__ import annotations

import dataclasses

from ray_operator.cron.go_parsing import GO_SPACE_RUN, GoSyntaxError, atoi, parse_duration
from ray_operator.cron.rules import STAR_BIT, EveryRule, FieldRule, Rule


class RobfigError(Exception):
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
    return (1 << (bounds.high + 1)) - (1 << bounds.low) | STAR_BIT


# The descriptors, exactly as robfig spells them (case matters: `@Daily` is refused).
_MIDNIGHT = (1 << 0, 1 << 0)
_DESCRIPTORS: dict[str, FieldRule] = {
    "@yearly": FieldRule(*_MIDNIGHT, 1 << 1, 1 << 1, _all_of(_DAYS_OF_WEEK)),
    "@monthly": FieldRule(*_MIDNIGHT, 1 << 1, _all_of(_MONTHS), _all_of(_DAYS_OF_WEEK)),
    "@weekly": FieldRule(*_MIDNIGHT, _all_of(_DAYS_OF_MONTH), _all_of(_MONTHS), 1 << 0),
    "@daily": FieldRule(
        *_MIDNIGHT, _all_of(_DAYS_OF_MONTH), _all_of(_MONTHS), _all_of(_DAYS_OF_WEEK)
    ),
    "@hourly": FieldRule(
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


def parse_rule(spec: str) -> Rule:
    """A schedule's text as a rule; raises RobfigError with robfig's message."""
    if spec == "":
        raise RobfigError("empty spec string")
    if spec.startswith("@"):
        return _parse_descriptor(spec)
    fields = [field for field in GO_SPACE_RUN.split(spec) if field]
    if len(fields) != 5:
        raise RobfigError(f"expected exactly 5 fields, found {len(fields)}: [{' '.join(fields)}]")
    return FieldRule(
        minutes=_parse_field(fields[0], _MINUTES),
        hours=_parse_field(fields[1], _HOURS),
        days_of_month=_parse_field(fields[2], _DAYS_OF_MONTH),
        months=_parse_field(fields[3], _MONTHS),
        days_of_week=_parse_field(fields[4], _DAYS_OF_WEEK),
    )


def _parse_descriptor(spec: str) -> Rule:
    if spec in _DESCRIPTORS:
        return _DESCRIPTORS[spec]
    if spec.startswith(_EVERY_PREFIX):
        try:
            nanoseconds = parse_duration(spec[len(_EVERY_PREFIX) :])
        except GoSyntaxError as error:
            raise RobfigError(f"failed to parse duration {spec}: {error}") from None
        # robfig: under a second becomes a second; the fraction of a second is dropped.
        return EveryRule(seconds=max(nanoseconds, 1_000_000_000) // 1_000_000_000)
    raise RobfigError(f"unrecognized descriptor: {spec}")


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
        start, end, star = bounds.low, bounds.high, STAR_BIT
    else:
        start = _parse_int_or_name(low_and_high[0], bounds)
        if len(low_and_high) > 2:
            raise RobfigError(f"too many hyphens: {item}")
        end = start if len(low_and_high) == 1 else _parse_int_or_name(low_and_high[1], bounds)
    if len(range_and_step) > 2:
        raise RobfigError(f"too many slashes: {item}")
    step = 1
    if len(range_and_step) == 2:
        step = _parse_int(range_and_step[1])
        if len(low_and_high) == 1:
            end = bounds.high
        if step > 1:
            star = 0
    _check_range(item, bounds, start=start, end=end, step=step)
    return _bits(start, end, step) | star


def _check_range(item: str, bounds: _Bounds, *, start: int, end: int, step: int) -> None:
    if start < bounds.low:
        raise RobfigError(f"beginning of range ({start}) below minimum ({bounds.low}): {item}")
    if end > bounds.high:
        raise RobfigError(f"end of range ({end}) above maximum ({bounds.high}): {item}")
    if start > end:
        raise RobfigError(f"beginning of range ({start}) beyond end of range ({end}): {item}")
    if step == 0:
        raise RobfigError(f"step of range should be a positive number: {item}")


def _bits(start: int, end: int, step: int) -> int:
    # Fields span at most 60 values, so this is at most 60 iterations whatever the step.
    bits = 0
    for value in range(start, end + 1, step):
        bits |= 1 << value
    return bits


def _parse_int_or_name(text: str, bounds: _Bounds) -> int:
    named = bounds.names.get(text.lower())
    return named if named is not None else _parse_int(text)


def _parse_int(text: str) -> int:
    """Go's strconv.Atoi, then robfig's refusal of negative numbers."""
    try:
        number = atoi(text)
    except GoSyntaxError as error:
        raise RobfigError(f"failed to parse int from {text}: {error}") from None
    if number < 0:
        raise RobfigError(f"negative number ({number}) not allowed: {text}")
    return number
