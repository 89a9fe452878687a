"""Issue 28, finding 1: a YAML alias bomb in a tenant's field is refused, never expanded.

A namespace editor writes a 9-level "billion laughs" (about half a kilobyte of YAML that stands
for 10^9 strings) into `RayJob.spec.runtimeEnvYAML` or `RayService.spec.serveConfigV2`, as valid
as the rest of the spec: a runtime env that is a mapping, a Serve config whose one deployment's
`user_config` is the bomb. PyYAML loads such a text at once, sharing each anchor; the first
json.dumps of it (the RayJob's `--runtime-env-json`, the Serve config's hash, an error message)
writes gigabytes. The webhook let both through (it only parsed), and the controllers then ran the
operator out of memory on every reconcile: every tenant's objects stopped with it.

Both the webhook and the controllers now read these fields with `bounded_yaml`, which refuses the
bomb from its event stream, as Go's YAML (KubeRay's) refuses it: "excessive aliasing". Measured
from outside on a separate operator process: the admission answer (a dry-run POST straight to the
API server, which calls the webhook), and with the webhook off, the InvalidSpec report, /healthz,
RSS, the process id, and a healthy RayCluster of another namespace meanwhile.
"""

from __future__ import annotations

import copy
import http.client
import statistics
import time
from collections.abc import Iterator
from typing import Any

from tests.adversarial.bombs import RUNTIME_ENV_BOMB, SERVE_CONFIG_BOMB, create, rayjob, rayservice
from tests.conftest import Kubectl
from tests.robustness.conftest import StartOperator
from tests.robustness.manifests import as_text, ray_cluster
from tests.robustness.observe import (
    MIB,
    ApiServer,
    HealthProbe,
    OperatorUnderTest,
    RssProbe,
    mib,
    wait_for,
)

GO_WORDS = "yaml: document contains excessive aliasing"
ADMISSION_BOUND = 0.1
"""Seconds the API server may take to answer a refused dry-run create (webhook call included):
the webhook's own work is a few milliseconds; the rest is two local TLS round trips."""
ADMISSION_TRIES = 5
HEALTHZ_BOUND = 1.0
RSS_BOUND = 50 * MIB
REPORT_BOUND = 30.0
QUIET_SECONDS = 5.0
"""How long an object reported invalid is watched for a retry that writes again."""
RAY_JOBS = "/apis/ray.io/v1/namespaces/{namespace}/rayjobs"
RAY_SERVICES = "/apis/ray.io/v1/namespaces/{namespace}/rayservices"


HEALTHY_SERVE_CONFIG = "applications:\n  - name: app\n    import_path: app:graph\n"
HEALTHY_RUNTIME_ENV = "env_vars: {LEVEL: debug}\n"
BOMBS = [
    (RAY_JOBS, rayjob, HEALTHY_RUNTIME_ENV, RUNTIME_ENV_BOMB, "spec.runtimeEnvYAML"),
    (RAY_SERVICES, rayservice, HEALTHY_SERVE_CONFIG, SERVE_CONFIG_BOMB, "spec.serveConfigV2"),
]


# --- talking to the API server directly (kubectl would add its own start-up) -------------------


def timed_refusals(
    connection: http.client.HTTPSConnection, path: str, manifest: dict[str, Any]
) -> Iterator[tuple[int, str, float]]:
    """(status, message, seconds) of `ADMISSION_TRIES` dry-run creates of `manifest`."""
    for _ in range(ADMISSION_TRIES):
        status, body, took = create(connection, path, manifest, dry_run=True)
        yield status, str(body.get("message", "")), took


