"""EventRecorder against the real API server: retries and floods end as a few counted Events."""

from __future__ import annotations

from typing import Any

from ray_operator.metrics import Metrics
from ray_operator.runtime import KubeClient
from ray_operator.runtime.events import COMBINED_PREFIX, EventRecorder
from ray_operator.spec.kinds import EVENT


def involved(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "c", "namespace": namespace, "uid": "uid-c"},
    }


async def events_in(client: KubeClient, namespace: str) -> list[dict[str, Any]]:
    return (await client.list(EVENT, namespace=namespace)).items


async def test_the_same_message_again_bumps_the_count_of_one_event(
    client: KubeClient, namespace: str
) -> None:
    recorder = EventRecorder(client, metrics=Metrics(), instance="test")
    for _ in range(5):
        await recorder.record(involved(namespace), reason="Retry", message="same", type="Warning")
    [event] = await events_in(client, namespace)
    assert (event["reason"], event["message"], event["count"]) == ("Retry", "same", 5)


async def test_messages_that_differ_by_a_name_end_in_one_combined_event(
    client: KubeClient, namespace: str
) -> None:
    recorder = EventRecorder(client, metrics=Metrics(), instance="test", similar_limit=3)
    for number in range(40):
        await recorder.record(
            involved(namespace), reason="FailedThing", message=f"pod-{number} failed"
        )
    await recorder.record(involved(namespace), reason="Other", message="unrelated")
    events = await events_in(client, namespace)
    failed = [e for e in events if e["reason"] == "FailedThing"]
    assert len(failed) == 3 + 1
    [combined] = [e for e in failed if e["message"].startswith(COMBINED_PREFIX)]
    assert combined["count"] == 40 - 3
    assert combined["message"] == COMBINED_PREFIX + "pod-39 failed"
    assert [e["message"] for e in events if e["reason"] == "Other"] == ["unrelated"]
