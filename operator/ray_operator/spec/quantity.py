"""Kubernetes resource quantities ("500m", "2Gi", "40G", "1e3"): parse, add, scale and print.

This module owns the arithmetic that `ray start` flags and RayCluster status need, with the
semantics of apimachinery's `resource.Quantity`: `value()` rounds up to a whole number (so a
"500m" CPU limit becomes `--num-cpus=1`, as in KubeRay), and `str()` prints the canonical form
the API server would (`1.5` CPU prints as "1500m", 3072Mi prints as "3Gi"). Exact decimal
arithmetic; no floats except where KubeRay itself uses one (`as_float`).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import re
from decimal import Decimal, localcontext
from fractions import Fraction


class QuantityFormat(enum.Enum):
    """How a quantity prints, decided by the suffix it was written with."""

    BINARY_SI = "BinarySI"
    DECIMAL_SI = "DecimalSI"
    DECIMAL_EXPONENT = "DecimalExponent"


class InvalidQuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIXES = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
# The grammar of apimachinery's `ParseQuantity`: sign, digits with an optional fraction, suffix.
# `[0-9]`, not `\d`, which would also match other scripts' digits.
_QUANTITY_RE = re.compile(
    r"([+-]?)(?:([0-9]+)(?:\.([0-9]*))?|\.([0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
# Bounds that keep parsing O(len) and small, and refuse what Kubernetes cannot hold anyway:
# its quantities are int64 counts of nano-units at best (`Value()`, `MilliValue()`), so no
# quantity a Pod can use needs more than 19 integer and 9 fractional digits. Without these,
# "1e10000000" builds a ten-million-digit number (seconds of CPU on the event loop, issue 12).
MAX_QUANTITY_LENGTH = 64
MAX_QUANTITY = 2**63 - 1
"""The largest magnitude apimachinery can hold (it caps BinarySI there; int64 `Value()`)."""
_SMALLEST_NON_ZERO = Fraction(1, 10**9)
_MAX_INTEGER_DIGITS = len(str(MAX_QUANTITY))


@dataclasses.dataclass(frozen=True)
class Quantity:
    """An exact quantity with the format it prints in."""

    amount: Fraction
    format: QuantityFormat = QuantityFormat.DECIMAL_SI

    @classmethod
    def parse(cls, text: str | int | float) -> Quantity:
        """Parse a quantity as the API server accepts it (numbers are taken as decimal).

        Bounded: at most `MAX_QUANTITY_LENGTH` characters, a magnitude of at most
        `MAX_QUANTITY` and, unless zero, at least 1n; anything else raises
        `InvalidQuantityError` after O(len) work, before any large number is built.
        """
        if isinstance(text, bool) or not isinstance(text, int | float | str):
            kind = type(text).__name__
            raise InvalidQuantityError(f"a quantity must be a string or a number, not {kind}")
        if isinstance(text, int):
            return cls(_in_range(Fraction(_bounded_int(text))), QuantityFormat.DECIMAL_SI)
        if isinstance(text, float):
            if not math.isfinite(text):
                raise InvalidQuantityError(f"a quantity must be a finite number, not {text}")
            text = repr(text)  # "1e+300": the same bounds as the string
        return _parse_text(text)

    def is_zero(self) -> bool:
        return self.amount == 0

    def value(self) -> int:
        """The quantity rounded up to an integer (apimachinery's `Quantity.Value()`)."""
        return math.ceil(self.amount)

    def as_float(self) -> float:
        return float(self.amount)

    def __add__(self, other: Quantity) -> Quantity:
        # apimachinery keeps the receiver's format, except that a zero receiver adopts the other's.
        fmt = other.format if self.is_zero() else self.format
        return Quantity(self.amount + other.amount, fmt)

    def times(self, factor: int) -> Quantity:
        return Quantity(self.amount * factor, self.format)

    def __str__(self) -> str:
        return _canonical(self.amount, self.format)


ZERO = Quantity(Fraction(0))


# A reconcile reads every container's requests and limits (desired resources in the status,
# validation): the same few strings ("100m", "256Mi") thousands of times after a restart.
# Quantities are immutable, so the parsed value of a text is shared; errors are not cached (each
# bad text costs its O(len) check again, as before), and the table is bounded.
@functools.lru_cache(maxsize=1024)
def _parse_text(text: str) -> Quantity:
    if len(text) > MAX_QUANTITY_LENGTH:
        raise InvalidQuantityError(
            f"too long: a quantity has at most {MAX_QUANTITY_LENGTH} characters, "
            f"this one has {len(text)}"
        )
    match = _QUANTITY_RE.fullmatch(text.strip())
    if match is None:
        raise InvalidQuantityError(
            "quantities must match the regular expression "
            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        )
    sign, whole, fraction, only_fraction, suffix = match.groups(default="")
    fraction = fraction or only_fraction
    digits = (whole + fraction).lstrip("0")
    if suffix in _BINARY_SUFFIXES:
        # At most 64 digits times 2**60: small numbers, built at once.
        amount = Fraction(int(digits or "0"), 10 ** len(fraction)) * 2 ** _BINARY_SUFFIXES[suffix]
        fmt = QuantityFormat.BINARY_SI
    else:
        if suffix in _DECIMAL_SUFFIXES:
            exponent, fmt = _DECIMAL_SUFFIXES[suffix], QuantityFormat.DECIMAL_SI
        else:  # "e<exponent>": at most 62 digits long, so int() is cheap; its size is checked
            exponent, fmt = int(suffix[1:]), QuantityFormat.DECIMAL_EXPONENT
        amount = _scaled(digits, exponent - len(fraction))
    return Quantity(_in_range(-amount if sign == "-" else amount), fmt)


def _scaled(digits: str, scale: int) -> Fraction:
    """`int(digits) * 10**scale`, refusing (before building it) a magnitude out of range."""
    if not digits:
        return Fraction(0)  # "0e10000000" is zero, whatever the exponent
    # The value lies in [10**(order-1), 10**order): compare orders, never build 10**scale
    # for an exponent nobody could mean.
    order = len(digits) + scale
    if order > _MAX_INTEGER_DIGITS:
        raise _too_large()
    if order < -8:
        raise _too_small()
    return Fraction(int(digits)) * Fraction(10) ** scale


def _bounded_int(number: int) -> int:
    # Checked by bit length: str() of a huge int is itself quadratic (and capped by Python).
    if number.bit_length() > 63:
        raise _too_large()
    return number


def _in_range(amount: Fraction) -> Fraction:
    if abs(amount) > MAX_QUANTITY:
        raise _too_large()
    if amount != 0 and abs(amount) < _SMALLEST_NON_ZERO:
        raise _too_small()
    return amount


def _too_large() -> InvalidQuantityError:
    return InvalidQuantityError(
        f"out of range: a quantity may be at most {MAX_QUANTITY} (2^63-1), "
        "the largest Kubernetes holds"
    )


def _too_small() -> InvalidQuantityError:
    return InvalidQuantityError(
        "out of range: a non-zero quantity must be at least 1n (10^-9), "
        "the smallest Kubernetes holds"
    )


def sum_quantities(quantities: list[Quantity]) -> Quantity:
    """Add quantities left to right; an empty list sums to zero."""
    total = ZERO
    for quantity in quantities:
        total = total + quantity
    return total


@functools.lru_cache(maxsize=1024)
def _canonical(amount: Fraction, fmt: QuantityFormat) -> str:
    # Sub-nano precision is rounded up, as the API server does.
    amount = Fraction(math.ceil(amount * 10**9), 10**9)
    if amount == 0:
        return "0"
    if fmt is QuantityFormat.BINARY_SI and abs(amount) >= 1024 and amount.denominator == 1:
        return _binary(int(amount))
    return _decimal(amount, exponent_form=fmt is QuantityFormat.DECIMAL_EXPONENT)


def _binary(amount: int) -> str:
    suffix = ""
    for name in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"):
        if amount % 1024 != 0:
            break
        amount //= 1024
        suffix = name
    return f"{amount}{suffix}"


def _decimal(amount: Fraction, *, exponent_form: bool) -> str:
    nanos = int(amount * 10**9)  # exact: amount was rounded to nano precision
    exponent = -9
    while exponent < 18 and nanos % 1000 == 0:
        nanos //= 1000
        exponent += 3
    if exponent_form:
        return f"{nanos}e{exponent}" if exponent else str(nanos)
    suffix = next(name for name, exp in _DECIMAL_SUFFIXES.items() if exp == exponent)
    return f"{nanos}{suffix}"


def format_float_like_go(number: float) -> str:
    """Print a float as Go's encoding/json does for the sizes Ray resources take ("4", "0.5")."""
    if number.is_integer() and abs(number) < 1e21:
        return str(int(number))
    with localcontext() as ctx:
        ctx.prec = 17
        return format(Decimal(repr(number)).normalize(), "f")


# --- The string Go writes for a Quantity it read from JSON (KubeRay's hashes) ------------------

GO_MAX_QUANTITY_LENGTH = 1024
"""Longest quantity text `go_json_quantity` takes; every step is O(length) string work."""
_GO_QUANTITY_RE = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)")
_GO_DECIMAL_SUFFIXES = {exponent: name for name, exponent in _DECIMAL_SUFFIXES.items()}
_INT64_DIGITS = 18  # apimachinery's maxInt64Factors
_INT64_MAX = 2**63 - 1
_GO_MAX_INT_BITS = int(GO_MAX_QUANTITY_LENGTH * 3.32)  # fewer than GO_MAX_QUANTITY_LENGTH digits