def warnings_about(api: ApiServer, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [
        event
        for event in api.events(namespace, name)
        if event.get("type") == "Warning" and event.get("reason") == reason
    ]


def get(api: ApiServer, path: str) -> dict[str, Any]:
    found: dict[str, Any] | None = api.get_json(path)
    assert found is not None, path
    return found


def rayjob_report(api: ApiServer, namespace: str, name: str) -> str | None:
    """The RayJob's ValidationFailed message, once a Warning Event tells it too."""
    status = get(api, f"{RAY_JOBS.format(namespace=namespace)}/{name}").get("status") or {}
    if status.get("jobDeploymentStatus") != "ValidationFailed":
        return None
    if not warnings_about(api, namespace, name, "InvalidRayJobSpec"):
        return None
    return str(status.get("message", ""))


def rayservice_report(api: ApiServer, namespace: str, name: str) -> str | None:
    """The RayService's Ready=False/ValidationFailed message, once a Warning Event tells it."""
    status = get(api, f"{RAY_SERVICES.format(namespace=namespace)}/{name}").get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    if ready.get("reason") != "ValidationFailed" or ready.get("status") != "False":
        return None
    if not warnings_about(api, namespace, name, "InvalidRayServiceSpec"):
        return None
    return str(ready.get("message", ""))


def resource_version(api: ApiServer, path: str) -> str:
    return str(get(api, path)["metadata"]["resourceVersion"])


# --- the tests ---------------------------------------------------------------------------------


def test_the_webhook_refuses_alias_bombs_within_a_tenth_of_a_second_naming_the_field(
    operator_with_webhooks: OperatorUnderTest, api_server: ApiServer, namespace: str
) -> None:
    assert len(RUNTIME_ENV_BOMB) < 600
    assert len(SERVE_CONFIG_BOMB) < 700
    connection = api_server.connect(timeout=10)
    try:
        for path_template, manifest, healthy, bomb, field in BOMBS:
            path = path_template.format(namespace=namespace)
            # The same spec with a healthy field is admitted (and warms the connections).
            status, body, _ = create(connection, path, manifest("fine", healthy), dry_run=True)
            assert status == 201, body
            refusals = list(timed_refusals(connection, path, manifest("bomb", bomb)))
            seconds = [took for _, _, took in refusals]
            print(f"\n{field}: refused in " + ", ".join(f"{s * 1000:.0f} ms" for s in seconds))
            for status, message, _ in refusals:
                assert status == 422, message
                assert f"{field}: Invalid value: " in message, message
                assert message.endswith(GO_WORDS), message
                assert len(message) < 1000, message
            assert statistics.median(seconds) < ADMISSION_BOUND, seconds
    finally:
        connection.close()
    assert operator_with_webhooks.alive()


def test_bombs_created_without_the_webhook_get_invalid_spec_and_hurt_no_other_tenant(
    start_operator: StartOperator,
    api_server: ApiServer,
    kubectl: Kubectl,
    namespace: str,
    other_namespace: str,
) -> None:
    operator = start_operator(all_namespaces=True)
    time.sleep(2.0)  # let start-up allocations settle before the idle figure
    idle = operator.rss_bytes()
    jobs, services = RAY_JOBS.format(namespace=namespace), RAY_SERVICES.format(namespace=namespace)
    try:
        with HealthProbe(operator.health_url) as probe, RssProbe(operator) as rss:
            kubectl("apply", "-n", other_namespace, "-f", "-", input_text=as_text(victim()))
            connection = api_server.connect(timeout=10)
            try:
                for path, manifest in [
                    (jobs, rayjob("bomb", RUNTIME_ENV_BOMB)),
                    (services, rayservice("bomb", SERVE_CONFIG_BOMB)),
                ]:
                    status, body, _ = create(connection, path, manifest, dry_run=False)
                    assert status == 201, body
            finally:
                connection.close()
            job_report = wait_for(
                lambda: rayjob_report(api_server, namespace, "bomb"),
                timeout=REPORT_BOUND,
                what=f"the RayJob reported invalid (log: {operator.log_path})",
            )
            service_report = wait_for(
                lambda: rayservice_report(api_server, namespace, "bomb"),
                timeout=REPORT_BOUND,
                what=f"the RayService reported invalid (log: {operator.log_path})",
            )
            victim_ready = wait_for(
                lambda: api_server.state(other_namespace, "victim") == "ready",
                timeout=REPORT_BOUND,
                what="the other tenant's RayCluster ready meanwhile",
            )
            versions = {
                path: resource_version(api_server, f"{path}/bomb") for path in (jobs, services)
            }
            time.sleep(QUIET_SECONDS)
            rewritten = [
                p for p, v in versions.items() if resource_version(api_server, f"{p}/bomb") != v
            ]

        job_message = rayjob_report(api_server, namespace, "bomb") or ""
        service_message = rayservice_report(api_server, namespace, "bomb") or ""
        print(
            f"\nRayJob reported {job_report:.1f} s after its creation: {job_message[:200]}"
            f"\nRayService {service_report:.1f} s after that: {service_message[:200]}"
            f"\nvictim ready {victim_ready:.1f} s after that"
            f"; RSS idle {mib(idle)}, peak {mib(rss.peak)}; healthz {probe.summary()}"
        )
        assert job_message.startswith("spec.runtimeEnvYAML: Invalid value: "), job_message
        assert job_message.endswith(GO_WORDS), job_message
        assert service_message.startswith("spec.serveConfigV2: Invalid value: "), service_message
        assert GO_WORDS in service_message, service_message
        assert not rewritten, f"written again after the report: {rewritten}"
        # Alive throughout, the same process: nothing restarted it (RssProbe saw it all along).
        assert not rss.vanished
        assert operator.alive()
        assert rss.peak - idle < RSS_BOUND, f"RSS {mib(idle)} -> {mib(rss.peak)}"
        assert not probe.failures, probe.failures[:5]
        assert probe.max_latency < HEALTHZ_BOUND, probe.summary()
    finally:
        kubectl("delete", "raycluster", "victim", "-n", other_namespace, "--wait=false")
        wait_for(
            lambda: api_server.pod_count(other_namespace, "ray.io/cluster=victim") == 0,
            timeout=60,
            what="the other tenant's Pods deleted by the operator",
        )


def victim() -> dict[str, Any]:
    """Another tenant's healthy cluster."""
    return copy.deepcopy(ray_cluster("victim"))
