"""Whatever schema-valid RayClusters a tenant applies, the operator stays healthy for the others.

Hypothesis generates hostile RayClusters the CRD schema admits: quantities with huge exponents or
thousands of digits, replicas and numOfHosts up to 2^31 - 1, names up to the API server's 253
characters, a dozen groups, odd `rayStartParams`, odd container/env/port names, long
`workersToDelete` lists naming nothing. Each example applies a batch of them (no webhook: only the
schema stands in the way) to one running operator process, then scales a healthy reference
cluster and requires it to converge within a bound, while /healthz is probed every 100 ms
throughout and must always answer within a second. The batch is deleted before the next example.

Hostile Pods name a scheduler that does not exist, so scheduling thousands of them does not
eat the two shared cores; what is tested is the operator's own work.
"""

from __future__ import annotations

import copy
import itertools
import string
import time
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.conftest import Kubectl
from tests.robustness.conftest import StartOperator
from tests.robustness.manifests import (
    HOSTILE_LABEL,
    IMAGE,
    INT32_MAX,
    UNSCHEDULED,
    as_text,
    ray_cluster,
    with_replicas,
)
from tests.robustness.observe import ApiServer, HealthProbe, PodWatch, wait_for

EXAMPLES = 20
HEALTHZ_BOUND = 1.0
CONVERGENCE_BOUND = 10.0
"""Seconds the healthy cluster may take to reach a new worker count (about 1-2 s unloaded)."""

_numbers = itertools.count()

# --- strategies ---------------------------------------------------------------------------------
# Half the clusters are "wild": any value the schema admits, so most of them are refused by the
# operator's own validation (Event + condition). The other half stay within the rules but push
# them: thousands of replicas, a dozen groups, odd `rayStartParams`, long `workersToDelete` lists
# naming nothing, so that the scaling path itself is exercised, not only the validation.

SUFFIXES = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"]
digits = st.one_of(
    st.integers(0, 10**6).map(str),
    st.integers(1, 5000).map(lambda n: "9" * n),
)
exponents = st.one_of(
    st.integers(-400, 400), st.sampled_from([10**7, -(10**7), 10**9, -(10**9), 10**18])
)


@st.composite
def wild_quantities(draw: st.DrawFn) -> str:
    """Any string the CRD's quantity pattern accepts, often a costly or absurd one."""
    sign = draw(st.sampled_from(["", "", "+", "-"]))
    number = draw(digits)
    if draw(st.booleans()):
        number += "." + draw(st.one_of(st.just(""), digits))
    if draw(st.booleans()):
        suffix = draw(st.sampled_from(SUFFIXES))
    else:
        suffix = draw(st.sampled_from(["e", "E"])) + str(draw(exponents))
    return sign + number + suffix


tame_quantities = st.one_of(
    st.tuples(
        st.integers(0, 10**6), st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi"])
    ).map(lambda pair: f"{pair[0]}{pair[1]}"),
    st.sampled_from(
        ["0", "0.5", ".5", "1e3", "1E9", "+1", "999999Ti", "1n", "9223372036854775807"]
    ),
)
odd_text = st.one_of(
    st.text(string.ascii_letters + string.digits + "-_.:/ ", max_size=40),
    st.sampled_from(["", "true", "false", "1e10000000", "-1", "{", '{"a": 1e400}', "$(HOME)"]),
    st.integers(1, 5000).map(lambda n: "x" * n),
)
dns_labels = st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True)
odd_names = st.one_of(
    dns_labels,
    st.sampled_from(["Ray_Worker", "UPPER", "a" * 64, "with space", "x.y", "-lead", "ray-head"]),
)
env_names = st.from_regex(r"[A-Z_][A-Z0-9_]{0,20}", fullmatch=True)


def names(*, wild: bool) -> st.SearchStrategy[str]:
    return odd_names if wild else dns_labels


def container(draw: st.DrawFn, name: str, *, wild: bool) -> dict[str, Any]:
    quantities = wild_quantities() if wild else tame_quantities
    resource_names = st.sampled_from(["cpu", "memory", "nvidia.com/gpu"])
    # Tame containers set limits only: requests above limits would be refused.
    parts = [p for p in ("limits", "requests") if draw(st.booleans())] if wild else ["limits"]
    resources = {part: draw(st.dictionaries(resource_names, quantities)) for part in parts}
    spec: dict[str, Any] = {"name": name, "resources": resources}
    if not wild or draw(st.integers(0, 4)):
        spec["image"] = IMAGE  # else no image at all: a Pod the API server would refuse
    if draw(st.booleans()):
        # The schema keys env by name: duplicates would be refused before the operator saw them.
        keys = draw(st.lists(odd_names if wild else env_names, min_size=1, max_size=3, unique=True))
        spec["env"] = [{"name": key, "value": draw(odd_text)} for key in keys]
    if draw(st.booleans()):
        port = draw(odd_names if wild else st.from_regex(r"[a-z]{1,15}", fullmatch=True))
        spec["ports"] = [{"name": port, "containerPort": draw(st.integers(1, 65535))}]
    return spec