# Pure and asked for the same few values by every validation of a cluster (its Go hash); typed,
# so that 1, 1.0 and True stay apart. Errors are not cached.
@functools.lru_cache(maxsize=256, typed=True)
def go_json_quantity(value: str | int | float) -> str:
    """What apimachinery's `Quantity.MarshalJSON` writes after `UnmarshalJSON` of `value`.

    Its canonical form ("1000m" → "1", "0.5" → "500m", "1.5Gi" → "1536Mi", "1e3" kept), or the
    text itself when apimachinery's parser keeps it (already canonical, as "100m" or "+1").
    Exact, and bounded: at most `GO_MAX_QUANTITY_LENGTH` characters, O(length) work whatever
    the exponent (digits are moved as strings, "1e10000000" never becomes a number).
    Raises `InvalidQuantityError` where apimachinery's `ParseQuantity` fails.
    """
    text = _go_quantity_text(value)
    if len(text) > GO_MAX_QUANTITY_LENGTH:
        raise InvalidQuantityError(
            f"too long: at most {GO_MAX_QUANTITY_LENGTH} characters, this one has {len(text)}"
        )
    if text == "0":
        return text
    match = _GO_QUANTITY_RE.fullmatch(text) if text else None
    if match is None:
        raise InvalidQuantityError(
            "quantities must match the regular expression "
            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        )
    sign, whole, fraction, suffix = match.groups(default="")
    num = whole.lstrip("0") or "0"
    base, exponent, fmt = _go_suffix(suffix)
    negative = sign == "-"
    fast_path = _go_fast_path(num, fraction, base=base, exponent=exponent)
    if fast_path is _GoFastPath.KEEPS_TEXT:
        return text
    if fast_path is _GoFastPath.NOT_TAKEN and not (whole or fraction):
        # Its slow path parses the text as a decimal again, and "." or "-" is none.
        raise InvalidQuantityError("a quantity needs at least one digit")
    if base == 2:
        return _go_binary_canonical(num + fraction, len(fraction), exponent, negative=negative)
    digits, scale = _go_round_to_nano(num + fraction, exponent - len(fraction))
    return _go_decimal_canonical(digits, scale, fmt, negative=negative)


