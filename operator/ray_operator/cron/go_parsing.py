"""Go's text parsing, as robfig/cron v3 relies on it: fields split on Go's `unicode.IsSpace`,
numbers read by `strconv.Atoi`, `@every`'s delay by `time.ParseDuration`, and `strconv.Quote`
for the messages. Errors carry Go's own wording; robfig's prefix is the parser's to add.

Bounds: every function here is linear in the length of its text.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# Go's unicode.IsSpace, which strings.Fields and strings.TrimSpace split and trim on; Python's
# str.split() also splits on U+001C..U+001F, which Go does not.
_GO_SPACES = (
    "\t\n\v\f\r \x85\xa0\u1680"
    + "".join(map(chr, range(0x2000, 0x200B)))
    + ("\u2028\u2029\u202f\u205f\u3000")
)
GO_SPACE_RUN = re.compile(f"[{re.escape(_GO_SPACES)}]+")
"""A run of the characters Go's strings.Fields splits on."""
_GO_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_INT64_MAX = (1 << 63) - 1


class GoSyntaxError(ValueError):
    """Text Go's parser refuses; str() is Go's message (`strconv.Atoi: ...`, `time: ...`)."""


def atoi(text: str) -> int:
    """Go's strconv.Atoi: ASCII digits with an optional sign, within int64."""
    if not _GO_INT.fullmatch(text):
        raise GoSyntaxError(f"strconv.Atoi: parsing {go_quote(text)}: invalid syntax")
    number = int(text)
    if not -_INT64_MAX - 1 <= number <= _INT64_MAX:
        raise GoSyntaxError(f"strconv.Atoi: parsing {go_quote(text)}: value out of range")
    return number


def go_quote(text: str) -> str:
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


def parse_duration(text: str) -> int:
    """Go's time.ParseDuration in nanoseconds (bytes, like Go)."""

    def refuse(problem: str) -> GoSyntaxError:
        return GoSyntaxError(f"time: {problem} {go_quote(text)}")

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


def _duration_term(rest: bytes, refuse: Callable[[str], GoSyntaxError]) -> tuple[int, bytes]:
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
        fraction, scale = _leading_fraction(fraction_digits)
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
        raise refuse(f"unknown unit {go_quote(unit_text.decode(errors='replace'))} in duration")
    if whole > (1 << 63) // unit:
        raise refuse("invalid duration")
    value = whole * unit
    if fraction > 0:
        # Go computes the fraction in float64; the same arithmetic gives the same nanoseconds.
        value += int(float(fraction) * (float(unit) / scale))
        if value > 1 << 63:
            raise refuse("invalid duration")
    return value, rest


def _leading_fraction(digits: bytes) -> tuple[int, float]:
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
