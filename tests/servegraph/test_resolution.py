"""`LookupPool`: name lookups on threads of their own, bounded, fair, with a timeout.

The system resolver is replaced by a function that blocks until the test lets it go (a name
whose DNS server never answers) or answers at once: what the pool does with its threads is the
subject, not DNS (tests/adversarial/test_fetch_hardening.py uses the real one).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from ray_operator.servegraph.resolution import LookupPool, LookupTimedOutError


class Resolver:
    """getaddrinfo for the pool: names under `.blackhole` block until `release()`."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.lock = threading.Lock()
        self.running = 0
        self.most_running = 0
        self.threads: set[str] = set()

    def __call__(self, host: str, port: int, **_: Any) -> list[tuple[Any, ...]]:
        with self.lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            self.threads.add(threading.current_thread().name)
        try:
            if host.endswith(".blackhole"):
                self.released.wait(timeout=30)
                raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", port))]
        finally:
            with self.lock:
                self.running -= 1


@pytest.fixture
def resolver() -> Iterator[Resolver]:
    fake = Resolver()
    yield fake
    fake.released.set()  # no thread outlives the test for long


async def test_a_lookup_runs_on_the_pools_thread_not_the_default_executor(
    resolver: Resolver,
) -> None:
    pool = LookupPool(threads=2, per_tenant=1, timeout=5, getaddrinfo=resolver)

    results = await pool.resolver("ns").resolve("registry.test", 443, socket.AF_UNSPEC)

    assert [(r["host"], r["port"], r["hostname"]) for r in results] == [
        ("10.0.0.7", 443, "registry.test")
    ]
    assert all(name.startswith("serve-graph-lookup-") for name in resolver.threads)


async def test_a_name_that_never_answers_times_out_but_keeps_its_slot_until_its_thread_returns(
    resolver: Resolver,
) -> None:
    pool = LookupPool(threads=2, per_tenant=1, timeout=0.3, getaddrinfo=resolver)

    with pytest.raises(LookupTimedOutError):
        await pool.lookup("ns", "a.blackhole", 443, socket.AF_UNSPEC)

    assert pool.busy == 1  # the thread still waits for DNS
    resolver.released.set()
    await _eventually(lambda: pool.busy == 0)


async def test_one_namespaces_black_holed_names_never_delay_another_namespaces_lookup(
    resolver: Resolver,
) -> None:
    pool = LookupPool(threads=4, per_tenant=2, timeout=0.5, getaddrinfo=resolver)
    attacks = [
        asyncio.create_task(pool.lookup("attacker", f"h{i}.blackhole", 443, socket.AF_UNSPEC))
        for i in range(50)
    ]
    await asyncio.sleep(0.1)

    started = time.monotonic()
    await pool.lookup("victim", "registry.test", 443, socket.AF_UNSPEC)

    assert time.monotonic() - started < 0.3
    assert resolver.most_running <= 3  # the attacker's 2, then the victim's 1
    results = await asyncio.gather(*attacks, return_exceptions=True)
    assert all(isinstance(result, LookupTimedOutError) for result in results)
    assert resolver.most_running <= 3


async def test_no_more_threads_than_the_pool_has_look_names_up_at_once(
    resolver: Resolver,
) -> None:
    pool = LookupPool(threads=3, per_tenant=1, timeout=0.3, getaddrinfo=resolver)
    tasks = [
        asyncio.create_task(pool.lookup(f"ns-{i}", f"h{i}.blackhole", 443, socket.AF_UNSPEC))
        for i in range(10)
    ]

    await asyncio.gather(*tasks, return_exceptions=True)

    assert pool.busy == 3
    assert resolver.most_running == 3


async def test_a_lookup_error_reaches_the_caller(resolver: Resolver) -> None:
    pool = LookupPool(threads=1, per_tenant=1, timeout=5, getaddrinfo=resolver)
    resolver.released.set()

    with pytest.raises(socket.gaierror):
        await pool.lookup("ns", "x.blackhole", 443, socket.AF_UNSPEC)
    await _eventually(lambda: pool.busy == 0)


async def _eventually(check: Any, *, within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)
