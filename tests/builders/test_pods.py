"""Head and worker Pods: names, labels, env vars, command, probes, volumes, sidecars."""

from __future__ import annotations

import copy

from ray_operator.builders import PodOptions, build_head_pod, build_worker_pod
from ray_operator.spec.hashing import pod_template_hash

from tests.builders.clusters import env_of, ray_container, raycluster, worker_group


def _head(cluster: dict | None = None, **kwargs: object) -> dict:
    return build_head_pod(cluster or raycluster(), suffix="abcde", **kwargs)  # type: ignore[arg-type]


def _worker(cluster: dict | None = None, group: str = "workers", **kwargs: object) -> dict:
    kwargs.setdefault("replica_index", 0)
    return build_worker_pod(cluster or raycluster(), group, suffix="vwxyz", **kwargs)  # type: ignore[arg-type]


def test_pod_names_use_the_given_suffix() -> None:
    assert _head()["metadata"]["name"] == "demo-head-abcde"
    assert _worker()["metadata"]["name"] == "demo-workers-worker-vwxyz"


def test_long_names_are_clipped_and_lowercased_like_kuberay() -> None:
    cluster = raycluster(groups=[worker_group("G" * 60)])
    name = _worker(cluster, "G" * 60)["metadata"]["name"]
    assert name == ("demo-" + "g" * 45) + "-worker-vwxyz"


def test_builders_are_deterministic_and_do_not_mutate_input() -> None:
    cluster = raycluster()
    before = copy.deepcopy(cluster)
    assert _head(cluster) == _head(cluster)
    assert _worker(cluster) == _worker(cluster)
    assert cluster == before


def test_pods_live_in_the_cluster_namespace_and_are_owned_by_it() -> None:
    pod = _worker()
    assert pod["metadata"]["namespace"] == "ns1"
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "RayCluster",
        "demo",
        "uid-1",
        True,
    )


def test_user_labels_cannot_override_identity_labels() -> None:
    cluster = raycluster()
    labels = {
        "ray.io/cluster": "x",
        "ray.io/group": "x",
        "app.kubernetes.io/created-by": "x",
        "team": "a",
    }
    cluster["spec"]["headGroupSpec"]["template"]["metadata"] = {"labels": labels}
    result = _head(cluster)["metadata"]["labels"]
    assert (result["ray.io/cluster"], result["ray.io/group"]) == ("demo", "headgroup")
    assert result["app.kubernetes.io/created-by"] == "ray-operator"
    assert result["team"] == "a"


def test_group_labels_field_is_added_to_pod_labels() -> None:
    cluster = raycluster(groups=[worker_group(labels={"zone": "b"})])
    assert _worker(cluster)["metadata"]["labels"]["zone"] == "b"


def test_worker_gets_replica_index_label() -> None:
    labels = _worker(replica_index=3)["metadata"]["labels"]
    assert labels["ray.io/worker-group-replica-index"] == "3"
    assert "ray.io/worker-group-replica-name" not in labels


def test_multi_host_worker_gets_replica_name_and_host_index() -> None:
    cluster = raycluster(groups=[worker_group(numOfHosts=2)])
    labels = _worker(cluster, replica_index=1, replica_name="workers-abcde", host_index=1)[
        "metadata"
    ]["labels"]
    assert labels["ray.io/worker-group-replica-name"] == "workers-abcde"
    assert labels["ray.io/replica-host-index"] == "1"
    assert labels["ray.io/worker-group-replica-index"] == "1"


def test_worker_env_points_at_the_head_service() -> None:
    env = env_of(_worker()["spec"]["containers"][0])
    assert env["FQ_RAY_IP"] == "demo-head-svc.ns1.svc.cluster.local"
    assert env["RAY_IP"] == "demo-head-svc"
    assert env["RAY_ADDRESS"] == "demo-head-svc.ns1.svc.cluster.local:6379"
    assert env["RAY_PORT"] == "6379"


def test_head_env_uses_localhost_and_reports_usage_tags() -> None:
    env = env_of(_head()["spec"]["containers"][0])
    assert env["RAY_ADDRESS"] == "127.0.0.1:6379"
    assert env["RAY_USAGE_STATS_KUBERAY_IN_USE"] == "1"
    assert env["RAY_USAGE_STATS_EXTRA_TAGS"] == "kuberay_version=nightly;kuberay_crd=RayCluster"
    assert env["RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE"] == "1"
    assert "FQ_RAY_IP" not in env


def test_ray_containers_get_downward_api_env_for_the_autoscaler() -> None:
    env = env_of(_worker()["spec"]["containers"][0])
    assert env["RAY_CLUSTER_NAME"] == {
        "fieldRef": {"fieldPath": "metadata.labels['ray.io/cluster']"}
    }
    assert env["RAY_CLOUD_INSTANCE_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["RAY_NODE_TYPE_NAME"] == {
        "fieldRef": {"fieldPath": "metadata.labels['ray.io/group']"}
    }


