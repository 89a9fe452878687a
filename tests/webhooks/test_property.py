"""Whatever the API server sends, the webhooks answer with a well-formed allow or deny, quickly.

Hypothesis generates AdmissionReviews around the samples: wrong types anywhere, huge strings,
duplicate groups, min above max, random operations, old objects being deleted, kinds sent to the
wrong endpoint. They go over real HTTP to the real aiohttp application on loopback; every answer
must be a 200 carrying an AdmissionReview for the same uid, with a boolean `allowed`, a Status on
denial, and (from the mutating endpoints) a JSONPatch that applies to the object.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from ray_operator.webhooks.handlers import MAX_REVIEW_BYTES, admission_application

from tests.webhooks.conftest import load_sample
from tests.webhooks.server import ApplicationThread

ANSWER_TIMEOUT = 5.0  # the webhook configurations' timeoutSeconds
BASES = {
    "RayCluster": load_sample("ray-cluster.mini.yaml"),
    "RayJob": load_sample("ray-job.sample.yaml"),
    "RayService": load_sample("ray-service.sample.yaml", "RayService"),
}
INTERESTING_PATHS = {
    "RayCluster": [
        "metadata.name",
        "spec.rayVersion",
        "spec.enableInTreeAutoscaling",
        "spec.suspend",
        "spec.headGroupSpec",
        "spec.headGroupSpec.rayStartParams",
        "spec.headGroupSpec.template.spec.containers",
        "spec.workerGroupSpecs",
        "spec.workerGroupSpecs[0].minReplicas",
        "spec.workerGroupSpecs[0].maxReplicas",
        "spec.workerGroupSpecs[0].replicas",
        "spec.workerGroupSpecs[0].groupName",
        "spec.workerGroupSpecs[0].suspend",
        "spec.workerGroupSpecs[0].labels",
        "spec.gcsFaultToleranceOptions",
        "spec.authOptions",
        "spec.autoscalerOptions",
        "spec.upgradeStrategy",
        "metadata.annotations",
        "spec",
    ],
    "RayJob": [
        "metadata.name",
        "spec.entrypoint",
        "spec.submissionMode",
        "spec.clusterSelector",
        "spec.rayClusterSpec",
        "spec.rayClusterSpec.workerGroupSpecs[0].minReplicas",
        "spec.backoffLimit",
        "spec.suspend",
        "spec.shutdownAfterJobFinishes",
        "spec.ttlSecondsAfterFinished",
        "spec.deletionStrategy",
        "spec.runtimeEnvYAML",
        "spec.submitterPodTemplate",
        "spec.submitterConfig",
        "spec.activeDeadlineSeconds",
        "spec",
    ],
    "RayService": [
        "metadata.name",
        "metadata.annotations",
        "spec.serveConfigV2",
        "spec.upgradeStrategy",
        "spec.upgradeStrategy.type",
        "spec.rayClusterDeletionDelaySeconds",
        "spec.rayClusterConfig",
        "spec.rayClusterConfig.workerGroupSpecs[0].maxReplicas",
        "spec.rayClusterConfig.headGroupSpec.headService",
        "spec",
    ],
}

huge_strings = st.sampled_from([10_000, 300_000, 1_000_000]).map(lambda n: "x" * n)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-3, 10),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
serve_configs = st.one_of(
    st.text(max_size=200),
    st.lists(
        st.fixed_dictionaries(
            {
                "name": st.sampled_from(["a", "b", "", "a"]),
                "route_prefix": st.sampled_from(["/", "/a", "a", "/a/", None]),
                "import_path": st.sampled_from(["m:app", "m.app", "app", ":x", "m::x"]),
            },
            optional={
                "deployments": st.lists(
                    st.dictionaries(st.sampled_from(["name", "num_replicas"]), json_values),
                    max_size=3,
                )
            },
        ),
        max_size=4,
    ).map(lambda apps: json.dumps({"applications": apps})),
)


@st.composite
def mutated_objects(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    obj = copy.deepcopy(BASES[kind])
    for _ in range(draw(st.integers(0, 4))):
        path = draw(st.sampled_from(INTERESTING_PATHS[kind]))
        if path == "spec.serveConfigV2":
            value: Any = draw(serve_configs)
        elif path.endswith(("Replicas", "replicas")):
            value = draw(st.one_of(st.integers(-5, 10), json_values))
        elif draw(st.integers(0, 19)) == 0:
            value = draw(huge_strings)
        else:
            value = draw(json_values)
        _set(obj, path, value)
    if draw(st.booleans()) and kind != "RayService":
        _duplicate_first_group(obj)
    return obj


def _set(obj: Any, path: str, value: Any) -> None:
    steps: list[Any] = [int(s) if s.isdigit() else s for s in path.replace("[0]", ".0").split(".")]
    node = obj
    for step in steps[:-1]:
        child = _child(node, step)
        if not isinstance(child, dict | list):
            return  # an earlier change replaced the parent: nothing to set
        node = child
    if isinstance(node, dict):
        node[steps[-1]] = value


def _child(node: Any, step: Any) -> Any:
    if isinstance(node, list) and isinstance(step, int):
        return node[step] if step < len(node) else None
    return node.get(step) if isinstance(node, dict) else None


def _duplicate_first_group(obj: dict[str, Any]) -> None:
    spec = obj.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("rayClusterSpec"), dict):
        spec = spec["rayClusterSpec"]
    groups = spec.get("workerGroupSpecs") if isinstance(spec, dict) else None
    if isinstance(groups, list) and groups:
        groups.append(copy.deepcopy(groups[0]))


@st.composite
def reviews(draw: st.DrawFn) -> tuple[str, str, dict[str, Any]]:
    kind = draw(st.sampled_from(sorted(BASES)))
    endpoint_kind = kind if draw(st.integers(0, 9)) else draw(st.sampled_from(sorted(BASES)))
    verb = draw(st.sampled_from(["validate", "mutate"]))
    operation = draw(st.sampled_from(["CREATE", "UPDATE", "UPDATE", "DELETE", "CONNECT"]))
    request: dict[str, Any] = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "ray.io", "version": "v1", "kind": kind},
        "resource": {"group": "ray.io", "version": "v1", "resource": kind.lower() + "s"},
        "operation": operation,
        "namespace": "default",
        "object": draw(mutated_objects(kind)) if draw(st.integers(0, 19)) else draw(json_values),
    }
    if operation == "UPDATE":
        old = draw(mutated_objects(kind))
        if draw(st.booleans()):
            # A running RayJob: its UPDATE rules look at the old spec, whatever its shape.
            old["status"] = {"jobDeploymentStatus": draw(st.sampled_from(["Running", "New"]))}
            if draw(st.integers(0, 3)) == 0:
                old["spec"] = draw(json_values)
        if draw(st.integers(0, 4)) == 0:
            old["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        request["oldObject"] = old if draw(st.integers(0, 19)) else draw(json_values)
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    return verb, endpoint_kind.lower(), review


class Client:
    """Keep-alive HTTP to the server; a fresh connection after the server closed one."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._connection = self._connect()

    def _connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self._port, timeout=ANSWER_TIMEOUT)

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        """Status and body; status 0 when the server closed the connection instead (413 case)."""
        try:
            self._connection.request(
                "POST", path, body=body, headers={"Content-Type": "application/json"}
            )
            response = self._connection.getresponse()
            status, answer = response.status, response.read()
        except (ConnectionError, http.client.HTTPException):
            status, answer = 0, b""
        if status in (0, 413):
            # aiohttp closes a connection whose body it refused: start a new one.
            self._connection.close()
            self._connection = self._connect()
        return status, answer

    def close(self) -> None:
        self._connection.close()


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with ApplicationThread(admission_application) as server:
        client = Client(server.port)
        yield client
        client.close()


