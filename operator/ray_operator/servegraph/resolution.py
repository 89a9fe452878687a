"""How the host name of a RayServeGraph's URL becomes the addresses the fetch connects to.

    LookupPool          getaddrinfo on threads of its own, never the event loop's default
                        executor (compile, parse and TLS set-up run there): at most `threads`
                        lookups at once, at most `per_tenant` of them for one namespace
                        (`fairshare.FairShare`), each waited for at most `timeout` seconds
      └─ .resolver(namespace)   the aiohttp resolver of one namespace's fetches
    GuardedResolver     refuses a name when any address it resolves to is refused
                        (`addresses.refusal`): aiohttp connects to what it returns

Why threads and not an asynchronous DNS client: the system resolver is what the cluster's
configuration means (`/etc/hosts`, `search` and `ndots` in resolv.conf, nsswitch); a second
implementation would resolve some names differently. Its cost is that getaddrinfo cannot be
cancelled: a name whose DNS server never answers holds its thread until the C library gives up
(`timeout` x `attempts` of resolv.conf, per search domain: minutes). So the pool counts a lookup
until its thread returns, even after its caller stopped waiting; one namespace's black-holed
names therefore hold at most `per_tenant` threads, and no lookup of another namespace queues
behind them. Threads are started per lookup (lookups are rare: one per fetch) and are daemons:
a stuck one neither outlives its usefulness in a pool nor holds up the operator's exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import socket
import threading
from collections.abc import Callable
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult

from ray_operator.servegraph.fairshare import FairShare
from ray_operator.spec.fetch_addresses import parse_ip_literal, refusal

AddressInfo = tuple[Any, ...]
GetAddrInfo = Callable[..., list[AddressInfo]]

_NUMERIC_FLAGS = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV
_lookup_numbers = itertools.count(1)


class AddressRefusedError(OSError):
    """A name resolved to a refused address. An OSError so aiohttp treats it as a failed lookup
    (it wraps it in ClientConnectorDNSError); the fetch reads `GuardedResolver.refused`."""


class LookupTimedOutError(OSError):
    """No answer for a name within the pool's timeout (an OSError without errno: aiohttp
    reports it as a failed lookup, not as the fetch's own timeout)."""


class LookupPool:
    """See the module docstring."""

    def __init__(
        self,
        *,
        threads: int,
        per_tenant: int,
        timeout: float,
        getaddrinfo: GetAddrInfo = socket.getaddrinfo,
    ) -> None:
        self._share = FairShare(threads, per_tenant=per_tenant)
        self._timeout = timeout
        self._getaddrinfo = getaddrinfo

    @property
    def busy(self) -> int:
        """Threads looking a name up now (some perhaps for callers that gave up)."""
        return self._share.in_use

    def resolver(self, tenant: str) -> AbstractResolver:
        """An aiohttp resolver whose lookups count against `tenant`'s share."""
        return _TenantResolver(self, tenant)

    async def lookup(
        self, tenant: str, host: str, port: int, family: socket.AddressFamily
    ) -> list[AddressInfo]:
        """getaddrinfo(host, port) on a thread of the pool; `LookupTimedOutError` when the wait
        for a thread and the answer together exceed the timeout."""
        loop = asyncio.get_running_loop()
        lookup = _Lookup(loop, loop.create_future(), tenant, host, port, family)
        try:
            async with asyncio.timeout(self._timeout):
                await self._share.acquire(tenant)
                self._start(lookup)
                return await lookup.answer
        except TimeoutError:
            raise LookupTimedOutError(f"no answer for {host} within {self._timeout:g} s") from None

    def _start(self, lookup: _Lookup) -> None:
        thread = threading.Thread(
            target=self._look_up,
            args=(lookup,),
            name=f"serve-graph-lookup-{next(_lookup_numbers)}",
            daemon=True,
        )
        try:
            thread.start()
        except BaseException:
            self._share.release(lookup.tenant)
            raise

    def _look_up(self, lookup: _Lookup) -> None:
        """On the lookup's own thread: ask the system resolver, then hand the outcome (and the
        slot) back to the loop."""
        outcome: list[AddressInfo] | BaseException
        try:
            outcome = self._getaddrinfo(
                lookup.host,
                lookup.port,
                family=lookup.family,
                type=socket.SOCK_STREAM,
                flags=socket.AI_ADDRCONFIG,
            )
        except Exception as error:  # handed to the waiting coroutine
            outcome = error
        # RuntimeError: the loop is closed, the operator stopped while the lookup hung.
        with contextlib.suppress(RuntimeError):
            lookup.loop.call_soon_threadsafe(self._finish, lookup, outcome)

    def _finish(self, lookup: _Lookup, outcome: list[AddressInfo] | BaseException) -> None:
        self._share.release(lookup.tenant)
        if lookup.answer.done():
            return  # its caller stopped waiting
        if isinstance(outcome, BaseException):
            lookup.answer.set_exception(outcome)
        else:
            lookup.answer.set_result(outcome)


@dataclasses.dataclass(frozen=True, slots=True)
class _Lookup:
    """One lookup: where its answer goes (a future of `loop`), whose share it counts against,
    and the query."""

    loop: asyncio.AbstractEventLoop
    answer: asyncio.Future[list[AddressInfo]]
    tenant: str
    host: str
    port: int
    family: socket.AddressFamily


class _TenantResolver(AbstractResolver):
    def __init__(self, pool: LookupPool, tenant: str) -> None:
        self._pool = pool
        self._tenant = tenant

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        infos = await self._pool.lookup(self._tenant, host, port, family)
        return [_result(host, info) for info in infos if _usable(info)]

    async def close(self) -> None:
        pass


def _usable(info: AddressInfo) -> bool:
    # An IPv6 answer on a Python built without IPv6 comes as a 2-tuple: not connectable.
    return info[0] != socket.AF_INET6 or len(info[4]) >= 4


def _result(hostname: str, info: AddressInfo) -> ResolveResult:
    family, _, proto, _, address = info
    host = str(address[0])
    if family == socket.AF_INET6 and address[3]:
        host = f"{host}%{address[3]}"  # a scope: link-local, which the guard refuses anyway
    return ResolveResult(
        hostname=hostname,
        host=host,
        port=int(address[1]),
        family=family,
        proto=proto,
        flags=_NUMERIC_FLAGS,
    )


class GuardedResolver(AbstractResolver):
    """Resolves with `inner`, refusing the name if any of its addresses is refused.

    All or nothing: a name resolving to a private address and to the metadata address is
    hostile, not half-usable. `refused` keeps the first refusal (host, why) for the caller, as
    aiohttp hands resolver errors on wrapped in its own exception type.
    """

    def __init__(self, inner: AbstractResolver, *, allow_loopback: bool, owns_inner: bool) -> None:
        self._inner = inner
        self._allow_loopback = allow_loopback
        self._owns_inner = owns_inner
        self.refused: tuple[str, str] | None = None

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            address = parse_ip_literal(result["host"])
            if address is None:
                why: str | None = "an address that is not an IP"
            else:
                why = refusal(address, allow_loopback=self._allow_loopback)
            if why is not None:
                self.refused = self.refused or (host, why)
                raise AddressRefusedError(f"{host} resolves to {why}")
        return results

    async def close(self) -> None:
        if self._owns_inner:
            await self._inner.close()


__all__ = [
    "AddressRefusedError",
    "GuardedResolver",
    "LookupPool",
    "LookupTimedOutError",
]
