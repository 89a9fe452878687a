"""What the local Ray agent may run, and against which cluster (issue 28, finding 4).

The agent turns Pods bound to the fake node into processes on the developer's machine, run as
the developer. Two rules keep that to the developer's own work:

- **Only on the embedded control plane, unless asked.** `ray-operator dev` runs the agent when it
  started the control plane itself (it knows: it holds the plane's processes, not a name a
  cluster could claim). When KUBECONFIG names another cluster, the agent runs only with an
  explicit `--local-ray`, and `dev` then says what that runs (`external_cluster_warning`).
- **Only what the operator created.** A Pod becomes a process only if this operator created it
  for one of the RayClusters it manages (a head or worker Pod), or it is the Pod of a submitter
  Job the operator created for a RayJob, holding exactly that Job's template. `CreatedObjects`
  is the record: the controllers' client tells it every Pod and Job it created, with the uid the
  API server assigned (which no one else can choose) and the controller owner's uid. Pods are
  immutable where the agent reads them (containers, env, volumes), so a Pod created by the
  operator still holds what the operator wrote. A Pod anyone else creates with that node name,
  labels and owner references is left alone, whatever it claims. (A Redis Pod of the GCS
  fault-tolerance samples gets this machine's `redis-server` with the agent's own config, whoever
  created it: none of its commands runs; `redis.py` says why that is safe.)

The record is kept in a file beside the agent's other state, so a restarted `make run` (whose
control plane keeps its etcd data) runs the Pods the operator created before. Entries of objects
gone from the operator's cache are forgotten after `FORGET_AFTER_SECONDS`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ray_operator.localray.plan import UnplannablePodError, plan_submitter

if TYPE_CHECKING:
    from ray_io.v1_views import Pod

logger = logging.getLogger(__name__)

RECORDED_KINDS = frozenset({"Pod", "Job"})
FORGET_AFTER_SECONDS = 600.0
"""How long an entry outlives its object in the cache: far longer than the cache lags a create
(a Pod the operator just created is not in it yet, and must not be forgotten meanwhile)."""


def local_ray_wanted(requested: bool | None, *, embedded_control_plane: bool) -> bool:
    """Whether `ray-operator dev` runs the agent: `--local-ray`/`--no-local-ray` when given,
    else only on the control plane it started itself."""
    return embedded_control_plane if requested is None else requested


def external_cluster_warning(
    *, kubeconfig: str, node_name: str, namespaces: Collection[str]
) -> str:
    """What `--local-ray` against a cluster `dev` did not start makes this machine run."""
    where = ", ".join(sorted(namespaces)) if namespaces else "every namespace"
    return (
        f"WARNING: --local-ray against the cluster of {kubeconfig}, which ray-operator dev did not "
        f"start: the Ray head, worker and RayJob submitter Pods this operator creates there (in "
        f"{where}) that are bound to node {node_name} run as processes on this machine, as your "
        "user, with their env, commands and mounted ConfigMaps. Whoever may create RayClusters, "
        "RayJobs or RayServices there runs code here, with your files and credentials. Pods "
        "others create on that node are never run. Use it only with a cluster whose Ray users "
        "you trust; --no-local-ray turns it off."
    )


@dataclass(frozen=True, slots=True)
class _Entry:
    owner_uid: str
    """The uid of the object's controller owner (the RayCluster of a Pod, the RayJob of a Job)."""
    recorded_at: float


