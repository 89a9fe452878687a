"""Valid manifests pass the webhooks unchanged, except for the documented defaults.

Every Ray object of samples/ and of KubeRay's published samples is created (server-side dry run:
admission runs in full, nothing is stored) once in an intercepted namespace and once in a plain
one; the two results differ exactly by what `ray_operator.defaults` adds (the table in
docs/webhooks.md).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import yaml
from ray_operator.defaults import default_object
from ray_operator.webhooks.jsonpatch import json_patch

from tests.conftest import KUBERAY_FIXTURES, SAMPLES, Kubectl

# Paths the webhook may add (docs/webhooks.md's table); anything else is a bug.
DOCUMENTED_DEFAULTS = {
    "RayCluster": set(),
    "RayJob": set(),
    "RayService": {
        "/spec/rayClusterDeletionDelaySeconds",
        "/spec/upgradeStrategy/type",
        "/spec/upgradeStrategy",
    },
    "RayServeGraph": set(),
    "RayCronJob": set(),
}


def _ray_objects() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(SAMPLES.glob("*.yaml")) + sorted(KUBERAY_FIXTURES.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and str(document.get("kind", "")).startswith("Ray"):
                found.append((f"{path.parent.name}/{path.name}", document))
    return found


SAMPLE_OBJECTS = _ray_objects()


def _dry_run_create(kubectl: Kubectl, namespace: str) -> list[dict[str, Any]]:
    text = yaml.safe_dump_all([document for _, document in SAMPLE_OBJECTS])
    result = kubectl.run(
        "create", "--dry-run=server", "-n", namespace, "-o", "json", "-f", "-", input_text=text
    )
    assert result.returncode == 0, result.stderr
    items = _json_documents(result.stdout)
    assert len(items) == len(SAMPLE_OBJECTS)
    return [_comparable(item) for item in items]


def _json_documents(text: str) -> list[dict[str, Any]]:
    """kubectl prints one JSON document per object, one after the other."""
    decoder, documents, position = json.JSONDecoder(), [], 0
    while position < len(text.rstrip()):
        document, end = decoder.raw_decode(text, position)
        documents.append(document)
        position = end + len(text[end:]) - len(text[end:].lstrip())
    return documents


def _comparable(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj["metadata"]
    for volatile in ("uid", "creationTimestamp", "namespace", "managedFields", "generation"):
        metadata.pop(volatile, None)
    return obj


@pytest.fixture(scope="module")
def plain_results(kubectl_session: Kubectl) -> list[dict[str, Any]]:
    namespace = f"webhook-plain-{uuid.uuid4().hex[:6]}"
    kubectl_session("create", "namespace", namespace)
    return _dry_run_create(kubectl_session, namespace)


@pytest.fixture(scope="module")
def admitted_results(
    kubectl_session: Kubectl, shared_webhook_namespace: str
) -> list[dict[str, Any]]:
    return _dry_run_create(kubectl_session, shared_webhook_namespace)


def test_there_are_samples_of_every_kind() -> None:
    kinds = {document["kind"] for _, document in SAMPLE_OBJECTS}
    assert kinds == {"RayCluster", "RayJob", "RayService", "RayCronJob", "RayServeGraph"}
    assert len(SAMPLE_OBJECTS) >= 30


@pytest.mark.parametrize(
    "index", range(len(SAMPLE_OBJECTS)), ids=[name for name, _ in SAMPLE_OBJECTS]
)
def test_sample_is_admitted_with_only_documented_defaults(
    plain_results: list[dict[str, Any]], admitted_results: list[dict[str, Any]], index: int
) -> None:
    plain, admitted = plain_results[index], admitted_results[index]
    assert admitted == default_object(plain)
    changed = {operation["path"] for operation in json_patch(plain, admitted)}
    assert changed <= DOCUMENTED_DEFAULTS[plain["kind"]]
