"""Specification: JSON in a user's string field is refused past a fixed nesting depth, whatever
the interpreter's recursion limit, and read as json reads it otherwise."""

from __future__ import annotations

import sys

import pytest
from ray_operator.bounded_json import MAX_DEPTH, JsonTooDeepError, loads, nesting_depth


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ('{"CPU": 1, "custom": 2.5}', 1),
        ("[[1], {}]", 2),
        ('{"a": "[[[[[[not structure]", "b": ["\\"[[", {"c": []}]}', 4),
        ("7", 0),
        ("", 0),
    ],
)
def test_the_depth_counts_arrays_and_objects_but_not_brackets_inside_strings(
    text: str, depth: int
) -> None:
    assert nesting_depth(text) == depth


def test_a_flat_object_of_amounts_is_read_as_json_reads_it() -> None:
    assert loads('{"CPU": 1, "TPU": 0.5}') == {"CPU": 1, "TPU": 0.5}


def test_nesting_up_to_the_bound_is_read_and_beyond_it_refused() -> None:
    at_the_bound = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert nesting_depth(at_the_bound) == MAX_DEPTH
    loads(at_the_bound)
    with pytest.raises(JsonTooDeepError, match=f"nested deeper than {MAX_DEPTH} levels"):
        loads("[" + at_the_bound + "]")


def test_the_bound_does_not_move_with_the_recursion_limit() -> None:
    deep = "[" * 5000 + "]" * 5000
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # as hypothesis raises it around the tests it runs
    try:
        with pytest.raises(JsonTooDeepError):
            loads(deep)
    finally:
        sys.setrecursionlimit(limit)


def test_a_refusal_is_a_value_error_as_any_text_json_cannot_read() -> None:
    assert issubclass(JsonTooDeepError, ValueError)
    with pytest.raises(ValueError, match="Expecting property name"):
        loads("{")