@settings(
    max_examples=1000,
    deadline=None,  # the answer-time limit is asserted per request, on the HTTP round trip
    phases=(Phase.explicit, Phase.reuse, Phase.generate),  # no shrinking: it could run away
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
    database=None,
)
@given(reviews())
def test_every_review_gets_a_well_formed_answer_in_time(
    client: Client, drawn: tuple[str, str, dict[str, Any]]
) -> None:
    verb, kind, review = drawn
    request_body = json.dumps(review).encode()
    started = time.monotonic()
    status, body = client.post(f"/{verb}-ray-io-v1-{kind}", request_body)
    assert time.monotonic() - started < ANSWER_TIMEOUT
    if len(request_body) > MAX_REVIEW_BYTES:
        # The API server never sends that much: refused unread (413, or the connection closed
        # while the client was still sending).
        assert status in (0, 413)
        return
    assert status == 200, body[:500]
    answer = json.loads(body)
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == review["request"]["uid"]
    assert isinstance(response["allowed"], bool)
    if not response["allowed"]:
        assert isinstance(response["status"]["code"], int)
        assert 0 < len(response["status"]["message"]) < 200_000
        assert response["status"]["reason"] != "InternalError", response["status"]["message"]
    if "patch" in response:
        assert verb == "mutate"
        assert response["patchType"] == "JSONPatch"
        _apply_patch(review["request"]["object"], json.loads(base64.b64decode(response["patch"])))


def _apply_patch(document: Any, patch: list[dict[str, Any]]) -> None:
    """Just enough RFC 6902 to prove the patch applies: every parent exists."""
    for operation in patch:
        steps = [s.replace("~1", "/").replace("~0", "~") for s in operation["path"].split("/")[1:]]
        node = document
        for step in steps[:-1]:
            node = node[int(step)] if isinstance(node, list) else node[step]
        assert operation["op"] in ("add", "replace", "remove")
        if operation["op"] == "remove":
            del node[steps[-1]]
        else:
            node[steps[-1]] = operation["value"]


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b"[]",
        b'{"kind": "AdmissionReview"}',
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}',
        b"[" * 100_000,
    ],
)
def test_a_body_that_is_no_admission_review_gets_a_400(client: Client, body: bytes) -> None:
    status, _ = client.post("/validate-ray-io-v1-raycluster", body)
    assert status == 400


def test_a_body_over_the_cap_is_refused_before_it_is_parsed(
    client: Client,
) -> None:
    status, _ = client.post("/mutate-ray-io-v1-rayjob", b" " * (MAX_REVIEW_BYTES + 1))
    assert status in (0, 413)
    # and the server keeps answering
    status, _ = client.post("/mutate-ray-io-v1-rayjob", b"{}")
    assert status == 400
