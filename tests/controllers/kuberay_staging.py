"""Staging "KubeRay ran here" on the real API server for the takeover tests: objects labelled as
KubeRay labels what it creates, created in the test's namespace, their uids remembered so a test
can prove our operator created or replaced none of them.

`KubeRayStaging` is the shared part; `KubeRayService` (kuberay_rayservice.py) and the RayJob
takeover test's `KubeRayRun` say what KubeRay leaves for their kind.
"""

from __future__ import annotations

import datetime
from typing import Any

from ray_operator.spec.kinds import POD, RAY_CLUSTER, SERVICE, Kind

from tests.controllers.conftest import Harness

KUBERAY = "kuberay-operator"
CREATED_BY = "app.kubernetes.io/created-by"


def now_text(*, minus_seconds: int = 0) -> str:
    """A timestamp as KubeRay writes it in a status, `minus_seconds` ago."""
    moment = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=minus_seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def by_kuberay(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` labelled as KubeRay labels what it creates (its Pod template too, for a Job)."""
    obj["metadata"].setdefault("labels", {})[CREATED_BY] = KUBERAY
    template = (obj.get("spec") or {}).get("template")
    if obj["kind"] == "Job" and template is not None:
        template["metadata"]["labels"][CREATED_BY] = KUBERAY
    return obj


class KubeRayStaging:
    """Objects staged on the API server as KubeRay left them; remembers their uids by kind."""

    watched: tuple[Kind, ...] = (RAY_CLUSTER, POD, SERVICE)
    """The kinds `assert_nothing_created_or_replaced` compares with what was staged."""

    def __init__(self, harness: Harness, name: str) -> None:
        self.harness = harness
        self.name = name
        self.staged: dict[str, set[str]] = {}
        self.status: dict[str, Any] = {}

    @property
    def namespace(self) -> str:
        return self.harness.namespace

    async def create(self, kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"]["namespace"] = self.namespace
        created = dict(await self.harness.client.create(kind, obj, namespace=self.namespace))
        self.staged.setdefault(kind.kind, set()).add(created["metadata"]["uid"])
        return created

    async def uids(self, kind: Kind) -> set[str]:
        """The uids of every `kind` object in the namespace now."""
        listed = await self.harness.client.list(kind, namespace=self.namespace)
        return {item["metadata"]["uid"] for item in listed.items}

    async def assert_nothing_created_or_replaced(self) -> None:
        for kind in self.watched:
            assert await self.uids(kind) == self.staged.get(kind.kind, set()), kind
        pods_ever = set(self.harness.created_pods)
        assert pods_ever == self.staged["Pod"], "a Pod was created after the staging"
