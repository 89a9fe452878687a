"""The webhooks as one root task: certificate, TLS server, registration, rotation — in order.

`Webhooks(options, client=...).run()` is what the operator starts (task `webhooks`, on every
replica; `webhook_component(options)` is the factory `app.run(..., components=[...])` takes).
Its order matters:

1. get the serving material (self-managed Secret or cert-manager's directory), retrying API
   errors with backoff — nothing can be served without a certificate;
2. load it into the live SSLContext and start listening (TLS, `options.port`), every request read
   within `read_limits` (header and body timeouts, the body cap, the bodies and connections held
   at once: `handlers.REVIEW_READ_LIMITS`) and answered off the event loop (`handlers.py`); a
   TLS handshake gets `read_limits.handshake_seconds` (10 s);
3. publish the CA bundle to the webhook configurations (in the URL mode: create them) — only
   now, so the API server is never told to call a port that does not answer yet;
4. every `check_interval` (sooner when a renewal is due) look again; on a change publish the new
   CA bundle *before* serving the new certificate, so the API server already trusts it.

On the way out (cancelled at shutdown) the URL mode deletes its configurations, so a stopped
`make run` does not leave `failurePolicy: Fail` pointing at a dead port.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import ssl
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn

from ray_operator.features import FeatureGates
from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.errors import KubeError
from ray_operator.server import BoundedSite, ReadLimits, bounded_runner, start_site
from ray_operator.settings import cluster_limits
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.webhooks.certificates import (
    CertificateSource,
    DirectoryCertificates,
    SelfManagedCertificates,
    ServingMaterial,
)
from ray_operator.webhooks.handlers import REVIEW_READ_LIMITS, admission_application
from ray_operator.webhooks.options import WebhookOptions
from ray_operator.webhooks.registration import Registrar
from ray_operator.webhooks.tls import ServingCertificate

if TYPE_CHECKING:
    # Annotations only: the app imports its components' factories, never the reverse at run time.
    from ray_operator.components import ComponentContext
    from ray_operator.metrics import Metrics

logger = logging.getLogger(__name__)

_RETRY_DELAYS = (1.0, 2.0, 5.0, 10.0, 30.0)


class Webhooks:
    """The admission webhooks of one replica."""

    def __init__(
        self,
        options: WebhookOptions,
        *,
        client: KubeClient,
        limits: ClusterLimits = DEFAULT_LIMITS,
        gates: FeatureGates | None = None,
        read_limits: ReadLimits = REVIEW_READ_LIMITS,
        metrics: Metrics | None = None,
    ) -> None:
        self.options = options
        self.metrics = metrics
        """Where the answers are counted and timed (none: not measured)."""
        self.limits = limits
        """The bounds validation applies (`--max-pods-per-cluster`), as the controllers do."""
        self.gates = gates or FeatureGates()
        """The feature gates (`--feature-gates`): a kind whose gate is off is refused by name."""
        self.read_limits = read_limits
        self.serving = ServingCertificate()
        self.registrar = Registrar(client, options.endpoint())
        self.source: CertificateSource
        if options.cert_dir is not None:
            # cert-manager's cainjector fills the caBundle in a cluster; out of one, we do.
            self.source = DirectoryCertificates(
                options.cert_dir, publish_ca=options.url_base is not None
            )
        else:
            self.source = SelfManagedCertificates(
                client,
                namespace=options.namespace,
                secret_name=options.secret_name,
                dns_names=options.dns_names(),
                ip_addresses=options.ip_addresses(),
                validity=options.certificate_validity,
                ca_validity=options.ca_validity,
            )
        self.serving_started = asyncio.Event()
        """Set once the server listens with a certificate and the CA bundle was published."""
        self._published_ca: bytes | None = None

    async def run(self) -> NoReturn:
        """Serve until cancelled (see the module docstring for the order of things)."""
        material = await self._load_with_retries()
        self.serving.load(material.serving)
        application = admission_application(
            limits=self.limits,
            gates=self.gates,
            read_limits=self.read_limits,
            metrics=self.metrics,
        )
        runner = bounded_runner(application, self.read_limits)
        await runner.setup()
        try:
            site = BoundedSite(
                runner,
                self.options.listen_host,
                self.options.port,
                limits=self.read_limits,
                ssl_context=self.serving.context,
            )
            await start_site(
                site,
                host=self.options.listen_host,
                port=self.options.port,
                flags=("--webhook-port",),
            )
            logger.info(
                "serving admission webhooks on https://%s:%d",
                self.options.listen_host,
                self.options.port,
            )
            try:
                await self._publish(material)
            except KubeError as error:
                # Keep serving (other replicas may have published); retried every round.
                logger.warning("could not publish the webhook CA bundle: %s", error)
            self.serving_started.set()
            await self._keep_current(material)
        finally:
            await self.registrar.withdraw()
            await runner.cleanup()

    async def _keep_current(self, material: ServingMaterial) -> NoReturn:
        while True:
            await asyncio.sleep(self._seconds_until_next_look(material))
            try:
                latest = await self.source.load()
                await self._publish(latest)
            except (KubeError, OSError, ValueError) as error:
                logger.warning("could not refresh the webhook certificate: %s", error)
                continue
            if latest.serving.cert_pem != material.serving.cert_pem:
                try:
                    self.serving.load(latest.serving)
                except ssl.SSLError as error:
                    logger.warning("not serving the new webhook certificate: %s", error)
                    continue
                logger.info(
                    "now serving a new webhook certificate (valid until %s)",
                    latest.serving.not_after.isoformat(),
                )
            material = latest

    async def _load_with_retries(self) -> ServingMaterial:
        for attempt in range(len(_RETRY_DELAYS) + 1):
            try:
                return await self.source.load()
            except (KubeError, OSError, ValueError) as error:
                delay = _RETRY_DELAYS[min(attempt, len(_RETRY_DELAYS) - 1)]
                logger.warning("no webhook certificate yet (%s); retrying in %.0fs", error, delay)
                await asyncio.sleep(delay)
        return await self.source.load()  # the last try raises: the operator stops, visibly

    async def _publish(self, material: ServingMaterial) -> None:
        if material.ca_bundle is None:
            return  # cert-manager's cainjector publishes it
        if material.ca_bundle == self._published_ca and not self.registrar_needs_refresh:
            return
        await self.registrar.publish(material.ca_bundle)
        self._published_ca = material.ca_bundle

    @property
    def registrar_needs_refresh(self) -> bool:
        # In the Service mode the installed configurations may be re-applied without a
        # caBundle (a fresh `kubectl apply -k`): look at them on every round. Cheap: a GET each.
        return not self.options.endpoint().owns_configurations

    def _seconds_until_next_look(self, material: ServingMaterial) -> float:
        interval = self.options.check_interval
        if material.renew_at is None:
            return interval
        due = (material.renew_at - datetime.datetime.now(datetime.UTC)).total_seconds()
        return max(0.1, min(interval, due))


def webhook_component(
    options: WebhookOptions, *, limits: ClusterLimits | None = None
) -> Callable[[ComponentContext], Webhooks]:
    """The component factory for `app.run(settings, components=[...])`; `limits`: the operator's
    one `ClusterLimits` (by default built from the context's settings)."""

    def build(context: ComponentContext) -> Webhooks:
        # The unguarded client: a standby replica must keep its certificate current too.
        return Webhooks(
            options,
            client=context.client,
            limits=limits if limits is not None else cluster_limits(context.settings),
            gates=context.settings.feature_gates,
            metrics=context.metrics,
        )

    return build
