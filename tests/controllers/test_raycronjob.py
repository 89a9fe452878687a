"""Specification of the RayCronJob controller on the real control plane, with a fake clock: a
scheduled time creates one RayJob (KubeRay's name, labels and owner); Forbid skips while one
runs and starts once it finished; an invalid spec creates nothing and says why.

No RayJob controller runs here: the tests write the RayJobs' status themselves, as the RayJob
controller would.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml
from ray_operator.app import Operator
from ray_operator.controllers.raycronjob import raycronjob_controller
from ray_operator.localcluster.controlplane import LocalControlPlane
from ray_operator.runtime.client import load_api_client

from tests.conftest import REPO_ROOT
from tests.controllers.conftest import Harness, operator_settings
from tests.operator_runs import operator_running

SAMPLE = REPO_ROOT / "samples" / "ray-cronjob.sample.yaml"


class FakeClock:
    """The controller's clock: moved by the test, never by waiting."""

    def __init__(self, now: datetime.datetime) -> None:
        self.now = now

    def __call__(self) -> datetime.datetime:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime.datetime.now(datetime.UTC))


@pytest.fixture
async def cron_operator(
    control_plane: LocalControlPlane, namespace: str, harness: Harness, clock: FakeClock
) -> AsyncIterator[Operator]:
    api = await load_api_client(control_plane.kubeconfig)
    replica = Operator(
        operator_settings(control_plane.kubeconfig, namespace),
        api=api,
        controllers=[raycronjob_controller(clock=clock)],
    )
    async with operator_running(replica, name="raycronjob-operator-under-test", api=api):
        yield replica


def cron_manifest(name: str = "every-five", **spec: Any) -> dict[str, Any]:
    manifest: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    manifest["metadata"]["name"] = name
    manifest["spec"]["schedule"] = "*/5 * * * *"
    manifest["spec"].pop("timeZone", None)
    manifest["spec"].update(spec)
    return manifest


async def created_at(harness: Harness, name: str) -> datetime.datetime:
    found = await harness.get_json(f"raycronjob/{name}")
    stamp = found["metadata"]["creationTimestamp"].replace("Z", "+00:00")
    return datetime.datetime.fromisoformat(stamp)


def next_five_minutes(moment: datetime.datetime) -> datetime.datetime:
    start = moment.replace(second=0, microsecond=0)
    return start + datetime.timedelta(minutes=5 - start.minute % 5)


async def tick(harness: Harness, name: str, clock: FakeClock, to: datetime.datetime) -> None:
    """Move the clock, then make the controller look (as its timer would have)."""
    clock.now = to
    await harness.kubectl("annotate", "--overwrite", f"raycronjob/{name}", f"tick={to.timestamp()}")


async def rayjobs(harness: Harness, cron: str) -> list[dict[str, Any]]:
    listed = await harness.get_json("rayjobs", "-l", f"ray.io/cronjob-name={cron}")
    items: list[dict[str, Any]] = listed["items"]
    return items


async def wait_for_rayjobs(harness: Harness, cron: str, count: int) -> list[dict[str, Any]]:
    async def check() -> list[dict[str, Any]] | None:
        found = await rayjobs(harness, cron)
        return found if len(found) == count else None

    result: list[dict[str, Any]] = await harness.eventually(
        check, what=f"{count} RayJobs of {cron}"
    )
    return result


async def set_deployment_status(harness: Harness, name: str, status: dict[str, Any]) -> None:
    await harness.kubectl(
        "patch", f"rayjob/{name}", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip


async def test_a_scheduled_time_creates_one_rayjob_named_labelled_and_owned_as_kuberays(
    harness: Harness, cron_operator: Operator, clock: FakeClock
) -> None:
    await harness.apply(cron_manifest())
    due = next_five_minutes(await created_at(harness, "every-five"))
    await tick(harness, "every-five", clock, due - datetime.timedelta(seconds=1))
    await asyncio.sleep(1)
    assert await rayjobs(harness, "every-five") == []

    await tick(harness, "every-five", clock, due + datetime.timedelta(seconds=2))
    (job,) = await wait_for_rayjobs(harness, "every-five", 1)
    assert job["metadata"]["name"] == f"every-five-{int(due.timestamp()) // 60}"
    assert job["metadata"]["annotations"]["ray.io/cronjob-scheduled-timestamp"] == (
        due.strftime("%Y-%m-%dT%H:%M:%SZ")
    )
    cron = await harness.get_json("raycronjob/every-five")
    (owner,) = job["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("RayCronJob", cron["metadata"]["uid"])
    assert job["spec"]["entrypoint"] == cron["spec"]["jobTemplate"]["entrypoint"]

    async def status_written() -> dict[str, Any] | None:
        status = (await harness.get_json("raycronjob/every-five")).get("status") or {}
        return status if status.get("lastScheduleTime") else None

    status = await harness.eventually(status_written, what="the status")
    assert status["lastScheduleTime"] == due.strftime("%Y-%m-%dT%H:%M:%SZ")
    upcoming = due + datetime.timedelta(minutes=5)
    assert status["nextScheduleTime"] == upcoming.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert status["active"] == [job["metadata"]["name"]]

    # Looking again at the same moment creates nothing more.
    await tick(harness, "every-five", clock, due + datetime.timedelta(seconds=3))
    await asyncio.sleep(1)
    assert len(await rayjobs(harness, "every-five")) == 1


async def test_forbid_skips_a_time_while_a_rayjob_runs_and_starts_it_once_that_one_ended(
    harness: Harness, cron_operator: Operator, clock: FakeClock
) -> None:
    await harness.apply(cron_manifest(concurrencyPolicy="Forbid"))
    first = next_five_minutes(await created_at(harness, "every-five"))
    await tick(harness, "every-five", clock, first + datetime.timedelta(seconds=1))
    (running,) = await wait_for_rayjobs(harness, "every-five", 1)
    await set_deployment_status(
        harness, running["metadata"]["name"], {"jobDeploymentStatus": "Running"}
    )

    second = first + datetime.timedelta(minutes=5)
    await tick(harness, "every-five", clock, second + datetime.timedelta(seconds=1))

    async def skipped() -> bool:
        events = await harness.get_json("events", "--field-selector", "reason=SkippedRayJob")
        return bool(events["items"])

    await harness.eventually(skipped, what="a SkippedRayJob Event")
    assert len(await rayjobs(harness, "every-five")) == 1

    await set_deployment_status(
        harness,
        running["metadata"]["name"],
        {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"},
    )
    jobs = await wait_for_rayjobs(harness, "every-five", 2)
    names = {job["metadata"]["name"] for job in jobs}
    assert f"every-five-{int(second.timestamp()) // 60}" in names


async def test_an_invalid_schedule_creates_nothing_and_says_why(
    harness: Harness, cron_operator: Operator, clock: FakeClock
) -> None:
    # Admitted here (no webhook on this plane), so the controller must refuse it itself.
    await harness.apply(cron_manifest(name="broken", schedule="61 * * * *"))
    await tick(harness, "broken", clock, clock.now + datetime.timedelta(days=1))

    async def told() -> list[dict[str, Any]] | None:
        events = await harness.get_json(
            "events", "--field-selector", "involvedObject.name=broken,reason=InvalidRayCronJobSpec"
        )
        items: list[dict[str, Any]] = events["items"]
        return items or None

    (event,) = await harness.eventually(told, what="an InvalidRayCronJobSpec Event")
    assert event["type"] == "Warning"
    assert "spec.schedule" in event["message"]
    assert await rayjobs(harness, "broken") == []
