"""Where a RayCluster's dashboard (and its head's Serve proxy) can be reached from the operator.

A `DashboardResolver` turns a cached RayCluster (and, for Serve, its head Pod) into base URLs:

- `InClusterResolver` — the operator runs in the cluster: the head Service's DNS name,
  `http://<head-svc>.<ns>.svc.<domain>:<dashboard port>` (KubeRay's `FetchHeadServiceURL`), and
  the head Pod's IP for the Serve proxy health check.
- `StaticResolver` — explicit `<namespace>/<cluster>=<url>` entries (the cluster part may be a
  glob such as `ns/my-service-*`, since RayJob and RayService clusters get random suffixes), for
  an operator outside the cluster and for tests; anything unmatched goes to a fallback resolver.

Resolution is pure and synchronous: no I/O happens here.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ray_operator import labels as names
from ray_operator.builders.naming import head_service_name
from ray_operator.builders.services import head_ports

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster


Object = Mapping[str, Any]


class DashboardResolver(Protocol):
    """Finds the base URLs the operator uses to reach a cluster's Ray HTTP servers."""

    def dashboard_url(self, cluster: RayCluster) -> str | None:
        """The dashboard's base URL, or None when this resolver cannot tell."""
        ...

    def serve_proxy_url(self, cluster: RayCluster, head_pod: Pod) -> str | None:
        """The head's Serve HTTP proxy base URL, or None when this resolver cannot tell."""
        ...


class InClusterResolver:
    """Cluster DNS: the head Service for the dashboard, the head Pod IP for the Serve proxy."""

    def __init__(self, *, cluster_domain: str = names.DEFAULT_CLUSTER_DOMAIN) -> None:
        self._domain = cluster_domain

    def dashboard_url(self, cluster: RayCluster) -> str | None:
        return "http://" + dashboard_address(cluster, cluster_domain=self._domain)

    def serve_proxy_url(self, cluster: RayCluster, head_pod: Pod) -> str | None:
        ip = (head_pod.get("status") or {}).get("podIP")
        if not ip:
            return None
        port = head_ports(dict(cluster)).get(names.SERVE_PORT_NAME, names.SERVE_PORT)
        return f"http://{ip}:{port}"


class StaticResolver:
    """Explicit URLs by `<namespace>/<cluster>` (exact names win over globs), then a fallback."""

    def __init__(
        self,
        dashboards: Mapping[str, str],
        *,
        serve_proxies: Mapping[str, str] | None = None,
        fallback: DashboardResolver | None = None,
    ) -> None:
        self._dashboards = dict(dashboards)
        self._serve_proxies = dict(serve_proxies or {})
        self._fallback = fallback

    def dashboard_url(self, cluster: RayCluster) -> str | None:
        found = _lookup(self._dashboards, cluster)
        if found is None and self._fallback is not None:
            return self._fallback.dashboard_url(cluster)
        return found

    def serve_proxy_url(self, cluster: RayCluster, head_pod: Pod) -> str | None:
        found = _lookup(self._serve_proxies, cluster)
        if found is None and self._fallback is not None:
            return self._fallback.serve_proxy_url(cluster, head_pod)
        return found


def dashboard_address(
    cluster: RayCluster, *, cluster_domain: str = names.DEFAULT_CLUSTER_DOMAIN
) -> str:
    """`<head-svc>.<ns>.svc.<domain>:<port>`: what KubeRay stores as a RayJob's dashboardURL."""
    namespace = cluster.get("metadata", {}).get("namespace", "")
    port = head_ports(cluster).get(names.DASHBOARD_PORT_NAME, names.DASHBOARD_PORT)
    return f"{head_service_name(cluster)}.{namespace}.svc.{cluster_domain}:{port}"


def parse_overrides(entries: Iterable[str]) -> dict[str, str]:
    """`["ns/cluster=http://host:port", ...]` as a mapping; ValueError names a bad entry."""
    result: dict[str, str] = {}
    for entry in entries:
        key, separator, url = entry.partition("=")
        namespace, slash, cluster = key.strip().partition("/")
        if not separator or not slash or not namespace or not cluster:
            raise ValueError(f"expected <namespace>/<cluster>=<url>, got {entry!r}")
        if not url.strip().startswith(("http://", "https://")):
            raise ValueError(f"the URL of {key.strip()!r} must start with http:// or https://")
        result[f"{namespace}/{cluster}"] = url.strip().rstrip("/")
    return result


def _lookup(table: Mapping[str, str], cluster: RayCluster) -> str | None:
    metadata = cluster.get("metadata") or {}
    key = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
    if key in table:
        return table[key]
    for pattern, url in table.items():
        if fnmatch.fnmatchcase(key, pattern):
            return url
    return None


def resolver_from_overrides(
    dashboard_overrides: Iterable[str] = (),
    serve_proxy_overrides: Iterable[str] = (),
    *,
    cluster_domain: str = names.DEFAULT_CLUSTER_DOMAIN,
) -> DashboardResolver:
    """The operator's resolver: explicit overrides (Settings' `dashboard_url_overrides` and
    `serve_proxy_url_overrides`) first, the in-cluster addresses for everything else."""
    in_cluster = InClusterResolver(cluster_domain=cluster_domain)
    dashboards = parse_overrides(dashboard_overrides)
    proxies = parse_overrides(serve_proxy_overrides)
    if not dashboards and not proxies:
        return in_cluster
    return StaticResolver(dashboards, serve_proxies=proxies, fallback=in_cluster)
