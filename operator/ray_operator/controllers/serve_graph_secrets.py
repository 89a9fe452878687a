"""The Secrets a RayServeGraph's source names, read for one fetch: the bearer token
(`spec.source.tokenSecretRef`, sent only when the Secret opted in for the URL's host and, if it
lists graphs, for this graph: `spec.fetch_urls.check_secret_opt_in`) and the CA bundle
(`spec.source.caBundleSecretRef`).

Each is read by name at each fetch (`get`, never list or watch: least privilege) and decoded by
`spec.secret_values`, the reader the event endpoint's refresh secret goes through too. What goes
wrong is a `FetchFailure` naming the Secret, the key and the field, never a value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ray_operator.controllers.serve_graph_documents import FetchFailure
from ray_operator.runtime.errors import Forbidden, NotFound
from ray_operator.spec.fetch_types import ArtifactFetchError
from ray_operator.spec.fetch_urls import check_secret_opt_in
from ray_operator.spec.kinds import SECRET
from ray_operator.spec.secret_values import SecretValueError, secret_value

if TYPE_CHECKING:
    from ray_operator.runtime.client import KubeClient

Object = Mapping[str, Any]


class SourceSecrets:
    """Reads the token and CA bundle Secrets a graph's `spec.source` names."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def token(self, rsg: Object, source: Object) -> str | None:
        """The bearer token, if the spec names one and its Secret opted in for this URL."""
        reference = source.get("tokenSecretRef")
        if not reference:
            return None
        secret = await self._read(rsg, reference, field="spec.source.tokenSecretRef")
        url, graph_name = str(source.get("url") or ""), str(rsg["metadata"]["name"])
        try:
            check_secret_opt_in(secret, url=url, graph_name=graph_name)
        except ArtifactFetchError as error:
            raise FetchFailure(error.reason, error.message, retryable=error.retryable) from None
        raw = _secret_value(secret, reference, field="spec.source.tokenSecretRef")
        try:
            # Surrounding whitespace is a `echo` artefact, never part of a token (and a newline
            # is not allowed in a header).
            return raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise FetchFailure(
                "SecretNotFound",
                f"key {reference.get('key')!r} of Secret {reference.get('name')} "
                "(spec.source.tokenSecretRef) is not UTF-8 text",
                retryable=False,
            ) from None

    async def ca_bundle(self, rsg: Object, source: Object) -> bytes | None:
        """The CA bundle to trust for the URL, if the spec names one."""
        reference = source.get("caBundleSecretRef")
        if not reference:
            return None
        secret = await self._read(rsg, reference, field="spec.source.caBundleSecretRef")
        return _secret_value(secret, reference, field="spec.source.caBundleSecretRef")

    async def _read(self, rsg: Object, reference: Object, *, field: str) -> Object:
        """`get` on the Secret by name: no list or watch of Secrets (least privilege)."""
        namespace, name = rsg["metadata"]["namespace"], str(reference.get("name") or "")
        try:
            return await self._client.get(SECRET, name, namespace=namespace)
        except NotFound:
            raise FetchFailure(
                "SecretNotFound",
                f"Secret {namespace}/{name} named by {field} does not exist",
                retryable=False,
            ) from None
        except Forbidden:
            raise FetchFailure(
                "SecretForbidden",
                f"the operator may not read Secret {namespace}/{name} ({field}): bind the "
                f"ClusterRole ray-operator-serve-graph-secrets in namespace {namespace}, e.g. "
                f"kubectl create rolebinding ray-operator-serve-graph-secrets -n {namespace} "
                "--clusterrole=ray-operator-serve-graph-secrets "
                "--serviceaccount=<operator namespace>:ray-operator",
                retryable=False,
            ) from None


def _secret_value(secret: Object, reference: Object, *, field: str) -> bytes:
    """The decoded value of the referenced key; its absence is an error naming the key only."""
    try:
        return secret_value(secret, str(reference.get("key") or ""), named_by=field)
    except SecretValueError as error:
        raise FetchFailure("SecretNotFound", str(error), retryable=False) from None
