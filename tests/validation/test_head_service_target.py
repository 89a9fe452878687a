"""Specification: a RayCluster's head Service can never be an alias for another host (issue 28,
finding 2). `serviceType`, a custom `headService`'s `type` and its `externalName` are checked
wherever a RayCluster spec is embedded, each refusal naming the field path under its owner."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from ray_operator.validation import validate_raycluster
from ray_operator.validation.raycronjob import validate_raycronjob
from ray_operator.validation.rayjob import validate_rayjob
from ray_operator.validation.rayservegraph import validate_rayservegraph
from ray_operator.validation.rayservice import validate_rayservice

from tests.builders.clusters import raycluster
from tests.validation.servegraphs import graph

VICTIM = "victim-head-svc.b.svc.cluster.local"
RULE = (
    "must be ClusterIP, NodePort or LoadBalancer: the head Service selects this cluster's head "
    "Pod, and an ExternalName Service would alias another host instead"
)
EXTERNAL_NAME_RULE = (
    "Forbidden: a head Service is never an ExternalName Service: it selects this cluster's head Pod"
)


def cluster_spec(head_service: dict[str, Any] | None = None, **head: Any) -> dict[str, Any]:
    spec: dict[str, Any] = raycluster()["spec"]
    if head_service is not None:
        spec["headGroupSpec"]["headService"] = head_service
    spec["headGroupSpec"].update(head)
    return spec


ALIAS = {"spec": {"type": "ExternalName", "externalName": VICTIM}}


def messages_for(kind: str, spec: dict[str, Any]) -> tuple[str, list[str]]:
    """The field prefix of the embedded RayCluster spec in `kind`, and the errors of an object of
    that kind embedding `spec`."""
    spec = copy.deepcopy(spec)
    metadata = {"name": "tenant-a", "namespace": "a"}
    if kind == "RayCluster":
        return "spec", [str(e) for e in validate_raycluster({"metadata": metadata, "spec": spec})]
    if kind == "RayJob":
        job_spec = {"entrypoint": "python x.py", "rayClusterSpec": spec}
        rayjob = {"metadata": metadata, "spec": job_spec}
        return "spec.rayClusterSpec", [str(e) for e in validate_rayjob(rayjob)]
    if kind == "RayService":
        rayservice = {"metadata": metadata, "spec": {"rayClusterConfig": spec}}
        return "spec.rayClusterConfig", [str(e) for e in validate_rayservice(rayservice)]
    if kind == "RayServeGraph":
        return "spec.rayClusterSpec", validate_rayservegraph(graph(rayClusterSpec=spec))
    cron = {
        "metadata": metadata,
        "spec": {
            "schedule": "*/5 * * * *",
            "jobTemplate": {"entrypoint": "python x.py", "rayClusterSpec": spec},
        },
    }
    return "spec.jobTemplate.rayClusterSpec", [str(e) for e in validate_raycronjob(cron)]


KINDS = ["RayCluster", "RayJob", "RayService", "RayServeGraph", "RayCronJob"]


@pytest.mark.parametrize("kind", KINDS)
def test_an_external_name_head_service_is_refused_naming_its_type_and_external_name(
    kind: str,
) -> None:
    prefix, errors = messages_for(kind, cluster_spec(ALIAS))
    assert errors == [
        f'{prefix}.headGroupSpec.headService.spec.type: Invalid value: "ExternalName": {RULE}',
        f"{prefix}.headGroupSpec.headService.spec.externalName: {EXTERNAL_NAME_RULE}",
    ]


@pytest.mark.parametrize("kind", KINDS)
def test_an_external_name_service_type_is_refused(kind: str) -> None:
    # `serviceType` is the type of a custom headService that sets none: with an `externalName`
    # in the headService, the two together would make the same alias.
    prefix, errors = messages_for(kind, cluster_spec(serviceType="ExternalName"))
    assert errors == [f'{prefix}.headGroupSpec.serviceType: Invalid value: "ExternalName": {RULE}']


def test_an_external_name_beside_another_type_is_refused_too() -> None:
    head_service = {"spec": {"type": "ClusterIP", "externalName": VICTIM}}
    _, errors = messages_for("RayJob", cluster_spec(head_service))
    assert errors == [
        f"spec.rayClusterSpec.headGroupSpec.headService.spec.externalName: {EXTERNAL_NAME_RULE}"
    ]


@pytest.mark.parametrize("service_type", ["ClusterIP", "NodePort", "LoadBalancer"])
def test_the_types_that_select_the_head_pod_stay_valid(service_type: str) -> None:
    head_service = {"metadata": {"name": "my-head"}, "spec": {"type": service_type}}
    assert messages_for("RayCluster", cluster_spec(head_service, serviceType=service_type)) == (
        "spec",
        [],
    )


def test_an_unknown_type_is_refused_before_the_api_server_would_refuse_the_service() -> None:
    head_service = {"spec": {"type": "x" * 200}}
    _, errors = messages_for("RayCluster", cluster_spec(head_service))
    assert errors == [
        f'spec.headGroupSpec.headService.spec.type: Invalid value: "{"x" * 80}...": {RULE}'
    ]
