"""What the cache keeps of the objects it holds by the thousand: the fields the operator reads.

A Pod as the API sends it is ~40 KiB of dicts (env, volumes, probes, managedFields, every
condition with its timestamps); the controllers read a few dozen of its fields. With 4 Pods per
RayCluster that was most of the operator's memory (issue 16). So Pods and Jobs are cached as a
*projection*: the same dict shape, the same paths, with everything else left out. Code reading a
projected object cannot tell it apart from the original as long as it reads declared fields, and
every reader already treats a field as possibly absent (`.get(...) or {}`), as the API allows.

The declarations below are the single list of what is read; `tests/runtime/test_projection.py`
runs the Pod and Job readers (status, scaling, replacement, job outcome) on full objects and on
their projections and requires the same answers, so a reader of an undeclared field fails there.

Kinds whose whole content matters (a Service's or Ingress's spec is compared field by field for
drift, a ConfigMap's data whole, the custom resources are parsed whole) are not projected:
they only lose `managedFields` and the last-applied annotation, and are kept with their strings
`interned` (half the memory of a RayCluster or a Service as decoded: its keys are the same
strings as every other's).

Identical projected subtrees are shared between objects (`Projector`): the labels, ownerReferences
and spec of the Pods of one worker group project to equal dicts, so they are stored once. Cached
objects are read-only (see store.py), which is what makes sharing safe. The table of shared
subtrees is bounded (`SHARED_LIMIT` entries, each of at most `SHARED_MAX_CHARACTERS`) and starts
over when full: it holds subtrees after their objects are gone, so a tenant creating and deleting
Pods with megabytes of labels could otherwise make it keep gigabytes. Hostile variety costs
sharing, never unbounded memory.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ray_operator.spec.kinds import JOB, POD, Kind

Object = dict[str, Any]


@dataclass(frozen=True)
class Whole:
    """Keep the value as it is (a scalar, or a map or list kept entirely)."""

    shared: bool = False
    """Whether equal values are stored once (for values repeated by many objects: labels,
    owner references, a group's spec)."""


@dataclass(frozen=True)
class Fields:
    """Keep these keys of a map, each projected by its own shape; drop every other key."""

    keys: Mapping[str, Shape]
    shared: bool = False
    """Whether equal projections are stored once (see `Whole.shared`)."""


@dataclass(frozen=True)
class Each:
    """Project every element of a list; with `where`, keep only elements whose key has a value
    in the set (e.g. only the `Ready` condition)."""

    element: Shape
    where: tuple[str, frozenset[str]] | None = None
    shared: bool = False


@dataclass(frozen=True)
class KeysWithPrefix:
    """Keep the entries of a string map whose key starts with one of `prefixes` (annotations:
    ours and KubeRay's are read, a user's never are, and may be large)."""

    prefixes: tuple[str, ...]


Shape = Whole | Fields | Each | KeysWithPrefix

WHOLE: Final = Whole()
SHARED: Final = Whole(shared=True)

_OBJECT_METADATA: Final[Mapping[str, Shape]] = {
    "name": WHOLE,
    "namespace": WHOLE,
    "uid": WHOLE,
    "resourceVersion": WHOLE,
    "generation": WHOLE,
    "creationTimestamp": WHOLE,
    "deletionTimestamp": WHOLE,
    "labels": SHARED,
    "annotations": KeysWithPrefix(("ray.io/", "ray-operator.io/")),
    "ownerReferences": SHARED,
}

POD_FIELDS: Final = Fields(
    {
        "apiVersion": WHOLE,
        "kind": WHOLE,
        "metadata": Fields(_OBJECT_METADATA),
        "spec": Fields(
            {
                "restartPolicy": WHOLE,
                # Only the Ray container's name is read (it is the first container).
                "containers": Each(Fields({"name": WHOLE})),
            },
            shared=True,
        ),
        "status": Fields(
            {
                "phase": WHOLE,
                "podIP": WHOLE,
                "conditions": Each(
                    Fields({"type": WHOLE, "status": WHOLE, "reason": WHOLE, "message": WHOLE}),
                    # PodScheduled: the scheduler's reason and message (status/waiting.py).
                    where=("type", frozenset({"Ready", "PodScheduled"})),
                    shared=True,
                ),
                # Only why an init container waits (an image it cannot pull, a crash loop).
                "initContainerStatuses": Each(
                    Fields({"name": WHOLE, "state": Fields({"waiting": WHOLE})}), shared=True
                ),
                "containerStatuses": Each(
                    Fields(
                        {
                            "name": WHOLE,
                            # running.startedAt is never read; waiting and terminated are.
                            "state": Fields({"waiting": WHOLE, "terminated": WHOLE}),
                            # A restartable RayJob submitter's restarts (SidecarSubmitterRestart).
                            "restartCount": WHOLE,
                            "lastState": Fields({"terminated": WHOLE}),
                        }
                    ),
                    shared=True,
                ),
            }
        ),
    }
)
"""What is read of a Pod: identity, labels, ray.io annotations, owners, restart policy, the Ray
container's name, phase, IP, the Ready and PodScheduled conditions, the containers'
waiting/terminated states (and last termination and restart count), init containers' waiting."""

JOB_FIELDS: Final = Fields(
    {
        "apiVersion": WHOLE,
        "kind": WHOLE,
        "metadata": Fields(_OBJECT_METADATA),
        "status": Fields(
            {
                "conditions": Each(
                    Fields(
                        {
                            "type": WHOLE,
                            "status": WHOLE,
                            "reason": WHOLE,
                            "message": WHOLE,
                            "lastTransitionTime": WHOLE,
                        }
                    )
                ),
            }
        ),
    }
)
"""What is read of a batch Job (a RayJob's submitter, the Redis clean-up): identity, labels,
ray.io annotations, owners and its conditions."""

CACHE_PROJECTIONS: Final[Mapping[Kind, Fields]] = {POD: POD_FIELDS, JOB: JOB_FIELDS}
"""The kinds cached as projections; every other kind is cached whole (trimmed)."""

SHARED_LIMIT: Final = 4096
"""How many distinct shared subtrees a `Projector` remembers before starting over."""
SHARED_MAX_CHARACTERS: Final = 1024
"""The largest subtree shared, in characters of its JSON text (a worker group's labels are
~450); a larger one is kept by its object alone. With `SHARED_LIMIT`: a few MiB at most."""


@dataclass
class Projector:
    """Projects objects by a shape, storing equal shared subtrees once (a bounded table)."""

    shared_limit: int = SHARED_LIMIT
    _shared: dict[str, Any] = field(default_factory=dict)

    def project(self, obj: Object, shape: Fields) -> Object:
        """The projection of `obj` (a new dict; `obj` is left as it was)."""
        projected = self._project(obj, shape)
        assert isinstance(projected, dict)
        return projected

    def _project(self, value: Any, shape: Shape) -> Any:
        if isinstance(shape, Whole):
            whole = interned(value)
            return self._share(whole) if shape.shared else whole
        if isinstance(shape, KeysWithPrefix):
            if not isinstance(value, dict):
                return interned(value)
            return {
                sys.intern(key): interned(item)
                for key, item in value.items()
                if key.startswith(shape.prefixes)
            }
        if isinstance(shape, Fields):
            if not isinstance(value, dict):
                return interned(value)  # not the declared type: kept, for the reader to judge
            projected = {
                key: self._project(value[key], inner)
                for key, inner in shape.keys.items()
                if key in value
            }
            return self._share(projected) if shape.shared else projected
        if not isinstance(value, list):
            return interned(value)
        where = shape.where
        elements = [
            self._project(element, shape.element)
            for element in value
            if where is None or (isinstance(element, dict) and element.get(where[0]) in where[1])
        ]
        return self._share(elements) if shape.shared else elements

    def _share(self, value: Any) -> Any:
        if not isinstance(value, (dict, list)):
            return value
        # The JSON text is the key: equal texts are equal values of equal types (1, 1.0 and true
        # differ, so do key orders), written in C (json's default encoder, no per-call set-up);
        # two walks in Python per shared subtree were half the time to keep a Pod.
        key = json.dumps(value)
        if len(key) > SHARED_MAX_CHARACTERS:
            return value
        existing = self._shared.get(key)
        if existing is not None:
            return existing
        if len(self._shared) >= self.shared_limit:
            self._shared.clear()
        self._shared[key] = value
        return value


def interned(value: Any) -> Any:
    """A copy of `value` with its strings interned: the thousand equal keys and label values of
    a thousand cached objects are one string each (a JSON decoder makes new ones per document)."""
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, dict):
        return {sys.intern(key): interned(item) for key, item in value.items()}
    if isinstance(value, list):
        return [interned(item) for item in value]
    return value
