"""The operator's own identity is never lent: no Pod it builds runs as its ServiceAccount.

The operator acts with its ServiceAccount's token (in the namespaced install: Role and RoleBinding
writes, Secret create and delete in its namespace). A Pod runs as whichever ServiceAccount of its
namespace its spec names, so a Pod template in the operator's namespace that names the operator's
ServiceAccount would hand the token to the template author's command (issue 28, finding 6). This
rule refuses that, for every template the operator turns into a Pod or a Job:

- a RayCluster's head and worker templates (`serviceAccountName`, and the deprecated
  `serviceAccount` Kubernetes still reads when the former is empty); the Redis cleanup Job copies
  the head's template, so it is covered by the head's;
- the head of an autoscaling RayCluster whose template names none: it runs as the ServiceAccount
  the operator creates and binds for Ray's autoscaler, named after the cluster (KubeRay's
  convention), so a cluster named like the operator's ServiceAccount is refused at
  `metadata.name`;
- a RayJob's `submitterPodTemplate` (`submitter_template_identity_errors`).

RayJobs, RayServices, RayCronJobs and RayServeGraphs reach these rules through the RayCluster and
RayJob rules run on their embedded specs (`validation/embedded.py` and the stand-ins of
`raycronjob.py` and `rayservegraph.py`, which carry the owner's namespace for this rule).

A template only matters in the operator's own namespace: elsewhere the same name is another
ServiceAccount. An object whose namespace is not known is held to the rule (it may be there).
Kubernetes itself lets anyone who may create Pods in a namespace run them as any of its
ServiceAccounts, so the operator's namespace should not be a tenant's (docs/security.md);
this rule keeps the operator from being the way round that for someone who may only create Ray
objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ray_operator.spec.raycluster import (
    head_group,
    is_autoscaling_enabled,
    metadata,
    spec,
    worker_groups,
)
from ray_operator.validation.errors import FieldError, forbidden

if TYPE_CHECKING:
    from ray_io.v1_views import RayCluster

# Kubernetes reads the deprecated field when the current one is empty (core/v1 conversion).
_SERVICE_ACCOUNT_FIELDS = ("serviceAccountName", "serviceAccount")


@dataclasses.dataclass(frozen=True, slots=True)
class OperatorIdentity:
    """The ServiceAccount the operator runs as (`--service-account`, from the Downward API)."""

    service_account: str
    namespace: str

    def is_in(self, namespace: str) -> bool:
        """Whether an object in `namespace` ("" when not known) may be in the operator's."""
        return not namespace or namespace == self.namespace

    def describe(self) -> str:
        return (
            f"{self.service_account} is the operator's own ServiceAccount in namespace "
            f"{self.namespace}; a Pod the operator creates never runs as it"
        )


def cluster_identity_errors(
    cluster: RayCluster, *, identity: OperatorIdentity | None
) -> Iterator[FieldError]:
    """Each place where a RayCluster's Pods would run as the operator's ServiceAccount."""
    if identity is None or not identity.is_in(str(metadata(cluster).get("namespace") or "")):
        return
    head = head_group(cluster)
    yield from template_identity_errors(
        "spec.headGroupSpec.template", head.get("template"), identity=identity
    )
    for index, group in enumerate(worker_groups(cluster)):
        yield from template_identity_errors(
            f"spec.workerGroupSpecs[{index}].template", group.get("template"), identity=identity
        )
    if _head_runs_as_cluster_name(cluster) and metadata(cluster).get("name") == (
        identity.service_account
    ):
        yield forbidden(
            "metadata.name",
            "the head Pod of an autoscaling RayCluster whose template names no ServiceAccount "
            "runs as the one named after the cluster, and " + identity.describe(),
        )


def submitter_template_identity_errors(
    rayjob: Mapping[str, Any], *, identity: OperatorIdentity | None
) -> Iterator[FieldError]:
    """A RayJob's submitter Pod template naming the operator's ServiceAccount."""
    namespace = str((rayjob.get("metadata") or {}).get("namespace") or "")
    if identity is None or not identity.is_in(namespace):
        return
    template = (rayjob.get("spec") or {}).get("submitterPodTemplate")
    yield from template_identity_errors("spec.submitterPodTemplate", template, identity=identity)


def template_identity_errors(
    path: str, template: Any, *, identity: OperatorIdentity
) -> Iterator[FieldError]:
    """The Pod template at `path` naming `identity`'s ServiceAccount (namespace already checked)."""
    pod_spec = _spec_of(template)
    for field in _SERVICE_ACCOUNT_FIELDS:
        if pod_spec.get(field) == identity.service_account:
            yield forbidden(f"{path}.spec.{field}", identity.describe())


def _head_runs_as_cluster_name(cluster: RayCluster) -> bool:
    """Whether the head Pod gets the autoscaler's ServiceAccount, named after the cluster.

    Only the current field counts: the Pod builder (`builders.pods`) fills an empty
    `serviceAccountName` with the cluster's name, and Kubernetes then ignores the deprecated one.
    """
    template = head_group(cluster).get("template")
    return is_autoscaling_enabled(spec(cluster)) and not _spec_of(template).get(
        "serviceAccountName"
    )


def _spec_of(template: Any) -> Mapping[str, Any]:
    found = template.get("spec") if isinstance(template, Mapping) else None
    return found if isinstance(found, Mapping) else {}
