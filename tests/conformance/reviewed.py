"""The reviewed list: KubeRay e2e tests we do not run, or expect to fail, each with its reason.

Nothing is hidden: every entry is printed in the table. Two kinds:
- `NOT_RUN`: the test needs what one machine cannot give (GPUs, TPUs, a cloud load balancer,
  container images other than Ray and Redis, an installed Kueue/Volcano/Yunikorn, a kubelet that
  pulls images). Passed to `go test -skip`, never run, shown as "not run: <reason>".
- `EXPECTED_FAILING`: a gap we know and are closing on another branch ("needs <branch>"). `make
  conformance` runs them and shows what happens; the CI subset skips them so it stays green and
  fast. Remove an entry when its branch merges.

A pattern is Go's `-run`/`-skip` syntax for one test: the top-level name, then `/` and the subtest
name with spaces as underscores; each part is matched as a regexp, so the helpers below anchor and
escape them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable


@dataclasses.dataclass(frozen=True)
class Reviewed:
    """One reviewed test: which suite, which test (Go `-skip` pattern), and why."""

    suite: str
    pattern: str
    reason: str

    def matches(self, suite: str, name: str) -> bool:
        """Whether this entry names the test `name` of `suite` (or a parent of it)."""
        if suite != self.suite:
            return False
        parts = name.split("/")
        patterns = self.pattern.split("/")
        if len(patterns) > len(parts):
            return False
        return all(re.search(p, part) for p, part in zip(patterns, parts, strict=False))


def exactly(test: str, subtest: str = "") -> str:
    """The `-skip` pattern for exactly one test (and subtest, spaces written as Go writes them)."""
    pattern = f"^{re.escape(test)}$"
    if subtest:
        pattern += f"/^{re.escape(subtest.replace(' ', '_'))}$"
    return pattern


def skip_argument(entries: Iterable[Reviewed], suite: str) -> str:
    """One `-test.skip` value for a suite: its entries' patterns as top-level alternatives."""
    return "|".join(entry.pattern for entry in entries if entry.suite == suite)


def find(entries: Iterable[Reviewed], suite: str, name: str) -> Reviewed | None:
    return next((entry for entry in entries if entry.matches(suite, name)), None)


INSTALLED_RAY_CLI = (
    "the local submitter is the installed Ray's (2.60) CLI, whatever the image: when the head "
    "goes away, its `ray job logs --follow` exits 1 (Ray 2.46, the test's image, exits 0), so "
    "the submitter Job retries, resubmits the job to the new head and it SUCCEEDs; the test "
    "expects the submitter to have completed and the job to fail the 30 s grace period"
)
JOB_STATUS_REFUSED = (
    "the test marks the submitter Job Complete by a status write that our kube-apiserver (1.34) "
    "refuses (Complete=True without SuccessCriteriaMet=true, and active>0 on a finished Job); "
    "the older one of KubeRay's CI took it"
)
NO_POD_NETWORK = (
    "a Pod's own network and PID namespaces: its script, run by kubectl exec in the head Pod, "
    "dials ray://127.0.0.1:10001, but local Ray nodes share this machine's network (ports picked "
    "per node on 127.x.y.z), so the head's Ray client is not there; and its `pkill gcs_server` "
    "would stop every GCS of the user on this machine"
)
NEEDS_INTERNET = "its Serve app comes from github.com (runtime_env working_dir): run offline"

NOT_RUN: tuple[Reviewed, ...] = (
    # Not run rather than expected to fail: its `pkill gcs_server` would stop other clusters' GCS.
    Reviewed("e2e", exactly("TestRayClusterGCSFaultTolerance"), NO_POD_NETWORK),
    Reviewed(
        "sampleyaml",
        exactly("TestRayCluster", "ray-cluster.fluentbit.yaml"),
        "a fluent-bit sidecar image (only Ray and Redis images run locally)",
    ),
    Reviewed(
        "e2erayservice",
        exactly("TestOldHeadPodFailDuringUpgrade"),
        "an istio/iptables container image (only Ray and Redis images run locally)",
    ),
    Reviewed(
        "e2erayjob",
        exactly("TestRayJob", "RuntimeEnvYAML is not a valid YAML string"),
        "our validating webhook refuses the invalid runtimeEnvYAML at admission "
        "(docs/differences-from-kuberay.md); KubeRay, without webhooks, accepts it and fails the "
        "RayJob",
    ),
    Reviewed(
        "e2erayjob",
        exactly("TestRayJob", "RayJob name too long with 48 characters"),
        "our validating webhook refuses a RayJob name over 47 characters at admission "
        "(docs/differences-from-kuberay.md); KubeRay, without webhooks, accepts it and marks the "
        "RayJob ValidationFailed",
    ),
    # Every other e2erayservice test, and every RayService sample, serves an app that Ray
    # downloads from github.com (`runtime_env.working_dir`); the locust load tests also install
    # locust with pip. Conformance runs offline (CI reaches only the Go module proxy).
    *(
        Reviewed("e2erayservice", exactly(test), NEEDS_INTERNET)
        for test in (
            "TestStaticRayService",
            "TestAutoscalingRayService",
            "TestRayServiceZeroDowntimeUpgrade",
            "TestRayServiceGCSFaultTolerance",
            "TestRayServiceRayClusterDeletionDelaySeconds",
            "TestRayServiceInPlaceUpdate",
            "TestUpdateServeConfigAndRayClusterSpec",
            "TestUpdateServeConfigAndRayClusterSpecWithUpgradeDisabled",
            "TestRayServiceBecomesReadyBeforeTimeout",
            "TestRedeployRayServe",
        )
    ),
    Reviewed("sampleyaml", exactly("TestRayService"), NEEDS_INTERNET),
    Reviewed(
        "e2erayservice",
        exactly("TestRayServiceInitializingTimeoutTerminalFailure"),
        "an image pull that fails (ImagePullBackOff): KWOK pulls no image",
    ),
)

EXPECTED_FAILING: tuple[Reviewed, ...] = (
    # Every RayCluster sample run passes (ray-cluster.tls.yaml since the agent runs init
    # containers, 2026-11-29). e2e: TestGcsFaultToleranceOptions and
    # TestGcsFaultToleranceAnnotations (a Redis Pod of their own, redis-cli in it through kubectl
    # exec) pass since 2026-11-29. e2erayjob: every job reading its script from the ConfigMap at
    # /home/ray/jobs passes since local ConfigMap volumes hold its binaryData (full suite run,
    # 2026-11-29); these two fail for reasons of their own.
    Reviewed(
        "e2erayjob",
        exactly("TestRayJob", "RayJob fails when head Pod is deleted when job is running"),
        INSTALLED_RAY_CLI,
    ),
    Reviewed(
        "e2erayjob",
        exactly("TestRayJob", "RayJob has exceed SubmitterFinishedTimeout"),
        JOB_STATUS_REFUSED,
    ),
    # TestRayJobSidecarMode and TestRayJobRetry's SidecarMode subtest pass since the agent runs
    # the head Pod's submitter container (2026-11-29).
)

REVIEWED: tuple[Reviewed, ...] = NOT_RUN + EXPECTED_FAILING
