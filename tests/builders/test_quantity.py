"""Kubernetes quantities print and round the way the API server and KubeRay do."""

from __future__ import annotations

import pytest
from ray_operator.builders.quantity import (
    InvalidQuantityError,
    Quantity,
    format_float_like_go,
    sum_quantities,
)


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
