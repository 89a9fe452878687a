"""Kubernetes quantities print and round the way the API server and KubeRay do."""

from __future__ import annotations

import re

import pytest
from ray_operator.spec.quantity import (
    MAX_QUANTITY_LENGTH,
    InvalidQuantityError,
    Quantity,
    format_float_like_go,
    go_json_quantity,
    sum_quantities,
)

from tests.cpu_time import cpu_time


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", 1),
        ("500m", 1),
        ("2500m", 3),
        ("1Gi", 2**30),
        ("40G", 40 * 10**9),
        ("1e3", 1000),
        ("0.5", 1),
        (3, 3),
    ],
)
def test_value_rounds_up_to_an_integer(text: str, value: int) -> None:
    assert Quantity.parse(text).value() == value


@pytest.mark.parametrize(
    ("parts", "printed"),
    [
        (["500m", "1"], "1500m"),
        (["1Gi", "2Gi"], "3Gi"),
        (["512Mi", "512Mi"], "1Gi"),
        (["1", "1"], "2"),
        (["1000", "1000"], "2k"),
        ([], "0"),
        (["100Mi", "1G"], "1104857600"),
    ],
)
def test_sums_print_in_canonical_form(parts: list[str], printed: str) -> None:
    assert str(sum_quantities([Quantity.parse(p) for p in parts])) == printed


def test_scaling_keeps_the_format() -> None:
    assert str(Quantity.parse("1Gi").times(3)) == "3Gi"


def test_invalid_quantity_is_rejected() -> None:
    with pytest.raises(InvalidQuantityError):
        Quantity.parse("lots")


def test_floats_print_like_go_json() -> None:
    assert format_float_like_go(4.0) == "4"
    assert format_float_like_go(0.5) == "0.5"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("1e10000000", "out of range: a quantity may be at most 9223372036854775807"),
        ("1e-10000000", "out of range: a non-zero quantity must be at least 1n"),
        ("9" * 10_000, "too long: a quantity has at most 64 characters, this one has 10000"),
        ("1" + "0" * 19, "out of range: a quantity may be at most"),
        ("8Ei", "out of range: a quantity may be at most"),
        ("0.1n", "out of range: a non-zero quantity must be at least 1n"),
        ("1e99999999999999999999999999999999999999999999999999", "out of range"),
        (1e300, "out of range: a quantity may be at most"),
        (2**64, "out of range: a quantity may be at most"),
        (float("nan"), "a quantity must be a finite number"),
        ("1e1.5", "quantities must match the regular expression"),
        ("١", "quantities must match the regular expression"),  # an Arabic-Indic digit
    ],
)
def test_extreme_quantities_are_refused_fast_naming_the_problem(
    text: str | float, problem: str
) -> None:
    with cpu_time() as spent, pytest.raises(InvalidQuantityError, match=re.escape(problem)):
        Quantity.parse(text)
    # Before the bounds, "1e10000000" took seconds: it built a ten-million-digit number.
    assert spent.seconds < 0.01


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("9223372036854775807", 2**63 - 1),
        ("7Ei", 7 * 2**60),
        ("0e10000000", 0),
        ("1n", 1),
        ("-2", -2),
        ("1.5e3", 1500),
        (".5Gi", 2**29),
    ],
)
def test_quantities_up_to_the_bounds_kubernetes_holds_are_accepted(text: str, value: int) -> None:
    assert Quantity.parse(text).value() == value


def test_the_longest_quantity_parses_in_well_under_a_millisecond() -> None:
    text = "1." + "0" * (MAX_QUANTITY_LENGTH - 2)
    with cpu_time() as spent:
        assert Quantity.parse(text).value() == 1
    assert spent.seconds < 0.001


def test_a_quantity_text_is_parsed_once_and_a_bad_one_is_refused_every_time() -> None:
    # After a restart every reconcile reads the same few requests and limits ("100m", "256Mi").
    assert Quantity.parse("100m") is Quantity.parse("100m")
    for _ in range(2):
        with pytest.raises(InvalidQuantityError):
            Quantity.parse("1.2.3")


@pytest.mark.parametrize("first", [10**21, 1e21])
def test_go_json_quantities_of_equal_numbers_of_different_types_are_told_apart(
    first: int | float,
) -> None:
    # To a dict 10**21 == 1e21 and 1 == True; Go writes the first two differently and refuses
    # a boolean: the cache must give each value its own answer, whichever was asked first.
    go_json_quantity.cache_clear()
    values = [first, *(value for value in (10**21, 1e21) if type(value) is not type(first))]
    assert [go_json_quantity(value) for value in values] == [
        go_json_quantity.__wrapped__(value) for value in values
    ]
    assert go_json_quantity(1) == "1"
    with pytest.raises(InvalidQuantityError, match="not bool"):
        go_json_quantity(True)
