"""EventRecorder against the real API server: retries and floods end as a few counted Events,
written in the background so that no caller waits for them, in bounded memory."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client as kube_client
from ray_operator.metrics import Metrics
from ray_operator.runtime import KubeClient
from ray_operator.runtime.errors import NotLeader
from ray_operator.runtime.events import COMBINED_PREFIX, QUIET_SECONDS, EventRecorder
from ray_operator.spec.kinds import EVENT

from tests.silent_server import silent_server


def involved(namespace: str, name: str = "c") -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
    }


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    return sum(
        s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == name and labels.items() <= s.labels.items()
    )


async def events_in(client: KubeClient, namespace: str) -> list[dict[str, Any]]:
    return (await client.list(EVENT, namespace=namespace)).items


@pytest.fixture
async def unanswering_client() -> AsyncIterator[KubeClient]:
    """A client of a loopback "API server" that takes connections and never answers."""
    async with silent_server() as url:
        configuration = kube_client.Configuration(host=url)
        async with kube_client.ApiClient(configuration) as api:
            yield KubeClient(api, metrics=Metrics(), request_timeout=30)


async def test_the_same_message_again_bumps_the_count_of_one_event(
    client: KubeClient, namespace: str
) -> None:
    recorder = EventRecorder(client, metrics=Metrics(), instance="test")
    for _ in range(3):
        recorder.record(involved(namespace), reason="Retry", message="same", type="Warning")
        assert await recorder.flush(within=30)
    [event] = await events_in(client, namespace)
    assert (event["reason"], event["message"], event["count"]) == ("Retry", "same", 3)


async def test_records_of_an_event_still_queued_are_one_write_with_their_count(
    client: KubeClient, metrics: Metrics, namespace: str
) -> None:
    recorder = EventRecorder(client, metrics=metrics, instance="test")
    for _ in range(5):
        recorder.record(involved(namespace), reason="Retry", message="same", type="Warning")
    assert await recorder.flush(within=30)
    [event] = await events_in(client, namespace)
    assert (event["reason"], event["count"]) == ("Retry", 5)
    assert sample(metrics, "ray_operator_api_requests_total", verb="create") == 1
    assert sample(metrics, "ray_operator_api_requests_total", verb="patch") == 0


async def test_messages_that_differ_by_a_name_end_in_one_combined_event(
    client: KubeClient, namespace: str
) -> None:
    recorder = EventRecorder(client, metrics=Metrics(), instance="test", similar_limit=3)
    for number in range(40):
        recorder.record(involved(namespace), reason="FailedThing", message=f"pod-{number} failed")
    recorder.record(involved(namespace), reason="Other", message="unrelated")
    assert await recorder.flush(within=60)
    events = await events_in(client, namespace)
    failed = [e for e in events if e["reason"] == "FailedThing"]
    assert len(failed) == 3 + 1
    [combined] = [e for e in failed if e["message"].startswith(COMBINED_PREFIX)]
    assert combined["count"] == 40 - 3
    assert combined["message"] == COMBINED_PREFIX + "pod-39 failed"
    assert [e["message"] for e in events if e["reason"] == "Other"] == ["unrelated"]


async def test_recording_returns_while_the_api_server_does_not_answer(
    unanswering_client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    """What a reconcile sees of an API server that hangs on Events: nothing. `record` is not a
    coroutine; the writer holds one request open and the rest waits in the queue."""
    recorder = EventRecorder(unanswering_client, metrics=Metrics(), instance="test")
    for number in range(100):
        recorder.record(involved("ns", f"c{number}"), reason="CreatedHeadPod", message="head")
    assert not await recorder.flush(within=0.5)
    with caplog.at_level(logging.WARNING, logger="ray_operator.runtime.events"):
        await recorder.close(grace=0.1)
    assert "99 queued Events were not written" in caplog.text
    assert await recorder.flush(within=0)  # closed: nothing left to write or wait for


async def test_a_full_queue_drops_new_events_counts_them_and_warns_once(
    unanswering_client: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = Metrics()
    recorder = EventRecorder(unanswering_client, metrics=metrics, instance="test", backlog=3)
    with caplog.at_level(logging.WARNING, logger="ray_operator.runtime.events"):
        for number in range(10):
            recorder.record(involved("ns", f"c{number}"), reason="CreatedHeadPod", message="head")
        # An Event already queued is merged, not dropped, however full the queue is.
        recorder.record(involved("ns", "c0"), reason="CreatedHeadPod", message="head")
    assert sample(metrics, "ray_operator_events_dropped_total") == 10 - 3
    assert sample(metrics, "ray_operator_events_total", reason="CreatedHeadPod") == 11
    dropping = [r for r in caplog.records if "dropping new ones" in r.getMessage()]
    assert len(dropping) == 1, caplog.text
    assert "CreatedHeadPod about ns/c3" in dropping[0].getMessage()
    await recorder.close(grace=0.1)


async def test_an_event_the_api_server_refuses_is_given_up_and_the_next_is_written(
    client: KubeClient, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = EventRecorder(client, metrics=Metrics(), instance="test")
    with caplog.at_level(logging.WARNING, logger="ray_operator.runtime.events"):
        recorder.record(involved("no-such-namespace-x"), reason="Lost", message="refused")
        recorder.record(involved(namespace), reason="Kept", message="written")
        assert await recorder.flush(within=30)
    assert [e["reason"] for e in await events_in(client, namespace)] == ["Kept"]
    assert "no-such-namespace-x/c: could not record event Lost" in caplog.text


class Clock:
    """The recorder's clock, moved by the test: a slow machine cannot fake a pause."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def record_head_pod_events(recorder: EventRecorder, namespace: str, count: int) -> None:
    """`count` different Events, one per cluster c0, c1, ..."""
    for number in range(count):
        recorder.record(involved(namespace, f"c{number}"), reason="CreatedHeadPod", message="head")


