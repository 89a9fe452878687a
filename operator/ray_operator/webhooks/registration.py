"""The Validating/MutatingWebhookConfigurations: built here, and kept trusting our CA.

Two ways to be reached:
- in a cluster, through the webhook Service (`clientConfig.service`): the configurations come
  from the install (config/webhook); the operator only writes its CA into their `caBundle`
  (RBAC lets it update those two objects and no others), and never deletes them.
- outside a cluster (`make run`, tests), at a URL such as `https://127.0.0.1:9443`
  (`clientConfig.url`): nothing installed them, so the operator owns them whole — it applies
  both configurations at start and whenever its CA changes, and deletes them when it stops
  (`failurePolicy: Fail` pointing at a dead port would block every ray.io write).

Either way the webhooks fail closed, time out after 5 seconds, have no side effects, speak
AdmissionReview v1 only, and skip the operator's own namespace (in the URL mode there is no
Pod to protect, so by default no namespace is skipped).
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from typing import Any

from ray_operator.runtime.client import KubeClient, Object
from ray_operator.runtime.errors import Conflict, KubeError, NotFound
from ray_operator.spec.kinds import Kind
from ray_operator.webhooks.handlers import admission_paths
from ray_operator.webhooks.options import WebhookEndpoint
from ray_operator.webhooks.review import ADMISSION_KINDS, AdmissionKind

logger = logging.getLogger(__name__)

VALIDATING_WEBHOOK_CONFIGURATION = Kind(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    namespaced=False,
)
MUTATING_WEBHOOK_CONFIGURATION = Kind(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    namespaced=False,
)
WEBHOOK_NAME_SUFFIX = "ray-operator.io"
_NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


def webhook_configurations(endpoint: WebhookEndpoint, *, ca_bundle: bytes) -> tuple[Object, Object]:
    """The (validating, mutating) configurations for every kind, trusting `ca_bundle`."""
    validating, mutating = [], []
    for kind in ADMISSION_KINDS:
        validate_path, mutate_path = admission_paths(kind)
        common = _webhook(endpoint, kind)
        validating.append(
            {
                "name": f"v{kind.singular}.{WEBHOOK_NAME_SUFFIX}",
                "clientConfig": _client_config(endpoint, validate_path, ca_bundle),
                **common,
            }
        )
        mutating.append(
            {
                "name": f"m{kind.singular}.{WEBHOOK_NAME_SUFFIX}",
                "clientConfig": _client_config(endpoint, mutate_path, ca_bundle),
                "reinvocationPolicy": "Never",
                **common,
            }
        )
    return (
        _configuration(VALIDATING_WEBHOOK_CONFIGURATION, endpoint.validating_name, validating),
        _configuration(MUTATING_WEBHOOK_CONFIGURATION, endpoint.mutating_name, mutating),
    )


def _webhook(endpoint: WebhookEndpoint, kind: AdmissionKind) -> dict[str, Any]:
    return {
        "rules": [
            {
                "apiGroups": [kind.group],
                "apiVersions": [kind.version],
                "operations": ["CREATE", "UPDATE"],
                "resources": [kind.plural],
                "scope": "Namespaced",
            }
        ],
        "failurePolicy": "Fail",
        "matchPolicy": "Equivalent",
        "sideEffects": "None",
        "timeoutSeconds": endpoint.timeout_seconds,
        "admissionReviewVersions": ["v1"],
        "namespaceSelector": dict(_namespace_selector(endpoint)),
    }


def _namespace_selector(endpoint: WebhookEndpoint) -> Mapping[str, Any]:
    if endpoint.namespace_selector is not None:
        return endpoint.namespace_selector
    if endpoint.owns_configurations:
        return {}
    # A broken webhook must never lock the operator out of its own namespace.
    expression = {
        "key": _NAMESPACE_NAME_LABEL,
        "operator": "NotIn",
        "values": [endpoint.service_namespace],
    }
    return {"matchExpressions": [expression]}


def _client_config(endpoint: WebhookEndpoint, path: str, ca_bundle: bytes) -> dict[str, Any]:
    encoded = base64.b64encode(ca_bundle).decode()
    if endpoint.url_base is not None:
        return {"url": endpoint.url_base.rstrip("/") + path, "caBundle": encoded}
    service = {
        "name": endpoint.service_name,
        "namespace": endpoint.service_namespace,
        "path": path,
        "port": endpoint.service_port,
    }
    return {"service": service, "caBundle": encoded}


def _configuration(kind: Kind, name: str, webhooks: list[dict[str, Any]]) -> Object:
    return {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": {
            "name": name,
            "labels": {
                "app.kubernetes.io/name": "ray-operator",
                "app.kubernetes.io/component": "webhook",
            },
        },
        "webhooks": webhooks,
    }


class Registrar:
    """Publishes our CA bundle to the webhook configurations (and owns them in the URL mode)."""

    def __init__(self, client: KubeClient, endpoint: WebhookEndpoint) -> None:
        self._client = client
        self._endpoint = endpoint

    async def publish(self, ca_bundle: bytes) -> None:
        """Make both configurations trust `ca_bundle` (apply them whole in the URL mode)."""
        validating, mutating = webhook_configurations(self._endpoint, ca_bundle=ca_bundle)
        for kind, body in (
            (VALIDATING_WEBHOOK_CONFIGURATION, validating),
            (MUTATING_WEBHOOK_CONFIGURATION, mutating),
        ):
            if self._endpoint.owns_configurations:
                await self._client.apply(kind, body)
            else:
                await self._set_ca_bundle(kind, body["metadata"]["name"], ca_bundle)

    async def withdraw(self) -> None:
        """Delete the configurations if the operator owns them (URL mode); best effort."""
        if not self._endpoint.owns_configurations:
            return
        for kind, name in (
            (VALIDATING_WEBHOOK_CONFIGURATION, self._endpoint.validating_name),
            (MUTATING_WEBHOOK_CONFIGURATION, self._endpoint.mutating_name),
        ):
            try:
                await self._client.delete(kind, name, request_timeout=5.0)
            except NotFound:
                continue
            except KubeError as error:
                logger.warning("could not delete %s %s: %s", kind, name, error)
                continue
            logger.info("deleted %s %s", kind, name)

    async def _set_ca_bundle(self, kind: Kind, name: str, ca_bundle: bytes) -> None:
        encoded = base64.b64encode(ca_bundle).decode()
        for _ in range(3):
            try:
                configuration = await self._client.get(kind, name)
            except NotFound:
                logger.warning(
                    "%s %s is not installed: the API server will not call the "
                    "webhooks (install config/webhook)",
                    kind,
                    name,
                )
                return
            webhooks = configuration.get("webhooks") or []
            if all((w.get("clientConfig") or {}).get("caBundle") == encoded for w in webhooks):
                return
            for webhook in webhooks:
                webhook.setdefault("clientConfig", {})["caBundle"] = encoded
            try:
                await self._client.replace(kind, configuration)
            except Conflict:
                continue  # changed under us: read it again
            logger.info("wrote the webhook CA bundle into %s %s", kind, name)
            return
