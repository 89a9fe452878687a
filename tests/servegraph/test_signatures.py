"""Specification: a refresh signature covers a time, the object and the body, and is accepted
within five minutes of the operator's clock (either way), once; the memory of accepted
signatures is bounded per object, per namespace and in total, and forgetting never lets a
replay in. Pure: a virtual clock, no network."""

from __future__ import annotations

import hashlib
import hmac
import tracemalloc

import pytest
from ray_operator.servegraph.signatures import (
    MAX_PER_NAMESPACE,
    MAX_TOTAL,
    SWEEP_INTERVAL_SECONDS,
    TOLERANCE_SECONDS,
    Replayed,
    ReplayMemory,
    ReplayMemoryFull,
    Signature,
    body_signature,
    refresh_message,
    refresh_signature,
    sign_body,
    sign_refresh,
    unix_seconds_of,
    within_window,
)

SECRET = b"0123456789abcdef-hook-secret"
NOW = 1_790_000_000


class Clock:
    """A settable Unix clock."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def signed(
    *, namespace: str = "ns1", name: str = "pipeline", body: bytes = b"", at: int = NOW
) -> Signature:
    """A signature as the endpoint reads it from a correctly signed request."""
    header = sign_refresh(SECRET, namespace=namespace, name=name, body=body, at=at)
    signature = refresh_signature(header, namespace=namespace, name=name, body=body)
    assert signature is not None
    return signature


# --- the scheme -------------------------------------------------------------------------------


def test_the_signed_bytes_are_time_object_path_and_body_on_three_lines() -> None:
    message = refresh_message(NOW, namespace="ns1", name="pipe.line", body=b'{"a": 1}')
    assert message == b'1790000000\nnamespaces/ns1/rayservegraphs/pipe.line\n{"a": 1}'
    expected = hmac.new(SECRET, message, hashlib.sha256).hexdigest()
    header = sign_refresh(SECRET, namespace="ns1", name="pipe.line", body=b'{"a": 1}', at=NOW)
    assert header == f"t={NOW},v1={expected}"


def verifies(header: str, *, namespace: str = "ns1", name: str = "pipeline", body: bytes) -> bool:
    """Whether a well-formed `header` verifies for this object and body with `SECRET`."""
    signature = refresh_signature(header, namespace=namespace, name=name, body=body)
    assert signature is not None
    return signature.verifies(SECRET)


def test_a_refresh_signature_verifies_only_for_its_object_body_time_and_secret() -> None:
    header = sign_refresh(SECRET, namespace="ns1", name="pipeline", body=b"x", at=NOW)
    assert signed(body=b"x").signed_at == NOW
    assert verifies(header, body=b"x")
    assert not signed(body=b"x").verifies(SECRET + b"x")
    assert not verifies(header, namespace="ns2", body=b"x")
    assert not verifies(header, name="other", body=b"x")
    assert not verifies(header, body=b"y")
    mac = header.partition(",v1=")[2]
    assert not verifies(f"t={NOW + 1},v1={mac}", body=b"x")


def test_a_name_with_dots_cannot_be_split_into_another_object_and_body() -> None:
    # The object's path ends at a newline, which no name and no namespace can hold.
    header = sign_refresh(SECRET, namespace="ns1", name="a", body=b"b.c", at=NOW)
    assert not verifies(header, name="a.b", body=b"c")


@pytest.mark.parametrize(
    "header",
    [
        "",
        "sha256=" + "0" * 64,
        f"v1={'0' * 64},t={NOW}",
        f"t={NOW}",
        f"t=0{NOW},v1={'0' * 64}",
        f"t=-{NOW},v1={'0' * 64}",
        f"t={NOW},v1={'0' * 63}",
        f"t={'9' * 13},v1={'0' * 64}",
    ],
)
def test_a_malformed_refresh_signature_is_no_signature(header: str) -> None:
    assert refresh_signature(header, namespace="ns1", name="pipeline", body=b"") is None


def test_a_body_signature_covers_the_body_and_takes_its_time_from_it() -> None:
    body = b'{"time": "2026-09-21T12:00:00Z"}'
    signature = body_signature(sign_body(body, secret=SECRET), body=body, signed_at=NOW)
    assert signature == Signature(signature.mac if signature else b"", NOW, body)
    assert signature.verifies(SECRET)
    assert body_signature("sha1=" + "0" * 40, body=body, signed_at=NOW) is None


def test_an_empty_secret_never_verifies() -> None:
    signature = signed()
    assert not Signature(signature.mac, NOW, signature.message).verifies(b"")


def test_cloudevent_times_are_rfc3339_instants() -> None:
    assert unix_seconds_of("2026-09-21T12:00:00Z") == 1_789_992_000
    assert unix_seconds_of("2026-09-21T14:00:00.900+02:00") == 1_789_992_000
    for not_an_instant in ("2026-09-21", "2026-09-21T12:00:00", "yesterday", 1_789_992_000, ""):
        assert unix_seconds_of(not_an_instant) is None
    assert unix_seconds_of("2026-09-21T12:00:00Z" + " " * 100) is None


# --- the window --------------------------------------------------------------------------------


def test_the_window_is_five_minutes_either_way() -> None:
    assert TOLERANCE_SECONDS == 300
    assert within_window(NOW, now=NOW)
    assert within_window(NOW - 300, now=NOW)  # the sender's clock is behind
    assert within_window(NOW + 300, now=NOW)  # the sender's clock is ahead
    assert not within_window(NOW - 301, now=NOW)
    assert not within_window(NOW + 301, now=NOW)


# --- the replay memory -----------------------------------------------------------------------


def test_a_signature_is_admitted_once_per_object() -> None:
    memory = ReplayMemory(clock=Clock())
    signature = signed()
    memory.admit("ns1", "pipeline", signature)
    with pytest.raises(Replayed):
        memory.admit("ns1", "pipeline", signature)
    memory.admit("ns1", "pipeline", signed(body=b"another request"))


def test_a_released_signature_may_be_sent_again() -> None:
    # The request failed after admission (503): the sender's retry is not a replay.
    memory = ReplayMemory(clock=Clock())
    signature = signed()
    memory.admit("ns1", "pipeline", signature)
    memory.release("ns1", "pipeline", signature)
    memory.admit("ns1", "pipeline", signature)
    assert len(memory) == 1


def test_a_signature_is_remembered_until_the_window_refuses_it() -> None:
    clock = Clock()
    memory = ReplayMemory(clock=clock)
    signature = signed(at=NOW + 300)  # the sender's clock runs five minutes ahead
    memory.admit("ns1", "pipeline", signature)
    clock.now = NOW + 600  # the last moment the window still accepts it
    with pytest.raises(Replayed):
        memory.admit("ns1", "pipeline", signature)
    clock.now = NOW + 601
    memory.admit("ns1", "pipeline", signed(at=NOW + 601))  # expired entries are dropped
    assert len(memory) == 1


def test_a_full_object_forgets_its_oldest_signature_and_refuses_anything_as_old() -> None:
    memory = ReplayMemory(per_object=4, clock=Clock())
    oldest = signed(at=NOW - 10)
    memory.admit("ns1", "pipeline", oldest)
    for second in range(4):
        memory.admit("ns1", "pipeline", signed(at=NOW + second))
    assert len(memory) == 4  # the bound held: the oldest went
    with pytest.raises(Replayed):
        memory.admit("ns1", "pipeline", oldest)  # forgotten, yet not replayable
    with pytest.raises(Replayed):
        memory.admit("ns1", "pipeline", signed(at=NOW - 10, body=b"as old"))
    memory.admit("ns1", "pipeline", signed(at=NOW + 5))  # a fresh signature is welcome


def test_a_namespace_cannot_take_more_than_its_share() -> None:
    clock = Clock()
    memory = ReplayMemory(per_object=4, per_namespace=8, total=100, clock=clock)
    for graph in range(2):
        for second in range(4):
            memory.admit("attacker", f"g{graph}", signed(name=f"g{graph}", at=NOW + second))
    with pytest.raises(ReplayMemoryFull):
        memory.admit("attacker", "g3", signed(name="g3"))
    memory.admit("victim", "pipeline", signed(namespace="victim"))  # other tenants unaffected
    clock.now = NOW + TOLERANCE_SECONDS + 4  # every signature of the attacker left the window
    memory.admit("attacker", "g3", signed(name="g3", at=int(clock.now)))


def test_the_whole_memory_is_bounded_whatever_the_number_of_namespaces() -> None:
    clock = Clock()
    memory = ReplayMemory(per_object=2, per_namespace=2, total=6, clock=clock)
    for namespace in ("a", "b", "c"):
        for second in range(2):
            memory.admit(namespace, "g", signed(namespace=namespace, name="g", at=NOW + second))
    with pytest.raises(ReplayMemoryFull) as full:
        memory.admit("d", "g", signed(namespace="d", name="g"))
    assert full.value.retry_after > 0
    assert len(memory) == 6


def test_a_memory_at_its_bound_sweeps_at_most_once_a_second() -> None:
    clock = Clock()
    memory = ReplayMemory(per_object=1, per_namespace=10, total=2, clock=clock)
    memory.admit("a", "g", signed(namespace="a", name="g", at=NOW - TOLERANCE_SECONDS))
    memory.admit("b", "g", signed(namespace="b", name="g"))
    with pytest.raises(ReplayMemoryFull):
        memory.admit("c", "g", signed(namespace="c", name="g"))  # swept: nothing expired
    clock.now = NOW + SWEEP_INTERVAL_SECONDS / 2  # a's signature has left the window...
    with pytest.raises(ReplayMemoryFull):
        memory.admit("c", "g", signed(namespace="c", name="g"))  # ...but no sweep so soon
    clock.now = NOW + SWEEP_INTERVAL_SECONDS
    memory.admit("c", "g", signed(namespace="c", name="g"))
    assert len(memory) == 2


def test_the_default_bounds_hold_and_cost_a_few_megabytes_at_most() -> None:
    clock = Clock()
    memory = ReplayMemory(clock=clock)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        admitted = 0
        for namespace in range(MAX_TOTAL // MAX_PER_NAMESPACE + 1):
            for graph in range(MAX_PER_NAMESPACE // 32 + 1):
                for second in range(33):
                    signature = signed(namespace=f"n{namespace}", name=f"g{graph}", at=NOW - second)
                    try:
                        memory.admit(f"n{namespace}", f"g{graph}", signature)
                        admitted += 1
                    except ReplayMemoryFull:
                        pass
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(memory) == MAX_TOTAL
    assert admitted > MAX_TOTAL  # the per-object bound forgot some to take newer ones
    assert held < 8 * 1024 * 1024, held
