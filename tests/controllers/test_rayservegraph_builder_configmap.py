"""Specification: a RayServeGraph's builder ConfigMap holds exactly the operator's module, and the
Ray containers mount that file alone — whatever a tenant plants, patches or swaps in.

The RayServeGraph controller runs alone against the real API server (the RayService it creates
stays as created). The attacker here may create, patch and delete ConfigMaps in the namespace
and read the graph (its uid, for a forged ownerReference), nothing else.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest
from ray_operator.builders.serve_graph import (
    BUILDER_FILE,
    build_builder_configmap,
    builder_configmap_name,
    builder_source,
)
from ray_operator.runtime.errors import Invalid
from ray_operator.spec.kinds import CONFIG_MAP, RAY_CLUSTER, RAY_SERVE_GRAPH, RAY_SERVICE
from ray_operator.spec.serve_graph_names import BUILDER_VOLUME, GRAPH_LABEL

from tests.controllers.conftest import Harness, eventually
from tests.controllers.ray_fixtures import head_only_cluster_spec
from tests.controllers.rayservegraph_fixtures import (
    GRAPH_PATH,
    TOKEN,
    StartGraphOperator,
    artifacts,
    builder_configmap,
    condition,
    events_about,
    graph_status,
    rayservegraph,
    registry_secrets,
    start_graph_operator,
    wait_for_condition,
    wait_for_object,
    wait_until_gone,
)
from tests.servegraph.artifact_server import ArtifactServer
from tests.servegraph.graphs import document, pipeline_graph
from tests.servegraph.planted import PAYLOAD, PLANTED_WORDS, planted_builder_configmap

__all__ = ["artifacts", "registry_secrets", "start_graph_operator"]  # fixtures, used by name

NAME = builder_configmap_name("pipeline")
ONLY_THE_MODULE = [{"key": BUILDER_FILE, "path": BUILDER_FILE}]


def planted(uid: str | None, *, labelled: bool = True, **metadata: Any) -> dict[str, Any]:
    return planted_builder_configmap("pipeline", owner_uid=uid, labelled=labelled, **metadata)


async def graph_uid(harness: Harness) -> str:
    graph = await harness.client.get(RAY_SERVE_GRAPH, "pipeline", namespace=harness.namespace)
    return str(graph["metadata"]["uid"])


async def exact_configmap(harness: Harness, *, not_uid: str | None = None) -> dict[str, Any]:
    """The builder ConfigMap once it holds exactly the module, immutable (and is not `not_uid`)."""

    async def check() -> dict[str, Any] | None:
        found = await harness.get_json_if_exists("configmap", NAME)
        if found is None or found["metadata"]["uid"] == not_uid:
            return None
        exact = found.get("data") == {BUILDER_FILE: builder_source()}
        clean = "binaryData" not in found and found.get("immutable") is True
        return found if exact and clean else None

    result: dict[str, Any] = await eventually(check, what="the operator's builder ConfigMap")
    return result


def builder_volumes(cluster_config: dict[str, Any]) -> list[dict[str, Any]]:
    groups = [cluster_config["headGroupSpec"], *(cluster_config.get("workerGroupSpecs") or [])]
    return [
        volume
        for group in groups
        for volume in group["template"]["spec"].get("volumes") or ()
        if volume.get("configMap", {}).get("name") == NAME
    ]


async def assert_nothing_planted_is_shown(harness: Harness) -> None:
    shown = json.dumps(await graph_status(harness, "pipeline"))
    shown += json.dumps([event["message"] for event in await events_about(harness, "pipeline")])
    assert not [word for word in PLANTED_WORDS if word in shown]


async def deployed(
    harness: Harness, artifacts: ArtifactServer, start_graph_operator: StartGraphOperator
) -> dict[str, Any]:
    """The graph deployed by a running operator; its builder ConfigMap."""
    artifacts.serve(GRAPH_PATH, document(pipeline_graph()), token=TOKEN)
    await start_graph_operator()
    await harness.apply(rayservegraph("pipeline", artifacts.url(GRAPH_PATH)))
    await wait_for_object(harness, RAY_SERVICE, "pipeline")
    return await exact_configmap(harness)


async def test_a_planted_configmap_claiming_the_graph_is_replaced_before_the_rayservice_is_made(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    start_graph_operator: StartGraphOperator,
) -> None:
    """A forged ownerReference (the graph's uid is readable) and a finalizer (which would keep
    the content mounted while it terminates) do not keep planted keys alive: the ConfigMap is
    replaced by exactly the module, and the RayService mounts that file alone."""
    artifacts.serve(GRAPH_PATH, document(pipeline_graph()), token=TOKEN)
    await harness.apply(rayservegraph("pipeline", artifacts.url(GRAPH_PATH)))
    uid = await graph_uid(harness)
    plant = planted(uid, finalizers=["example.com/keep"])
    before = await harness.client.create(CONFIG_MAP, plant, namespace=harness.namespace)

    await start_graph_operator()
    rayservice = await wait_for_object(harness, RAY_SERVICE, "pipeline")

    ours = await exact_configmap(harness, not_uid=before["metadata"]["uid"])
    assert set(ours["data"]) == {BUILDER_FILE}
    assert not ours["metadata"].get("finalizers")
    assert ours["metadata"]["ownerReferences"][0]["uid"] == uid
    volumes = builder_volumes(rayservice["spec"]["rayClusterConfig"])
    assert volumes
    assert all(volume["configMap"]["items"] == ONLY_THE_MODULE for volume in volumes)
    events = await events_about(harness, "pipeline")
    (event,) = [event for event in events if event["reason"] == "BuilderConfigMapReplaced"]
    assert event["type"] == "Warning"
    assert "data keys besides the module" in event["message"]
    assert "binaryData" in event["message"]
    assert "a module that is not the operator's" in event["message"]
    await assert_nothing_planted_is_shown(harness)


@pytest.mark.parametrize(
    "patch",
    [
        {"data": {"sitecustomize.py": PAYLOAD}},
        {"data": {BUILDER_FILE: PAYLOAD}},
        {"binaryData": {"zz-evil.pth": base64.b64encode(PAYLOAD.encode()).decode()}},
        {"immutable": False},
    ],
    ids=["extra key", "module", "binaryData", "mutable again"],
)
async def test_the_api_server_refuses_any_change_of_the_written_configmap(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    start_graph_operator: StartGraphOperator,
    patch: dict[str, Any],
) -> None:
    written = await deployed(harness, artifacts, start_graph_operator)
    with pytest.raises(Invalid):
        await harness.client.patch(CONFIG_MAP, NAME, patch, namespace=harness.namespace)
    after = await harness.client.get(CONFIG_MAP, NAME, namespace=harness.namespace)
    assert after["metadata"]["resourceVersion"] == written["metadata"]["resourceVersion"]


@pytest.mark.parametrize("forged_owner", [True, False], ids=["forged owner", "no owner"])
async def test_a_configmap_swapped_in_under_the_name_the_graph_mounts_is_replaced(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    start_graph_operator: StartGraphOperator,
    forged_owner: bool,
) -> None:
    """Who may delete and create ConfigMaps can swap one in (unlabelled: the operator's cache
    never sees it); the operator finds it by name and puts its own back — claiming the graph or
    not, the name is the graph's once its RayService mounts it."""
    written = await deployed(harness, artifacts, start_graph_operator)
    uid = await graph_uid(harness) if forged_owner else None
    await start_graph_operator.stop_all()
    await harness.kubectl("delete", "configmap", NAME)
    swapped = await harness.client.create(
        CONFIG_MAP, planted(uid, labelled=False), namespace=harness.namespace
    )

    await start_graph_operator()
    ours = await exact_configmap(harness, not_uid=swapped["metadata"]["uid"])
    assert ours["metadata"]["uid"] != written["metadata"]["uid"]
    assert ours["metadata"]["labels"][GRAPH_LABEL] == "pipeline"
    reasons = [event["reason"] for event in await events_about(harness, "pipeline")]
    assert "BuilderConfigMapReplaced" in reasons
    await assert_nothing_planted_is_shown(harness)


