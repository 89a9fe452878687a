"""Leader election against the real API server, in-process with short timings.

A TCP proxy between one candidate and the API server can freeze, to play the network partition a
real leader meets: it must stop writing before anyone else may take the lease.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from kubernetes_asyncio.client import ApiClient
from ray_operator.metrics import Metrics
from ray_operator.runtime import KubeClient
from ray_operator.runtime.errors import NotLeader
from ray_operator.runtime.leader import LeaderElector, LeaseConfig
from ray_operator.spec.kinds import LEASE

from tests.runtime.waiting import eventually

TIMING = {"lease_duration": 2.0, "renew_deadline": 1.5, "retry_period": 0.25}


class FreezableProxy:
    """Forwards TCP to the API server until `freeze()`, then silently stops moving bytes."""

    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._thawed = asyncio.Event()
        self._thawed.set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def freeze(self) -> None:
        self._thawed.clear()

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in self._writers:
            writer.close()
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(*self._upstream)
        self._writers += [writer, upstream_writer]
        for source, sink in ((reader, upstream_writer), (upstream_reader, writer)):
            task = asyncio.create_task(self._pump(source, sink), name="proxy-pump")
            self._tasks.add(task)

    async def _pump(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        while data := await source.read(65536):
            await self._thawed.wait()
            sink.write(data)
            await sink.drain()


@asynccontextmanager
async def candidate(
    api: ApiClient, namespace: str, identity: str, *, metrics: Metrics
) -> AsyncIterator[LeaderElector]:
    config = LeaseConfig(name="lease", namespace=namespace, identity=identity, **TIMING)
    elector = LeaderElector(KubeClient(api, metrics=metrics), config, metrics=metrics)
    task = asyncio.create_task(elector.run(), name=f"candidate-{identity}")
    try:
        yield elector
    finally:
        task.cancel()
        await asyncio.wait([task])


@asynccontextmanager
async def api_through(proxy: FreezableProxy, api: ApiClient) -> AsyncIterator[ApiClient]:
    configuration = copy.copy(api.configuration)
    configuration.host = f"https://127.0.0.1:{proxy.port}"
    async with ApiClient(configuration) as proxied:
        yield proxied


async def test_of_two_candidates_exactly_one_leads(api: ApiClient, namespace: str) -> None:
    async with (
        candidate(api, namespace, "a", metrics=Metrics()) as a,
        candidate(api, namespace, "b", metrics=Metrics()) as b,
    ):
        await eventually(lambda: a.leading.is_set() or b.leading.is_set())
        await asyncio.sleep(TIMING["lease_duration"] * 1.5)  # through several renewals
        assert [a.leading.is_set(), b.leading.is_set()].count(True) == 1


async def test_a_leader_renews_with_one_request_per_period(api: ApiClient, namespace: str) -> None:
    """A PUT carrying the resourceVersion of its own last write; no GET before each (KubeRay's
    client-go reads first: two requests per renewal)."""
    metrics = Metrics()
    async with candidate(api, namespace, "leader", metrics=metrics) as leader:
        await asyncio.wait_for(leader.leading.wait(), timeout=10)
        before = _requests(metrics)
        await asyncio.sleep(TIMING["retry_period"] * 8)
        during = {verb: count - before.get(verb, 0) for verb, count in _requests(metrics).items()}
        assert leader.leading.is_set()
    assert during.get("get", 0) == 0
    assert during.get("update", 0) >= 4


async def test_a_lease_written_by_someone_else_is_read_again_before_the_next_renewal(
    api: ApiClient, namespace: str
) -> None:
    metrics = Metrics()
    client = KubeClient(api, metrics=Metrics())
    async with candidate(api, namespace, "leader", metrics=metrics) as leader:
        await asyncio.wait_for(leader.leading.wait(), timeout=10)
        lease = await client.get(LEASE, "lease", namespace=namespace)
        lease["metadata"].setdefault("annotations", {})["touched-by"] = "someone-else"
        touched = await client.replace(LEASE, lease)
        before = _requests(metrics)
        await eventually(lambda: _requests(metrics).get("get", 0) > before.get("get", 0))
        await asyncio.sleep(TIMING["retry_period"] * 4)
        assert leader.leading.is_set()
        renewed = await client.get(LEASE, "lease", namespace=namespace)
    assert renewed["spec"]["holderIdentity"] == "leader"
    assert renewed["spec"]["renewTime"] > touched["spec"]["renewTime"]


def _requests(metrics: Metrics) -> dict[str, float]:
    """Requests sent so far, by verb."""
    counts: dict[str, float] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name.endswith("_api_requests_total"):
                verb = sample.labels["verb"]
                counts[verb] = counts.get(verb, 0) + sample.value
    return counts


async def test_a_standby_says_once_who_leads_not_every_retry(
    api: ApiClient, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ray_operator.runtime.leader")
    async with candidate(api, namespace, "leader", metrics=Metrics()) as leader:
        await asyncio.wait_for(leader.leading.wait(), timeout=10)
        async with candidate(api, namespace, "standby", metrics=Metrics()):
            await asyncio.sleep(TIMING["lease_duration"] * 1.5)  # many retry periods
    standby_lines = [r.getMessage() for r in caplog.records if "standby:" in r.getMessage()]
    assert standby_lines == [
        f"{namespace}/lease: standby: leader leads; standby takes over if it stops renewing for 2s"
    ]


async def test_a_released_lease_is_taken_within_one_retry_period(
    api: ApiClient, namespace: str
) -> None:
    metrics = Metrics()
    config = LeaseConfig(name="lease", namespace=namespace, identity="first", **TIMING)
    first = LeaderElector(KubeClient(api, metrics=metrics), config, metrics=metrics)
    campaign = asyncio.create_task(first.run(), name="candidate-first")
    try:
        await asyncio.wait_for(first.leading.wait(), timeout=10)
        async with candidate(api, namespace, "second", metrics=Metrics()) as second:
            await asyncio.sleep(TIMING["retry_period"] * 2)
            assert not second.leading.is_set()
            # As the app does on SIGTERM: stop campaigning, then release.
            campaign.cancel()
            await asyncio.wait([campaign])
            loop = asyncio.get_running_loop()
            released_at = loop.time()
            await first.release()
            await asyncio.wait_for(second.leading.wait(), timeout=TIMING["lease_duration"])
            assert loop.time() - released_at <= TIMING["retry_period"] + 0.2
    finally:
        campaign.cancel()
        await asyncio.wait([campaign])


@pytest.mark.timeout(60)
async def test_a_leader_cut_off_from_the_api_stops_writing_before_its_lease_can_be_taken(
    api: ApiClient, namespace: str
) -> None:
    host, port = api.configuration.host.removeprefix("https://").rsplit(":", 1)
    proxy = FreezableProxy(host, int(port))
    await proxy.start()
    loop = asyncio.get_running_loop()
    try:
        async with (
            api_through(proxy, api) as cut_off_api,
            candidate(cut_off_api, namespace, "isolated", metrics=Metrics()) as isolated,
        ):
            await asyncio.wait_for(isolated.leading.wait(), timeout=10)
            isolated.check_may_write()
            async with candidate(api, namespace, "standby", metrics=Metrics()) as standby:
                await asyncio.sleep(TIMING["retry_period"] * 2)
                proxy.freeze()
                frozen_at = loop.time()
                await asyncio.wait_for(isolated.following.wait(), timeout=10)
                stepped_down_at = loop.time()
                with pytest.raises(NotLeader):
                    isolated.check_may_write()
                await asyncio.wait_for(standby.leading.wait(), timeout=10)
                taken_at = loop.time()
        # Its last successful renewal was at most one retry period before the freeze.
        assert stepped_down_at - frozen_at <= TIMING["renew_deadline"] + 0.1
        assert stepped_down_at < taken_at
        assert taken_at - frozen_at >= TIMING["lease_duration"] - TIMING["retry_period"]
    finally:
        await proxy.close()
