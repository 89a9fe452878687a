"""Specification: what a conversion reports never quotes a secret. Its problems and warnings go
to stderr, and for a served legacy cluster into Events, the status and the log; a password given
to `ray start` must not follow them there."""

from __future__ import annotations

import pytest
from ray_operator.legacy.conversion import LegacyConversionError, convert_legacy_cluster

from tests.legacy.legacy_clusters import small_legacy_cluster

SECRET = "hunter2-do-not-show"


def problems_of(head_commands: list[str]) -> str:
    legacy = small_legacy_cluster()
    legacy["spec"]["headStartRayCommands"] = head_commands
    with pytest.raises(LegacyConversionError) as raised:
        convert_legacy_cluster(legacy)
    return str(raised.value)


def test_a_password_given_twice_is_reported_without_either_value() -> None:
    text = problems_of(
        [
            f"ray start --head --redis-password={SECRET}",
            "ray start --head --redis-password=another-secret",
        ]
    )
    assert "--redis-password to <hidden>" in text
    assert SECRET not in text
    assert "another-secret" not in text


def test_a_refused_command_is_quoted_with_its_password_hidden() -> None:
    text = problems_of([f"ray start --head --redis-password {SECRET} | tee /tmp/log"])
    assert "pipes or redirections" in text
    assert "--redis-password <hidden>" in text
    assert SECRET not in text


def test_a_kept_password_reaches_the_cluster_and_no_warning() -> None:
    legacy = small_legacy_cluster()
    legacy["spec"]["headStartRayCommands"] = [f"ray start --head --redis-password={SECRET}"]
    conversion = convert_legacy_cluster(legacy)
    params = conversion.cluster["spec"]["headGroupSpec"]["rayStartParams"]
    assert params["redis-password"] == SECRET
    assert all(SECRET not in str(warning) for warning in conversion.warnings)
