"""How the admission webhooks run: the frozen `WebhookOptions` and `WEBHOOK_FLAGS`, its flags.

Like `settings.py` (and through the same `flags.Flag` table): every `--webhook-…` flag can also
come from `RAY_OPERATOR_WEBHOOK_…`, and `--webhooks/--no-webhooks` from `RAY_OPERATOR_WEBHOOKS`.
Left unset, webhooks run when they can be reached: in a cluster (through their Service), or when
`--webhook-url-base` or `--webhook-cert-dir` says how.

`--no-webhooks` turns them off; so does `--webhook-port=0`, which config/namespaced once relied
on while nothing honoured it: in a Pod the webhooks switched on, could not read their certificate
Secret under that install's RBAC, and the process exited after ~78 s (issue 12, finding 12).
"""

from __future__ import annotations

import argparse
import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray_operator.flags import Flag, add_flags, flag_fields, optional_path


@dataclass(frozen=True)
class WebhookEndpoint:
    """How the API server reaches the webhooks, and which configurations name them."""

    url_base: str | None = None
    """`https://host:port` to call (the URL mode); None: the Service below."""
    service_name: str = "ray-operator-webhook"
    """The webhook Service (Service mode)."""
    service_namespace: str = "default"
    """The operator's namespace: the Service's, and the one namespace never intercepted."""
    service_port: int = 443
    """The Service port."""
    validating_name: str = "ray-operator-validating-webhook-configuration"
    """Name of the ValidatingWebhookConfiguration."""
    mutating_name: str = "ray-operator-mutating-webhook-configuration"
    """Name of the MutatingWebhookConfiguration."""
    namespace_selector: Mapping[str, Any] | None = None
    """Which namespaces to intercept; None: all but the operator's (Service mode) or all (URL)."""
    timeout_seconds: int = 5
    """How long the API server waits for an answer before failing the request."""

    @property
    def owns_configurations(self) -> bool:
        """Whether the operator creates and deletes the configurations (the URL mode)."""
        return self.url_base is not None


@dataclass(frozen=True, slots=True)
class WebhookOptions:
    """How this replica serves and registers the admission webhooks."""

    enabled: bool = False
    """Serve the webhooks (and keep their certificate and configurations up to date)."""
    host: str = ""
    """Address to listen on; empty: all interfaces (127.0.0.1 in the URL mode)."""
    port: int = 9443
    """TLS port of the webhooks (`Settings.webhook_port`)."""
    namespace: str = "default"
    """The operator's namespace: its certificate Secret, its Service, never intercepted."""
    url_base: str | None = None
    """Out-of-cluster mode: register configurations calling `<url_base>/validate-…` ourselves."""
    cert_dir: Path | None = None
    """cert-manager mode: serve tls.crt/tls.key from this directory (reloaded when they change)."""
    service_name: str = "ray-operator-webhook"
    """The webhook Service, in `namespace` (in-cluster mode)."""
    secret_name: str = "ray-operator-webhook-server-cert"
    """The self-managed certificate Secret, in `namespace`."""
    validating_configuration: str = "ray-operator-validating-webhook-configuration"
    """Name of the ValidatingWebhookConfiguration."""
    mutating_configuration: str = "ray-operator-mutating-webhook-configuration"
    """Name of the MutatingWebhookConfiguration."""
    namespace_selector: dict[str, Any] | None = None
    """Namespaces to intercept; None: all but `namespace` (in-cluster) or all (URL mode)."""
    timeout_seconds: int = 5
    """How long the API server waits for a webhook answer."""
    certificate_validity: datetime.timedelta = datetime.timedelta(days=365)
    """Lifetime of a self-managed serving certificate (renewed at 2/3 of it)."""
    ca_validity: datetime.timedelta = datetime.timedelta(days=3650)
    """Lifetime of the self-managed CA (renewed at 2/3 of it)."""
    check_interval: float = 60.0
    """Seconds between looks at the certificate Secret or directory and the configurations."""

    @property
    def listen_host(self) -> str:
        if self.host:
            return self.host
        return "127.0.0.1" if self.url_base else "0.0.0.0"

    def endpoint(self) -> WebhookEndpoint:
        """Where the API server reaches us, for the webhook configurations."""
        return WebhookEndpoint(
            url_base=self.url_base,
            service_name=self.service_name,
            service_namespace=self.namespace,
            validating_name=self.validating_configuration,
            mutating_name=self.mutating_configuration,
            namespace_selector=self.namespace_selector,
            timeout_seconds=self.timeout_seconds,
        )

    def dns_names(self) -> list[str]:
        """The names the serving certificate must carry."""
        service = f"{self.service_name}.{self.namespace}.svc"
        return [service, f"{service}.cluster.local"]

    def ip_addresses(self) -> list[str]:
        """IP SANs: the loopback address the URL mode is called on."""
        return ["127.0.0.1"] if self.url_base else []