async def test_a_foreign_configmap_there_before_the_first_deployment_is_left_alone(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    start_graph_operator: StartGraphOperator,
) -> None:
    """A ConfigMap of that name that does not claim the graph, before the graph mounts the name,
    may be someone else's: neither used nor changed, nothing deployed, and `Deployed` and a
    Warning say what was found in fixed words."""
    theirs = await harness.client.create(CONFIG_MAP, planted(None), namespace=harness.namespace)
    artifacts.serve(GRAPH_PATH, document(pipeline_graph()), token=TOKEN)
    await start_graph_operator()
    await harness.apply(rayservegraph("pipeline", artifacts.url(GRAPH_PATH)))

    status = await wait_for_condition(
        harness, "pipeline", "Deployed", status="False", reason="BuilderConfigMapConflict"
    )
    message = condition(status, "Deployed")["message"]
    assert NAME in message
    assert "data keys besides the module" in message
    kept = await harness.client.get(CONFIG_MAP, NAME, namespace=harness.namespace)
    assert kept["metadata"]["resourceVersion"] == theirs["metadata"]["resourceVersion"]
    assert (await harness.client.list(RAY_SERVICE, namespace=harness.namespace)).items == []
    reasons = [event["reason"] for event in await events_about(harness, "pipeline")]
    assert "BuilderConfigMapConflict" in reasons
    await assert_nothing_planted_is_shown(harness)


