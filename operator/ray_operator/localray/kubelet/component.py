"""The local Ray agent and the fake node's kubelet endpoint as one operator component: the
endpoint reads the agent's Pods (`LocalPods`), and when either stops, both do."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn, Protocol

from ray_operator.localray.kubelet.server import KubeletEndpoint, KubeletEndpointOptions
from ray_operator.localray.views import LocalPods

if TYPE_CHECKING:
    from ray_operator.components import ComponentContext


class LocalPodsComponent(LocalPods, Protocol):
    """A component that runs Pods locally (the local Ray agent)."""

    async def run(self) -> NoReturn: ...


class LocalRayAgentWithKubelet:
    """The agent and the kubelet endpoint serving its Pods, run together."""

    def __init__(self, pods: LocalPodsComponent, endpoint: KubeletEndpoint) -> None:
        self._pods = pods
        self._endpoint = endpoint

    async def run(self) -> NoReturn:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self._pods.run(), name="local-ray-agent")
            tasks.create_task(self._endpoint.run(), name="kubelet-endpoint")
        raise AssertionError("the local Ray agent and its kubelet endpoint never return")


def with_kubelet_endpoint(
    build_pods: Callable[[ComponentContext], LocalPodsComponent], options: KubeletEndpointOptions
) -> Callable[[ComponentContext], LocalRayAgentWithKubelet]:
    """`build_pods`'s component, serving its Pods' logs, exec and port-forward beside it."""

    def build(context: ComponentContext) -> LocalRayAgentWithKubelet:
        pods = build_pods(context)
        return LocalRayAgentWithKubelet(pods, KubeletEndpoint(pods, options))

    return build
