"""The only door to the Kubernetes API: generic verbs on any kind, plain dicts in and out.

`KubeClient` wraps kubernetes-asyncio's `ApiClient` for what it does well — kubeconfig/in-cluster
credentials, TLS, token refresh, the aiohttp connection pool — and skips its generated OpenAPI
models: requests go out through `ApiClient.call_api(..., _preload_content=False)` and responses are
parsed straight into dicts, which is what the cache keeps and several times cheaper.

Everything that can fail is mapped here, once, to `runtime.errors` (the tree is in that module's
docstring); every request is counted in `ray_operator_api_requests_total{verb,code}`. Mutating verbs
first ask the optional `write_guard`, which raises `NotLeader` when this replica may no longer
write (see `leader.py`): a replica that lost its lease cannot write even if a reconcile is still
running.

    client = KubeClient(api, metrics=metrics)
    pod = await client.get(POD, "head-0", namespace="ns")
    await client.patch(RAY_CLUSTER, "c", {"metadata": {"labels": {...}}}, namespace="ns")
    await client.patch_status(RAY_CLUSTER, "c", {"status": {...}}, namespace="ns")
    await client.apply(SERVICE, service_dict)              # server-side apply, our field manager
    await client.delete(POD, "worker-1", namespace="ns", uid=pod_uid)
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import aiohttp

from ray_operator.lean_imports import defer_unneeded_imports
from ray_operator.runtime.errors import (
    Conflict,
    KubeError,
    NotFound,
    TransportError,
    error_from_status,
)
from ray_operator.spec.kinds import OPERATOR_NAME, Kind, Viewed

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

    from ray_operator.metrics import Metrics

logger = logging.getLogger(__name__)

Object = dict[str, Any]
"""An API object as JSON: what the client returns and the cache stores."""

_MUTATING_VERBS = frozenset({"create", "update", "patch", "apply", "delete"})

CreateObserver = Callable[[str, Object], None]
"""Told `(kind name, the object as stored)` after each create (`with_create_observer`)."""


class PatchType(enum.StrEnum):
    """The patch flavours the API server accepts (the value is the Content-Type)."""

    MERGE = "application/merge-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"
    JSON = "application/json-patch+json"
    APPLY = "application/apply-patch+yaml"


@dataclass(frozen=True, slots=True)
class ObjectList:
    """The result of a list: the items and the resourceVersion to start watching from."""

    items: list[Object]
    resource_version: str


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One line of a watch stream: ADDED, MODIFIED, DELETED, BOOKMARK or ERROR, and its object."""

    type: str
    object: Object


SERVICE_ACCOUNT_DIR_ENV = "RAY_OPERATOR_SERVICE_ACCOUNT_DIR"
"""Where in-cluster credentials (`token`, `ca.crt`) are read from when set; unset (always, in a
Pod): the kubelet's mount, /var/run/secrets/kubernetes.io/serviceaccount. Tests set it to run the
operator process exactly as in a Pod, with the ServiceAccount token a Pod would get."""


REQUEST_CONNECTIONS = 100
"""Connections for requests, beside those watches hold (kubernetes-asyncio's pool size)."""


async def load_api_client(kubeconfig: Path | None, *, watches: int = 0) -> ApiClient:
    """Credentials: `kubeconfig`, else in-cluster, else $KUBECONFIG or ~/.kube/config.

    `watches`: how many watches will run at once. Each holds a pooled connection for as long as
    it runs, so the pool gets that many on top of `REQUEST_CONNECTIONS`: with 13 watches per
    namespace, a fixed pool of 100 would be all watches at 8 namespaces, and every write would
    wait for a free connection forever.
    """
    defer_unneeded_imports()  # ~36 MiB of generated modules we never use (see lean_imports)
    from kubernetes_asyncio import client as kube_client
    from kubernetes_asyncio import config as kube_config

    configuration = kube_client.Configuration()
    configuration.connection_pool_maxsize = watches + REQUEST_CONNECTIONS
    if kubeconfig is not None:
        await kube_config.load_kube_config(
            config_file=str(kubeconfig), client_configuration=configuration
        )
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        kube_config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration, **_service_account_files()
        )
    else:
        # kubernetes-asyncio's default location honours $KUBECONFIG, then ~/.kube/config.
        await kube_config.load_kube_config(client_configuration=configuration)
    api = kube_client.ApiClient(configuration=configuration)
    _stop_environment_lookups(api)
    return api


def _service_account_files() -> dict[str, str]:
    directory = os.environ.get(SERVICE_ACCOUNT_DIR_ENV)
    if not directory:
        return {}  # kubernetes-asyncio's defaults: the kubelet's mount
    return {
        "token_filename": str(Path(directory) / "token"),
        "cert_filename": str(Path(directory) / "ca.crt"),
    }


