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
_QUANTITY_RE = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)


@dataclasses.dataclass(frozen=True)
class Quantity:
    """An exact quantity with the format it prints in."""

    amount: Fraction
    format: QuantityFormat = QuantityFormat.DECIMAL_SI

    @classmethod
    def parse(cls, text: str | int | float) -> Quantity:
        """Parse a quantity as the API server accepts it (numbers are taken as decimal)."""
        if isinstance(text, int | float):
            return cls(Fraction(str(text)), QuantityFormat.DECIMAL_SI)
        match = _QUANTITY_RE.match(text.strip())
        if match is None:
            raise InvalidQuantityError(f"quantities must match the regular expression: {text!r}")
        number, suffix = Fraction(match.group(1)), match.group(2) or ""
        if suffix in _BINARY_SUFFIXES:
            return cls(number * 2 ** _BINARY_SUFFIXES[suffix], QuantityFormat.BINARY_SI)
        if suffix in _DECIMAL_SUFFIXES:
            return cls(
                number * Fraction(10) ** _DECIMAL_SUFFIXES[suffix], QuantityFormat.DECIMAL_SI
            )
        exponent = int(suffix[1:])
        return cls(number * Fraction(10) ** exponent, QuantityFormat.DECIMAL_EXPONENT)

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


def sum_quantities(quantities: list[Quantity]) -> Quantity:
    """Add quantities left to right; an empty list sums to zero."""
    total = ZERO
    for quantity in quantities:
        total = total + quantity
    return total


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
