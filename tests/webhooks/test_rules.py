"""Every admission rule, as a user meets it: `kubectl apply` of a bad manifest is refused at once
with the rule's exact message (field path, value, reason), and nothing is created.

The manifests are the valid samples with one thing broken; the real API server calls the real
webhook over TLS. Rules the CRD schema already enforces (types, enums, CEL) are not repeated.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import yaml
from ray_operator.validation import validate_raycluster

from tests.conftest import Kubectl
from tests.webhooks.rule_cases import (
    CLUSTER,
    HEAD,
    HEAD_ENV,
    JOB,
    JOB_CLUSTER,
    SERVICE,
    SERVICE_CLUSTER,
    WORKER,
    Case,
    Manifest,
    annotate,
    case,
    put,
)

NO_SUBMITTER = put("spec.submitterPodTemplate", None)
SELECTOR = put("spec.clusterSelector", {"ray.io/cluster": "existing"})
NO_CLUSTER_SPEC = put("spec.rayClusterSpec", None)
WORKER_TEMPLATE = {
    "spec": {"containers": [{"name": "ray-worker", "image": "rayproject/ray:2.52.0"}]}
}


def serve_config(text: str) -> Callable[[Manifest], None]:
    return put("spec.serveConfigV2", text)


RAYCLUSTER_CASES = [
    case(
        "min-above-max",
        CLUSTER,
        put(f"{WORKER}.minReplicas", 5),
        put(f"{WORKER}.maxReplicas", 3),
        expect=f"{WORKER}.minReplicas: Invalid value: 5: must be less than or equal to "
        "maxReplicas (3)",
    ),
    case(
        "duplicate-group-names",
        CLUSTER,
        lambda m: m["spec"]["workerGroupSpecs"].append(
            copy.deepcopy(m["spec"]["workerGroupSpecs"][0])
        ),
        expect='spec.workerGroupSpecs[1].groupName: Duplicate value: "workers"',
    ),
    case(
        "cluster-name-too-long",
        CLUSTER,
        put("metadata.name", "a" * 54),
        expect="metadata.name: Too long: may not be more than 53 bytes",
    ),
    case(
        "every-violation-at-once",
        CLUSTER,
        put(f"{WORKER}.minReplicas", 5),
        put(f"{WORKER}.maxReplicas", 3),
        put("metadata.name", "a" * 54),
        put(f"{HEAD}.rayStartParams", {"labels": "a=b"}),
        expect=(
            f"{WORKER}.minReplicas: Invalid value: 5: must be less than or equal to "
            "maxReplicas (3)",
            "metadata.name: Too long: may not be more than 53 bytes",
            f"{HEAD}.rayStartParams.labels: Forbidden",
        ),
    ),
]

RAYJOB_CASES = [
    case(
        "job-name-too-long",
        JOB,
        put("metadata.name", "j" * 48),
        expect="metadata.name: Too long: may not be more than 47 bytes",
    ),
    case(
        "job-name-not-dns-1035",
        JOB,
        put("metadata.name", "1job"),
        expect='metadata.name: Invalid value: "1job": a DNS-1035 label must consist of lower '
        "case alphanumeric characters or '-', start with an alphabetic character, and end "
        "with an alphanumeric character",
    ),
    case(
        "suspend-without-shutdown",
        JOB,
        put("spec.suspend", True),
        put("spec.shutdownAfterJobFinishes", False),
        put("spec.ttlSecondsAfterFinished", 0),
        expect="spec.suspend: Forbidden: a RayJob can be suspended only with "
        "shutdownAfterJobFinishes: true",
    ),
    case(
        "ttl-without-shutdown",
        JOB,
        put("spec.shutdownAfterJobFinishes", False),
        put("spec.ttlSecondsAfterFinished", 30),
        expect="spec.ttlSecondsAfterFinished: Forbidden: requires shutdownAfterJobFinishes: true",
    ),
    case(
        "no-cluster-at-all",
        JOB,
        NO_CLUSTER_SPEC,
        expect="spec.rayClusterSpec: Required value: one of rayClusterSpec or clusterSelector "
        "must be set",
    ),
    case(
        "selector-and-cluster-spec",
        JOB,
        SELECTOR,
        expect="spec.rayClusterSpec: Forbidden: cannot be set together with clusterSelector "
        "(the job runs on an existing cluster)",
    ),
    case(
        "selector-without-cluster-name",
        JOB,
        NO_CLUSTER_SPEC,
        put("spec.clusterSelector", {"team": "a"}),
        expect="spec.clusterSelector[ray.io/cluster]: Required value: the name of the RayCluster "
        "to run on",
    ),
    case(
        "selector-in-sidecar-mode",
        JOB,
        NO_CLUSTER_SPEC,
        SELECTOR,
        NO_SUBMITTER,
        put("spec.submissionMode", "SidecarMode"),
        expect='spec.submissionMode: Invalid value: "SidecarMode": not supported with '
        "clusterSelector",
    ),
    case(
        "selector-with-retries",
        JOB,
        NO_CLUSTER_SPEC,
        SELECTOR,
        put("spec.backoffLimit", 2),
        expect="spec.backoffLimit: Invalid value: 2: must be 0 with clusterSelector",
    ),
    case(
        "selector-with-suspend",
        JOB,
        NO_CLUSTER_SPEC,
        SELECTOR,
        put("spec.suspend", True),
        expect="spec.suspend: Forbidden: a RayJob with a clusterSelector cannot be suspended",
    ),
    case(
        "interactive-with-retries",
        JOB,
        NO_SUBMITTER,
        put("spec.submissionMode", "InteractiveMode"),
        put("spec.backoffLimit", 1),
        expect="spec.backoffLimit: Invalid value: 1: must be 0 when submissionMode is "
        "InteractiveMode",
    ),
    case(
        "sidecar-with-submitter-template",
        JOB,
        put("spec.submissionMode", "SidecarMode"),
        expect="spec.submitterPodTemplate: Forbidden: not supported when submissionMode is "
        "SidecarMode",
    ),
    case(
        "sidecar-with-submitter-config",
        JOB,
        NO_SUBMITTER,
        put("spec.submissionMode", "SidecarMode"),
        put("spec.submitterConfig", {"backoffLimit": 1}),
        expect="spec.submitterConfig: Forbidden: not supported when submissionMode is SidecarMode",
    ),
    case(
        "sidecar-with-restarting-head",
        JOB,
        NO_SUBMITTER,
        put("spec.submissionMode", "SidecarMode"),
        put(f"{JOB_CLUSTER}.headGroupSpec.template.spec.restartPolicy", "OnFailure"),
        expect=f"{JOB_CLUSTER}.headGroupSpec.template.spec.restartPolicy: Invalid value: "
        '"OnFailure": must be Never or unset when submissionMode is SidecarMode',
    ),
    case(
        "sidecar-name-taken-in-head",
        JOB,
        NO_SUBMITTER,
        put("spec.submissionMode", "SidecarMode"),
        put(
            f"{JOB_CLUSTER}.headGroupSpec.template.spec.containers",
            [
                {"name": "ray-head", "image": "rayproject/ray:2.52.0"},
                {"name": "ray-job-submitter", "image": "rayproject/ray:2.52.0"},
            ],
        ),
        expect=f"{JOB_CLUSTER}.headGroupSpec.template.spec.containers[1].name: Invalid value: "
        '"ray-job-submitter": is the name of the submitter container SidecarMode adds to the '
        "head Pod",
    ),
    case(
        "unknown-submission-mode",
        JOB,
        put("spec.submissionMode", "FaxMode"),
        expect='spec.submissionMode: Unsupported value: "FaxMode": supported values: '
        '"K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"',
    ),
    case(
        "runtime-env-not-yaml",
        JOB,
        put("spec.runtimeEnvYAML", "pip: [unclosed"),
        expect='spec.runtimeEnvYAML: Invalid value: "pip: [unclosed": not valid YAML',
    ),
    case(
        "runtime-env-not-a-mapping",
        JOB,
        put("spec.runtimeEnvYAML", "- a\n- b\n"),
        expect='spec.runtimeEnvYAML: Invalid value: "- a\\n- b\\n": must be a YAML mapping '
        "(a runtime_env)",
    ),
    case(
        "entrypoint-resources-not-amounts",
        JOB,
        put("spec.entrypointResources", '{"GPU": "one"}'),
        expect='spec.entrypointResources: Invalid value: "{\\"GPU\\": \\"one\\"}": must be a JSON '
        'object of resource amounts, such as {"GPU": 1}',
    ),
    case(
        "entrypoint-resources-nested-beyond-decoding",
        JOB,
        put("spec.entrypointResources", "[" * 5000 + "]" * 5000),
        expect='spec.entrypointResources: Invalid value: "' + "[" * 80 + '...": must be a JSON '
        "object of resource amounts",
    ),
    case(
        "zero-active-deadline",
        JOB,
        put("spec.activeDeadlineSeconds", 0),
        expect="spec.activeDeadlineSeconds: Invalid value: 0: must be greater than 0",
    ),
    case(
        "negative-backoff-limit",
        JOB,
        put("spec.backoffLimit", -1),
        expect="spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0",
    ),
    case(
        "no-entrypoint",
        JOB,
        NO_SUBMITTER,
        put("spec.entrypoint", None),
        expect="spec.entrypoint: Required value: required unless submissionMode is "
        "InteractiveMode or a submitterPodTemplate is given",
    ),
    case(
        "deletion-rules-with-shutdown",
        JOB,
        put("spec.ttlSecondsAfterFinished", 0),
        put(
            "spec.deletionStrategy",
            {
                "deletionRules": [
                    {"policy": "DeleteCluster", "condition": {"jobStatus": "SUCCEEDED"}}
                ]
            },
        ),
        expect="spec.deletionStrategy.deletionRules: Forbidden: cannot be used together with "
        "shutdownAfterJobFinishes: true",
    ),
    case(
        "deletion-rules-out-of-order",
        JOB,
        put("spec.shutdownAfterJobFinishes", False),
        put("spec.ttlSecondsAfterFinished", 0),
        put(
            "spec.deletionStrategy",
            {
                "deletionRules": [
                    {
                        "policy": "DeleteSelf",
                        "condition": {"jobStatus": "FAILED", "ttlSeconds": 10},
                    },
                    {
                        "policy": "DeleteCluster",
                        "condition": {"jobStatus": "FAILED", "ttlSeconds": 60},
                    },
                ]
            },
        ),
        expect="spec.deletionStrategy.deletionRules[0].condition.ttlSeconds: Invalid value: 10: "
        "must be greater than or equal to the ttlSeconds of DeleteCluster for jobStatus "
        "FAILED (60)",
    ),
    case(
        "duplicate-deletion-rule",
        JOB,
        put("spec.shutdownAfterJobFinishes", False),
        put("spec.ttlSecondsAfterFinished", 0),
        put(
            "spec.deletionStrategy",
            {
                "deletionRules": [
                    {"policy": "DeleteCluster", "condition": {"jobStatus": "FAILED"}},
                    {
                        "policy": "DeleteCluster",
                        "condition": {"jobStatus": "FAILED", "ttlSeconds": 5},
                    },
                ]
            },
        ),
        expect="spec.deletionStrategy.deletionRules[1]: Duplicate value: "
        '{"jobStatus":"FAILED","policy":"DeleteCluster"}',
    ),
    case(
        "delete-none-with-shutdown",
        JOB,
        put(
            "spec.deletionStrategy",
            {"onSuccess": {"policy": "DeleteNone"}, "onFailure": {"policy": "DeleteCluster"}},
        ),
        expect='spec.deletionStrategy.onSuccess.policy: Invalid value: "DeleteNone": '
        "contradicts shutdownAfterJobFinishes: true",
    ),
    case(
        "delete-cluster-of-a-selected-cluster",
        JOB,
        NO_CLUSTER_SPEC,
        SELECTOR,
        put("spec.shutdownAfterJobFinishes", False),
        put("spec.ttlSecondsAfterFinished", 0),
        put(
            "spec.deletionStrategy",
            {"onSuccess": {"policy": "DeleteCluster"}, "onFailure": {"policy": "DeleteSelf"}},
        ),
        expect='spec.deletionStrategy.onSuccess.policy: Invalid value: "DeleteCluster": not '
        "supported with clusterSelector (the cluster is not the RayJob's)",
    ),
    case(
        "embedded-cluster-min-above-max",
        JOB,
        put(f"{JOB_CLUSTER}.workerGroupSpecs[0].minReplicas", 4),
        expect=f"{JOB_CLUSTER}.workerGroupSpecs[0].minReplicas: Invalid value: 4: must be less "
        "than or equal to maxReplicas (2)",
    ),
    case(
        "embedded-cluster-upgrade-strategy",
        JOB,
        put(f"{JOB_CLUSTER}.upgradeStrategy", {"type": "Recreate"}),
        expect=f"{JOB_CLUSTER}.upgradeStrategy: Forbidden: cannot be set on a RayCluster created "
        "by a RayJob",
    ),
    case(
        "job-with-k8s-token-auth",
        JOB,
        put(f"{JOB_CLUSTER}.authOptions", {"mode": "token", "enableK8sTokenAuth": True}),
        put(f"{JOB_CLUSTER}.rayVersion", "2.56.0"),
        expect=f"{JOB_CLUSTER}.authOptions.enableK8sTokenAuth: Forbidden: Kubernetes token "
        "authentication is not supported for RayJob",
    ),
]

RAYSERVICE_CASES = [
    case(
        "service-name-too-long",
        SERVICE,
        put("metadata.name", "s" * 48),
        expect="metadata.name: Too long: may not be more than 47 bytes",
    ),
    case(
        "bad-initializing-timeout",
        SERVICE,
        annotate({"ray.io/initializing-timeout": "soon"}),
        expect='metadata.annotations[ray.io/initializing-timeout]: Invalid value: "soon": must '
        'be a Go duration such as "5m" or "1h", or a whole number of seconds',
    ),
    case(
        "negative-initializing-timeout",
        SERVICE,
        annotate({"ray.io/initializing-timeout": "-5m"}),
        expect='metadata.annotations[ray.io/initializing-timeout]: Invalid value: "-5m": must '
        "be positive",
    ),
    case(
        "fixed-head-service-name",
        SERVICE,
        put(f"{SERVICE_CLUSTER}.headGroupSpec.headService", {"metadata": {"name": "head"}}),
        expect=f"{SERVICE_CLUSTER}.headGroupSpec.headService.metadata.name: Forbidden: the "
        "RayService names the head Service of each of its clusters",
    ),
    case(
        "unknown-upgrade-type",
        SERVICE,
        put("spec.upgradeStrategy.type", "BlueGreen"),
        expect='spec.upgradeStrategy.type: Unsupported value: "BlueGreen": supported values: '
        '"NewClusterWithIncrementalUpgrade", "NewCluster", "None"',
    ),
    case(
        "incremental-upgrade-without-autoscaler",
        SERVICE,
        put(
            "spec.upgradeStrategy",
            {
                "type": "NewClusterWithIncrementalUpgrade",
                "clusterUpgradeOptions": {
                    "gatewayClassName": "istio",
                    "stepSizePercent": 50,
                    "maxSurgePercent": 20,
                    "intervalSeconds": 30,
                },
            },
        ),
        expect=(
            "spec.upgradeStrategy.type: Forbidden: NewClusterWithIncrementalUpgrade requires "
            "rayClusterConfig.enableInTreeAutoscaling: true",
            "spec.upgradeStrategy.clusterUpgradeOptions.stepSizePercent: Invalid value: 50: "
            "must be less than or equal to maxSurgePercent (20)",
        ),
    ),
    case(
        "serve-config-not-yaml",
        SERVICE,
        serve_config("applications: [\n"),
        expect='spec.serveConfigV2: Invalid value: "applications: [\\n": not valid YAML',
    ),
    case(
        "serve-config-without-applications",
        SERVICE,
        serve_config("proxy_location: EveryNode\n"),
        expect="spec.serveConfigV2.applications: Required value: the Serve applications to deploy",
    ),
    case(
        "serve-config-bad-proxy-location",
        SERVICE,
        serve_config("proxy_location: Everywhere\napplications: []\n"),
        expect='spec.serveConfigV2.proxy_location: Unsupported value: "Everywhere": supported '
        'values: "Disabled", "HeadOnly", "EveryNode"',
    ),
    case(
        "serve-duplicate-application-names",
        SERVICE,
        serve_config(
            "applications:\n- {name: a, route_prefix: /a, import_path: m:app}\n"
            "- {name: a, route_prefix: /b, import_path: m:app}\n"
        ),
        expect='spec.serveConfigV2.applications[1].name: Duplicate value: "a"',
    ),
    case(
        "serve-duplicate-route-prefixes",
        SERVICE,
        serve_config(
            "applications:\n- {name: a, route_prefix: /x, import_path: m:app}\n"
            "- {name: b, route_prefix: /x, import_path: m:app}\n"
        ),
        expect='spec.serveConfigV2.applications[1].route_prefix: Duplicate value: "/x"',
    ),
    case(
        "serve-route-prefix-without-slash",
        SERVICE,
        serve_config("applications:\n- {name: a, route_prefix: api, import_path: m:app}\n"),
        expect='spec.serveConfigV2.applications[0].route_prefix: Invalid value: "api": must '
        'start with "/"',
    ),
    case(
        "serve-missing-import-path",
        SERVICE,
        serve_config("applications:\n- {name: a, route_prefix: /a}\n"),
        expect="spec.serveConfigV2.applications[0].import_path: Required value: the module and "
        "attribute of the application",
    ),
    case(
        "serve-bad-import-path",
        SERVICE,
        serve_config("applications:\n- {name: a, import_path: app}\n"),
        expect='spec.serveConfigV2.applications[0].import_path: Invalid value: "app": must '
        'separate the module from the attribute with a dot or a colon ("module.app")',
    ),
    case(
        "serve-deployment-without-name",
        SERVICE,
        serve_config(
            "applications:\n- name: a\n  import_path: m:app\n  deployments:\n  - num_replicas: 2\n"
        ),
        expect="spec.serveConfigV2.applications[0].deployments[0].name: Required value: the name "
        "of the deployment it configures",
    ),
    case(
        "serve-zero-replicas",
        SERVICE,
        serve_config(
            "applications:\n- name: a\n  import_path: m:app\n  deployments:\n"
            "  - {name: D, num_replicas: 0}\n"
        ),
        expect="spec.serveConfigV2.applications[0].deployments[0].num_replicas: Invalid value: "
        '0: must be a positive integer or "auto"',
    ),
    case(
        "serve-application-port",
        SERVICE,
        serve_config("applications:\n- {name: a, import_path: m:app, port: 9000}\n"),
        expect="spec.serveConfigV2.applications[0].port: Forbidden: set it in http_options at "
        "the top level",
    ),
    case(
        "embedded-cluster-of-service",
        SERVICE,
        put(f"{SERVICE_CLUSTER}.workerGroupSpecs[0].minReplicas", 7),
        expect=f"{SERVICE_CLUSTER}.workerGroupSpecs[0].minReplicas: Invalid value: 7: must be "
        "less than or equal to maxReplicas (3)",
    ),
]


@pytest.mark.parametrize("rule", [*RAYCLUSTER_CASES, *RAYJOB_CASES, *RAYSERVICE_CASES])
def test_kubectl_apply_of_a_bad_manifest_is_refused_with_the_rule(
    kubectl: Kubectl, shared_webhook_namespace: str, rule: Case
) -> None:
    manifest = rule.manifest()
    result = kubectl.run(
        "apply", "-n", shared_webhook_namespace, "-f", "-", input_text=yaml.safe_dump(manifest)
    )
    assert result.returncode != 0, f"admitted: {rule.id}"
    for message in rule.messages:
        assert message in result.stderr
    kind = manifest["kind"].lower()
    listed = kubectl("get", kind, "-n", shared_webhook_namespace, "-o", "name")
    assert listed == ""


# The RayCluster rules themselves live (and are unit-tested) in validation/raycluster.py; here
# each one is met through kubectl, and the messages must be exactly those the controller reports.
FT = "spec.gcsFaultToleranceOptions"
REDIS_FT = {"redisAddress": "redis:6379"}


def env(*names: str) -> Callable[[Manifest], None]:
    return put(HEAD_ENV, [{"name": name, "value": "1"} for name in names])


RAYCLUSTER_RULE_CASES = [
    pytest.param(
        (put(f"{WORKER}.groupName", "bad group!"),),
        f"{WORKER}.groupName",
        id="group-name-not-a-label-value",
    ),
    pytest.param(
        (put(f"{HEAD}.template.spec.containers", []),),
        f"{HEAD}.template.spec.containers",
        id="head-without-containers",
    ),
    pytest.param(
        (put(f"{WORKER}.minReplicas", -1),), f"{WORKER}.minReplicas", id="negative-min-replicas"
    ),
    pytest.param(
        (put("spec.enableInTreeAutoscaling", True), put(f"{WORKER}.suspend", True)),
        f"{WORKER}.suspend",
        id="suspended-group-with-autoscaler",
    ),
    pytest.param(
        (put(f"{HEAD}.rayStartParams", {"labels": "a=b"}),),
        f"{HEAD}.rayStartParams.labels",
        id="labels-in-ray-start-params",
    ),
    pytest.param(
        (
            put(f"{WORKER}.rayStartParams", {"num-cpus": "1"}),
            put(f"{WORKER}.resources", {"CPU": "1"}),
        ),
        f"{WORKER}.resources",
        id="resources-twice",
    ),
    pytest.param(
        (put(f"{WORKER}.idleTimeoutSeconds", 30),),
        f"{WORKER}.idleTimeoutSeconds",
        id="idle-timeout-without-autoscaler-v2",
    ),
    pytest.param(
        (put("spec.authOptions", {"mode": "token"}), put("spec.rayVersion", "2.46.0")),
        "spec.rayVersion",
        id="token-auth-on-old-ray",
    ),
    pytest.param((put("spec.tlsOptions", {}),), "spec.tlsOptions", id="unsupported-tls-options"),
    pytest.param((put("metadata.name", "1ray"),), "metadata.name", id="name-not-dns-1035"),
    pytest.param((put(f"{HEAD}.labels", {"bad key": "v"}),), f"{HEAD}.labels", id="bad-label-key"),
    pytest.param(
        (put(f"{WORKER}.labels", {"k": "bad value!"}),), f"{WORKER}.labels[k]", id="bad-label-value"
    ),
    pytest.param(
        (put(f"{WORKER}.template.spec.containers", []),),
        f"{WORKER}.template.spec.containers",
        id="worker-without-containers",
    ),
    pytest.param((put(f"{WORKER}.priority", 5),), f"{WORKER}.priority", id="priority-needs-v2"),
    pytest.param(
        (annotate({"ray.io/ft-enabled": "true"}), put(FT, REDIS_FT)),
        FT,
        id="ft-annotation-and-options",
    ),
    pytest.param((env("RAY_REDIS_ADDRESS"),), HEAD_ENV, id="redis-address-without-ft"),
    pytest.param(
        (put(f"{HEAD}.rayStartParams", {"redis-username": "u"}),),
        f"{HEAD}.rayStartParams",
        id="redis-username-param",
    ),
    pytest.param(
        (put(FT, REDIS_FT), put(f"{HEAD}.rayStartParams", {"redis-password": "p"})),
        f"{HEAD}.rayStartParams.redis-password",
        id="redis-password-param-with-ft",
    ),
    pytest.param(
        (put(FT, REDIS_FT), env("REDIS_PASSWORD")), HEAD_ENV, id="redis-password-env-with-ft"
    ),
    pytest.param(
        (put(FT, REDIS_FT), annotate({"ray.io/external-storage-namespace": "x"})),
        "metadata.annotations",
        id="external-storage-annotation-with-ft",
    ),
    pytest.param(
        (put(FT, {**REDIS_FT, "storage": {"size": "1Gi"}}),),
        f"{FT}.storage",
        id="storage-without-rocksdb",
    ),
    pytest.param(
        (put(FT, {"backend": "rocksdb", "redisAddress": "r:6379"}),),
        f"{FT}.redisAddress",
        id="redis-address-with-rocksdb",
    ),
    pytest.param(
        (put(FT, {"backend": "rocksdb", "storage": {"claimName": "c", "size": "1Gi"}}),),
        f"{FT}.storage.claimName",
        id="claim-name-and-size",
    ),
    pytest.param(
        (put(FT, {"backend": "rocksdb"}), env("RAY_gcs_storage")),
        f"{HEAD}.template.spec",
        id="managed-gcs-storage-env",
    ),
    pytest.param((env("RAY_enable_autoscaler_v2"),), HEAD_ENV, id="autoscaler-v2-env-off"),
    pytest.param(
        (
            put("spec.enableInTreeAutoscaling", True),
            put("spec.autoscalerOptions", {"version": "v2"}),
            env("RAY_enable_autoscaler_v2"),
        ),
        "spec.autoscalerOptions.version",
        id="autoscaler-version-twice",
    ),
    pytest.param(
        (
            put("spec.enableInTreeAutoscaling", True),
            put("spec.autoscalerOptions", {"version": "v2"}),
            put(f"{WORKER}.template.spec.restartPolicy", "Always"),
        ),
        f"{WORKER}.template.spec.restartPolicy",
        id="autoscaler-v2-restart-policy",
    ),
    pytest.param(
        (
            put(
                "spec.autoscalerOptions",
                {"env": [{"name": "KUBERAY_GEN_AUTOSCALER_START_CMD", "value": "x"}]},
            ),
        ),
        "spec.autoscalerOptions.env",
        id="managed-autoscaler-env",
    ),
    pytest.param(
        (put("spec.authOptions", {"enableK8sTokenAuth": True}),),
        "spec.authOptions.enableK8sTokenAuth",
        id="k8s-token-auth-without-token-mode",
    ),
    pytest.param(
        (put("spec.authOptions", {"mode": "token", "enableK8sTokenAuth": True}),),
        "spec.rayVersion",
        id="k8s-token-auth-on-old-ray",
    ),
    pytest.param(
        (
            put("spec.rayVersion", "2.56.0"),
            put(
                "spec.authOptions", {"mode": "token", "enableK8sTokenAuth": True, "secretName": "s"}
            ),
        ),
        "spec.authOptions.secretName",
        id="k8s-token-auth-with-secret",
    ),
    pytest.param(
        (put("spec.networkPolicy", {}),), "spec.networkPolicy", id="unsupported-network-policy"
    ),
]


@pytest.mark.parametrize(("changes", "field"), RAYCLUSTER_RULE_CASES)
def test_raycluster_rules_reach_kubectl_exactly_as_the_controller_reports_them(
    kubectl: Kubectl,
    shared_webhook_namespace: str,
    changes: tuple[Callable[[Manifest], None], ...],
    field: str,
) -> None:
    manifest = Case("", CLUSTER, changes, ()).manifest()
    expected = [str(error) for error in validate_raycluster(manifest)]
    assert any(message.startswith(f"{field}: ") for message in expected), expected

    result = kubectl.run(
        "apply", "-n", shared_webhook_namespace, "-f", "-", input_text=yaml.safe_dump(manifest)
    )

    assert result.returncode != 0
    for message in expected:
        assert message in result.stderr
