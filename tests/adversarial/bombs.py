"""Billion-laughs YAML for the fields a user writes YAML into (a RayJob's runtime env, a
RayService's Serve config), the objects that carry it, and a create sent straight to the API server
(kubectl would add its own start-up) that times the answer."""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
from typing import Any

from tests.robustness.manifests import as_text, ray_cluster

LEVELS = 9


def laughs(levels: int = LEVELS) -> list[str]:
    """The anchors of a billion laughs: level i is ten aliases of level i - 1."""
    lines = ['l0: &l0 ["lol"]']
    for level in range(1, levels + 1):
        lines.append(f"l{level}: &l{level} [" + ",".join([f"*l{level - 1}"] * 10) + "]")
    return lines


RUNTIME_ENV_BOMB = "\n".join(laughs()) + "\n"
"""A mapping, as a runtime env must be: its ten keys hold 10^0 ... 10^9 strings."""
SERVE_CONFIG_BOMB = (
    "laughs:\n"
    + "".join(f"  {line}\n" for line in laughs())
    + "applications:\n"
    + "  - name: app\n"
    + "    import_path: app:graph\n"
    + "    deployments:\n"
    + f"      - name: D\n        user_config: *l{LEVELS}\n"
)
"""A Serve config admission once found fine: Serve ignores the extra top-level key."""


def rayjob(name: str, runtime_env: str) -> dict[str, Any]:
    """A RayJob that submits from a sidecar of its head Pod (built with its cluster, so the
    runtime env was expanded at once)."""
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name},
        "spec": {
            "submissionMode": "SidecarMode",
            "entrypoint": "python -c 'print(1)'",
            "runtimeEnvYAML": runtime_env,
            "rayClusterSpec": ray_cluster(name)["spec"],
        },
    }


def rayservice(name: str, serve_config: str) -> dict[str, Any]:
    cluster = ray_cluster(name)["spec"]
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["ports"] = [{"name": "serve", "containerPort": 8000}]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {"name": name},
        "spec": {"serveConfigV2": serve_config, "rayClusterConfig": cluster},
    }


def create(
    connection: http.client.HTTPSConnection, path: str, manifest: dict[str, Any], *, dry_run: bool
) -> tuple[int, dict[str, Any], float]:
    """POST `manifest` on a kept-alive connection: (HTTP status, decoded body, seconds)."""
    query = "?" + urllib.parse.urlencode({"dryRun": "All"}) if dry_run else ""
    started = time.monotonic()
    connection.request(
        "POST", path + query, body=as_text(manifest), headers={"Content-Type": "application/json"}
    )
    response = connection.getresponse()
    body = response.read()
    took = time.monotonic() - started
    return response.status, json.loads(body), took
