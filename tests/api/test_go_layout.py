"""Specification: the saved Go JSON layout (apigen/kubernetes/kuberay_go_layout.json, refreshed by
`python -m ray_operator.apigen --fetch-go-layout`) describes the Go types KubeRay's hashes come
from, and every type in it is one the encoder models."""

from __future__ import annotations

from ray_io import go_layout
from ray_operator.apigen.go_layout import load_layout_document
from ray_operator.spec import go_json


def test_the_layout_comes_from_the_kuberay_release_and_kubernetes_api_it_pins() -> None:
    modules = load_layout_document()["modules"]
    assert modules["github.com/ray-project/kuberay/ray-operator"] == "v1.7.0"
    assert modules["k8s.io/api"] == "v0.36.0"
    assert modules["k8s.io/apimachinery"] == "v0.36.0"


def test_every_struct_of_the_layout_has_an_encoder() -> None:
    # Building refuses unknown types, unmodelled options and recursive types.
    for name in go_layout.STRUCTS:
        assert go_json.marshal({}, name).startswith(b"{")


def test_embedded_go_structs_are_flattened_into_their_parent() -> None:
    # Volume embeds VolumeSource, Probe embeds ProbeHandler: their fields are the parent's.
    volume = [field for field, _, _ in go_layout.STRUCTS["Volume"]]
    assert volume[:3] == ["name", "hostPath", "emptyDir"]
    assert "VolumeSource" not in go_layout.STRUCTS
    probe = [field for field, _, _ in go_layout.STRUCTS["Probe"]]
    assert probe[:4] == ["exec", "httpGet", "tcpSocket", "grpc"]
