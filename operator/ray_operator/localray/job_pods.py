"""Job Pods the local Ray agent runs: a RayJob's submitter Pod (K8sJobMode) and a deleted GCS
fault-tolerance cluster's Redis cleanup Pod.

Each runs only when it belongs to a Job this operator created and holds exactly that Job's
template (decided once per Pod). A submitter runs its command pointed at the local dashboard; a
Redis cleanup runs its command (Ray's `cleanup_redis_storage`) against the local Redis its
`RAY_REDIS_ADDRESS` names. When one ends, the agent writes the Pod's terminal phase, which KWOK
leaves to it (`LocalControlPlane(ray_job_submitters_run_locally=True)`), so the Job completes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Set
from typing import TYPE_CHECKING, Any

from ray_operator.localray.agent_context import AgentContext, remove_paths
from ray_operator.localray.plan import (
    SubmitterPlan,
    UnplannablePodError,
    plan_submitter,
    replace_address,
    without_agent_owned,
)
from ray_operator.localray.redis_plan import RAY_REDIS_ADDRESS_ENV
from ray_operator.localray.registry import LocalCluster
from ray_operator.localray.running import RunningPod
from ray_operator.localray.scope import controller_of_kind, runs_the_template_of
from ray_operator.runtime.errors import NotFound
from ray_operator.spec.kinds import JOB, RAY_JOB

if TYPE_CHECKING:
    from ray_io.v1_views import Pod

Object = Mapping[str, Any]


class JobPods:
    """Runs the submitter and Redis cleanup Pods of the Jobs this operator created."""

    def __init__(self, context: AgentContext) -> None:
        self._context = context
        self._checked: dict[str, bool] = {}
        """Pod uid -> whether it runs the template of a Job this operator created."""

    def forget_all_but(self, listed: Set[str]) -> None:
        """Forget the checks of Pods no longer listed."""
        self._checked = {uid: ok for uid, ok in self._checked.items() if uid in listed}

    async def ensure_submitter(self, pod: Pod) -> None:
        """Run a RayJob submitter Pod's command against its cluster's local dashboard, once the
        RayJob names it and the head's GCS is up."""
        uid = pod["metadata"]["uid"]
        plan = self._job_pod_to_start(pod)
        if plan is None:
            return
        what = f"RayJob {plan.rayjob}'s submitter Job (with its template)"
        if not await self._is_operators_job_pod(pod, rayjob=plan.rayjob, what=what):
            return
        target = self._submitter_target(plan)
        if target is None:
            return
        in_cluster_address, local = target
        local_address = f"{local.address}:{local.dashboard_port}"
        files = self._context.pod_directory(pod)

        def pointed_at_the_local_dashboard(text: str) -> str:
            return replace_address(text, old=in_cluster_address, new=local_address)

        argv = [pointed_at_the_local_dashboard(word) for word in plan.argv]
        view = await self._context.prepare_view(pod, files, pod_ip=local.address, argv=argv)
        if view is None:
            await asyncio.to_thread(remove_paths, files)
            return
        argv = [view.localised(word) for word in argv]
        env = {
            **self._context.base_env,
            **{
                name: view.localised(pointed_at_the_local_dashboard(value))
                for name, value in without_agent_owned(view.env).items()
            },
        }
        process = self._context.process_for(view, argv, env=env, files=files, pod=pod)
        await process.start()
        self._context.running[uid] = RunningPod(pod=pod, process=process, files=files, view=view)
        self._context.record(
            pod,
            reason="LocalRayStarted",
            message=f"submitter runs locally against the dashboard at {local_address}; "
            f"its output: {self._context.log_path(pod)}",
        )

    async def ensure_redis_cleanup(self, pod: Pod) -> None:
        """Run a deleted cluster's Redis cleanup (its Job's command: Ray's
        `cleanup_redis_storage`) against the local Redis its `RAY_REDIS_ADDRESS` names; its end
        is written on the Pod as for a submitter, so the Job completes and the cluster goes."""
        uid = pod["metadata"]["uid"]
        plan = self._job_pod_to_start(pod)
        if plan is None:
            return
        what = "a RayCluster's Redis cleanup Job (with its template)"
        if not await self._is_operators_job_pod(pod, rayjob=None, what=what):
            return
        files = self._context.pod_directory(pod)
        view = await self._context.prepare_view(pod, files, pod_ip="127.0.0.1", argv=plan.argv)
        if view is None:
            await asyncio.to_thread(remove_paths, files)
            return
        env = {**self._context.base_env, **without_agent_owned(view.env)}
        if address := env.get(RAY_REDIS_ADDRESS_ENV):
            env[RAY_REDIS_ADDRESS_ENV] = await self._context.redis.local_address(
                plan.namespace, address
            )
        process = self._context.process_for(view, plan.argv, env=env, files=files, pod=pod)
        await process.start()
        self._context.running[uid] = RunningPod(pod=pod, process=process, files=files, view=view)
        self._context.record(
            pod,
            reason="LocalRayStarted",
            message=f"Redis cleanup runs locally; its output: {self._context.log_path(pod)}",
        )

    def _job_pod_to_start(self, pod: Pod) -> SubmitterPlan | None:
        """The command of a Job's Pod that runs but has no local process yet (None: nothing to
        start, or an unplannable Pod, told)."""
        uid = pod["metadata"]["uid"]
        if uid in self._context.running or (pod.get("status") or {}).get("phase") != "Running":
            return None
        try:
            return plan_submitter(pod)
        except UnplannablePodError as error:
            self._context.tell_once(pod, "LocalRayUnplannable", f"no local process: {error}")
            return None

    async def _is_operators_job_pod(self, pod: Pod, *, rayjob: str | None, what: str) -> bool:
        """Whether the Pod belongs to a Job this operator created (for RayJob `rayjob`, when
        named), and runs exactly that Job's template (owner references and labels anyone can
        write); refused with an Event naming `what` if not.

        Decided once per Pod: neither a Pod's containers nor a Job's template can change.
        """
        uid = pod["metadata"]["uid"]
        if uid not in self._checked:
            self._checked[uid] = await self._runs_a_created_job(pod, rayjob=rayjob)
        if not self._checked[uid]:
            self._context.refuse(pod, what)
        return self._checked[uid]

    async def _runs_a_created_job(self, pod: Pod, *, rayjob: str | None) -> bool:
        namespace = str(pod["metadata"].get("namespace") or "")
        job_uid = controller_of_kind(pod["metadata"], "Job")
        owner = self._context.registry.created.owner_of("Job", job_uid) if job_uid else None
        if not owner or job_uid is None:
            return False
        if rayjob is not None:
            found = self._context.store.get(RAY_JOB, namespace, rayjob)
            if found is None or found["metadata"].get("uid") != owner:
                return False
        job = await self._job_with_uid(namespace, pod, job_uid)
        return job is not None and runs_the_template_of(pod, job)

    async def _job_with_uid(self, namespace: str, pod: Pod, uid: str) -> Object | None:
        for owner in pod["metadata"].get("ownerReferences") or ():
            if owner.get("uid") == uid:
                try:
                    job = await self._context.client.get(
                        JOB, str(owner.get("name")), namespace=namespace
                    )
                except NotFound:
                    return None
                return job if job["metadata"].get("uid") == uid else None
        return None

    def _submitter_target(self, plan: SubmitterPlan) -> tuple[str, LocalCluster] | None:
        """The address the submitter was given and the local cluster it means, once known."""
        rayjob = self._context.store.get(RAY_JOB, plan.namespace, plan.rayjob)
        status = (rayjob or {}).get("status") or {}
        cluster = self._context.registry.get(
            plan.namespace, str(status.get("rayClusterName") or "")
        )
        if rayjob is None or cluster is None or not status.get("dashboardURL"):
            return None
        head = self._context.running.get(cluster.head_uid)
        if head is None or not head.gcs_ready:
            return None
        return str(status["dashboardURL"]), cluster