async def written_after_a_pause(recorder: EventRecorder, clock: Clock) -> bool:
    """Let the recorder's clock show a pause in recording; whether all is written then."""
    clock.now += QUIET_SECONDS
    return await recorder.flush(within=60)


def creates(metrics: Metrics) -> float:
    return sample(metrics, "ray_operator_api_requests_total", verb="create")


async def test_a_few_events_are_written_at_once_even_while_recording_goes_on(
    client: KubeClient, metrics: Metrics, namespace: str
) -> None:
    clock = Clock()  # never moves: recording never pauses
    recorder = EventRecorder(client, metrics=metrics, instance="test", clock=clock)
    record_head_pod_events(recorder, namespace, 5)
    assert await recorder.flush(within=30)
    assert creates(metrics) == 5


async def test_a_burst_of_events_waits_for_recording_to_pause_one_a_second_meanwhile(
    client: KubeClient, metrics: Metrics, namespace: str
) -> None:
    """The API server's attention goes to the writes the Events tell of (a burst of new
    clusters' Pods) while they happen; the Events follow as soon as recording pauses."""
    clock = Clock()
    recorder = EventRecorder(client, metrics=metrics, instance="test", clock=clock)
    record_head_pod_events(recorder, namespace, 40)
    # 40 wait, just recorded: one is written, the next not before the clock says a second passed.
    assert not await recorder.flush(within=0.5)
    assert creates(metrics) == 1
    assert await written_after_a_pause(recorder, clock)
    assert creates(metrics) == 40
    assert len(await events_in(client, namespace)) == 40


async def test_with_three_quarters_of_the_backlog_used_events_are_written_however_busy(
    client: KubeClient, metrics: Metrics, namespace: str
) -> None:
    """Yielding must not make the queue overflow: from 6 of 8 waiting the writer goes on."""
    clock = Clock()
    recorder = EventRecorder(client, metrics=metrics, instance="test", clock=clock, backlog=8)
    record_head_pod_events(recorder, namespace, 7)
    # Busy all along (the clock never moves): written until fewer than 6 wait.
    assert not await recorder.flush(within=1.0)
    assert creates(metrics) == 2
    assert await written_after_a_pause(recorder, clock)
    assert creates(metrics) == 7


async def test_events_queued_when_the_lease_is_lost_are_dropped_with_one_warning(
    client: KubeClient, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    def not_leading() -> None:
        raise NotLeader("lease ns/ray-operator is not held by this replica")

    recorder = EventRecorder(
        client.with_write_guard(not_leading), metrics=Metrics(), instance="test", backlog=100
    )
    with caplog.at_level(logging.WARNING, logger="ray_operator.runtime.events"):
        for number in range(60):
            recorder.record(involved(namespace, f"c{number}"), reason="CreatedHeadPod", message="h")
        assert await recorder.flush(within=30)
    assert [r.getMessage() for r in caplog.records] == [
        "dropping 60 queued Events: lease ns/ray-operator is not held by this replica"
    ]
    assert await events_in(client, namespace) == []
