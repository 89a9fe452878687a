"""`FairShare`: a bounded number of slots, a bound per tenant, waiters served tenant by tenant."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ray_operator.servegraph.fairshare import FairShare


async def holders(share: FairShare, tenant: str, count: int) -> list[asyncio.Task[None]]:
    """`count` tasks of `tenant` that each take a slot and keep it until cancelled."""

    async def hold() -> None:
        async with share.slot(tenant):
            await asyncio.Event().wait()

    tasks = [asyncio.create_task(hold()) for _ in range(count)]
    await asyncio.sleep(0)
    return tasks


async def stop(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_one_tenant_holds_at_most_its_share_and_the_others_still_get_in() -> None:
    share = FairShare(4, per_tenant=2)
    greedy = await holders(share, "attacker", 100)

    assert (share.in_use, share.held_by("attacker")) == (2, 2)
    await asyncio.wait_for(share.acquire("victim"), timeout=1)  # no wait behind the 98

    assert share.held_by("victim") == 1
    share.release("victim")
    await stop(greedy)
    assert share.in_use == 0


async def test_the_total_never_exceeds_the_capacity() -> None:
    share = FairShare(3, per_tenant=2)
    tasks = [task for tenant in "abc" for task in await holders(share, tenant, 2)]

    assert share.in_use == 3
    await stop(tasks)
    assert share.in_use == 0


async def test_a_freed_slot_goes_to_the_next_tenant_in_turn_not_to_the_longest_queue() -> None:
    share = FairShare(1, per_tenant=1)
    served: list[str] = []
    await share.acquire("first")

    async def take(tenant: str) -> None:
        await share.acquire(tenant)
        served.append(tenant)
        share.release(tenant)

    queued = [asyncio.create_task(take("crowd")) for _ in range(5)]
    await asyncio.sleep(0)
    queued.append(asyncio.create_task(take("alone")))
    await asyncio.sleep(0)
    share.release("first")
    await asyncio.gather(*queued)

    assert served.index("alone") <= 1  # after at most one of the crowd's five
    assert sorted(served) == ["alone"] + ["crowd"] * 5


async def test_a_cancelled_waiter_holds_nothing_and_blocks_no_one() -> None:
    share = FairShare(1, per_tenant=1)
    await share.acquire("a")
    waiter = asyncio.create_task(share.acquire("b"))
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)

    share.release("a")
    await asyncio.wait_for(share.acquire("c"), timeout=1)
    assert (share.in_use, share.held_by("b")) == (1, 0)


async def test_a_waiter_cancelled_as_it_is_handed_a_slot_gives_it_back() -> None:
    share = FairShare(1, per_tenant=1)
    await share.acquire("a")
    waiter = asyncio.create_task(share.acquire("b"))
    await asyncio.sleep(0)
    share.release("a")  # hands the slot to b's waiter ...
    waiter.cancel()  # ... which is cancelled before it runs
    await asyncio.gather(waiter, return_exceptions=True)

    assert share.in_use == 0


def test_a_release_without_a_slot_is_a_bug_said_loudly() -> None:
    with pytest.raises(RuntimeError):
        FairShare(1, per_tenant=1).release("nobody")


@settings(max_examples=50, deadline=None)
@given(
    capacity=st.integers(1, 5),
    per_tenant=st.integers(1, 5),
    plan=st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 3)), max_size=30),
)
def test_bounds_hold_whatever_the_order_of_arrivals_and_departures(
    capacity: int, per_tenant: int, plan: list[tuple[str, int]]
) -> None:
    async def scenario() -> None:
        share = FairShare(capacity, per_tenant=per_tenant)
        worst = {"total": 0, "tenant": 0}

        async def use(tenant: str, turns: int) -> None:
            async with share.slot(tenant):
                worst["total"] = max(worst["total"], share.in_use)
                worst["tenant"] = max(worst["tenant"], share.held_by(tenant))
                for _ in range(turns):
                    await asyncio.sleep(0)

        await asyncio.wait_for(asyncio.gather(*(use(t, n) for t, n in plan)), timeout=5)
        assert worst["total"] <= capacity
        assert worst["tenant"] <= min(per_tenant, capacity)
        assert share.in_use == 0

    asyncio.run(scenario())
