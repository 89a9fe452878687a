"""Specification: `go_json.marshal` writes the bytes Go's encoding/json writes for KubeRay's typed
RayClusterSpec. Every expected value below was obtained once from real Go (go1.26.8, KubeRay
ray-operator v1.7.0 types, k8s.io/api and apimachinery v0.36.0): `json.Unmarshal` of the input
into `rayv1.RayClusterSpec` (or `resource.Quantity`), then `json.Marshal`."""

from __future__ import annotations

import pytest
from ray_operator.spec.go_json import GoDecodeError, marshal
from ray_operator.spec.quantity import InvalidQuantityError, go_json_quantity

# The Pod template every spec writes, even when absent: a struct value is never omitted.
EMPTY_TEMPLATE = '"template":{"metadata":{},"spec":{"containers":null}}'


def test_an_empty_spec_writes_struct_values_and_null_for_nil_fields_without_omitempty() -> None:
    assert (
        marshal({}) == ('{"headGroupSpec":{' + EMPTY_TEMPLATE + ',"rayStartParams":null}}').encode()
    )


def test_present_empty_collections_differ_from_absent_ones_where_omitempty_is_missing() -> None:
    spec = {
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": []}}},
        "workerGroupSpecs": [{"groupName": "g"}],
    }
    assert (
        marshal(spec)
        == (
            '{"headGroupSpec":{"template":{"metadata":{},"spec":{"containers":[]}},'
            '"rayStartParams":{}},"workerGroupSpecs":[{"groupName":"g","minReplicas":null,'
            '"maxReplicas":null,"rayStartParams":null,' + EMPTY_TEMPLATE + ',"scaleStrategy":{}}]}'
        ).encode()
    )


def test_omitempty_keeps_a_pointer_to_false() -> None:
    spec = {
        "enableInTreeAutoscaling": False,
        "suspend": False,
        "headGroupSpec": {"enableIngress": False},
    }
    assert (
        marshal(spec)
        == (
            '{"suspend":false,"enableInTreeAutoscaling":false,"headGroupSpec":{'
            + EMPTY_TEMPLATE
            + ',"enableIngress":false,"rayStartParams":null}}'
        ).encode()
    )


def test_strings_are_escaped_as_go_escapes_them() -> None:
    params = {
        "b": '<a href="x">&</a>\u2028\u2029',
        "a": "tab\there\nnl\r\b\f\x01\x1f\x7f é 日本 😀 \\",
    }
    assert (
        marshal({"headGroupSpec": {"rayStartParams": params}})
        == (
            '{"headGroupSpec":{' + EMPTY_TEMPLATE + ',"rayStartParams":{'
            '"a":"tab\\there\\nnl\\r\\b\\f\\u0001\\u001f\x7f é 日本 😀 \\\\",'
            '"b":"\\u003ca href=\\"x\\"\\u003e\\u0026\\u003c/a\\u003e\\u2028\\u2029"}}}'
        ).encode()
    )


def test_map_keys_are_sorted_by_bytes() -> None:
    spec = {"headServiceAnnotations": {"b": "1", "a": "2", "B": "3", "é": "4", "_": "5"}}
    assert (
        marshal(spec)
        == (
            '{"headServiceAnnotations":{"B":"3","_":"5","a":"2","b":"1","é":"4"},'
            '"headGroupSpec":{' + EMPTY_TEMPLATE + ',"rayStartParams":null}}'
        ).encode()
    )


def test_quantities_are_written_in_canonical_form() -> None:
    resources = {
        "limits": {"memory": "1.5Gi", "cpu": "1000m", "nvidia.com/gpu": 1},
        "requests": {"cpu": "0.5", "memory": "1024Mi", "ephemeral-storage": "1e3"},
    }
    spec = {
        "headGroupSpec": {
            "template": {"spec": {"containers": [{"name": "c", "resources": resources}]}}
        }
    }
    assert marshal(spec) == (
        b'{"headGroupSpec":{"template":{"metadata":{},"spec":{"containers":[{"name":"c",'
        b'"resources":{"limits":{"cpu":"1","memory":"1536Mi","nvidia.com/gpu":"1"},'
        b'"requests":{"cpu":"500m","ephemeral-storage":"1e3","memory":"1Gi"}}}]}},'
        b'"rayStartParams":null}}'
    )