def pod_template(draw: st.DrawFn, *, wild: bool) -> dict[str, Any]:
    container_names = draw(st.lists(names(wild=wild), min_size=1, max_size=3, unique=True))
    return {
        "spec": {
            "schedulerName": UNSCHEDULED,
            "containers": [container(draw, name, wild=wild) for name in container_names],
        }
    }


tame_ray_start_params = st.sampled_from(
    [
        {},
        {"num-cpus": "0"},
        {"block": "true", "dashboard-host": "0.0.0.0"},
        {"num-cpus": "1000000", "num-gpus": "64", "memory": "999999999999"},
        {"resources": '"{\\"x\\": 1000000}"', "metrics-export-port": "8080"},
    ]
)


def ray_start_params(draw: st.DrawFn) -> dict[str, str]:
    keys = st.one_of(
        st.sampled_from(["num-cpus", "num-gpus", "memory", "resources", "block", "port", ""]),
        odd_names,
    )
    return draw(st.dictionaries(keys, odd_text, max_size=4))


def worker_group(draw: st.DrawFn, index: int, name: str, *, wild: bool) -> dict[str, Any]:
    if wild:
        replicas = draw(st.one_of(st.integers(0, 3), st.just(INT32_MAX), st.integers(0, INT32_MAX)))
        hosts = draw(st.sampled_from([1, 1, 2, 1000, INT32_MAX]))
    else:
        # Within the default bound of Pods per cluster: only the first group may be large.
        replicas = draw(st.sampled_from([0, 1, 2, 3, 500, 3000] if index == 0 else [0, 1, 2, 3]))
        hosts = draw(st.sampled_from([1, 1, 2]))
    group: dict[str, Any] = {
        "groupName": name,
        "replicas": replicas,
        "minReplicas": draw(st.sampled_from([0, replicas])),
        "maxReplicas": draw(st.sampled_from([replicas, INT32_MAX])),
        "numOfHosts": hosts,
        "rayStartParams": ray_start_params(draw) if wild else draw(tame_ray_start_params),
        "template": pod_template(draw, wild=wild),
    }
    if wild and draw(st.booleans()):
        group["resources"] = draw(
            st.dictionaries(st.sampled_from(["CPU", "GPU", "x"]), wild_quantities())
        )
    if draw(st.integers(0, 3)) == 0:
        count = draw(st.integers(1, 500))
        group["scaleStrategy"] = {"workersToDelete": [f"nobody-{i}" for i in range(count)]}
    if draw(st.integers(0, 5)) == 0:
        group["suspend"] = True
    return group


@st.composite
def hostile_clusters(draw: st.DrawFn) -> dict[str, Any]:
    wild = draw(st.booleans())
    # Wild names go up to the API server's 253 characters (a DNS subdomain), far too long for
    # the labels and Service names derived from them; tame ones stay within KubeRay's 53.
    stem = f"h{next(_numbers)}"
    padding = ["", "-" + "n" * 60, "-" + "n" * 240] if wild else ["", "-" + "n" * 45]
    name = stem + draw(st.sampled_from(padding))
    groups = draw(st.integers(0, 12))
    group_names = (
        [draw(st.one_of(odd_names, st.just("workers"))) for _ in range(groups)]
        if wild
        else draw(st.lists(dns_labels, min_size=groups, max_size=groups, unique=True))
    )
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "labels": {HOSTILE_LABEL: "true", "wild": str(wild).lower()}},
        "spec": {
            "rayVersion": draw(st.sampled_from(["2.52.0", "", "999.0.0", "x"]))
            if wild
            else "2.52.0",
            "enableInTreeAutoscaling": draw(st.booleans()),
            "headGroupSpec": {
                "rayStartParams": (ray_start_params(draw) if wild else draw(tame_ray_start_params)),
                "template": pod_template(draw, wild=wild),
            },
            "workerGroupSpecs": [
                worker_group(draw, index, group_name, wild=wild)
                for index, group_name in enumerate(group_names)
            ],
        },
    }


