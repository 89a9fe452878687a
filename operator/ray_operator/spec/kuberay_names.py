"""KubeRay's names that other programs rely on: labels, annotations, env vars, ports, suffixes.

Imported `as names` (`names.CLUSTER_LABEL`, `names.GCS_PORT`). This module owns the compatibility
vocabulary shared with KubeRay (ray-project/kuberay,
`ray-operator/controllers/ray/utils/constant.go`). Ray's autoscaler, the Ray dashboard and users'
kubectl habits select Pods and Services by these exact strings, so they must never drift. The one
deliberate difference is `app.kubernetes.io/created-by`, which names this operator; the runtime
watches Jobs and RBAC objects by that label with either operator's value (`KUBERAY_CREATED_BY`:
a cluster KubeRay ran is taken over), Services by the `ray.io/*` labels both operators put on
them, and Pods by `ray.io/cluster` (`RAY_POD_SELECTOR`), the label KubeRay and Ray's autoscaler
find them by (see `spec/kinds.py: watch_selectors`).

Only constants live here: no functions, no mutable state, no imports of the operator.
"""

from typing import Final

# --- Labels on Pods and Services ------------------------------------------------------------
CLUSTER_LABEL: Final = "ray.io/cluster"
NODE_TYPE_LABEL: Final = "ray.io/node-type"
GROUP_LABEL: Final = "ray.io/group"
IS_RAY_NODE_LABEL: Final = "ray.io/is-ray-node"
IDENTIFIER_LABEL: Final = "ray.io/identifier"
SERVE_LABEL: Final = "ray.io/serve"
HEADLESS_WORKER_SERVICE_LABEL: Final = "ray.io/headless-worker-svc"
ORIGINATED_FROM_CR_NAME_LABEL: Final = "ray.io/originated-from-cr-name"
ORIGINATED_FROM_CRD_LABEL: Final = "ray.io/originated-from-crd"
# Multi-host (and single-host multi-slice) indexing labels; KubeRay's RayMultiHostIndexing gate,
# on by default since it went beta.
WORKER_REPLICA_NAME_LABEL: Final = "ray.io/worker-group-replica-name"
WORKER_REPLICA_INDEX_LABEL: Final = "ray.io/worker-group-replica-index"
REPLICA_HOST_INDEX_LABEL: Final = "ray.io/replica-host-index"

APP_NAME_LABEL: Final = "app.kubernetes.io/name"
APP_NAME: Final = "kuberay"
CREATED_BY_LABEL: Final = "app.kubernetes.io/created-by"
CREATED_BY: Final = "ray-operator"
CREATED_BY_SELECTOR: Final = f"{CREATED_BY_LABEL}={CREATED_BY}"
# KubeRay's value (`utils.ComponentName`): what it made is recognised, and never relabelled.
KUBERAY_CREATED_BY: Final = "kuberay-operator"
# "has the label": a Pod stays visible when a user strips `created-by` (or KubeRay made it); which
# cluster it belongs to is decided by its ownerReferences, never by labels alone.
RAY_POD_SELECTOR: Final = CLUSTER_LABEL

HEAD_NODE: Final = "head"
WORKER_NODE: Final = "worker"
HEAD_GROUP_NAME: Final = "headgroup"

# --- Annotations ----------------------------------------------------------------------------
OVERWRITE_CONTAINER_CMD_ANNOTATION: Final = "ray.io/overwrite-container-cmd"
FT_ENABLED_ANNOTATION: Final = "ray.io/ft-enabled"
EXTERNAL_STORAGE_NAMESPACE_ANNOTATION: Final = "ray.io/external-storage-namespace"
UPGRADE_STRATEGY_RECREATE_HASH_ANNOTATION: Final = "ray.io/upgrade-strategy-recreate-hash"
KUBERAY_VERSION_ANNOTATION: Final = "ray.io/kuberay-version"
# Ours: changing this annotation on a RayCluster restarts every Pod (the legacy operator's
# "apply again" habit). Builders copy the value onto each Pod so the reconciler can compare.
RESTART_ANNOTATION: Final = "ray.io/restart"
# "true" on a RayCluster asks for a `<cluster>-serve-svc` in front of its Serve proxies
# (kuberay#1672).
ENABLE_SERVE_SERVICE_ANNOTATION: Final = "ray.io/enable-serve-service"

# The values of a RayJob's or RayService's `spec.managedBy` that mean "this operator" (KubeRay's
# own value included, so manifests written for it work); anything else: hands off (e.g. Kueue).
OWN_MANAGED_BY: Final = (None, "", "ray.io/kuberay-operator")

