"""Staging "KubeRay ran here": the objects KubeRay's operator made for each sample, recreated.

`../shared/fixtures/kuberay-created/<sample>.yaml` holds, per sample, what KubeRay's own operator
created and wrote (uids, resourceVersions and managedFields removed). `stage_fixture` recreates
one file in its namespace (KubeRay's), in the order an operator and the API server made it:

1. the custom resources, roots first (a RayJob's or RayService's RayCluster names its owner's new
   uid); a resource KubeRay's writes took to `metadata.generation` 2 gets one spec update more
   (created with another value of one field, then updated to the fixture's);
2. their `status`, through the status subresource, exactly as KubeRay wrote it;
3. everything else (Pods, Services, Jobs, RBAC, Secrets, ConfigMaps, Deployments, Ingresses),
   ownerReferences remapped to the new uids by owner kind and name; then each Pod's `status`.

Pods keep the fixture's status (Running, Ready, KubeRay's IPs). They are bound to a Node no kubelet
serves (`STAGED_NODE`), so nothing rewrites that status: the control plane's KWOK would otherwise
give them its own IPs, and a RayCluster's `status.head.podIP` would rightly change. A Job is
created without the selector and controller-uid labels the API server generated for KubeRay's
(it generates them again; a Job that brings its own is refused). Services keep the clusterIPs and
nodePorts KubeRay's API server allocated (all distinct, and in this one's ranges): a RayCluster's
status quotes them (`head.serviceIP`, `endpoints`).
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import dataclass, field
from typing import Any

import yaml

from tests.conftest import REPO_ROOT
from tests.robustness.observe import ApiServer

KUBERAY_CREATED = REPO_ROOT.parent / "shared" / "fixtures" / "kuberay-created"
STAGED_NODE = "kuberay-ran-here"
"""The node staged Pods are bound to: none exists, so no kubelet (nor KWOK) touches them."""

Object = dict[str, Any]

_RESOURCES: dict[str, tuple[str, str]] = {
    "RayCluster": ("/apis/ray.io/v1", "rayclusters"),
    "RayJob": ("/apis/ray.io/v1", "rayjobs"),
    "RayService": ("/apis/ray.io/v1", "rayservices"),
    "Pod": ("/api/v1", "pods"),
    "Service": ("/api/v1", "services"),
    "ServiceAccount": ("/api/v1", "serviceaccounts"),
    "Secret": ("/api/v1", "secrets"),
    "ConfigMap": ("/api/v1", "configmaps"),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles"),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    "Job": ("/apis/batch/v1", "jobs"),
    "Deployment": ("/apis/apps/v1", "deployments"),
    "Ingress": ("/apis/networking.k8s.io/v1", "ingresses"),
}
CUSTOM_KINDS = ("RayJob", "RayService", "RayCluster")
"""In creation order: roots first, so an owned RayCluster can name its owner's uid."""
_SERVER_SET_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation", "selfLink")
_JOB_GENERATED_LABELS = (
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-name",
    "controller-uid",
    "job-name",
)


@dataclass
class StagedFixture:
    """One fixture file recreated in its namespace."""

    file_name: str
    namespace: str
    objects: list[Object]
    """The fixture's objects as KubeRay left them (its namespace and uids, not ours)."""
    uids: dict[tuple[str, str], str] = field(default_factory=dict)
    """(kind, name) -> the uid of the object recreated here."""

    def of_kind(self, kind: str) -> list[Object]:
        return [obj for obj in self.objects if obj["kind"] == kind]


def fixture_files() -> list[str]:
    """Every file of `kuberay-created/` (one per KubeRay sample)."""
    return sorted(path.name for path in KUBERAY_CREATED.glob("*.yaml"))


def namespace_for(file_name: str) -> str:
    """The namespace KubeRay ran the sample in (one per file, e.g. `kd-ray-job-sample-e4f73`).

    Kept: it is written into what KubeRay made (a RayJob's `dashboardURL`, its submitter's
    addresses, a RoleBinding's subject), and this control plane holds nothing else.
    """
    namespaces = {obj["metadata"]["namespace"] for obj in load_fixture(file_name)}
    if len(namespaces) != 1:
        raise AssertionError(f"{file_name}: objects in {sorted(namespaces)}, expected one")
    return namespaces.pop()


def load_fixture(file_name: str) -> list[Object]:
    """The objects of one fixture file (a fresh copy: callers may change them)."""
    return copy.deepcopy(_parsed(file_name))


@functools.cache
def _parsed(file_name: str) -> list[Object]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    documents = yaml.load_all((KUBERAY_CREATED / file_name).read_text(), Loader=loader)
    objects: list[Object] = []
    for document in documents:
        if not document:
            continue
        objects.extend(document["items"] if document.get("kind") == "List" else [document])
    return objects


