"""Admission webhooks for RayCluster, RayJob, RayService and RayServeGraph, served over TLS by
every replica.

    review.py         AdmissionReview in → allow/deny (+ JSONPatch) out; pure, no HTTP
    handlers.py       the aiohttp routes (/validate-ray-io-v1-<kind>, /mutate-…), body cap
    workers.py        the worker processes that answer large reviews, off the event loop
    jsonpatch.py      the JSON Patch between an object and its defaulted copy
    tls.py            the live SSLContext whose certificate is swapped without a restart
    certificates.py   where certificates come from: a self-managed Secret, or a directory
    registration.py   the Validating/MutatingWebhookConfigurations and their caBundle
    options.py        WebhookOptions and its command-line flags
    component.py      `Webhooks.run()`: the root task tying them together

Validation lives in `ray_operator.validation` and defaulting in `ray_operator.defaults`, shared
with the controllers; this package only adapts them to admission. docs/webhooks.md has the
rules, the defaults, the modes and the wiring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ray_operator.webhooks.options import (
    WebhookOptions,
    add_webhook_arguments,
    webhook_options_from_args,
)

if TYPE_CHECKING:
    from ray_operator.webhooks.component import Webhooks, webhook_component


def __getattr__(name: str) -> Any:
    # The component (aiohttp routes, certificates with `cryptography`, validation through the
    # generated models) loads when webhooks are turned on, not with the flags: an operator
    # running without webhooks never holds those modules (issue 16, idle memory).
    if name in ("Webhooks", "webhook_component"):
        from ray_operator.webhooks import component

        return getattr(component, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "WebhookOptions",
    "Webhooks",
    "add_webhook_arguments",
    "webhook_component",
    "webhook_options_from_args",
]
