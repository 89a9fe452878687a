"""Admission refuses what can never run (issue 12, findings 1 and 8): `kubectl apply` of a spec
whose Pods the API server would refuse, or that asks for more Pods than the operator allows, or
that carries a quantity out of Kubernetes' range, fails at once with the field path and the rule.

Each manifest passes the CRD schema (the API server checks it before calling us): only the
webhook stands between it and a controller that would retry creating an impossible Pod.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.conftest import Kubectl
from tests.webhooks.rule_cases import (
    CLUSTER,
    HEAD,
    HEAD_CONTAINER,
    JOB,
    JOB_CLUSTER,
    SERVICE,
    SERVICE_CLUSTER,
    WORKER,
    WORKER_CONTAINER,
    Case,
    case,
    put,
)

INT32_MAX = 2**31 - 1

IMPOSSIBLE = [
    case(
        "cpu-1e10000000",
        CLUSTER,
        put(f"{WORKER_CONTAINER}.resources", {"limits": {"cpu": "1e10000000"}}),
        expect=f'{WORKER_CONTAINER}.resources.limits[cpu]: Invalid value: "1e10000000": out of '
        "range: a quantity may be at most 9223372036854775807",
    ),
    case(
        "memory-1e-10000000",
        CLUSTER,
        put(f"{HEAD_CONTAINER}.resources", {"requests": {"memory": "1e-10000000"}}),
        expect=f'{HEAD_CONTAINER}.resources.requests[memory]: Invalid value: "1e-10000000": out '
        "of range: a non-zero quantity must be at least 1n",
    ),
    case(
        "ten-thousand-digits",
        CLUSTER,
        put(f"{HEAD_CONTAINER}.resources", {"limits": {"cpu": "9" * 10_000}}),
        expect="too long: a quantity has at most 64 characters, this one has 10000",
    ),
    case(
        "request-above-limit",
        CLUSTER,
        put(f"{HEAD_CONTAINER}.resources", {"limits": {"cpu": "1"}, "requests": {"cpu": "2"}}),
        expect=f'{HEAD_CONTAINER}.resources.requests: Invalid value: "2": must be less than or '
        "equal to cpu limit of 1",
    ),
    case(
        "group-resources-quantity",
        CLUSTER,
        put(f"{WORKER}.resources", {"CPU": "1e10000000"}),
        expect=f'{WORKER}.resources[CPU]: Invalid value: "1e10000000": out of range',
    ),
    case(
        "replicas-int32-max",
        CLUSTER,
        put(f"{WORKER}.replicas", INT32_MAX),
        put(f"{WORKER}.maxReplicas", INT32_MAX),
        expect=f"{WORKER}.replicas: Invalid value: {INT32_MAX}: asks for {INT32_MAX} Pods "
        "(x numOfHosts 1); at most 10000 Pods per cluster",
    ),
    case(
        "missing-image",
        CLUSTER,
        put(f"{HEAD_CONTAINER}.image", None),
        expect=f"{HEAD_CONTAINER}.image: Required value",
    ),
    case(
        "container-name-not-dns-1123",
        CLUSTER,
        put(f"{WORKER_CONTAINER}.name", "Ray_Worker"),
        expect=f'{WORKER_CONTAINER}.name: Invalid value: "Ray_Worker": a lowercase RFC 1123 label',
    ),
    case(
        "init-container-named-like-a-container",
        CLUSTER,
        lambda m: m["spec"]["headGroupSpec"]["template"]["spec"].update(
            initContainers=[
                {
                    "name": m["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["name"],
                    "image": "busybox",
                }
            ]
        ),
        expect=f"{HEAD}.template.spec.containers[0].name: Duplicate value",
    ),
    case(
        "port-name-not-iana",
        CLUSTER,
        put(f"{HEAD_CONTAINER}.ports", [{"name": "dashboard_port", "containerPort": 8265}]),
        expect=f'{HEAD_CONTAINER}.ports[0].name: Invalid value: "dashboard_port": must contain '
        "only alpha-numeric characters (a-z, 0-9), and hyphens (-)",
    ),
    case(
        "port-out-of-range",
        CLUSTER,
        put(f"{HEAD_CONTAINER}.ports", [{"name": "gcs", "containerPort": 70000}]),
        expect=f"{HEAD_CONTAINER}.ports[0].containerPort: Invalid value: 70000: must be between 1 "
        "and 65535, inclusive",
    ),
    case(
        "env-name-with-equals",
        CLUSTER,
        put(f"{WORKER_CONTAINER}.env", [{"name": "A=B", "value": "1"}]),
        expect=f'{WORKER_CONTAINER}.env[0].name: Invalid value: "A=B": a valid environment '
        "variable name must consist only of printable ASCII characters other than '='",
    ),
    case(
        "job-submitter-without-image",
        JOB,
        put("spec.submitterPodTemplate.spec.containers[0].image", None),
        expect="spec.submitterPodTemplate.spec.containers[0].image: Required value",
    ),
    case(
        "job-cluster-quantity",
        JOB,
        put(
            f"{JOB_CLUSTER}.headGroupSpec.template.spec.containers[0].resources",
            {"limits": {"memory": "1e10000000"}},
        ),
        expect=f"{JOB_CLUSTER}.headGroupSpec.template.spec.containers[0].resources.limits[memory]",
    ),
    case(
        "service-cluster-without-image",
        SERVICE,
        put(f"{SERVICE_CLUSTER}.workerGroupSpecs[0].template.spec.containers[0].image", None),
        expect=f"{SERVICE_CLUSTER}.workerGroupSpecs[0].template.spec.containers[0].image: "
        "Required value",
    ),
]


@pytest.mark.parametrize("rule", IMPOSSIBLE)
def test_a_spec_that_can_never_run_is_refused_with_the_field_path(
    kubectl: Kubectl, shared_webhook_namespace: str, rule: Case
) -> None:
    manifest = rule.manifest()
    started = time.monotonic()
    # JSON, not YAML: kubectl's YAML would read an unquoted 1e-10000000 as the number 0.
    result = kubectl.run(
        "apply", "-n", shared_webhook_namespace, "-f", "-", input_text=json.dumps(manifest)
    )
    assert result.returncode != 0, f"admitted: {rule.id}"
    for message in rule.messages:
        assert message in result.stderr
    assert time.monotonic() - started < 10  # the webhook answers within its 5 s timeout
    listed = kubectl("get", manifest["kind"].lower(), "-n", shared_webhook_namespace, "-o", "name")
    assert listed == ""
