"""The CustomResourceDefinition objects: names, printer columns, subresources.

The schemas come from `schema.crd_schema`; this module adds what `kubectl` shows about each kind,
and the size limit that `render` holds every CRD to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ray_operator.apigen.schema import RAY_IO, Definitions, crd_schema

GROUP = RAY_IO.group
VERSION = RAY_IO.version

# etcd refuses requests above 1.5 MiB by default (--max-request-bytes), and a CRD is stored as one
# value. A server-side apply also stores managedFields beside it, so keep clear of the limit.
MAX_CRD_BYTES = 1_400_000


@dataclass(frozen=True)
class Column:
    """One column of `kubectl get`; priority 1 columns show only with `-o wide`."""

    name: str
    json_path: str
    type: str = "string"
    priority: int = 0
    description: str = ""

    def render(self) -> dict[str, Any]:
        column: dict[str, Any] = {"name": self.name, "jsonPath": self.json_path, "type": self.type}
        if self.priority:
            column["priority"] = self.priority
        if self.description:
            column["description"] = self.description
        return column


AGE = Column("age", ".metadata.creationTimestamp", "date")
# Ours, KubeRay has no such column: why Pods wait (`status/waiting.py`). Priority 1 (`-o wide`),
# so the default output stays KubeRay's, column for column, for scripts that parse it.
WAITING = Column(
    "waiting",
    '.status.conditions[?(@.type=="PodsWaiting")].reason',
    priority=1,
    description=(
        "Why Pods wait: Unschedulable, ImagePullFailed, ContainerConfigFailed, CrashLoop"
        " (condition PodsWaiting)."
    ),
)

# By CRD name: two groups have a RayCluster. The column names are KubeRay's (the legacy
# operator's for cluster.ray.io), so scripts that parse `kubectl get` output keep working.
PRINTER_COLUMNS: dict[str, tuple[Column, ...]] = {
    "rayclusters.ray.io": (
        Column(
            "desired workers",
            ".status.desiredWorkerReplicas",
            "integer",
            description="Worker Pods the cluster should have.",
        ),
        Column(
            "available workers",
            ".status.availableWorkerReplicas",
            "integer",
            description="Worker Pods that are running.",
        ),
        Column("cpus", ".status.desiredCPU", description="CPUs requested by all Pods."),
        Column("memory", ".status.desiredMemory", description="Memory requested by all Pods."),
        Column("gpus", ".status.desiredGPU", description="GPUs requested by all Pods."),
        Column("tpus", ".status.desiredTPU", priority=1, description="TPUs requested by all Pods."),
        Column("status", ".status.state", description="Deprecated summary state."),
        AGE,
        Column("head pod IP", ".status.head.podIP", priority=1, description="IP of the head Pod."),
        Column(
            "head service IP",
            ".status.head.serviceIP",
            priority=1,
            description="Cluster IP of the head Service.",
        ),
        WAITING,
    ),
    "rayjobs.ray.io": (
        Column("job status", ".status.jobStatus", description="Status of the Ray job."),
        Column(
            "deployment status",
            ".status.jobDeploymentStatus",
            description="Where the RayJob is in its life.",
        ),
        Column(
            "ray cluster name", ".status.rayClusterName", description="The cluster running the job."
        ),
        Column("start time", ".status.startTime", description="When the RayJob started."),
        Column("end time", ".status.endTime", description="When the RayJob ended."),
        AGE,
        WAITING,
    ),
    "rayservices.ray.io": (
        Column("service status", ".status.serviceStatus", description="Running when serving."),
        Column(
            "num serve endpoints",
            ".status.numServeEndpoints",
            "integer",
            description="Pods behind the Serve Service.",
        ),
        Column(
            "ready",
            '.status.conditions[?(@.type=="Ready")].status',
            priority=1,
            description="The Ready condition.",
        ),
        Column(
            "active cluster",
            ".status.activeServiceStatus.rayClusterName",
            priority=1,
            description="The RayCluster serving traffic.",
        ),
        Column(
            "pending cluster",
            ".status.pendingServiceStatus.rayClusterName",
            priority=1,
            description="The RayCluster being prepared to take over.",
        ),
        AGE,
        WAITING,
    ),
    "raycronjobs.ray.io": (
        Column("schedule", ".spec.schedule", description="When RayJobs are created."),
        Column("timezone", ".spec.timeZone", description="The schedule's time zone."),
        Column(
            "last schedule",
            ".status.lastScheduleTime",
            "date",
            description="The scheduled time of the last RayJob created.",
        ),
        AGE,
        Column("suspend", ".spec.suspend", "boolean", description="No new RayJobs while true."),
    ),
    "rayservegraphs.ray-operator.io": (
        Column("source", ".spec.source.url", description="URL of the graph document."),
        Column(
            "revision",
            ".status.revision",
            description="First 12 hex digits of the deployed document's digest.",
        ),
        Column("phase", ".status.phase", description="Where the graph is in its life."),
        Column(
            "ready",
            '.status.conditions[?(@.type=="Ready")].status',
            priority=1,
            description="The Ready condition.",
        ),
        AGE,
    ),
    "rayclusters.cluster.ray.io": (
        Column("status", ".status.phase", description="Running, Pending or Error."),
        AGE,
        Column(
            "ray cluster",
            ".status.rayClusterName",
            priority=1,
            description="The ray.io/v1 RayCluster that runs it.",
        ),
    ),
}

# KubeRay's kinds have none; ours gets one, since "rayservegraph" is long to type.
SHORT_NAMES: dict[str, list[str]] = {"rayservegraphs.ray-operator.io": ["rsg"]}


def plural(kind: str) -> str:
    """RayCluster -> rayclusters."""
    return kind.lower() + "s"


def custom_resource_definition(
    definitions: Definitions, kind: str, *, kubernetes_descriptions: bool = False
) -> dict[str, Any]:
    """The complete CRD object of `kind`."""
    api = definitions.api
    crd_name = f"{plural(kind)}.{api.group}"
    names: dict[str, Any] = {
        "categories": ["all"],
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural(kind),
        "singular": kind.lower(),
    }
    if crd_name in SHORT_NAMES:
        names["shortNames"] = SHORT_NAMES[crd_name]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {
            "group": api.group,
            "names": names,
            "scope": "Namespaced",
            "versions": [
                {
                    "name": api.version,
                    "served": True,
                    "storage": True,
                    "additionalPrinterColumns": [
                        column.render() for column in PRINTER_COLUMNS[crd_name]
                    ],
                    "schema": {
                        "openAPIV3Schema": crd_schema(
                            definitions, kind, kubernetes_descriptions=kubernetes_descriptions
                        )
                    },
                    # KubeRay has a status subresource and no scale subresource: worker groups
                    # scale one by one, which a single /scale replicas field cannot express.
                    "subresources": {"status": {}},
                }
            ],
        },
    }
