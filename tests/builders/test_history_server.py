"""Specification: with the RayClusterHistoryServer gate on, head and worker Pods carry KubeRay's
history-server collector sidecar, share /tmp/ray with it and export Ray's events to it; with the
gate off, or without `collectorOptions`, the Pods are what they were.

The expected containers and env vars below were compared with the Pods KubeRay's own
`DefaultHeadPodTemplate`/`DefaultWorkerPodTemplate` + `BuildPod` build for the same specs
(kuberay feeaf72, gate on): equal field for field, and so is the spec hash.
"""

from __future__ import annotations

import copy
from typing import Any

from ray_operator.builders import PodOptions, build_head_pod, build_worker_pod
from ray_operator.builders.history_server import COLLECTOR_CONTAINER_NAME
from ray_operator.builders.pods import with_feature_gates
from ray_operator.features import parse_feature_gates
from ray_operator.spec.hashing import pod_template_hash

from tests.builders.clusters import raycluster

GATE_ON = PodOptions(history_server=True)
FQDN = "history-head-svc.ns1.svc.cluster.local"
EXPOSABLE = (
    "TASK_DEFINITION_EVENT,TASK_LIFECYCLE_EVENT,ACTOR_TASK_DEFINITION_EVENT,TASK_PROFILE_EVENT,"
    "DRIVER_JOB_DEFINITION_EVENT,DRIVER_JOB_LIFECYCLE_EVENT,ACTOR_DEFINITION_EVENT,"
    "ACTOR_LIFECYCLE_EVENT,NODE_DEFINITION_EVENT,NODE_LIFECYCLE_EVENT"
)
GCS_ENV = [
    {"name": "STORAGE_BACKEND", "value": "GCS"},
    {"name": "GCS_BUCKET", "value": "ray-history"},
]


def history_cluster(**collector: Any) -> dict[str, Any]:
    options = {"image": "collector:1", "env": copy.deepcopy(GCS_ENV), **collector}
    return raycluster("history", historyServerOptions={"collectorOptions": options})


def head(cluster: dict[str, Any], options: PodOptions = GATE_ON) -> dict[str, Any]:
    return build_head_pod(cluster, suffix="abcde", options=options)  # type: ignore[arg-type]


def worker(cluster: dict[str, Any], options: PodOptions = GATE_ON) -> dict[str, Any]:
    return build_worker_pod(
        cluster,  # type: ignore[arg-type]
        "workers",
        suffix="vwxyz",
        replica_index=0,
        options=options,
    )


def collector(pod: dict[str, Any]) -> dict[str, Any]:
    (found,) = [c for c in pod["spec"]["containers"] if c["name"] == COLLECTOR_CONTAINER_NAME]
    return found


def kuberay_env(role: str) -> list[dict[str, Any]]:
    return [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "RAY_CLUSTER_NAME", "value": "history"},
        {"name": "RAY_CLUSTER_NAMESPACE", "value": "ns1"},
        {"name": "RAY_ROLE", "value": role},
        {"name": "EVENTS_PORT", "value": "8084"},
        {"name": "FQ_RAY_IP", "value": FQDN},
    ]


def test_the_head_gets_kuberays_collector_after_its_other_containers() -> None:
    pod = head(history_cluster())
    assert [c["name"] for c in pod["spec"]["containers"]] == ["ray-head", COLLECTOR_CONTAINER_NAME]
    assert collector(pod) == {
        "name": COLLECTOR_CONTAINER_NAME,
        "image": "collector:1",
        "imagePullPolicy": "IfNotPresent",
        "resources": {
            "limits": {"cpu": "200m", "memory": "256Mi"},
            "requests": {"cpu": "50m", "memory": "64Mi"},
        },
        "env": [
            *kuberay_env("Head"),
            {"name": "RAY_DASHBOARD_ADDRESS", "value": "http://localhost:8265"},
            *GCS_ENV,
        ],
        "volumeMounts": [{"mountPath": "/tmp/ray", "name": "ray-logs"}],
    }