def test_int_or_string_keeps_its_kind() -> None:
    container = {
        "name": "c",
        "readinessProbe": {"httpGet": {"port": 8080, "path": "/"}},
        "livenessProbe": {"tcpSocket": {"port": "http"}},
    }
    spec = {"headGroupSpec": {"template": {"spec": {"containers": [container]}}}}
    assert marshal(spec) == (
        b'{"headGroupSpec":{"template":{"metadata":{},"spec":{"containers":[{"name":"c",'
        b'"resources":{},"livenessProbe":{"tcpSocket":{"port":"http"}},'
        b'"readinessProbe":{"httpGet":{"path":"/","port":8080}}}]}},"rayStartParams":null}}'
    )


def test_unknown_fields_are_dropped() -> None:
    assert marshal({"notAField": 1, "headGroupSpec": {"whatever": {"x": 1}}}) == marshal({})


@pytest.mark.parametrize(
    ("written", "go_writes"),
    [
        ("1", "1"),
        ("+1", "+1"),  # kept as written: apimachinery caches text it finds canonical
        ("1000m", "1"),
        ("0.5", "500m"),
        ("1.5Gi", "1536Mi"),
        ("1024Mi", "1Gi"),
        ("1025Mi", "1025Mi"),
        ("1e2", "100"),
        ("1e3", "1e3"),
        ("0.1n", "1n"),
        ("1e-12", "1e-9"),  # rounded up to 1n, written in the exponent form it came in
        ("1000E", "1"),  # DecimalSI 10^21 has no SI suffix: Go prints none
        ("9223372036854775808", "9223372036854775808"),
        ("16Ei", "9223372036854775807"),  # BinarySI is capped at 2^63-1
        ("1.1Ki", "1126400m"),
        ("0.5Ki", "512"),
        ("-1.5Gi", "-1536Mi"),
        ("0.0", "0"),
        ("  2  ", "2"),
        (0.5, "500m"),
        (1e-07, "100e-9"),  # a JSON number: Go's float text "1e-7", an exponent form
        (1e21, "1e+21"),
        (10**20, "100E"),  # a JSON integer beyond int64, as the API server stores 1e20
        (123 * 10**25, "1230"),  # 1.23e27: DecimalSI 10^27 has no suffix, Go writes none
    ],
)
def test_quantity_canonical_form_is_apimachinerys(written: str | float, go_writes: str) -> None:
    assert go_json_quantity(written) == go_writes


@pytest.mark.parametrize("written", ["abc", "1x", "1e", "1Kii", "", ".Ei", "-.e-20"])
def test_a_quantity_apimachinery_refuses_raises(written: str) -> None:
    with pytest.raises(InvalidQuantityError):
        go_json_quantity(written)


def test_a_malformed_quantity_is_a_decode_error_naming_the_field() -> None:
    spec = {
        "headGroupSpec": {
            "template": {
                "spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": "lots"}}}]}
            }
        }
    }
    with pytest.raises(GoDecodeError) as raised:
        marshal(spec)
    assert raised.value.path == "headGroupSpec.template.spec.containers[0].resources.limits[cpu]"


def test_an_integer_out_of_its_go_range_is_a_decode_error() -> None:
    with pytest.raises(GoDecodeError, match=r"workerGroupSpecs\[0\]\.numOfHosts: out of the int32"):
        marshal({"workerGroupSpecs": [{"groupName": "g", "numOfHosts": 2**31}]})


def test_a_huge_exponent_is_handled_as_text_with_gos_int32_exponent() -> None:
    # Go keeps int32(exponent); digits are moved as strings, never built as a number.
    assert go_json_quantity("1e9999999999") == "10e1410065406"
