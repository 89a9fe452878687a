"""Where a RayCluster's dashboard (and its head's Serve proxy) can be reached from the operator.

A `DashboardResolver` turns a cached RayCluster and its head Pod into base URLs:

- `InClusterResolver` — the operator runs in the cluster: the IP of the head Pod the cluster
  made (`head_pod_to_address`), with the head container's dashboard or serve port. Never the
  head Service's DNS name, although KubeRay asks `<head-svc>.<ns>.svc.<domain>` (its
  `FetchHeadServiceURL`): a Service is the tenant's to edit, and one turned into an ExternalName
  (by its spec, a patch, or a Service pre-created under the head Service's name) is a CNAME to
  any host — another tenant's dashboard, reached past every NetworkPolicy that admits the
  operator, with the tenant's job or Serve config (issue 28, finding 2). Checking the cached
  Service before each request would not close it: cluster DNS answers from its own cache for
  seconds after a flip back. A Pod's IP is written by its kubelet, which a tenant cannot do, and
  whatever the tenant runs in its own Pod reaches others only as that Pod.
- `StaticResolver` — explicit `<namespace>/<cluster>=<url>` entries (the cluster part may be a
  glob such as `ns/my-service-*`, since RayJob and RayService clusters get random suffixes), for
  an operator outside the cluster and for tests; anything unmatched goes to a fallback resolver.
  Only a cluster admin sets them (operator flags).

`dashboard_address` is the head Service's address that KubeRay stores as a RayJob's
`status.dashboardURL` (and its submitter uses, as the tenant's own Pod): kept as KubeRay has it,
never asked by the operator.

Resolution is pure and synchronous: no I/O happens here.
"""

from __future__ import annotations

import fnmatch
import ipaddress
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ray_operator.builders.services import head_ports
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.object_names import head_service_name
from ray_operator.spec.pods import is_head, is_running_and_ready, is_terminating

if TYPE_CHECKING:
    from ray_io.v1_views import Pod, RayCluster


Object = Mapping[str, Any]


class DashboardResolver(Protocol):
    """Finds the base URLs the operator uses to reach a cluster's Ray HTTP servers."""

    def dashboard_url(self, cluster: RayCluster, head_pod: Pod | None) -> str | None:
        """The dashboard's base URL, or None when this resolver cannot tell."""
        ...

    def serve_proxy_url(self, cluster: RayCluster, head_pod: Pod | None) -> str | None:
        """The head's Serve HTTP proxy base URL, or None when this resolver cannot tell."""
        ...


class InClusterResolver:
    """The head Pod's IP for both the dashboard and the Serve proxy (see the module docstring)."""

    def dashboard_url(self, cluster: RayCluster, head_pod: Pod | None) -> str | None:
        port = head_ports(cluster).get(names.DASHBOARD_PORT_NAME, names.DASHBOARD_PORT)
        return _head_pod_url(cluster, head_pod, port)

    def serve_proxy_url(self, cluster: RayCluster, head_pod: Pod | None) -> str | None:
        port = head_ports(cluster).get(names.SERVE_PORT_NAME, names.SERVE_PORT)
        return _head_pod_url(cluster, head_pod, port)


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

    def dashboard_url(self, cluster: RayCluster, head_pod: Pod | None) -> str | None:
        found = _lookup(self._dashboards, cluster)
        if found is None and self._fallback is not None:
            return self._fallback.dashboard_url(cluster, head_pod)
        return found

    def serve_proxy_url(self, cluster: RayCluster, head_pod: Pod | None) -> str | None:
        found = _lookup(self._serve_proxies, cluster)
        if found is None and self._fallback is not None:
            return self._fallback.serve_proxy_url(cluster, head_pod)
        return found


def head_pod_to_address(cluster: RayCluster, pods: Iterable[Pod]) -> Pod | None:
    """The head Pod of `cluster` the operator may address (`is_head_pod_of`, with an IP); a
    Ready one first."""
    candidates = [p for p in pods if is_head_pod_of(cluster, p) and _pod_ip(p) is not None]
    ready = [pod for pod in candidates if is_running_and_ready(pod)]
    chosen = ready or candidates
    return chosen[0] if chosen else None


def is_head_pod_of(cluster: RayCluster, pod: Pod) -> bool:
    """Whether `pod` is `cluster`'s live head: labelled as its head, in its namespace, owned by
    this very cluster (its uid; ours or KubeRay's Pod), not being deleted."""
    cluster_meta = cluster.get("metadata") or {}
    pod_meta = pod.get("metadata") or {}
    uid = cluster_meta.get("uid")
    return (
        bool(uid)
        and any(ref.get("uid") == uid for ref in pod_meta.get("ownerReferences") or ())
        and is_head(pod)
        and (pod_meta.get("labels") or {}).get(names.CLUSTER_LABEL) == cluster_meta.get("name")
        and pod_meta.get("namespace") == cluster_meta.get("namespace")
        and not is_terminating(pod)
    )


def _head_pod_url(cluster: RayCluster, head_pod: Pod | None, port: int) -> str | None:
    # Checked again here, whoever chose the Pod: no caller can hand in another one.
    if head_pod is None or not is_head_pod_of(cluster, head_pod):
        return None
    ip = _pod_ip(head_pod)
    if ip is None:
        return None
    host = f"[{ip}]" if ip.version == 6 else str(ip)
    return f"http://{host}:{port}"


def _pod_ip(pod: Pod) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The Pod's IP as its kubelet reported it (an IP literal, nothing else), or None."""
    try:
        return ipaddress.ip_address(str((pod.get("status") or {}).get("podIP") or ""))
    except ValueError:
        return None


def dashboard_address(
    cluster: RayCluster, *, cluster_domain: str = names.DEFAULT_CLUSTER_DOMAIN
) -> str:
    """`<head-svc>.<ns>.svc.<domain>:<port>`: what KubeRay stores as a RayJob's dashboardURL
    (for the tenant's own submitter; the operator never connects to it)."""
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
    dashboard_overrides: Iterable[str] = (), serve_proxy_overrides: Iterable[str] = ()
) -> DashboardResolver:
    """The operator's resolver: explicit overrides (Settings' `dashboard_url_overrides` and
    `serve_proxy_url_overrides`) first, the in-cluster addresses for everything else."""
    in_cluster = InClusterResolver()
    dashboards = parse_overrides(dashboard_overrides)
    proxies = parse_overrides(serve_proxy_overrides)
    if not dashboards and not proxies:
        return in_cluster
    return StaticResolver(dashboards, serve_proxies=proxies, fallback=in_cluster)