async def test_our_labels_and_owner_taken_off_the_configmap_are_put_back(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    start_graph_operator: StartGraphOperator,
) -> None:
    """Metadata stays patchable on an immutable ConfigMap: without our label it leaves the
    operator's cache, which finds it by name, still exact, and labels and owns it again."""
    written = await deployed(harness, artifacts, start_graph_operator)
    await harness.kubectl(
        "patch",
        "configmap",
        NAME,
        "--type=json",
        "-p",
        json.dumps(
            [
                {"op": "remove", "path": "/metadata/labels"},
                {"op": "remove", "path": "/metadata/ownerReferences"},
            ]
        ),
    )

    async def restored() -> dict[str, Any] | None:
        found = await harness.client.get(CONFIG_MAP, NAME, namespace=harness.namespace)
        labels = found["metadata"].get("labels") or {}
        owned = found["metadata"].get("ownerReferences")
        return found if labels.get(GRAPH_LABEL) == "pipeline" and owned else None

    found = await eventually(restored, what="our label and ownerReference back")
    assert found["metadata"]["uid"] == written["metadata"]["uid"]


async def test_an_exact_immutable_copy_made_by_someone_else_is_used_and_adopted(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    start_graph_operator: StartGraphOperator,
) -> None:
    """Trust is by content: an immutable ConfigMap holding exactly the module can never hold
    anything else, whoever made it; it gets our labels and ownerReference and is used."""
    copy = build_builder_configmap({"metadata": {"name": "pipeline", "namespace": "x"}})
    copy["metadata"] = {"name": NAME}
    made = await harness.client.create(CONFIG_MAP, copy, namespace=harness.namespace)

    await deployed(harness, artifacts, start_graph_operator)
    uid = await graph_uid(harness)

    async def adopted() -> dict[str, Any] | None:
        found = await harness.client.get(CONFIG_MAP, NAME, namespace=harness.namespace)
        references = found["metadata"].get("ownerReferences") or ()
        return found if [reference["uid"] for reference in references] == [uid] else None

    found = await eventually(adopted, what="the copy owned by the graph")
    assert found["metadata"]["uid"] == made["metadata"]["uid"]
    assert found["metadata"]["labels"][GRAPH_LABEL] == "pipeline"


async def test_an_older_modules_configmap_is_made_immutable_while_mounted_then_deleted(
    harness: Harness,
    artifacts: ArtifactServer,
    registry_secrets: None,
    start_graph_operator: StartGraphOperator,
) -> None:
    """After an upgrade the graph's cluster rolls out on the new ConfigMap; the one an older
    operator wrote (mutable, every key mounted) stays while a RayCluster mounts it — made
    immutable, holding the module alone — and goes when none does."""
    # The cluster an older operator's RayService made, mounting that operator's ConfigMap.
    old_cluster = head_only_cluster_spec()
    old_pod = old_cluster["headGroupSpec"]["template"]["spec"]
    old_pod["volumes"] = [
        {"name": BUILDER_VOLUME, "configMap": {"name": "pipeline-serve-graph-builder"}}
    ]
    old = {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "old"}}
    await harness.apply({**old, "spec": old_cluster})
    await deployed(harness, artifacts, start_graph_operator)
    legacy = planted(await graph_uid(harness))
    legacy["metadata"]["name"] = "pipeline-serve-graph-builder"
    del legacy["binaryData"]
    await harness.client.create(CONFIG_MAP, legacy, namespace=harness.namespace)
    await kick(harness)

    async def hardened() -> dict[str, Any] | None:
        found = await harness.get_json("configmap", "pipeline-serve-graph-builder")
        exact = found.get("data") == {BUILDER_FILE: builder_source()}
        return found if exact and found.get("immutable") is True else None

    await eventually(hardened, what="the older ConfigMap holding the module alone, immutable")

    await harness.client.delete(RAY_CLUSTER, "old", namespace=harness.namespace)
    await wait_until_gone(harness, RAY_CLUSTER, "old")
    await kick(harness)
    await wait_until_gone(harness, CONFIG_MAP, "pipeline-serve-graph-builder")
    assert (await builder_configmap(harness, "pipeline"))["metadata"]["name"] == NAME


async def kick(harness: Harness) -> None:
    """Bring the graph to a reconcile (any change of it does)."""
    await harness.client.patch(
        RAY_SERVE_GRAPH,
        "pipeline",
        {"metadata": {"annotations": {"test.example.com/kick": str(time.monotonic())}}},
        namespace=harness.namespace,
    )