def resource_path(kind: str, namespace: str, name: str | None = None) -> str:
    prefix, plural = _RESOURCES[kind]
    path = f"{prefix}/namespaces/{namespace}/{plural}"
    return path if name is None else f"{path}/{name}"


def request(api: ApiServer, method: str, path: str, body: Any = None) -> Any:
    """One API call; the decoded answer. Fails the test on any status but 2xx."""
    content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
    connection = api.connect(timeout=30)
    try:
        payload = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if payload is not None else {}
        connection.request(method, path, body=payload, headers=headers)
        response = connection.getresponse()
        answer = response.read()
    finally:
        connection.close()
    if not 200 <= response.status < 300:
        raise AssertionError(f"{method} {path}: HTTP {response.status}: {answer[:800]!r}")
    return json.loads(answer) if answer else None


def create_namespace(api: ApiServer, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    request(api, "POST", "/api/v1/namespaces", body)


def stage_fixture(api: ApiServer, file_name: str) -> StagedFixture:
    """Recreate what KubeRay made for one sample in a new namespace (see the module docstring)."""
    staged = StagedFixture(file_name, namespace_for(file_name), load_fixture(file_name))
    create_namespace(api, staged.namespace)
    for kind in CUSTOM_KINDS:
        for obj in staged.of_kind(kind):
            _create_custom_resource(api, staged, obj)
    for obj in (
        staged.of_kind("RayJob") + staged.of_kind("RayService") + staged.of_kind("RayCluster")
    ):
        if obj.get("status"):
            _write_status(api, staged, obj)
    for obj in staged.objects:
        if obj["kind"] not in CUSTOM_KINDS:
            _create(api, staged, _as_created(obj, staged))
    for pod in staged.of_kind("Pod"):
        if pod.get("status"):
            _write_status(api, staged, pod)
    return staged


def _create_custom_resource(api: ApiServer, staged: StagedFixture, obj: Object) -> None:
    body = _as_created(obj, staged)
    generation = int(obj["metadata"].get("generation") or 1)
    if generation == 1:
        _create(api, staged, body)
        return
    # Generation 2: created with one spec field changed, then updated to the fixture's spec.
    first, restore = _one_field_changed(body)
    _create(api, staged, first)
    path = resource_path(obj["kind"], staged.namespace, obj["metadata"]["name"])
    updated = request(api, "PATCH", path, {"spec": restore})
    if updated["metadata"]["generation"] != generation:
        raise AssertionError(f"{path}: generation {updated['metadata']['generation']}")


def _one_field_changed(body: Object) -> tuple[Object, Object]:
    """(body with one spec field changed, the merge patch restoring it): a RayJob's
    `backoffLimit` (defaulted), a RayService's `serveConfigV2`, a RayCluster's `suspend`."""
    first = copy.deepcopy(body)
    spec = first["spec"]
    if body["kind"] == "RayJob":
        spec["backoffLimit"] = int(spec.get("backoffLimit") or 0) + 1
        return first, {"backoffLimit": body["spec"].get("backoffLimit", 0)}
    if body["kind"] == "RayService":
        spec["serveConfigV2"] = (spec.get("serveConfigV2") or "") + "\n"
        return first, {"serveConfigV2": body["spec"].get("serveConfigV2")}
    if body["kind"] == "RayCluster":
        spec["suspend"] = not spec.get("suspend")
        return first, {"suspend": body["spec"].get("suspend")}
    raise AssertionError(f"no field to update a {body['kind']} with")


def _create(api: ApiServer, staged: StagedFixture, body: Object) -> None:
    created = request(api, "POST", resource_path(body["kind"], staged.namespace), body)
    staged.uids[(body["kind"], body["metadata"]["name"])] = created["metadata"]["uid"]


def _write_status(api: ApiServer, staged: StagedFixture, obj: Object) -> None:
    path = resource_path(obj["kind"], staged.namespace, obj["metadata"]["name"]) + "/status"
    request(api, "PATCH", path, {"status": obj["status"]})


def _as_created(obj: Object, staged: StagedFixture) -> Object:
    """The body that recreates `obj` here: owner uids remapped, no server-set fields."""
    body = copy.deepcopy(obj)
    body.pop("status", None)
    metadata = body["metadata"]
    metadata["namespace"] = staged.namespace
    for key in _SERVER_SET_METADATA:
        metadata.pop(key, None)
    for reference in metadata.get("ownerReferences") or ():
        reference["uid"] = staged.uids[(reference["kind"], reference["name"])]
    if body["kind"] == "Pod":
        body["spec"]["nodeName"] = STAGED_NODE
    elif body["kind"] == "Job":
        body["spec"].pop("selector", None)
        template_labels = body["spec"]["template"]["metadata"].get("labels") or {}
        for label in _JOB_GENERATED_LABELS:
            template_labels.pop(label, None)
    return body
