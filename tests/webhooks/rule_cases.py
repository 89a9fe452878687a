"""Admission rule cases as a user meets them: a valid sample with one thing broken (`put` a value at
a field path), and the messages the webhook must answer with; field paths of the samples' parts."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.webhooks.conftest import load_sample

Manifest = dict[str, Any]
_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def put(path: str, value: Any) -> Callable[[Manifest], None]:
    """A change that sets `path` (`spec.a[0].b`) to `value`; None deletes the field."""

    def change(manifest: Manifest) -> None:
        steps = [int(index) if index else key for key, index in _STEP.findall(path)]
        node: Any = manifest
        for step in steps[:-1]:
            node = node[step]
        if value is None:
            node.pop(steps[-1], None)
        else:
            node[steps[-1]] = copy.deepcopy(value)

    return change


@dataclass(frozen=True)
class Case:
    id: str
    sample: str
    changes: tuple[Callable[[Manifest], None], ...]
    messages: tuple[str, ...]

    def manifest(self) -> Manifest:
        kind = "RayService" if "service" in self.sample else None
        manifest = copy.deepcopy(load_sample(self.sample, kind))
        for change in self.changes:
            change(manifest)
        return manifest


def annotate(annotations: dict[str, str]) -> Callable[[Manifest], None]:
    """A change that adds `annotations` to the manifest's metadata."""

    def change(manifest: Manifest) -> None:
        manifest["metadata"].setdefault("annotations", {}).update(annotations)

    return change


def case(
    id: str, sample: str, *changes: Callable[[Manifest], None], expect: str | tuple[str, ...]
) -> Any:
    messages = (expect,) if isinstance(expect, str) else expect
    return pytest.param(Case(id, sample, changes, messages), id=id)


CLUSTER = "ray-cluster.mini.yaml"
JOB = "ray-job.sample.yaml"
SERVICE = "ray-service.sample.yaml"
WORKER = "spec.workerGroupSpecs[0]"
HEAD = "spec.headGroupSpec"
JOB_CLUSTER = "spec.rayClusterSpec"
SERVICE_CLUSTER = "spec.rayClusterConfig"
HEAD_CONTAINER = f"{HEAD}.template.spec.containers[0]"
WORKER_CONTAINER = f"{WORKER}.template.spec.containers[0]"
HEAD_ENV = f"{HEAD_CONTAINER}.env"
