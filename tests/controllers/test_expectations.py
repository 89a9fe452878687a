"""Expectations: what we asked the API server for, folded into what the cache shows (pure)."""

from __future__ import annotations

from typing import Any

from ray_operator.controllers.expectations import Expectations
from ray_operator.spec.kinds import ObjectKey

OWNER = ObjectKey("RayCluster", "ns", "c")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def pod(name: str, uid: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name, **({"uid": uid} if uid else {})}}


def names(objects: list[Any]) -> set[str]:
    return {o["metadata"]["name"] for o in objects}


def test_a_create_whose_answer_was_lost_counts_as_existing_until_the_cache_shows_it() -> None:
    expectations = Expectations(clock=Clock())
    expectations.maybe_created(OWNER, pod("w-1"))
    assert names(expectations.observe(OWNER, [])) == {"w-1"}
    assert expectations.uncertain_count(OWNER) == 1
    # The cache shows it: the real object replaces our guess, once.
    assert expectations.observe(OWNER, [pod("w-1", "u1")]) == [pod("w-1", "u1")]
    assert expectations.uncertain_count(OWNER) == 0


def test_a_create_that_never_happened_is_forgotten_after_the_uncertain_ttl() -> None:
    clock = Clock()
    expectations = Expectations(clock=clock, ttl=300, uncertain_ttl=60)
    expectations.maybe_created(OWNER, pod("w-1"))
    clock.now = 59
    assert names(expectations.observe(OWNER, [])) == {"w-1"}
    clock.now = 61
    assert expectations.observe(OWNER, []) == []
    assert expectations.pending_count(OWNER) == 0


def test_deleting_a_pod_we_created_drops_the_pending_create() -> None:
    expectations = Expectations(clock=Clock())
    expectations.created(OWNER, pod("w-1", "u1"))
    expectations.maybe_created(OWNER, pod("w-2"))
    expectations.deleted(OWNER, pod("w-1", "u1"))
    expectations.deleted(OWNER, pod("w-2"))
    # Neither comes back as a ghost when the cache never saw them.
    assert expectations.observe(OWNER, []) == []