# --- the property -------------------------------------------------------------------------------


def test_hostile_clusters_never_stop_health_or_a_healthy_cluster(
    start_operator: StartOperator, kubectl: Kubectl, namespace: str, api_server: ApiServer
) -> None:
    operator = start_operator()
    healthy = ray_cluster("healthy", replicas=1)
    kubectl("apply", "-n", namespace, "-f", "-", input_text=as_text(healthy))
    baseline = seconds_to_converge(api_server, namespace, workers=1)
    figures: dict[str, list[float]] = {"converged": [], "admitted": [], "refused": []}
    refusals: list[str] = []

    with (
        HealthProbe(operator.health_url) as probe,
        PodWatch(api_server, namespace, "ray.io/cluster,ray.io/cluster!=healthy") as hostile_pods,
    ):

        @settings(
            max_examples=EXAMPLES,
            deadline=None,  # bounded by our own waits; a hypothesis deadline would flake on 2 cores
            phases=[Phase.generate],  # no shrinking: each example costs seconds of a live system
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(batch=st.lists(hostile_clusters(), min_size=1, max_size=3))
        def a_batch_of_hostile_clusters(batch: list[dict[str, Any]]) -> None:
            admitted = create_each(api_server, namespace, batch, refusals)
            figures["admitted"].append(admitted)
            figures["refused"].append(len(batch) - admitted)
            workers = 2 if len(figures["converged"]) % 2 == 0 else 1
            scale_healthy(api_server, namespace, healthy, workers)
            figures["converged"].append(seconds_to_converge(api_server, namespace, workers=workers))
            assert not probe.failures, probe.failures[:5]
            assert probe.max_latency < HEALTHZ_BOUND, probe.summary()
            # What `kubectl delete rayclusters -l <label> --wait=false` does, without a process.
            api_server.delete_collection(clusters_path(namespace), selector=HOSTILE_LABEL)

        a_batch_of_hostile_clusters()

    admitted, refused = sum(figures["admitted"]), sum(figures["refused"])
    print(
        f"\n{admitted} hostile clusters admitted by the schema, {refused} refused; "
        f"{hostile_pods.seen()} Pods created for them; healthy "
        f"cluster converged in {baseline:.2f} s alone, at worst {max(figures['converged']):.2f} s"
        f" beside them; healthz {probe.summary()}; the schema's refusals: {refusals[:3]}"
    )
    # They must reach the operator, or the property says little about it.
    assert admitted >= 4 * refused, (admitted, refused, refusals[:3])
    # And some must pass its validation, or only the validation was tested, not the scaling.
    assert hostile_pods.seen() > 0
    assert operator.alive()


def clusters_path(namespace: str) -> str:
    return f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters"


def create_each(
    api: ApiServer, namespace: str, batch: list[dict[str, Any]], refusals: list[str]
) -> int:
    """Create each cluster as `kubectl create` does (one POST, strict field validation); how
    many the API server admitted (the schema may refuse a few)."""
    admitted = 0
    for cluster in batch:
        status, answer = api.create(clusters_path(namespace), copy.deepcopy(cluster))
        admitted += status == 201
        if status != 201:
            refusals.append(f"HTTP {status}: {answer.get('message', answer)}"[:300])
    return admitted


def scale_healthy(api: ApiServer, namespace: str, healthy: dict[str, Any], workers: int) -> None:
    """`healthy` as created, with `workers` replicas (and as many at most): what `kubectl
    apply` of it would leave, as one merge patch of its groups."""
    groups = with_replicas(healthy, workers)["spec"]["workerGroupSpecs"]
    api.merge_patch(
        f"{clusters_path(namespace)}/{healthy['metadata']['name']}",
        {"spec": {"workerGroupSpecs": groups}},
    )


def seconds_to_converge(api: ApiServer, namespace: str, *, workers: int) -> float:
    """Until the healthy cluster has exactly `workers` worker Pods, all ready, status caught up."""
    selector = "ray.io/cluster=healthy,ray.io/node-type=worker"

    def converged() -> bool:
        cluster = api.ray_cluster(namespace, "healthy") or {}
        status = cluster.get("status") or {}
        return (
            status.get("observedGeneration") == cluster["metadata"]["generation"]
            and (status.get("readyWorkerReplicas") or 0) == workers  # omitted when 0
            and api.pod_count(namespace, selector) == workers
        )

    started = time.monotonic()
    wait_for(converged, timeout=CONVERGENCE_BOUND, what=f"the healthy cluster at {workers} workers")
    return time.monotonic() - started
