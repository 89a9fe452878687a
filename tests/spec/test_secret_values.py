"""Specification: one reader of Secret values and of the `serve-graphs` opt-in list, for the
serve-graph token path and the event endpoint's refresh path alike; its messages name the
Secret and the key, never a value."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from ray_operator.spec.secret_values import SecretValueError, graphs_opted_in, secret_value
from ray_operator.spec.serve_graph_names import SECRET_GRAPHS_ANNOTATION


def secret(data: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata = {"name": "creds", "annotations": annotations or {}}
    return {"metadata": metadata, "data": data}


def test_a_value_is_the_base64_decoding_of_its_key() -> None:
    encoded = base64.b64encode(b"s3cret\n").decode()
    assert secret_value(secret({"token": encoded}), "token") == b"s3cret\n"


@pytest.mark.parametrize("data", [{}, {"token": ""}], ids=["absent", "empty"])
def test_a_missing_or_empty_key_is_refused_naming_the_secret_the_key_and_the_field(
    data: dict[str, str],
) -> None:
    with pytest.raises(SecretValueError) as refused:
        secret_value(secret(data), "token", named_by="spec.source.tokenSecretRef")
    assert str(refused.value) == "Secret creds (spec.source.tokenSecretRef) has no key 'token'"


def test_a_value_that_is_not_strict_base64_is_refused_without_showing_it() -> None:
    with pytest.raises(SecretValueError) as refused:
        secret_value(secret({"token": "hunter2!"}), "token")
    assert str(refused.value) == "key 'token' of Secret creds is not valid base64"
    assert "hunter2" not in str(refused.value)


def test_the_serve_graphs_list_is_comma_separated_with_blanks_dropped() -> None:
    listed = secret({}, {SECRET_GRAPHS_ANNOTATION: " pipeline, ,other "})
    assert graphs_opted_in(listed) == ["pipeline", "other"]


def test_a_secret_without_the_serve_graphs_annotation_lists_nothing() -> None:
    assert graphs_opted_in(secret({})) is None
