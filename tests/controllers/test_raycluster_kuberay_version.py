"""Specification: a RayCluster that an older KubeRay left behind is taken over without a recreate,
and a spec KubeRay's Go types cannot decode is an invalid spec, not a crash loop.

- `upgradeStrategy.type: Recreate` with a head Pod stamped `ray.io/kuberay-version: v1.5.1` and
  a hash v1.5's algorithm wrote: the head Pod gets our hash and version (one merge patch), and no
  Pod is created or deleted (KubeRay's `shouldRecreatePodsForUpgrade`). The control: the same
  stale hash stamped by our own version does recreate the Pods.
- With the webhook off, a quantity that the CRD's Quantity pattern admits but apimachinery's
  `ParseQuantity` refuses (`1e99999999999999999999`: the exponent overflows int64) reaches the
  controller; it cannot hash the spec (`GoDecodeError`) and reports the field as InvalidSpec.

Against the real API server, kube-scheduler and KWOK; the operator runs the RayCluster controller.
"""

from __future__ import annotations

import copy
from typing import Any

from ray_operator.builders.pods import build_head_pod
from ray_operator.spec import kuberay_names as names
from ray_operator.spec.hashing import pod_template_hash
from ray_operator.spec.kinds import POD, RAY_CLUSTER

from tests.controllers.clusters import scalable_cluster
from tests.controllers.conftest import Harness, StartClusterOperator, reconcile_errors

STALE_HASH = "STALEHASHWRITTENBYKUBERAYV15XXXX"  # 32 base32hex characters, as KubeRay writes
OLD_VERSION = "v1.5.1"
UNDECODABLE_QUANTITY = "1e99999999999999999999"


async def stage_cluster_with_head(
    harness: Harness, name: str, *, version: str, recorded_hash: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A head-only Recreate cluster and its running head Pod, stamped as `version` stamped it."""
    manifest = scalable_cluster(name, replicas=0, upgradeStrategy={"type": "Recreate"})
    cluster = dict(await harness.client.create(RAY_CLUSTER, manifest, namespace=harness.namespace))
    head = build_head_pod(cluster, suffix="kuber")
    head["metadata"]["labels"][names.CREATED_BY_LABEL] = "kuberay-operator"
    head["metadata"]["annotations"][names.KUBERAY_VERSION_ANNOTATION] = version
    head["metadata"]["annotations"][names.UPGRADE_STRATEGY_RECREATE_HASH_ANNOTATION] = recorded_hash
    created = dict(await harness.client.create(POD, head, namespace=harness.namespace))
    await harness.pods_settled(name, head=1, workers=0)
    return cluster, created


async def head_annotations(harness: Harness, pod_name: str) -> dict[str, str]:
    pod = await harness.client.get(POD, pod_name, namespace=harness.namespace)
    return dict(pod["metadata"].get("annotations") or {})


async def test_a_head_pod_stamped_by_kuberay_v1_5_is_restamped_and_not_recreated(
    harness: Harness, start_cluster_operator: StartClusterOperator
) -> None:
    cluster, head = await stage_cluster_with_head(
        harness, "from-v15", version=OLD_VERSION, recorded_hash=STALE_HASH
    )
    ours = pod_template_hash(cluster)
    assert ours != STALE_HASH
    staged_pods = set(harness.created_pods)

    await start_cluster_operator()

    async def restamped() -> dict[str, str] | None:
        annotations = await head_annotations(harness, head["metadata"]["name"])
        return (
            annotations
            if annotations.get(names.KUBERAY_VERSION_ANNOTATION) == names.KUBERAY_VERSION
            else None
        )

    annotations = await harness.eventually(restamped, what="the head Pod re-stamped")
    assert annotations[names.UPGRADE_STRATEGY_RECREATE_HASH_ANNOTATION] == ours

    async def status_written_after_restamp() -> bool:
        status = (await harness.cluster("from-v15")).get("status") or {}
        return status.get("state") == "ready"

    # A reconcile that saw the re-stamped head (status comes last in it) decided nothing more.
    await harness.eventually(status_written_after_restamp, what="the cluster ready")
    pods = await harness.pods("from-v15")
    assert [p["metadata"]["uid"] for p in pods] == [head["metadata"]["uid"]]
    assert set(harness.created_pods) == staged_pods, "a Pod was created"


async def test_a_stale_hash_stamped_by_this_version_still_recreates_the_head(
    harness: Harness, start_cluster_operator: StartClusterOperator
) -> None:
    # The control for the test above: the same stale hash under our own version is a spec change.
    _, head = await stage_cluster_with_head(
        harness, "from-us", version=names.KUBERAY_VERSION, recorded_hash=STALE_HASH
    )
    await start_cluster_operator()

    async def replaced() -> bool:
        pods = await harness.pods("from-us")
        return bool(pods) and all(p["metadata"]["uid"] != head["metadata"]["uid"] for p in pods)

    await harness.eventually(replaced, what="the head Pod recreated")


def undecodable_cluster() -> dict[str, Any]:
    manifest = scalable_cluster("undecodable", replicas=1)
    pod_spec = manifest["spec"]["headGroupSpec"]["template"]["spec"]
    pod_spec["volumes"] = [{"name": "scratch", "emptyDir": {"sizeLimit": UNDECODABLE_QUANTITY}}]
    return manifest


async def test_a_spec_go_cannot_decode_is_an_invalid_spec_with_no_pod(
    harness: Harness, start_cluster_operator: StartClusterOperator
) -> None:
    # The API server admits it: the CRD's Quantity pattern allows any exponent.
    await harness.apply(undecodable_cluster())
    field = "spec.headGroupSpec.template.spec.volumes[0].emptyDir.sizeLimit"
    replica = await start_cluster_operator()

    async def invalid_condition() -> dict[str, Any] | None:
        status = (await harness.cluster("undecodable")).get("status") or {}
        return next(
            (
                c
                for c in status.get("conditions") or []
                if c["type"] == "InvalidSpec" and c["status"] == "True"
            ),
            None,
        )

    condition = await harness.eventually(invalid_condition, what="InvalidSpec condition")
    assert condition["message"].startswith(f'{field}: Invalid value: "{UNDECODABLE_QUANTITY}"')
    assert "KubeRay's Go types cannot decode it" in condition["message"]
    events = await harness.get_json(
        "events", "--field-selector", "involvedObject.name=undecodable,type=Warning"
    )
    assert [e["reason"] for e in events["items"]] == ["InvalidRayClusterSpec"]
    assert harness.created_pods == {}
    # Reported, not raised: no retry with backoff, let alone a hot loop.
    assert reconcile_errors(replica, "RayCluster") == {}
    assert replica.heartbeat.lag() < 1.0

    # Fixing the field is a spec change: the cluster then runs.
    fixed = copy.deepcopy(undecodable_cluster())
    fixed["spec"]["headGroupSpec"]["template"]["spec"]["volumes"][0]["emptyDir"] = {
        "sizeLimit": "1Gi"
    }
    await harness.apply(fixed)
    await harness.pods_settled("undecodable", head=1, workers=1)
