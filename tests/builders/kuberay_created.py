"""The objects KubeRay created for each sample (../shared/fixtures/kuberay-created): a sample's
objects by kind, and the hash annotations KubeRay wrote (what our hashes must equal)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CREATED_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "kuberay-created"
CREATED_FILES = sorted(path.name for path in CREATED_DIR.glob("*.yaml"))

RECREATE_HASH = "ray.io/upgrade-strategy-recreate-hash"
CLUSTER_HASH = "ray.io/hash-without-replicas-and-workers-to-delete"


@dataclass(frozen=True)
class HashExpectation:
    """One hash KubeRay wrote and the spec it hashed."""

    annotated: str
    """Kind/name of the object carrying the annotation."""
    annotation: str
    expected: str
    source: dict[str, Any]
    """The RayCluster (head Pod hash) or the RayService (cluster hash) whose spec was hashed."""


@functools.cache
def created_objects(filename: str) -> tuple[dict[str, Any], ...]:
    """Every object of one fixture file, Lists flattened."""
    objects: list[dict[str, Any]] = []
    for document in yaml.safe_load_all((CREATED_DIR / filename).read_text()):
        if not document:
            continue
        objects.extend(document["items"] if document["kind"].endswith("List") else [document])
    return tuple(objects)


def hash_expectations(filename: str) -> list[HashExpectation]:
    """Each head Pod's recreate hash (from its RayCluster) and each RayService cluster's hash."""
    objects = created_objects(filename)
    clusters = {o["metadata"]["name"]: o for o in objects if o["kind"] == "RayCluster"}
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "RayService"}
    expectations = []
    for obj in objects:
        annotations = obj["metadata"].get("annotations") or {}
        labels = obj["metadata"].get("labels") or {}
        if obj["kind"] == "Pod" and RECREATE_HASH in annotations:
            cluster = clusters[labels["ray.io/cluster"]]
            expectations.append(_expectation(obj, RECREATE_HASH, cluster))
        if obj["kind"] == "RayCluster" and CLUSTER_HASH in annotations:
            service = services[labels["ray.io/originated-from-cr-name"]]
            expectations.append(_expectation(obj, CLUSTER_HASH, service))
    return expectations


def _expectation(obj: dict[str, Any], annotation: str, source: dict[str, Any]) -> HashExpectation:
    return HashExpectation(
        annotated=f"{obj['kind']}/{obj['metadata']['name']}",
        annotation=annotation,
        expected=obj["metadata"]["annotations"][annotation],
        source=source,
    )


@functools.cache
def _documents(file_name: str) -> tuple[dict[str, Any], ...]:
    text = (CREATED_DIR / file_name).read_text()
    return tuple(doc for doc in yaml.safe_load_all(text) if doc)


def created(file_name: str, kind: str) -> list[dict[str, Any]]:
    """The objects of `kind` KubeRay created (or was given) for one sample, fresh copies."""
    return [
        yaml.safe_load(yaml.safe_dump(doc)) for doc in _documents(file_name) if doc["kind"] == kind
    ]


def rayjob_with_uid(file_name: str, owned: dict[str, Any]) -> dict[str, Any]:
    """The sample's RayJob with the uid its objects' ownerReferences name (the fixture drops it)."""
    (rayjob,) = created(file_name, "RayJob")
    rayjob["metadata"]["uid"] = owned["metadata"]["ownerReferences"][0]["uid"]
    return rayjob
