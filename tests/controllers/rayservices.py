"""A RayService manifest for the controller tests (the greeter app of tests/serve_apps on the run's
one real Ray head), and what they read and wait for: its status and conditions, Ready, the app's
answer."""

from __future__ import annotations

import contextlib
from typing import Any

import aiohttp
import yaml

from tests.controllers.conftest import Harness, eventually
from tests.controllers.ray_fixtures import head_only_cluster_spec
from tests.ray_head import RayHead


def serve_config(head: RayHead, *, greeting: str = "Hello", color: str = "blue") -> str:
    return yaml.safe_dump(
        {
            "http_options": {"host": "127.0.0.1", "port": head.serve_port},
            "applications": [
                {
                    "name": "greeter",
                    "import_path": "greeter:app",
                    "route_prefix": "/",
                    "deployments": [
                        {"name": "Greeter", "user_config": {"greeting": greeting, "color": color}}
                    ],
                }
            ],
        }
    )


def rayservice(head: RayHead, name: str = "greeter", **config: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": name},
        "spec": {
            "serveConfigV2": serve_config(head, **config),
            "rayClusterDeletionDelaySeconds": 1,
            "rayClusterConfig": head_only_cluster_spec(serve=True),
        },
    }


async def status_of(harness: Harness, name: str) -> dict[str, Any]:
    return dict((await harness.get_json(f"rayservice/{name}")).get("status") or {})


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


async def wait_ready(harness: Harness, name: str, *, within: float = 120) -> dict[str, Any]:
    async def ready() -> dict[str, Any] | None:
        status = await status_of(harness, name)
        return status if condition(status, "Ready").get("status") == "True" else None

    result: dict[str, Any] = await eventually(ready, within=within, what=f"{name} Ready")
    return result


async def answer(head: RayHead) -> str:
    async with (
        aiohttp.ClientSession() as http,
        http.get(head.serve_url + "/", timeout=aiohttp.ClientTimeout(total=5)) as response,
    ):
        response.raise_for_status()
        return await response.text()


async def wait_for_answer(head: RayHead, expected: str, *, within: float = 60) -> None:
    async def check() -> bool:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            return await answer(head) == expected
        return False

    await eventually(check, within=within, what=f"the app answering {expected!r}")


async def owned_names(harness: Harness, name: str) -> dict[str, list[str]]:
    """The RayClusters and Services the RayService `name` owns (a cluster's own head Service
    belongs to the cluster)."""
    found: dict[str, list[str]] = {}
    for kind in ("rayclusters", "services"):
        items = (await harness.get_json(kind))["items"]
        found[kind] = sorted(
            i["metadata"]["name"]
            for i in items
            if any(
                ref.get("kind") == "RayService" and ref.get("name") == name
                for ref in i["metadata"].get("ownerReferences") or ()
            )
        )
    return found


async def wait_condition(
    harness: Harness, name: str, kind: str, status: str, *, within: float = 60
) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        current = await status_of(harness, name)
        return current if condition(current, kind).get("status") == status else None

    result: dict[str, Any] = await harness.eventually(
        reached, within=within, what=f"{name} {kind}={status}"
    )
    return result