class CreatedObjects:
    """The Pods and Jobs this operator created, by uid (kept in `path` across runs if given)."""

    def __init__(self, path: Path | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self._path = path
        self._clock = clock
        self._entries: dict[tuple[str, str], _Entry] = self._load()

    def record(self, kind: str, created: Mapping[str, Any]) -> None:
        """Remember `created` (as the API server returned it) if it is a Pod or a Job."""
        if kind not in RECORDED_KINDS:
            return
        metadata = created.get("metadata") or {}
        uid = str(metadata.get("uid") or "")
        if not uid:
            return
        self._entries[(kind, uid)] = _Entry(controller_uid(metadata), self._clock())
        self._save()

    def owner_of(self, kind: str, uid: str) -> str | None:
        """The controller owner's uid of the `kind` this operator created with `uid`, else None."""
        entry = self._entries.get((kind, uid))
        return None if entry is None else entry.owner_uid

    def forget_missing(self, present: Collection[str]) -> None:
        """Drop entries whose object is not in `present` (uids) and was recorded long ago."""
        oldest = self._clock() - FORGET_AFTER_SECONDS
        gone = [
            key
            for key, entry in self._entries.items()
            if key[1] not in present and entry.recorded_at < oldest
        ]
        for key in gone:
            del self._entries[key]
        if gone:
            self._save()

    def __len__(self) -> int:
        return len(self._entries)

    def _load(self) -> dict[tuple[str, str], _Entry]:
        if self._path is None:
            return {}
        try:
            recorded = json.loads(self._path.read_text())
        except (OSError, ValueError):
            return {}
        # Loaded entries count as recorded now: the cache needs its first list before it can
        # tell which objects are gone.
        now = self._clock()
        entries: dict[tuple[str, str], _Entry] = {}
        for kind, uid, owner_uid in recorded if isinstance(recorded, list) else ():
            if kind in RECORDED_KINDS:
                entries[(str(kind), str(uid))] = _Entry(str(owner_uid), now)
        return entries

    def _save(self) -> None:
        if self._path is None:
            return
        rows = [[kind, uid, entry.owner_uid] for (kind, uid), entry in self._entries.items()]
        # A lost record only keeps a Pod of an earlier run from running after a restart.
        try:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._path.write_text(json.dumps(rows))
        except OSError as error:
            logger.warning("cannot record the operator's Pods in %s: %s", self._path, error)


def controller_uid(metadata: Mapping[str, Any]) -> str:
    """The uid of the object's controller owner reference ("" when it has none)."""
    for owner in metadata.get("ownerReferences") or ():
        if owner.get("controller") is True:
            return str(owner.get("uid") or "")
    return ""


def controller_of_kind(metadata: Mapping[str, Any], kind: str) -> str:
    """The uid of the object's controller owner when that owner is a `kind` ("" otherwise)."""
    for owner in metadata.get("ownerReferences") or ():
        if owner.get("controller") is True and owner.get("kind") == kind:
            return str(owner.get("uid") or "")
    return ""


def runs_the_template_of(pod: Pod, job: Mapping[str, Any]) -> bool:
    """Whether a submitter Pod runs what `job`'s Pod template says: the same command, env,
    mounts and mounted volumes (the Job controller copies them)."""
    template_spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    templated = cast("Pod", {"metadata": pod["metadata"], "spec": template_spec})
    try:
        wanted, running = plan_submitter(templated), plan_submitter(pod)
    except UnplannablePodError:
        return False
    return (wanted.argv, wanted.env) == (running.argv, running.env) and _same_view(
        template_spec, pod.get("spec") or {}
    )


_VIEW_FIELDS = ("env", "envFrom", "volumeMounts", "workingDir")


def _same_view(wanted: Mapping[str, Any], running: Mapping[str, Any]) -> bool:
    """The first container's env and mounts, and the volumes it mounts, are the same."""
    wanted_container = (wanted.get("containers") or [{}])[0]
    running_container = (running.get("containers") or [{}])[0]
    if any(wanted_container.get(key) != running_container.get(key) for key in _VIEW_FIELDS):
        return False
    mounted = {mount.get("name") for mount in wanted_container.get("volumeMounts") or ()}
    return _volumes(wanted, mounted) == _volumes(running, mounted)


def _volumes(spec: Mapping[str, Any], names: set[Any]) -> list[Any]:
    return sorted(
        (volume for volume in spec.get("volumes") or () if volume.get("name") in names),
        key=lambda volume: str(volume.get("name")),
    )