def test_generated_command_is_exported_and_run_with_raised_ulimit() -> None:
    container = _head()["spec"]["containers"][0]
    generated = env_of(container)["KUBERAY_GEN_RAY_START_CMD"]
    assert generated.startswith("ray start --head ")
    assert container["command"] == ["/bin/bash", "-c", "--"]
    assert container["args"] == [f"ulimit -n ${{RAY_START_ULIMIT_OPEN_FILES:-65536}}; {generated}"]


def test_user_env_values_are_kept() -> None:
    cluster = raycluster()
    cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "RAY_ADDRESS", "value": "mine"}
    ]
    assert env_of(_head(cluster)["spec"]["containers"][0])["RAY_ADDRESS"] == "mine"


def test_command_already_running_ray_start_is_left_alone() -> None:
    cluster = raycluster()
    container = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    container.update(command=["bash", "-c"], args=["ray start --head --block"])
    assert _head(cluster)["spec"]["containers"][0]["args"] == ["ray start --head --block"]


def test_worker_waits_for_gcs_in_an_init_container() -> None:
    init = _worker()["spec"]["initContainers"][-1]
    assert init["name"] == "wait-gcs-ready"
    assert "ray health-check --address demo-head-svc.ns1.svc.cluster.local:6379" in init["args"][0]
    assert init["resources"]["limits"] == {"cpu": "200m", "memory": "256Mi"}
    assert env_of(init)["FQ_RAY_IP"] == "demo-head-svc.ns1.svc.cluster.local"


def test_init_container_injection_can_be_disabled() -> None:
    assert "initContainers" not in _worker(options=PodOptions(inject_wait_gcs_ready=False))["spec"]


def test_old_ray_gets_exec_probes_checking_raylet_and_head_gcs() -> None:
    head = _head()["spec"]["containers"][0]
    command = head["livenessProbe"]["exec"]["command"][2]
    assert "http://localhost:52365/api/local_raylet_healthz" in command
    assert "http://localhost:8265/api/gcs_healthz" in command
    assert (
        head["livenessProbe"]["failureThreshold"],
        head["readinessProbe"]["failureThreshold"],
    ) == (120, 10)
    worker = _worker()["spec"]["containers"][0]
    assert "gcs_healthz" not in worker["readinessProbe"]["exec"]["command"][2]
    assert worker["readinessProbe"]["timeoutSeconds"] == 2


def test_ray_2_53_gets_http_probes_on_the_agent() -> None:
    probe = _head(raycluster(rayVersion="2.53.0"))["spec"]["containers"][0]["readinessProbe"]
    assert probe["httpGet"] == {"path": "/api/healthz", "port": 52365}
    assert "exec" not in probe


def test_user_probes_are_not_replaced() -> None:
    cluster = raycluster()
    mine = {"tcpSocket": {"port": 6379}}
    cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["livenessProbe"] = mine
    container = _head(cluster)["spec"]["containers"][0]
    assert container["livenessProbe"] == mine
    assert "readinessProbe" in container


def test_shared_memory_is_sized_like_the_container_memory() -> None:
    pod = _worker()
    assert {"name": "shared-mem", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}} in pod[
        "spec"
    ]["volumes"]
    assert {"mountPath": "/dev/shm", "name": "shared-mem"} in pod["spec"]["containers"][0][
        "volumeMounts"
    ]


def test_plasma_directory_disables_shared_memory_volume() -> None:
    cluster = raycluster(groups=[worker_group(rayStartParams={"plasma-directory": "/data"})])
    assert "volumes" not in _worker(cluster)["spec"]


def test_scheduling_fields_and_volumes_pass_through_untouched() -> None:
    extra = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}
            }
        },
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
        "nodeSelector": {"pool": "a"},
        "volumes": [{"name": "data", "emptyDir": {}}],
    }
    group = worker_group()
    group["template"]["spec"].update(copy.deepcopy(extra))
    spec = _worker(raycluster(groups=[group]))["spec"]
    for key in ("affinity", "tolerations", "nodeSelector"):
        assert spec[key] == extra[key]
    assert spec["volumes"][0] == {"name": "data", "emptyDir": {}}


def test_autoscaling_adds_the_autoscaler_sidecar_and_disables_the_monitor() -> None:
    pod = _head(raycluster(enableInTreeAutoscaling=True))
    ray, sidecar = pod["spec"]["containers"]
    assert sidecar["name"] == "autoscaler"
    assert sidecar["image"] == ray["image"]
    assert sidecar["args"] == [env_of(sidecar)["KUBERAY_GEN_AUTOSCALER_START_CMD"]]
    assert "--no-monitor" in env_of(ray)["KUBERAY_GEN_RAY_START_CMD"]
    assert pod["spec"]["serviceAccountName"] == "demo"
    for container in (ray, sidecar):
        assert {"mountPath": "/tmp/ray", "name": "ray-logs"} in container["volumeMounts"]


def test_autoscaler_options_override_the_sidecar_defaults() -> None:
    options = {
        "image": "custom:1",
        "resources": {"limits": {"cpu": "1"}},
        "env": [{"name": "X", "value": "1"}],
    }
    sidecar = _head(raycluster(enableInTreeAutoscaling=True, autoscalerOptions=options))["spec"][
        "containers"
    ][1]
    assert sidecar["image"] == "custom:1"
    assert sidecar["resources"] == {"limits": {"cpu": "1"}}
    assert env_of(sidecar)["X"] == "1"


