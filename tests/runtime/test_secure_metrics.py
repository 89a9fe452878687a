"""Specification: with `--metrics-auth=kubernetes` /metrics is read only with a bearer token the
API server authenticates (TokenReview) and authorizes for `get` on /metrics (SubjectAccessReview,
config/metrics-auth's reader role); decisions are cached, one review per token at a time, a
bounded number at once; `auto` keeps plain HTTP on loopback only; the listener speaks TLS with
the certificate of `--metrics-cert-dir`.

Real API server: real ServiceAccount tokens (TokenRequest), the real RBAC authorizer.
"""

from __future__ import annotations

import asyncio
import datetime
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from ray_operator import pki
from ray_operator.cli import _build_parser
from ray_operator.metrics import Metrics
from ray_operator.runtime.client import KubeClient, load_api_client
from ray_operator.secure_metrics import (
    Decision,
    MetricsAccess,
    ReviewUnavailable,
    SecureMetricsServer,
    TooManyReviews,
)
from ray_operator.settings import Settings, metrics_need_authentication, settings_from_args

from tests.conftest import REPO_ROOT, Kubectl
from tests.deploy.manifests import operator_kubeconfig

READER_ROLE = REPO_ROOT / "config" / "metrics-auth" / "reader_role.yaml"


@dataclass(frozen=True)
class Tokens:
    reader: str
    """A ServiceAccount bound to ray-operator-metrics-reader."""
    stranger: str
    """A ServiceAccount of the same namespace, bound to nothing."""


@pytest.fixture
def tokens(kubectl: Kubectl, namespace: str) -> Iterator[Tokens]:
    kubectl("apply", "--server-side", "-f", str(READER_ROLE))
    for account in ("reader", "stranger"):
        kubectl("create", "serviceaccount", account, "-n", namespace)
    binding = f"metrics-reader-{namespace}"
    kubectl(
        "create", "clusterrolebinding", binding, "--clusterrole=ray-operator-metrics-reader",
        f"--serviceaccount={namespace}:reader",
    )  # fmt: skip
    try:
        yield Tokens(
            reader=kubectl("create", "token", "reader", "-n", namespace).strip(),
            stranger=kubectl("create", "token", "stranger", "-n", namespace).strip(),
        )
    finally:
        kubectl("delete", "clusterrolebinding", binding, "--ignore-not-found")


@pytest.fixture
async def admin_client(kubectl: Kubectl) -> AsyncIterator[KubeClient]:
    client = KubeClient(await load_api_client(kubectl.kubeconfig), metrics=Metrics())
    try:
        yield client
    finally:
        await client.close()


async def test_only_a_token_allowed_to_get_metrics_is_allowed(
    admin_client: KubeClient, tokens: Tokens
) -> None:
    access = MetricsAccess(admin_client)
    assert await access.decide(tokens.reader) is Decision.ALLOWED
    assert await access.decide(tokens.stranger) is Decision.FORBIDDEN
    assert await access.decide("not-a-token") is Decision.UNAUTHENTICATED
    await access.close()


async def test_a_decision_is_reused_instead_of_asking_again(
    admin_client: KubeClient, tokens: Tokens
) -> None:
    access = MetricsAccess(admin_client)
    for _ in range(5):
        assert await access.decide(tokens.reader) is Decision.ALLOWED
        assert await access.decide("not-a-token") is Decision.UNAUTHENTICATED
    assert access.reviews_started == 2
    await access.close()


async def test_concurrent_requests_with_one_token_share_one_review(
    admin_client: KubeClient, tokens: Tokens
) -> None:
    access = MetricsAccess(admin_client)
    decisions = await asyncio.gather(*(access.decide(tokens.reader) for _ in range(20)))
    assert set(decisions) == {Decision.ALLOWED}
    assert access.reviews_started == 1
    await access.close()


