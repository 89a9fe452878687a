"""Where a RayServeGraph fetch may go, decided before any connection: the URL (`checked_url`),
each redirect's target (`redirect_target`), an IP literal host (`check_address`), and the token
Secret's opt-in for the URL's origin (`check_secret_opt_in`).

Pure: text in, an `ArtifactFetchError` out. The URL comes from a custom resource, so every rule
is a refusal with a fixed message: https (http only with `allowInsecureHTTP`), no
`user:password@`, an origin the operator allows (`FetchPolicy.allowed_hosts`, `origins`), an IP
literal judged by `addresses`; redirects to the same scheme, host and port only, so the token goes
to the origin its Secret opted in for and nowhere else. Messages show `host:port`
(`show_origin`), never a URL's userinfo or query, nor a redirect's location (the server's text).

`check_secret_opt_in` is the confused-deputy guard: a token Secret is only used for the origins
(and graphs) it names, https unless an entry says `http://` (`origins`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

from yarl import URL

from ray_operator.spec import fetch_addresses as addresses
from ray_operator.spec import fetch_origins as origins
from ray_operator.spec.fetch_origins import DEFAULT_PORTS, Origin
from ray_operator.spec.fetch_types import ArtifactRequest, FetchPolicy, fail
from ray_operator.spec.secret_values import graphs_opted_in
from ray_operator.spec.serve_graph_names import SECRET_GRAPHS_ANNOTATION, SECRET_HOSTS_ANNOTATION


def check_secret_opt_in(secret: Mapping[str, Any], *, url: str, graph_name: str) -> None:
    """Raise `SecretNotOptedIn` unless the token Secret names the URL's origin in its hosts
    annotation (`origins`: `host[:port]` means https only, `http://host[:port]` allows clear
    text) and, when it carries the graphs annotation, the graph's name. Without this, anyone
    allowed to create a RayServeGraph could make the operator send any Secret of the namespace
    to a URL of their choosing, or over a wire anyone may read."""
    metadata = secret.get("metadata") or {}
    name = metadata.get("name") or "?"
    annotations = metadata.get("annotations") or {}
    target = _origin_of(url)
    if target is None:
        _refuse_opt_in(f"the URL has no http(s) host the token Secret {name} could opt in for")
    hosts = annotations.get(SECRET_HOSTS_ANNOTATION)
    if not isinstance(hosts, str):
        _refuse_opt_in(
            f"the token Secret {name} has no {SECRET_HOSTS_ANNOTATION} annotation: add "
            f"{origins.entry_for(target)} to it to let it be sent there"
        )
    entries = hosts.split(",")
    if not origins.origin_listed(entries, target):
        _refuse_opt_in(_not_opted_in_message(name, entries, target))
    graphs = graphs_opted_in(secret)
    if graphs is not None and graph_name not in graphs:
        _refuse_opt_in(
            f"the token Secret {name} does not opt in for RayServeGraph {graph_name}: add it to "
            f"its {SECRET_GRAPHS_ANNOTATION} annotation"
        )


def _not_opted_in_message(name: str, entries: list[str], target: Origin) -> str:
    scheme, host, port = target
    if scheme == "http" and origins.origin_listed(entries, ("https", host, port)):
        return (
            f"the token Secret {name} opts in for {origins.entry_for(('https', host, port))} "
            "over https only (an entry without a scheme means https); to send it in clear text, "
            f"add {origins.entry_for(target)} to its {SECRET_HOSTS_ANNOTATION} annotation"
        )
    return (
        f"the token Secret {name} does not opt in for {origins.entry_for(target)}: add it to "
        f"its {SECRET_HOSTS_ANNOTATION} annotation"
    )


def _refuse_opt_in(message: str) -> NoReturn:
    fail("SecretNotOptedIn", message, retryable=False)


def checked_url(request: ArtifactRequest, *, policy: FetchPolicy) -> URL:
    """The URL, once the rules that need no network allow it."""
    try:
        url = URL(request.url)
    except (ValueError, TypeError):
        fail("InsecureURL", "the URL cannot be parsed", retryable=False)
    if url.scheme not in DEFAULT_PORTS or not url.host:
        fail("InsecureURL", "only https:// URLs with a host are fetched", retryable=False)
    if url.scheme == "http" and not request.allow_insecure_http:
        fail(
            "InsecureURL",
            "http:// would send the token in clear text: use https, or set "
            "spec.source.allowInsecureHTTP",
            retryable=False,
        )
    if url.raw_user is not None or url.raw_password is not None:
        fail(
            "InsecureURL",
            "the URL carries a user name or password; put the token in spec.source.tokenSecretRef",
            retryable=False,
        )
    if policy.allowed_hosts and not origins.origin_listed(policy.allowed_hosts, url_origin(url)):
        fail(
            "HostNotAllowed",
            f"{origins.entry_for(url_origin(url))} is not among the hosts this operator may fetch "
            "from (--serve-graph-allowed-hosts)",
            retryable=False,
        )
    check_address(url, policy=policy)
    return url


def check_address(url: URL, *, policy: FetchPolicy) -> None:
    """Refuse a URL whose host is an IP literal the address policy refuses (aiohttp connects to
    a literal without resolving it, so the resolver's guard never sees it)."""
    why = addresses.literal_refusal(url.host or "", allow_loopback=policy.allow_loopback)
    if why is not None:
        fail("AddressRefused", f"{show_origin(url)} is {why}", retryable=False)


def redirect_target(location: str | None, *, status: int, current: URL, origin: Origin) -> URL:
    """Where a redirect (`status`, its `Location`) from `current` leads, when that is the
    fetch's `origin`; a `RedirectRefused` error otherwise."""
    if not location:
        fail("RedirectRefused", f"a redirect ({status}) without a Location", retryable=False)
    try:
        target = current.join(URL(location))
    except (ValueError, TypeError):
        fail("RedirectRefused", "a redirect to a URL that cannot be parsed", retryable=False)
    if target.scheme not in DEFAULT_PORTS or not target.host:
        fail("RedirectRefused", "a redirect to a URL that is not http(s)", retryable=False)
    if url_origin(target) != origin:
        # Neither the location nor its host is shown: it is the server's text.
        fail(
            "RedirectRefused",
            f"{show_origin(current)} redirected to another "
            f"{'scheme' if target.scheme != origin[0] else 'host or port'}; the token only "
            "goes to the origin its Secret opted in for",
            retryable=False,
        )
    if target.raw_user is not None or target.raw_password is not None:
        fail("RedirectRefused", "a redirect to a URL with a user name or password", retryable=False)
    return target


def url_origin(url: URL) -> Origin:
    """(scheme, canonical host, port) of an http(s) URL."""
    return (url.scheme, origins.canonical_host(url.host or ""), _port(url))


def _origin_of(url: str) -> Origin | None:
    try:
        parsed = URL(url)
    except (ValueError, TypeError):
        return None
    if parsed.scheme not in DEFAULT_PORTS or not parsed.host:
        return None
    return url_origin(parsed)


def _port(url: URL) -> int:
    return url.port or DEFAULT_PORTS[url.scheme]


def show_origin(url: URL) -> str:
    """`host:port` of the URL (the scheme is the reader's to know)."""
    _, host, port = url_origin(url)
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}"