def _stop_environment_lookups(api: ApiClient) -> None:
    """Swap kubernetes-asyncio's HTTP session for one that does not trust the environment.

    With `trust_env=True` aiohttp looks for ~/.netrc in a thread-pool job on every request: a
    quarter of the operator's CPU while it creates Pods (profiled with py-spy in the M1
    benchmark). A proxy named in the kubeconfig still applies: kubernetes-asyncio passes it with
    each request; only the HTTP(S)_PROXY environment variables are no longer read.
    """
    rest = api.rest_client
    trusting = rest.pool_manager
    rest.pool_manager = aiohttp.ClientSession(
        connector=trusting.connector,
        trust_env=False,
        # As kubernetes-asyncio sets it: watch lines carry objects up to etcd's 1.5 MiB.
        read_bufsize=2**21,
    )
    trusting.detach()  # hands the connection pool over without closing it


class KubeClient:
    """Generic create/get/list/patch/apply/delete/watch on any `Kind`, with dicts in and out."""

    def __init__(
        self,
        api: ApiClient,
        *,
        metrics: Metrics,
        field_manager: str = OPERATOR_NAME,
        request_timeout: float = 30.0,
        write_guard: Callable[[], None] | None = None,
        create_observer: CreateObserver | None = None,
    ) -> None:
        self._api = api
        self._metrics = metrics
        self._field_manager = field_manager
        self._request_timeout = request_timeout
        self._write_guard = write_guard
        self._create_observer = create_observer

    def with_write_guard(self, write_guard: Callable[[], None]) -> KubeClient:
        """A client sharing this one's connections whose writes first call `write_guard`."""
        return self._sharing(write_guard=write_guard, create_observer=self._create_observer)

    def with_create_observer(self, observer: CreateObserver) -> KubeClient:
        """A client sharing this one's connections (and write guard) that tells `observer` of
        every object it created, as the API server stored it (the local Ray agent's record of
        the Pods and Jobs the operator made)."""
        return self._sharing(write_guard=self._write_guard, create_observer=observer)

    def _sharing(
        self, *, write_guard: Callable[[], None] | None, create_observer: CreateObserver | None
    ) -> KubeClient:
        return KubeClient(
            self._api,
            metrics=self._metrics,
            field_manager=self._field_manager,
            request_timeout=self._request_timeout,
            write_guard=write_guard,
            create_observer=create_observer,
        )

    async def close(self) -> None:
        """Close the connection pool (owned by the underlying `ApiClient`)."""
        await self._api.close()

    async def get(
        self,
        kind: Kind[Viewed],
        name: str,
        *,
        namespace: str | None = None,
        request_timeout: float | None = None,
    ) -> Viewed:
        """One object, read from the API server (controllers read the cache instead)."""
        stored = await self._call(
            "get",
            "GET",
            kind.path(namespace=namespace, name=name),
            what=_what("get", kind, namespace, name),
            request_timeout=request_timeout,
        )
        return cast("Viewed", stored)  # what the API server stores of `kind`: its view

    async def list(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        request_timeout: float | None = None,
        keep: Callable[[Object], Object] | None = None,
    ) -> ObjectList:
        """All objects of a kind (in a namespace, matching selectors), following pagination.

        `keep` is applied to each item as its page arrives (the watch cache passes what it
        keeps of an object), so only one page of full objects is in memory at a time.
        """
        items: list[Object] = []
        query: dict[str, str] = {"limit": str(page_size)}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        while True:
            page = await self._call(
                "list",
                "GET",
                kind.path(namespace=namespace),
                query=query,
                what=_what("list", kind, namespace, None),
                request_timeout=request_timeout,
            )
            for item in page.get("items") or ():
                kind.with_type_meta(item)
                items.append(item if keep is None else keep(item))
            metadata = page.get("metadata") or {}
            if not metadata.get("continue"):
                return ObjectList(items, str(metadata.get("resourceVersion", "")))
            query["continue"] = metadata["continue"]

    async def create(
        self,
        kind: Kind[Viewed],
        body: Mapping[str, Any],
        *,
        namespace: str | None = None,
        request_timeout: float | None = None,
        dry_run: bool = False,
    ) -> Viewed:
        """Create `body`; its namespace comes from `namespace` or its own metadata. `dry_run`:
        admitted and answered as stored, but not stored (`dryRun=All`)."""
        namespace = namespace or body.get("metadata", {}).get("namespace")
        name = body.get("metadata", {}).get("name") or body.get("metadata", {}).get("generateName")
        query = self._manager_query()
        if dry_run:
            query["dryRun"] = "All"
        stored = await self._call(
            "create",
            "POST",
            kind.path(namespace=namespace),
            body=body,
            query=query,
            what=_what("create", kind, namespace, name),
            request_timeout=request_timeout,
        )
        if self._create_observer is not None and not dry_run:
            self._create_observer(kind.kind, stored)
        return cast("Viewed", stored)  # what the API server stores of `kind`: its view

    async def replace(
        self, kind: Kind[Viewed], body: Mapping[str, Any], *, request_timeout: float | None = None
    ) -> Viewed:
        """PUT the whole object; its metadata.resourceVersion makes it a compare-and-swap."""
        metadata = body["metadata"]
        namespace, name = metadata.get("namespace"), metadata["name"]
        stored = await self._call(
            "update",
            "PUT",
            kind.path(namespace=namespace, name=name),
            body=body,
            query=self._manager_query(),
            what=_what("update", kind, namespace, name),
            request_timeout=request_timeout,
        )
        return cast("Viewed", stored)  # what the API server stores of `kind`: its view

    async def patch(
        self,
        kind: Kind[Viewed],
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
        request_timeout: float | None = None,
    ) -> Viewed:
        """Patch one object (merge by default; strategic or JSON patch on request)."""
        path = kind.path(namespace=namespace, name=name)
        if subresource:
            path = f"{path}/{subresource}"
        stored = await self._call(
            "patch",
            "PATCH",
            path,
            body=patch,
            content_type=patch_type,
            query=self._manager_query(),
            what=_what("patch", kind, namespace, name),
            request_timeout=request_timeout,
        )
        return cast("Viewed", stored)  # what the API server stores of `kind`: its view

    async def patch_status(
        self,
        kind: Kind[Viewed],
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.MERGE,
    ) -> Viewed:
        """Patch the status subresource (e.g. `{"status": {...}}`)."""
        return await self.patch(
            kind, name, patch, namespace=namespace, patch_type=patch_type, subresource="status"
        )

    async def apply(
        self,
        kind: Kind[Viewed],
        body: Mapping[str, Any],
        *,
        force: bool = True,
        subresource: str | None = None,
        request_timeout: float | None = None,
    ) -> Viewed:
        """Server-side apply `body` (with apiVersion, kind, name) as our field manager."""
        metadata = body["metadata"]
        namespace, name = metadata.get("namespace"), metadata["name"]
        path = kind.path(namespace=namespace, name=name)
        if subresource:
            path = f"{path}/{subresource}"
        query = {"fieldManager": self._field_manager, "force": "true" if force else "false"}
        stored = await self._call(
            "apply",
            "PATCH",
            path,
            body=body,
            content_type=PatchType.APPLY,
            query=query,
            what=_what("apply", kind, namespace, name),
            request_timeout=request_timeout,
        )
        return cast("Viewed", stored)  # what the API server stores of `kind`: its view

    async def delete(
        self,
        kind: Kind,
        name: str,
        *,
        namespace: str | None = None,
        uid: str | None = None,
        propagation_policy: str = "Background",
        request_timeout: float | None = None,
    ) -> None:
        """Delete one object; with `uid`, only that incarnation of the name (a precondition)."""
        options: dict[str, Any] = {"propagationPolicy": propagation_policy}
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        await self._call(
            "delete",
            "DELETE",
            kind.path(namespace=namespace, name=name),
            body=options,
            what=_what("delete", kind, namespace, name),
            request_timeout=request_timeout,
        )

    async def delete_seen(self, kind: Kind, obj: Mapping[str, Any]) -> None:
        """Delete `obj` as it was seen, its uid a precondition: already gone, or replaced by a
        new object of that name meanwhile (409), is nothing left to do."""
        metadata = obj["metadata"]
        with contextlib.suppress(NotFound, Conflict):
            await self.delete(
                kind, metadata["name"], namespace=metadata.get("namespace"), uid=metadata.get("uid")
            )

    async def delete_collection(
        self,
        kind: Kind,
        *,
        namespace: str,
        label_selector: str,
        request_timeout: float | None = None,
    ) -> None:
        """Delete every object of `kind` in `namespace` matching `label_selector`, in one call."""
        await self._call(
            "delete",
            "DELETE",
            kind.path(namespace=namespace),
            query={"labelSelector": label_selector},
            body={"propagationPolicy": "Background"},
            what=_what("delete", kind, namespace, f"-l {label_selector}"),
            request_timeout=request_timeout,
        )

    async def watch(
        self,
        kind: Kind,
        *,
        namespace: str | None = None,
        resource_version: str | None,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
        inactivity_timeout: float = 330.0,
        send_initial_events: bool = False,
    ) -> AsyncGenerator[WatchEvent, None]:
        """Stream events after `resource_version` until the server closes the watch.

        `timeout_seconds` asks the server to end the stream cleanly; `inactivity_timeout` ends it
        from our side (as `TransportError`) when no byte arrived for that long, so a silently
        stalled connection is noticed. Bookmarks are requested so a resume point stays fresh.

        `send_initial_events`: a streaming list (Kubernetes' WatchList, KEP-3157): the stream
        begins with an ADDED event per existing object, as of a consistent read when
        `resource_version` is None, then a BOOKMARK annotated `k8s.io/initial-events-end`, then
        goes on as a watch. A server without the feature refuses it (400/422).
        """
        query = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        if resource_version is not None:
            query["resourceVersion"] = resource_version
        if send_initial_events:
            query["sendInitialEvents"] = "true"
            query["resourceVersionMatch"] = "NotOlderThan"
        if label_selector:
            query["labelSelector"] = label_selector
        what = _what("watch", kind, namespace, None)
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self._request_timeout, sock_read=inactivity_timeout
        )
        response = await self._send(
            "watch",
            "GET",
            kind.path(namespace=namespace),
            query=query,
            body=None,
            content_type=None,
            client_timeout=timeout,
            what=what,
        )
        try:
            if response.status >= 400:
                raise error_from_status(response.status, await _json_or_none(response), what=what)
            while True:
                try:
                    line = await response.content.readline()
                except (aiohttp.ClientError, TimeoutError, ValueError) as error:
                    raise TransportError(f"{what}: stream broke: {_describe(error)}") from error
                if not line:
                    return
                if line.strip():
                    event = json.loads(line)
                    yield WatchEvent(str(event.get("type")), event.get("object") or {})
        finally:
            response.release()

    def _manager_query(self) -> dict[str, str]:
        return {"fieldManager": self._field_manager}

    async def _call(
        self,
        verb: str,
        method: str,
        path: str,
        *,
        what: str,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
        request_timeout: float | None = None,
    ) -> Object:
        if verb in _MUTATING_VERBS and self._write_guard is not None:
            self._write_guard()
        seconds = request_timeout if request_timeout is not None else self._request_timeout
        response = await self._send(
            verb,
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            what=what,
            client_timeout=aiohttp.ClientTimeout(total=seconds),
        )
        try:
            try:
                data = await response.read()
            except (aiohttp.ClientError, TimeoutError) as error:
                raise TransportError(f"{what}: {_describe(error)}") from error
        finally:
            response.release()
        try:
            parsed = json.loads(data) if data else {}
        except ValueError:
            # Not every failure is a Status: an unknown path answers "404 page not found".
            parsed = {"message": data[:200].decode(errors="replace").strip()}
        if response.status >= 400:
            raise error_from_status(
                response.status, parsed if isinstance(parsed, dict) else None, what=what
            )
        if not isinstance(parsed, dict):
            raise TransportError(f"{what}: the answer is not a JSON object")
        return parsed

    async def _send(
        self,
        verb: str,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None,
        body: Any,
        content_type: str | None,
        client_timeout: aiohttp.ClientTimeout,
        what: str,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": "application/json"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        started = time.perf_counter()
        try:
            response: aiohttp.ClientResponse = await self._api.call_api(
                path,
                method,
                query_params=list((query or {}).items()),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=client_timeout,
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            self._metrics.api_requests_total.labels(verb, "error").inc()
            raise TransportError(f"{what}: {_describe(error)}") from error
        finally:
            self._metrics.api_request_duration_seconds.labels(verb).observe(
                time.perf_counter() - started
            )
        self._metrics.api_requests_total.labels(verb, str(response.status)).inc()
        return response


def _what(verb: str, kind: Kind, namespace: str | None, name: str | None) -> str:
    target = "/".join(part for part in (namespace, name) if part)
    return f"{verb} {kind.key_kind} {target}".rstrip()


def _describe(error: BaseException) -> str:
    # aiohttp's messages name the host and port, never headers: safe to show.
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


async def _json_or_none(response: aiohttp.ClientResponse) -> dict[str, Any] | None:
    try:
        parsed = json.loads(await response.read())
    except (ValueError, aiohttp.ClientError, TimeoutError):
        return None
    return parsed if isinstance(parsed, dict) else None


__all__ = [
    "KubeClient",
    "KubeError",
    "Object",
    "ObjectList",
    "PatchType",
    "WatchEvent",
    "load_api_client",
]
