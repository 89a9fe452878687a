"""The origin lists of token Secrets and `--serve-graph-allowed-hosts` (`spec.fetch_origins`):
one entry, one origin; without a scheme, https only."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray_operator.spec.fetch_origins import (
    entry_for,
    malformed_entries,
    origin_listed,
    parse_origin_entry,
)


@pytest.mark.parametrize(
    ("entry", "origin"),
    [
        ("registry.example.com", ("https", "registry.example.com", 443)),
        ("registry.example.com:8443", ("https", "registry.example.com", 8443)),
        ("https://registry.example.com", ("https", "registry.example.com", 443)),
        ("HTTPS://Registry.Example.COM.:443/", ("https", "registry.example.com", 443)),
        ("http://registry.example.com", ("http", "registry.example.com", 80)),
        ("http://127.0.0.1:8765", ("http", "127.0.0.1", 8765)),
        ("  127.0.0.1:8765 ", ("https", "127.0.0.1", 8765)),
        ("[fd00:0::1]:8443", ("https", "fd00::1", 8443)),
        ("fd00::1", ("https", "fd00::1", 443)),
        ("http://[::1]", ("http", "::1", 80)),
    ],
)
def test_an_entry_names_one_origin_https_unless_it_says_http(
    entry: str, origin: tuple[str, str, int]
) -> None:
    assert parse_origin_entry(entry) == origin


@pytest.mark.parametrize(
    "entry",
    [
        "",
        "ftp://registry.example.com",
        "registry.example.com/graphs",
        "https://registry.example.com/graphs/g.pb",
        "user@registry.example.com",
        "registry.example.com:",
        "registry.example.com:0",
        "registry.example.com:65536",
        "registry.example.com:１２３",  # full-width digits
        "registry.example.com:https",
        "[registry.example.com]:443",
        "[fd00::1",
        "[fd00::1]x",
        "https://",
        ":8443",
        "registry example.com",
    ],
)
def test_a_malformed_entry_names_no_origin(entry: str) -> None:
    assert parse_origin_entry(entry) is None
    assert malformed_entries([entry, "registry.example.com"]) == [entry]


def test_a_schemeless_entry_never_allows_clear_text() -> None:
    entries = ["registry.example.com", "ci.example.com:8080"]

    assert origin_listed(entries, ("https", "registry.example.com", 443))
    assert not origin_listed(entries, ("http", "registry.example.com", 80))
    assert not origin_listed(entries, ("http", "registry.example.com", 443))
    assert origin_listed(entries, ("https", "ci.example.com", 8080))
    assert not origin_listed(entries, ("http", "ci.example.com", 8080))


def test_clear_text_needs_an_entry_spelled_with_http() -> None:
    entries = ["http://ci.example.com:8080"]

    assert origin_listed(entries, ("http", "ci.example.com", 8080))
    assert not origin_listed(entries, ("https", "ci.example.com", 8080))


@pytest.mark.parametrize(
    "origin",
    [
        ("https", "registry.example.com", 443),
        ("https", "registry.example.com", 8443),
        ("http", "127.0.0.1", 8765),
        ("https", "fd00::1", 443),
        ("http", "::1", 80),
    ],
)
def test_the_entry_a_message_suggests_lists_exactly_that_origin(
    origin: tuple[str, str, int],
) -> None:
    assert parse_origin_entry(entry_for(origin)) == origin


@given(st.text(max_size=64))
def test_any_text_is_an_origin_or_nothing_and_never_raises(entry: str) -> None:
    origin = parse_origin_entry(entry)

    if origin is not None:
        scheme, _, port = origin
        assert scheme in ("https", "http")
        assert 0 < port < 65536
        if "://" not in entry:
            assert scheme == "https"