# --- Well-known names -----------------------------------------------------------------------
HEAD_SERVICE_SUFFIX: Final = "head-svc"
SERVE_SERVICE_SUFFIX: Final = "serve-svc"
HEADLESS_SERVICE_SUFFIX: Final = "headless"
AUTOSCALER_CONTAINER_NAME: Final = "autoscaler"
WAIT_GCS_READY_CONTAINER_NAME: Final = "wait-gcs-ready"
SHARED_MEMORY_VOLUME_NAME: Final = "shared-mem"
SHARED_MEMORY_MOUNT_PATH: Final = "/dev/shm"
RAY_LOG_VOLUME_NAME: Final = "ray-logs"
RAY_LOG_MOUNT_PATH: Final = "/tmp/ray"
GCS_STORAGE_VOLUME_NAME: Final = "gcs-storage"
GCS_STORAGE_MOUNT_PATH: Final = "/data/gcs"
GCS_STORAGE_PVC_SUFFIX: Final = "-gcs-pvc"
RAY_TOKEN_VOLUME_NAME: Final = "ray-token"
RAY_TOKEN_MOUNT_PATH: Final = "/var/run/secrets/ray.io/serviceaccount"
AUTH_TOKEN_SECRET_KEY: Final = "auth_token"
DEFAULT_CLUSTER_DOMAIN: Final = "cluster.local"
# KubeRay reports its build version in RAY_USAGE_STATS_EXTRA_TAGS; "nightly" is what its
# unreleased builds report, and what Ray's usage stats already know.
KUBERAY_VERSION: Final = "nightly"

# --- Ports ----------------------------------------------------------------------------------
GCS_PORT: Final = 6379
DASHBOARD_PORT: Final = 8265
CLIENT_PORT: Final = 10001
SERVE_PORT: Final = 8000
METRICS_PORT: Final = 8080
DASHBOARD_AGENT_PORT: Final = 52365
GCS_PORT_NAME: Final = "gcs-server"
DASHBOARD_PORT_NAME: Final = "dashboard"
CLIENT_PORT_NAME: Final = "client"
SERVE_PORT_NAME: Final = "serve"
METRICS_PORT_NAME: Final = "metrics"

# --- Environment variables in Ray containers ------------------------------------------------
ENV_RAY_CLUSTER_NAME: Final = "RAY_CLUSTER_NAME"
ENV_RAY_CLUSTER_NAMESPACE: Final = "RAY_CLUSTER_NAMESPACE"
ENV_RAY_IP: Final = "RAY_IP"
ENV_FQ_RAY_IP: Final = "FQ_RAY_IP"
ENV_RAY_PORT: Final = "RAY_PORT"
ENV_RAY_ADDRESS: Final = "RAY_ADDRESS"
ENV_RAY_CLOUD_INSTANCE_ID: Final = "RAY_CLOUD_INSTANCE_ID"
ENV_RAY_NODE_TYPE_NAME: Final = "RAY_NODE_TYPE_NAME"
ENV_KUBERAY_GEN_RAY_START_CMD: Final = "KUBERAY_GEN_RAY_START_CMD"
ENV_KUBERAY_GEN_AUTOSCALER_START_CMD: Final = "KUBERAY_GEN_AUTOSCALER_START_CMD"
ENV_RAY_USAGE_STATS_KUBERAY_IN_USE: Final = "RAY_USAGE_STATS_KUBERAY_IN_USE"
ENV_RAY_USAGE_STATS_EXTRA_TAGS: Final = "RAY_USAGE_STATS_EXTRA_TAGS"
ENV_RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE: Final = "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE"
ENV_RAY_START_ULIMIT_OPEN_FILES: Final = "RAY_START_ULIMIT_OPEN_FILES"
ENV_RAY_ENABLE_AUTOSCALER_V2: Final = "RAY_enable_autoscaler_v2"
ENV_RAY_REDIS_ADDRESS: Final = "RAY_REDIS_ADDRESS"
ENV_REDIS_PASSWORD: Final = "REDIS_PASSWORD"
ENV_REDIS_USERNAME: Final = "REDIS_USERNAME"
ENV_RAY_EXTERNAL_STORAGE_NS: Final = "RAY_external_storage_namespace"
ENV_RAY_GCS_RPC_SERVER_RECONNECT_TIMEOUT_S: Final = "RAY_gcs_rpc_server_reconnect_timeout_s"
ENV_RAY_GCS_STORAGE: Final = "RAY_gcs_storage"
ENV_RAY_GCS_STORAGE_PATH: Final = "RAY_gcs_storage_path"
ENV_RAY_TIMEOUT_MS_TASK_WAIT_FOR_DEATH_INFO: Final = "RAY_timeout_ms_task_wait_for_death_info"
ENV_RAY_GCS_SERVER_REQUEST_TIMEOUT_SECONDS: Final = "RAY_gcs_server_request_timeout_seconds"
ENV_RAY_SERVE_KV_TIMEOUT_S: Final = "RAY_SERVE_KV_TIMEOUT_S"
ENV_RAY_AUTH_MODE: Final = "RAY_AUTH_MODE"
ENV_RAY_AUTH_TOKEN: Final = "RAY_AUTH_TOKEN"
ENV_RAY_ENABLE_K8S_TOKEN_AUTH: Final = "RAY_ENABLE_K8S_TOKEN_AUTH"

# --- Kinds of the custom resource that created a RayCluster ---------------------------------
CRD_RAY_CLUSTER: Final = "RayCluster"
CRD_RAY_JOB: Final = "RayJob"
CRD_RAY_SERVICE: Final = "RayService"
