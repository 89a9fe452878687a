"""What the API server must be able to do for a feature gate to work, asked once at start.

`SidecarSubmitterRestart` gives the RayJob submitter container its own `restartPolicy`
(Kubernetes' container restart rules: alpha in 1.34 behind the API server's ContainerRestartRules
gate, on by default from 1.35). An API server without them does not refuse the field, it drops
it: the submitter would then never restart, and a lost log stream would fail a running job.
KubeRay refuses to start below 1.35; here the API server is asked directly, with a server-side
dry run of a Pod that carries the field (stored nowhere; the operator may create Pods anyway),
so a 1.34 server with the gate on passes and a 1.35 one with it off does not.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ray_operator.features import SIDECAR_SUBMITTER_RESTART, FeatureGates
from ray_operator.runtime.client import KubeClient
from ray_operator.runtime.errors import KubeError
from ray_operator.spec.kinds import POD

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_SECONDS: Final = 30.0
# A Pod any admission policy accepts (Pod Security "restricted" included).
_PROBE_POD: Final[dict[str, Any]] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"generateName": "ray-operator-capability-probe-"},
    "spec": {
        "restartPolicy": "Never",
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "probe",
                "image": "registry.k8s.io/pause:3.10",
                "restartPolicy": "OnFailure",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    },
}


async def keeps_container_restart_policy(client: KubeClient, *, namespace: str) -> bool:
    """Whether the API server keeps a regular container's `restartPolicy` (dry run)."""
    answer = await client.create(
        POD,
        _PROBE_POD,
        namespace=namespace,
        dry_run=True,
        request_timeout=PROBE_TIMEOUT_SECONDS,
    )
    stored: Mapping[str, Any] = answer
    containers = (stored.get("spec") or {}).get("containers") or [{}]
    return bool(containers[0].get("restartPolicy") == "OnFailure")


async def unmet_gate_prerequisites(
    client: KubeClient, gates: FeatureGates, *, namespaces: Sequence[str]
) -> list[str]:
    """Why the gates turned on cannot work against this API server (empty: they can)."""
    if not gates.enabled(SIDECAR_SUBMITTER_RESTART):
        return []
    namespace = namespaces[0] if namespaces else "default"
    try:
        if await keeps_container_restart_policy(client, namespace=namespace):
            return []
        reason = "it drops a container's restartPolicy"
    except KubeError as error:
        reason = f"a dry-run Pod in namespace {namespace} to check failed: {error}"
    return [
        f"--feature-gates={SIDECAR_SUBMITTER_RESTART}=true needs an API server with container "
        f"restart rules (Kubernetes 1.35+, or 1.34 with its ContainerRestartRules gate): "
        f"{reason}; turn the gate off or upgrade the API server (and the kubelets)"
    ]
