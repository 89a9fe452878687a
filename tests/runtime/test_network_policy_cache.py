"""Specification: NetworkPolicies are cached only with the RayClusterNetworkPolicy gate on (the
operator holds no rights on them otherwise), and then only those labelled `ray.io/cluster`."""

from __future__ import annotations

from ray_operator.app import watched_kinds
from ray_operator.spec.kinds import NETWORK_POLICY, watch_selectors

from tests.runtime.run_flags import parse


def test_network_policies_are_watched_only_with_the_gate_on() -> None:
    assert NETWORK_POLICY not in watched_kinds(parse())
    assert NETWORK_POLICY in watched_kinds(parse("--feature-gates=RayClusterNetworkPolicy=true"))
    off_again = parse(
        "--feature-gates=RayClusterNetworkPolicy=true",
        "--feature-gates=RayClusterNetworkPolicy=false",
    )
    assert NETWORK_POLICY not in watched_kinds(off_again)


def test_only_policies_labelled_for_a_cluster_are_cached() -> None:
    (selector,) = watch_selectors(NETWORK_POLICY)
    assert str(selector) == "ray.io/cluster"
    assert selector is not None
    assert selector.matches(
        {"ray.io/cluster": "a", "app.kubernetes.io/created-by": "kuberay-operator"}
    )
    assert not selector.matches({"app": "unrelated"})