def test_a_worker_collector_has_no_dashboard_address() -> None:
    pod = worker(history_cluster())
    assert collector(pod)["env"] == [*kuberay_env("Worker"), *GCS_ENV]


def test_the_ray_container_shares_tmp_ray_and_exports_its_events_to_the_collector() -> None:
    for pod in (head(history_cluster()), worker(history_cluster())):
        ray = pod["spec"]["containers"][0]
        assert {"mountPath": "/tmp/ray", "name": "ray-logs"} in ray["volumeMounts"]
        assert {"name": "ray-logs", "emptyDir": {}} in pod["spec"]["volumes"]
        assert ray["env"][-5:] == [
            {"name": "RAY_enable_ray_event", "value": "true"},
            {"name": "RAY_enable_core_worker_ray_event_to_aggregator", "value": "true"},
            {
                "name": "RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR",
                "value": "http://localhost:8084/v1/events",
            },
            {"name": "RAY_DASHBOARD_AGGREGATOR_AGENT_EXPOSABLE_EVENT_TYPES", "value": EXPOSABLE},
            {
                "name": "RAY_DASHBOARD_AGGREGATOR_AGENT_PUBLISHER_HTTP_ENDPOINT_"
                "EXPOSABLE_EVENT_TYPES",
                "value": EXPOSABLE,
            },
        ]


def test_the_users_own_event_settings_win() -> None:
    cluster = history_cluster()
    ray = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    ray["env"] = [{"name": "RAY_enable_ray_event", "value": "false"}]
    env = head(cluster)["spec"]["containers"][0]["env"]
    assert [e for e in env if e["name"] == "RAY_enable_ray_event"] == [
        {"name": "RAY_enable_ray_event", "value": "false"}
    ]


def test_the_users_resources_pull_policy_and_dashboard_address_replace_kuberays() -> None:
    cluster = history_cluster(resources={"limits": {"cpu": "1"}}, imagePullPolicy="Always")
    cluster["spec"]["historyServerOptions"]["collectorOptions"]["env"].append(
        {"name": "RAY_DASHBOARD_ADDRESS", "value": "http://elsewhere:8265"}
    )
    sidecar = collector(head(cluster))
    assert sidecar["resources"] == {"limits": {"cpu": "1"}}
    assert sidecar["imagePullPolicy"] == "Always"
    addresses = [e["value"] for e in sidecar["env"] if e["name"] == "RAY_DASHBOARD_ADDRESS"]
    assert addresses == ["http://elsewhere:8265"]


def test_a_cluster_made_for_a_rayjob_names_its_owner_to_the_collector() -> None:
    cluster = history_cluster()
    cluster["metadata"]["labels"] = {
        "ray.io/originated-from-crd": "RayJob",
        "ray.io/originated-from-cr-name": "nightly",
    }
    env = collector(worker(cluster))["env"]
    assert env[6:8] == [
        {"name": "OWNER_KIND", "value": "RayJob"},
        {"name": "OWNER_NAME", "value": "nightly"},
    ]


def test_with_token_auth_the_collector_gets_the_clusters_token() -> None:
    cluster = history_cluster()
    cluster["spec"]["authOptions"] = {"mode": "token"}
    env = collector(head(cluster))["env"]
    assert env[-2:] == [
        {"name": "RAY_AUTH_MODE", "value": "token"},
        {
            "name": "RAY_AUTH_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "history", "key": "auth_token"}},
        },
    ]


def test_with_the_autoscaler_the_collector_comes_last_and_the_log_volume_is_shared_once() -> None:
    cluster = history_cluster()
    cluster["spec"]["enableInTreeAutoscaling"] = True
    pod = head(cluster)
    assert [c["name"] for c in pod["spec"]["containers"]] == [
        "ray-head",
        "autoscaler",
        COLLECTOR_CONTAINER_NAME,
    ]
    assert [v["name"] for v in pod["spec"]["volumes"]].count("ray-logs") == 1
    for container in pod["spec"]["containers"]:
        assert {"mountPath": "/tmp/ray", "name": "ray-logs"} in container["volumeMounts"]