def _or_none(value: str | None) -> str | None:
    return value or None


WEBHOOK_FLAGS = (
    Flag(
        "webhooks",
        switch=True,
        default=None,
        field="enabled",  # None (not said) is decided in webhook_options_from_args
        help="serve the admission webhooks; --no-webhooks (or --webhook-port=0) serves none "
        "(default: in a cluster, or with --webhook-url-base or --webhook-cert-dir)",
    ),
    Flag(
        "webhook-host",
        field="host",
        help="webhook listen address (default: all interfaces; 127.0.0.1 with a URL base)",
    ),
    Flag(
        "webhook-url-base",
        default=None,
        field="url_base",
        finish=_or_none,
        help="out of a cluster: register webhooks called at this https://host:port",
    ),
    Flag(
        "webhook-cert-dir",
        field="cert_dir",
        finish=optional_path,
        help="serve tls.crt/tls.key from this directory (cert-manager) instead of a "
        "self-managed certificate",
    ),
    Flag(
        "webhook-namespace",
        default=None,
        field="namespace",  # None (not said): webhook_options_from_args' default_namespace
        help="the operator's namespace: certificate Secret, webhook Service (default: the "
        "Lease namespace)",
    ),
    Flag(
        "webhook-service-name",
        field="service_name",
        help="webhook Service name (default: %(default)s)",
    ),
    Flag(
        "webhook-secret-name",
        field="secret_name",
        help="self-managed certificate Secret name (default: %(default)s)",
    ),
)
"""The webhook flags, each filling its `WebhookOptions` field (see `flags`); the port is
`Settings.webhook_port` (`--webhook-port`, a flag of `settings.RUN_FLAGS`)."""


def add_webhook_arguments(
    parser: argparse.ArgumentParser, *, environ: Mapping[str, str] | None = None
) -> None:
    """Add the webhook flags (defaults from RAY_OPERATOR_* env vars) to `parser`."""
    add_flags(parser, WEBHOOK_FLAGS, options=WebhookOptions, environ=environ)


def webhook_options_from_args(
    args: argparse.Namespace, *, port: int, default_namespace: str
) -> WebhookOptions:
    """The `WebhookOptions` described by parsed arguments (`port` from `Settings.webhook_port`).

    Port 0 means no webhooks; asking for webhooks on port 0 is a contradiction (ValueError).
    """
    fields = flag_fields(args, WEBHOOK_FLAGS)
    enabled = fields["enabled"]
    if port == 0:
        if enabled:
            raise ValueError("--webhooks needs a --webhook-port other than 0 (0 means off)")
        enabled = False
    if enabled is None:
        in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        enabled = in_cluster or bool(fields["url_base"] or fields["cert_dir"])
    fields |= {
        "enabled": enabled,
        "port": port,
        "namespace": fields["namespace"] or default_namespace,
    }
    return WebhookOptions(**fields)
