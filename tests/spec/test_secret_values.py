"""Specification: one reader of Secret values and of the `serve-graphs` opt-in list, for the
serve-graph token path, the event endpoint's refresh path, the Ray auth token and the webhook's
certificate Secret alike; its messages name the Secret and the key, never a value."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from ray_operator.spec.secret_values import (
    MissingSecretKeyError,
    SecretValueError,
    graphs_opted_in,
    secret_text,
    secret_value,
    secret_values,
)
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
    with pytest.raises(MissingSecretKeyError) as refused:
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


def test_a_reader_that_is_not_strict_skips_characters_outside_base64s_alphabet() -> None:
    # The Ray auth token and the certificate Secret were always read so.
    spaced = "czNj cmV0\n"
    with pytest.raises(SecretValueError):
        secret_value(secret({"token": spaced}), "token")
    assert secret_value(secret({"token": spaced}), "token", strict=False) == b"s3cret"


def test_a_text_value_is_utf8_without_surrounding_whitespace() -> None:
    encoded = base64.b64encode(" tok\u00e9n\n".encode()).decode()
    assert secret_text(secret({"token": encoded}), "token") == "tok\u00e9n"


def test_a_text_value_that_is_not_utf8_is_refused_without_showing_a_byte_of_it() -> None:
    encoded = base64.b64encode(b"\xfftoken").decode()
    with pytest.raises(SecretValueError) as refused:
        secret_text(secret({"token": encoded}), "token", named_by="spec.authOptions")
    assert str(refused.value) == "key 'token' of Secret creds (spec.authOptions) is not UTF-8 text"
    assert refused.value.__suppress_context__  # no UnicodeDecodeError quoting the byte


def test_every_value_is_decoded_an_empty_one_as_empty_bytes() -> None:
    data = {"tls.crt": base64.b64encode(b"cert").decode(), "ca.key": ""}
    assert secret_values(secret(data)) == {"tls.crt": b"cert", "ca.key": b""}
    assert secret_values({"metadata": {"name": "creds"}}) == {}


def test_one_value_that_is_not_base64_refuses_them_all_naming_its_key() -> None:
    data = {"tls.crt": base64.b64encode(b"cert").decode(), "tls.key": "hunter2!"}
    with pytest.raises(SecretValueError) as refused:
        secret_values(secret(data))
    assert str(refused.value) == "key 'tls.key' of Secret creds is not valid base64"