def test_a_user_mount_at_tmp_ray_is_kept_for_the_ray_container() -> None:
    cluster = history_cluster()
    head_spec = cluster["spec"]["headGroupSpec"]["template"]["spec"]
    head_spec["containers"][0]["volumeMounts"] = [{"name": "mine", "mountPath": "/tmp/ray"}]
    head_spec["volumes"] = [{"name": "mine", "emptyDir": {}}]
    pod = head(cluster)
    assert pod["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "mine", "mountPath": "/tmp/ray"},
        {"mountPath": "/dev/shm", "name": "shared-mem"},
    ]
    assert collector(pod)["volumeMounts"] == [{"mountPath": "/tmp/ray", "name": "ray-logs"}]


def test_gate_off_builds_the_pods_without_any_of_it() -> None:
    cluster = history_cluster()
    without = raycluster("history")
    for build in (head, worker):
        off = build(cluster, PodOptions())
        assert off["spec"] == build(without, PodOptions())["spec"]
        assert off["spec"] == build(without, GATE_ON)["spec"]


def test_the_operators_gates_decide() -> None:
    on = with_feature_gates(PodOptions(), parse_feature_gates("RayClusterHistoryServer=true"))
    assert on.history_server
    assert not with_feature_gates(PodOptions(), parse_feature_gates("")).history_server


def test_the_hash_covers_the_options_not_the_sidecar_as_kuberays() -> None:
    # KubeRay hashes the RayCluster spec, not the Pod: the gate leaves the annotation alone, a
    # new collector image changes it (KubeRay's value for its own sample, checked with its code).
    cluster = history_cluster()
    annotation = "ray.io/upgrade-strategy-recreate-hash"
    assert head(cluster)["metadata"]["annotations"][annotation] == pod_template_hash(cluster)
    assert head(cluster, PodOptions())["metadata"]["annotations"][annotation] == (
        pod_template_hash(cluster)
    )
    changed = copy.deepcopy(cluster)
    changed["spec"]["historyServerOptions"]["collectorOptions"]["image"] = "collector:2"
    assert pod_template_hash(changed) != pod_template_hash(cluster)


def test_kuberays_hash_of_its_history_server_sample() -> None:
    sample = raycluster(
        "raycluster-historyserver",
        groups=[],
        historyServerOptions={
            "collectorOptions": {
                "image": "quay.io/kuberay/collector:nightly",
                "imagePullPolicy": "IfNotPresent",
                "resources": {
                    "requests": {"cpu": "50m", "memory": "64Mi"},
                    "limits": {"cpu": "200m", "memory": "256Mi"},
                },
                "env": [
                    {"name": "STORAGE_BACKEND", "value": "GCS"},
                    {"name": "GCS_BUCKET", "value": "my-gcs-bucket"},
                ],
            }
        },
    )
    sample["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0] = {
        "name": "ray-head",
        "image": "rayproject/ray:2.52.0",
        "resources": {
            "limits": {"cpu": "1", "memory": "5Gi"},
            "requests": {"cpu": "1", "memory": "5Gi"},
        },
        "ports": [
            {"containerPort": 6379, "name": "gcs-server"},
            {"containerPort": 8265, "name": "dashboard"},
            {"containerPort": 10001, "name": "client"},
        ],
    }
    sample["spec"]["workerGroupSpecs"] = [
        {
            "replicas": 1,
            "minReplicas": 1,
            "maxReplicas": 5,
            "groupName": "workergroup",
            "rayStartParams": {},
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "ray-worker",
                            "image": "rayproject/ray:2.52.0",
                            "resources": {
                                "limits": {"cpu": "1", "memory": "1Gi"},
                                "requests": {"cpu": "1", "memory": "1Gi"},
                            },
                        }
                    ]
                }
            },
        }
    ]
    assert pod_template_hash(sample) == "TLPD9HKDB4J5UV2LIUNS4DSB91OJ2PTS"
