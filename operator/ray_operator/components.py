"""Components: what every replica runs beside the reconcilers (the admission webhooks, the
RayServeGraph event endpoint, the local Ray agent), and what each is given.

The contract between `app.run(settings, components=[...])` and the components, apart from `app`:
a component names what it gets without importing the process that wires it (which imports the
metrics server, which uses the webhooks' TLS), so the layers stay one-way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn, Protocol

if TYPE_CHECKING:
    from ray_operator.metrics import Metrics
    from ray_operator.runtime.client import KubeClient
    from ray_operator.runtime.store import StoreView
    from ray_operator.settings import Settings


class Component(Protocol):
    """Something every replica runs beside the reconcilers (the admission webhooks)."""

    async def run(self) -> NoReturn:
        """Run until cancelled; returning or raising stops the whole operator."""
        ...


@dataclass(frozen=True, slots=True)
class ComponentContext:
    """What a component factory gets."""

    client: KubeClient
    """The API client, NOT guarded by the lease: components run on every replica."""
    store: StoreView
    """The watch cache (read-only)."""
    settings: Settings
    """The operator's settings."""
    metrics: Metrics
    """The operator's metrics (register the component's own in `metrics.registry`)."""


ComponentFactory = Callable[[ComponentContext], Component]
"""Builds a component; `app.run(settings, components=[...])` takes these."""