def _go_quantity_text(value: str | int | float) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        kind = type(value).__name__
        raise InvalidQuantityError(f"a quantity must be a string or a number, not {kind}")
    if isinstance(value, int):
        # Go reads any size ("1e20" stored as 100000000000000000000): bounded like text, checked
        # by bit length before str(), which is quadratic in the number of digits.
        if value.bit_length() > _GO_MAX_INT_BITS:
            raise InvalidQuantityError(f"too long: at most {GO_MAX_QUANTITY_LENGTH} characters")
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidQuantityError(f"a quantity must be a finite number, not {value}")
        return _go_float_text(value)
    return value.strip()


def _go_float_text(number: float) -> str:
    """A float64 as Go's encoding/json (hence the API server's copy of a number) spells it:
    positional between 1e-6 and 1e21, else exponent form ("1e+21", "1.5e-7")."""
    if number == 0:
        return "0"
    shortest = repr(number)  # the same shortest digits as Go's strconv
    if 1e-6 <= abs(number) < 1e21:
        return format(Decimal(shortest).normalize(), "f")
    mantissa, exponent = shortest.split("e")
    if exponent.startswith("-0"):
        exponent = "-" + exponent[2:]
    return f"{mantissa}e{exponent}"


def _go_suffix(suffix: str) -> tuple[int, int, QuantityFormat]:
    """Base, exponent and format of a suffix, as apimachinery's suffixer interprets it."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], QuantityFormat.DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], QuantityFormat.BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        body = suffix[1:]
        if re.fullmatch(r"[+-]?[0-9]+", body) and len(body.lstrip("+-").lstrip("0")) <= 18:
            exponent = int(body)
            if -(2**63) <= exponent < 2**63:
                # Go parses 64 bits and keeps the low 32: int32(parsed).
                wrapped = (exponent + 2**31) % 2**32 - 2**31
                return 10, wrapped, QuantityFormat.DECIMAL_EXPONENT
    raise InvalidQuantityError(f"unknown quantity suffix {suffix!r}")


class _GoFastPath(enum.Enum):
    NOT_TAKEN = "not taken"
    CANONICAL = "taken, value printed in canonical form"
    KEEPS_TEXT = "taken, text kept and written back as it was"


def _go_fast_path(num: str, fraction: str, *, base: int, exponent: int) -> _GoFastPath:
    """What `ParseQuantity`'s int64 fast path does with the text: skipped, or taken, and then
    whether it caches the text so that `MarshalJSON` writes it back unchanged."""
    shifted = num + fraction
    if base == 2:
        if exponent < 0 or fraction:
            return _GoFastPath.NOT_TAKEN
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1
        scale = 0
    else:
        precision = _INT64_DIGITS - len(shifted)
        scale = exponent - len(fraction)
    if precision < 0 or scale < -9:
        return _GoFastPath.NOT_TAKEN
    value = int(shifted)
    if value * (2**exponent if base == 2 else 1) > _INT64_MAX:
        return _GoFastPath.NOT_TAKEN
    if base == 2:
        kept = exponent % 10 == 0 and value & 7 != 0
    else:
        kept = scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
    return _GoFastPath.KEEPS_TEXT if kept else _GoFastPath.CANONICAL


def _go_round_to_nano(digits: str, scale: int) -> tuple[str, int]:
    """`digits * 10**scale` rounded up (away from zero) to a multiple of 10**-9, as digits and a
    scale; digits keep no leading zeros ("0" for zero)."""
    digits = digits.lstrip("0")
    if not digits:
        return "0", 0
    if scale >= -9:
        return digits, scale
    kept = len(digits) + scale + 9  # digits at or above the 10**-9 place
    if kept <= 0:
        return "1", -9
    head, tail = digits[:kept], digits[kept:]
    if tail.strip("0"):
        head = str(int(head) + 1)
    return head, -9


def _go_decimal_canonical(digits: str, scale: int, fmt: QuantityFormat, *, negative: bool) -> str:
    """apimachinery's `AsCanonicalBytes` plus suffix: trailing zeros into the exponent, the
    exponent made a multiple of 3, then the SI suffix (none when it has none) or e<exponent>."""
    if digits == "0":
        return "0"
    stripped = digits.rstrip("0") or "0"
    scale += len(digits) - len(stripped)
    padding = scale % 3
    digits, scale = stripped + "0" * padding, scale - padding
    if fmt is QuantityFormat.DECIMAL_EXPONENT:
        suffix = f"e{scale}" if scale else ""
    else:
        # A DecimalSI exponent with no SI name (from 21 up) prints no suffix at all: Go does so.
        suffix = _GO_DECIMAL_SUFFIXES.get(scale, "")
    return f"{'-' if negative else ''}{digits}{suffix}"


def _go_binary_canonical(digits: str, decimals: int, exponent: int, *, negative: bool) -> str:
    """A BinarySI quantity: rounded up to 1n, capped at 2^63-1, printed with a binary suffix
    when it is a whole number of at least 1024, else in decimal."""
    amount = Fraction(int(digits) * 2**exponent, 10**decimals)
    amount = Fraction(math.ceil(amount * 10**9), 10**9)
    amount = min(amount, Fraction(_INT64_MAX))
    if amount == 0:
        return "0"
    if amount < 1024 or amount.denominator != 1:
        nanos = str(int(amount * 10**9))
        return _go_decimal_canonical(nanos, -9, QuantityFormat.DECIMAL_SI, negative=negative)
    return f"{'-' if negative else ''}{_binary(int(amount))}"
