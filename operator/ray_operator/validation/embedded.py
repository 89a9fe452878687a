"""Checks shared by RayJob and RayService: their own names, and the RayCluster spec they embed.

A RayJob (`spec.rayClusterSpec`) and a RayService (`spec.rayClusterConfig`) each carry a whole
RayClusterSpec. KubeRay validates it with the RayCluster rules and the owner's annotations; we
do the same by running `validate_raycluster` on a stand-in RayCluster and moving every `spec.…`
path under the owner's field. The stand-in carries the owner's annotations (the GCS FT and
external storage namespace rules read them) and the `ray.io/originated-from-crd` label the real
cluster will get, so rules about clusters created by a RayJob/RayService apply before anything
is created.
"""

from __future__ import annotations

import dataclasses
import re

from ray_operator.spec import kuberay_names as names
from ray_operator.spec.raycluster import JSON
from ray_operator.validation.errors import FieldError, invalid, shown, too_long
from ray_operator.validation.limits import DEFAULT_LIMITS, ClusterLimits
from ray_operator.validation.raycluster import MAX_CLUSTER_NAME_LENGTH, validate_raycluster

# The RayCluster of a RayJob/RayService is named `<owner>-<5 random characters>`, so the owner's
# name gets 6 characters less than a RayCluster's (KubeRay's MaxRayJobNameLength).
MAX_OWNER_NAME_LENGTH = MAX_CLUSTER_NAME_LENGTH - 6
_DNS1035_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_RULE = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
    "start with an alphabetic character, and end with an alphanumeric character"
)
# A stand-in name that passes the RayCluster name rules; errors about it are dropped anyway.
_STAND_IN_NAME = "embedded"


def owner_name_errors(obj: JSON) -> list[FieldError]:
    """`metadata.name` of a RayJob/RayService: a DNS-1035 label of at most 47 characters."""
    name = str((obj.get("metadata") or {}).get("name", ""))
    errors = []
    if len(name) > MAX_OWNER_NAME_LENGTH:
        errors.append(too_long("metadata.name", shown(name), MAX_OWNER_NAME_LENGTH))
    if not _DNS1035_RE.match(name):
        errors.append(invalid("metadata.name", shown(name), _DNS1035_RULE))
    return errors


def embedded_cluster_errors(
    owner: JSON, *, field: str, creator: str, limits: ClusterLimits = DEFAULT_LIMITS
) -> list[FieldError]:
    """RayCluster rules on `owner.spec.<field>`, with paths under `spec.<field>`."""
    cluster_spec = (owner.get("spec") or {}).get(field)
    if not isinstance(cluster_spec, dict):
        return []
    owner_metadata = owner.get("metadata") or {}
    stand_in = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": _STAND_IN_NAME,
            # The real cluster's: the operator-identity rule applies in one namespace only.
            "namespace": owner_metadata.get("namespace") or "",
            "annotations": dict(owner_metadata.get("annotations") or {}),
            "labels": {names.ORIGINATED_FROM_CRD_LABEL: creator},
        },
        "spec": cluster_spec,
    }
    prefix = f"spec.{field}"
    return [
        _moved(error, prefix)
        for error in validate_raycluster(stand_in, limits=limits)
        if not error.field.startswith("metadata.name")
    ]


def _moved(error: FieldError, prefix: str) -> FieldError:
    if error.field == "spec" or error.field.startswith(("spec.", "spec[")):
        return dataclasses.replace(error, field=prefix + error.field[len("spec") :])
    # metadata.annotations errors stay: the annotations are the owner's own.
    return error
