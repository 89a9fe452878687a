"""Ray's own KubeRay node provider, driven like Ray's autoscaler drives it (run as a process).

    python -m tests.controllers.ray_autoscaler_driver NAMESPACE CLUSTER GROUP ROUNDS SEED
    python -m tests.controllers.ray_autoscaler_driver NAMESPACE CLUSTER GROUP steps

In `steps` mode it reads one command per line on stdin, `terminate <pod>`, performs one
autoscaler update that terminates that worker, and answers with a JSON line
(`{"safe": ..., "terminated": ...}`), so a test can place updates exactly.

Each round is one autoscaler update as `StandardAutoscaler` performs it: `non_terminated_nodes`,
`safe_to_scale` (which clears handled `workersToDelete` lists itself), then a terminate of one
named worker — chosen at random, as idle nodes are — and `post_process`, which PATCHes the
RayCluster (`replicas` and `workersToDelete` in one JSON patch). When few workers are left it
scales the group back up instead. It talks to the API server named by the environment
(KUBERNETES_SERVICE_HOST, KUBERNETES_SERVICE_PORT_HTTPS, RAY_KUBERAY_CLIENT_CERT_PATH,
RAY_KUBERAY_CLIENT_KEY_PATH, RAY_KUBERAY_CA_CERT_PATH), which Ray reads at import time.
Prints one JSON line per terminate request: the worker it chose.
"""

from __future__ import annotations

import json
import random
import sys
import time

from ray.autoscaler._private.constants import (
    DISABLE_LAUNCH_CONFIG_CHECK_KEY,
    DISABLE_NODE_UPDATERS_KEY,
    FOREGROUND_NODE_LAUNCH_KEY,
    WORKER_LIVENESS_CHECK_KEY,
)
from ray.autoscaler._private.kuberay.node_provider import KubeRayNodeProvider
from ray.autoscaler.tags import NODE_KIND_WORKER, TAG_RAY_NODE_KIND, TAG_RAY_USER_NODE_TYPE

MIN_WORKERS = 2
REFILL_TO = 6
DEADLINE_SECONDS = 120


def provider_for(namespace: str, cluster: str) -> KubeRayNodeProvider:
    """The provider as Ray's autoscaler configures it for a RayCluster."""
    return KubeRayNodeProvider(
        {
            "namespace": namespace,
            DISABLE_NODE_UPDATERS_KEY: True,
            DISABLE_LAUNCH_CONFIG_CHECK_KEY: True,
            FOREGROUND_NODE_LAUNCH_KEY: True,
            WORKER_LIVENESS_CHECK_KEY: False,
        },
        cluster,
    )


def steps(namespace: str, cluster: str) -> None:
    provider = provider_for(namespace, cluster)
    for line in sys.stdin:
        verb, victim = line.split()
        assert verb == "terminate", line
        provider.non_terminated_nodes({})
        safe = provider.safe_to_scale()
        if safe:
            provider.terminate_node(victim)
            provider.post_process()
        print(json.dumps({"safe": safe, "terminated": victim if safe else None}), flush=True)


def main(namespace: str, cluster: str, group: str, rounds: int, seed: int) -> None:
    provider = provider_for(namespace, cluster)
    chooser = random.Random(seed)
    deadline = time.monotonic() + DEADLINE_SECONDS
    done = 0
    while done < rounds and time.monotonic() < deadline:
        nodes = provider.non_terminated_nodes({})
        if not provider.safe_to_scale():
            time.sleep(0.02)
            continue
        workers = sorted(
            n for n in nodes if provider.node_tags(n)[TAG_RAY_NODE_KIND] == NODE_KIND_WORKER
        )
        if len(workers) != _replicas(provider, group):
            # Pods still launching: the real autoscaler waits for them too (a scale-down
            # computed from a partial count would shrink the group below what it sees).
            time.sleep(0.02)
            continue
        if len(workers) <= MIN_WORKERS:
            provider.create_node({}, {TAG_RAY_USER_NODE_TYPE: group}, REFILL_TO - len(workers))
        else:
            victim = chooser.choice(workers)
            provider.terminate_node(victim)
            print(json.dumps({"terminate": victim}), flush=True)
            done += 1
        provider.post_process()
    print(json.dumps({"rounds": done}), flush=True)


def _replicas(provider: KubeRayNodeProvider, group: str) -> int:
    groups = provider._raycluster["spec"]["workerGroupSpecs"]  # read by non_terminated_nodes
    return int(next(g for g in groups if g["groupName"] == group).get("replicas", 0))


if __name__ == "__main__":
    if sys.argv[4] == "steps":
        steps(sys.argv[1], sys.argv[2])
    else:
        namespace, cluster, group, rounds, seed = sys.argv[1:6]
        main(namespace, cluster, group, int(rounds), int(seed))