def test_autoscaler_v2_sets_env_and_never_restart_policy() -> None:
    cluster = raycluster(enableInTreeAutoscaling=True, autoscalerOptions={"version": "v2"})
    head = _head(cluster)
    assert env_of(head["spec"]["containers"][0])["RAY_enable_autoscaler_v2"] == "true"
    assert head["spec"]["restartPolicy"] == "Never"
    assert _worker(cluster)["spec"]["restartPolicy"] == "Never"


def test_redis_fault_tolerance_wires_address_password_and_namespace() -> None:
    options = {
        "redisAddress": "redis:6379",
        "redisPassword": {"valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    }
    cluster = raycluster(gcsFaultToleranceOptions=options)
    head = _head(cluster)
    env = env_of(head["spec"]["containers"][0])
    assert env["RAY_REDIS_ADDRESS"] == "redis:6379"
    assert env["REDIS_PASSWORD"] == {"secretKeyRef": {"name": "s", "key": "k"}}
    assert env["RAY_external_storage_namespace"] == "uid-1"
    assert "--redis-password=$REDIS_PASSWORD" in env["KUBERAY_GEN_RAY_START_CMD"]
    assert head["metadata"]["annotations"]["ray.io/ft-enabled"] == "true"
    assert (
        env_of(_worker(cluster)["spec"]["containers"][0])["RAY_gcs_rpc_server_reconnect_timeout_s"]
        == "600"
    )


def test_head_records_that_fault_tolerance_is_off() -> None:
    assert _head()["metadata"]["annotations"]["ray.io/ft-enabled"] == "false"


def test_token_auth_reads_the_token_from_the_cluster_secret() -> None:
    cluster = raycluster(authOptions={"mode": "token"}, rayVersion="2.52.0")
    for pod in (_head(cluster), _worker(cluster)):
        env = env_of(pod["spec"]["containers"][0])
        assert env["RAY_AUTH_MODE"] == "token"
        assert env["RAY_AUTH_TOKEN"] == {"secretKeyRef": {"name": "demo", "key": "auth_token"}}
    assert env_of(_worker(cluster)["spec"]["initContainers"][-1])["RAY_AUTH_MODE"] == "token"


def test_ray_service_clusters_mark_serving_pods() -> None:
    cluster = raycluster()
    cluster["metadata"]["labels"] = {"ray.io/originated-from-crd": "RayService"}
    assert _head(cluster)["metadata"]["labels"]["ray.io/serve"] == "false"
    worker = _worker(cluster)
    assert worker["metadata"]["labels"]["ray.io/serve"] == "true"
    assert "-/healthz" in worker["spec"]["containers"][0]["readinessProbe"]["exec"]["command"][2]


def test_the_head_carries_the_template_hash_and_workers_the_restart_annotation() -> None:
    cluster = raycluster()
    cluster["metadata"]["annotations"] = {"ray.io/restart": "2"}
    head_annotations = build_head_pod(cluster, suffix="a")["metadata"]["annotations"]
    assert head_annotations["ray.io/upgrade-strategy-recreate-hash"] == pod_template_hash(cluster)
    assert head_annotations["ray.io/kuberay-version"] == "nightly"
    annotations = _worker(cluster)["metadata"]["annotations"]
    # As KubeRay: only the head Pod is stamped with the hash and the KubeRay version.
    assert "ray.io/upgrade-strategy-recreate-hash" not in annotations
    assert "ray.io/kuberay-version" not in annotations
    assert annotations["ray.io/restart"] == "2"


def test_template_hash_ignores_replica_counts_but_not_images() -> None:
    cluster = raycluster()
    scaled = copy.deepcopy(cluster)
    scaled["spec"]["workerGroupSpecs"][0].update(
        replicas=4, maxReplicas=9, scaleStrategy={"workersToDelete": ["a"]}
    )
    assert pod_template_hash(scaled) == pod_template_hash(cluster)
    # KubeRay's hash covers `suspend` (only a RayService's cluster hash leaves it out); harmless,
    # since suspending deletes the Pods anyway.
    suspended = copy.deepcopy(cluster)
    suspended["spec"]["suspend"] = True
    assert pod_template_hash(suspended) != pod_template_hash(cluster)
    upgraded = copy.deepcopy(cluster)
    upgraded["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["image"] = (
        "rayproject/ray:2.53.0"
    )
    assert pod_template_hash(upgraded) != pod_template_hash(cluster)


def test_custom_cluster_domain_changes_the_fqdn() -> None:
    env = env_of(_worker(options=PodOptions(cluster_domain="corp.local"))["spec"]["containers"][0])
    assert env["FQ_RAY_IP"] == "demo-head-svc.ns1.svc.corp.local"


def test_only_the_first_container_is_treated_as_ray() -> None:
    group = worker_group()
    group["template"]["spec"]["containers"].append(ray_container("sidecar"))
    sidecar = _worker(raycluster(groups=[group]))["spec"]["containers"][1]
    assert "env" not in sidecar
    assert "livenessProbe" not in sidecar