async def test_a_new_token_beyond_the_concurrent_reviews_is_refused_at_once(
    admin_client: KubeClient, tokens: Tokens
) -> None:
    access = MetricsAccess(admin_client, max_concurrent_reviews=1)
    first = asyncio.create_task(access.decide(tokens.reader))
    await asyncio.sleep(0)  # its review is under way
    with pytest.raises(TooManyReviews):
        await access.decide("an-invented-token")
    assert await first is Decision.ALLOWED
    assert await access.decide(tokens.reader) is Decision.ALLOWED  # cached: no review needed
    await access.close()


async def test_an_operator_that_may_not_review_tokens_serves_no_one(
    kubectl: Kubectl, namespace: str, tokens: Tokens, tmp_path: Path
) -> None:
    # The namespaced install's situation: no ClusterRole for TokenReviews.
    kubeconfig = operator_kubeconfig(
        kubectl, tmp_path / "kubeconfig", namespace=namespace, service_account="stranger"
    )
    client = KubeClient(await load_api_client(kubeconfig), metrics=Metrics())
    access = MetricsAccess(client)
    try:
        with pytest.raises(ReviewUnavailable):
            await access.decide(tokens.reader)
    finally:
        await access.close()
        await client.close()


@pytest.mark.parametrize(
    ("address", "mode", "authenticated"),
    [
        ("127.0.0.1:8080", "auto", False),
        ("[::1]:8080", "auto", False),
        ("localhost:8080", "auto", False),
        (":8080", "auto", True),
        ("0.0.0.0:8080", "auto", True),
        ("10.0.0.7:8080", "auto", True),
        ("127.0.0.1:8080", "kubernetes", True),
        (":8080", "none", False),
    ],
)
def test_auto_keeps_plain_metrics_on_loopback_only(
    address: str, mode: str, authenticated: bool
) -> None:
    settings = Settings(identity="x", metrics_addr=address, metrics_auth=mode)
    assert metrics_need_authentication(settings) is authenticated


async def test_the_listener_serves_the_certificate_of_the_cert_dir(
    admin_client: KubeClient, tmp_path: Path
) -> None:
    ca = pki.create_ca("metrics-test-ca", valid_for=datetime.timedelta(days=1))
    pair = pki.issue_certificate(
        ca, "metrics", valid_for=datetime.timedelta(days=1), ip_addresses=["127.0.0.1"], server=True
    )
    (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
    (tmp_path / "tls.key").write_bytes(pair.key_pem)
    server = SecureMetricsServer(
        Metrics(), client=admin_client, address="127.0.0.1:0", cert_dir=tmp_path
    )
    task = asyncio.create_task(server.run())
    try:
        await asyncio.wait_for(server.listening.wait(), timeout=10)
        trusting = ssl.create_default_context(cadata=ca.cert_pem.decode())
        async with aiohttp.ClientSession() as session:
            url = f"https://127.0.0.1:{server.port}/metrics"
            async with session.get(url, ssl=trusting) as response:
                assert response.status == 401  # verified TLS; no token, no metrics
                assert response.headers["WWW-Authenticate"].startswith("Bearer")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def run_settings(*argv: str) -> Settings:
    return settings_from_args(_build_parser().parse_args(["run", *argv]))


def test_authenticated_metrics_need_a_listener_of_their_own() -> None:
    shared = ("--health-addr", ":8080", "--metrics-addr", ":8080")
    with pytest.raises(ValueError, match="--metrics-addr another port than --health-addr"):
        run_settings(*shared)
    assert not metrics_need_authentication(run_settings(*shared, "--metrics-auth=none"))
    assert run_settings().metrics_auth == "auto"  # :8082 and :8080: HTTPS on 8080


def test_the_mode_comes_from_the_environment_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_OPERATOR_METRICS_AUTH", "None")
    assert run_settings().metrics_auth == "none"
    assert run_settings("--metrics-auth", "kubernetes").metrics_auth == "kubernetes"
