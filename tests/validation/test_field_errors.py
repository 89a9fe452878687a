"""Specification: a field error's message is bounded, whatever the value it shows.

A value reaches a message as JSON. Loaded from YAML with aliases it may share one list a million
times (still within `bounded_yaml`'s bounds for a long text, and far beyond them before), so it is
encoded piece by piece and cut at `MAX_SHOWN_VALUE` characters; a summary lists at most
`MAX_REPORTED_ERRORS` errors of at most `MAX_ERROR_LENGTH` characters each.
"""

from __future__ import annotations

import tracemalloc

from ray_operator.validation.errors import (
    MAX_ERROR_LENGTH,
    MAX_REPORTED_ERRORS,
    MAX_SHOWN_VALUE,
    forbidden,
    invalid,
    summarize,
)


def test_a_value_sharing_one_list_a_million_times_is_shown_in_a_few_hundred_characters() -> None:
    shared = list(range(1000))
    value = {"applications": [shared] * 1_000_000}  # 4 GB of JSON, written out
    tracemalloc.start()
    try:
        message = str(invalid("spec.serveConfigV2.applications", value, "must be a list"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    shown = message.removeprefix("spec.serveConfigV2.applications: Invalid value: ")
    assert shown.startswith('{"applications":[[0,1,2,')
    assert shown.endswith("...: must be a list")
    assert len(shown) == MAX_SHOWN_VALUE + len("...: must be a list")
    assert peak < 1024 * 1024


def test_a_long_string_is_cut_and_short_values_are_shown_whole() -> None:
    assert str(invalid("spec.x", "a" * 10_000, "bad")) == (
        f'spec.x: Invalid value: "{"a" * (MAX_SHOWN_VALUE - 1)}...: bad'
    )
    assert str(invalid("spec.x", {"b": [1, 2], "a": None}, "bad")) == (
        'spec.x: Invalid value: {"a":null,"b":[1,2]}: bad'
    )


def test_keys_json_cannot_sort_are_shown_by_type() -> None:
    assert str(invalid("spec.x", {1: "a", "b": 2}, "bad")) == "spec.x: Invalid value: <dict>: bad"


def test_a_summary_lists_the_first_errors_each_cut_then_counts_the_rest() -> None:
    errors = [forbidden(f"spec.items[{i}]", "x" * 5000) for i in range(MAX_REPORTED_ERRORS + 7)]
    summary = summarize(errors)
    parts = summary.split("; ")
    assert len(parts) == MAX_REPORTED_ERRORS + 1
    assert all(len(part) <= MAX_ERROR_LENGTH + 3 for part in parts)
    assert parts[0].startswith("spec.items[0]: Forbidden: xxx")
    assert parts[-1] == "and 7 more errors"


def test_a_detail_quoting_what_the_user_wrote_is_cut_too() -> None:
    zone = "9" * 100_000  # an "unknown time zone <name>" detail quotes the whole name
    message = str(invalid("spec.timeZone", zone, f"invalid time zone: unknown time zone {zone}"))
    assert len(message) <= len("spec.timeZone: Invalid value: ") + MAX_SHOWN_VALUE + 3 + 2 + (
        MAX_ERROR_LENGTH + 3
    )
    assert message.endswith("9...")
