"""SidecarMode's submitter container, played by the test: KWOK runs no container, so the test runs
the submitter's own command against the real Ray head and writes its termination into the head Pod's
status as the kubelet would."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import sys
from pathlib import Path
from typing import Any

from tests.controllers.conftest import Harness
from tests.ray_head import RayHead

SUBMITTER = "ray-job-submitter"


# What the controller's own requeue period is (3s): a few of them, for "nothing happens".
QUIET_SECONDS = 8


def now_text() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def head_pod(harness: Harness, cluster: str) -> dict[str, Any]:
    (pod,) = [
        p
        for p in await harness.pods(cluster)
        if p["metadata"]["labels"]["ray.io/node-type"] == "head"
    ]
    return pod


async def submitter_exits(harness: Harness, pod: dict[str, Any], *, code: int) -> None:
    """Write what the kubelet writes when the submitter container ends with `code`."""
    now = now_text()
    statuses = []
    for container in pod["status"]["containerStatuses"]:
        if container["name"] == SUBMITTER:
            container = {
                **container,
                "ready": False,
                "started": False,
                "state": {
                    "terminated": {
                        "exitCode": code,
                        "reason": "Completed" if code == 0 else "Error",
                        "startedAt": now,
                        "finishedAt": now,
                    }
                },
            }
        statuses.append(container)
    patch = json.dumps({"status": {"containerStatuses": statuses}})
    await harness.kubectl(
        "patch",
        "pod",
        pod["metadata"]["name"],
        "--subresource=status",
        "--type=merge",
        "-p",
        patch,
    )


async def run_sidecar_command(
    pod: dict[str, Any], ray_head: RayHead, *, exit_code: int = 0
) -> bytes:
    """The submitter container's own command, run here against the real head; it must end
    with `exit_code` (`ray job submit` follows the job: 0 when it succeeded, 1 when it failed)."""
    (container,) = [c for c in pod["spec"]["containers"] if c["name"] == SUBMITTER]
    assert container["command"] == ["/bin/bash", "-ce", "--"]
    script = container["args"][0]
    for local in ("http://127.0.0.1:8265", "http://localhost:8265"):
        assert local in script
        script = script.replace(local, ray_head.dashboard_url)
    env = {e["name"]: e.get("value", "") for e in container["env"] if "valueFrom" not in e}
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-ce",
        script,
        env={
            **env,
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": os.environ.get("HOME", "/tmp"),
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": ray_head.token,
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == exit_code, output.decode()[-2000:]
    return output
