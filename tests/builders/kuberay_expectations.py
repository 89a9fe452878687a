"""What KubeRay builds for each of its RayCluster samples, written out (derived from KubeRay's rules
in common/pod.go and service.go), not computed: the `ray start` lines byte for byte, including
KubeRay's double spaces, and the head Service's type and ports."""

from __future__ import annotations

_BASE = "--block  --dashboard-agent-listen-port=52365"
_HEAD = f"ray start --head  {_BASE}  --dashboard-host=0.0.0.0"


def _worker(cluster: str, flags: str) -> str:
    return (
        f"ray start  --address={cluster}-head-svc.default.svc.cluster.local:6379  {_BASE}  {flags} "
    )


_SMALL_WORKER = "--memory=1073741824  --metrics-export-port=8080  --num-cpus=1"
_STANDARD_HEAD = f"{_HEAD}  --memory=5368709120  --metrics-export-port=8080  --num-cpus=1 "
_AUTOSCALED_HEAD = (
    f"{_HEAD}  --memory=5368709120  --metrics-export-port=8080  --no-monitor  --num-cpus=0 "
)


# File → (head `ray start` line, {group: worker `ray start` line}).
EXPECTED_RAY_START: dict[str, tuple[str, dict[str, str]]] = {
    "ray-cluster-label-selector.yaml": (
        f"{_HEAD}  --labels=ray.io/region=us-central2  --memory=5368709120"
        "  --metrics-export-port=8080  --no-monitor  --num-cpus=0 ",
        {
            "large-cpu-group": _worker(
                "ray-label-cluster",
                "--labels=cpu-family=intel,ray.io/market-type=on-demand  --memory=4294967296"
                "  --metrics-export-port=8080  --num-cpus=2",
            ),
            "accelerator-group": _worker(
                "ray-label-cluster",
                "--labels=ray.io/accelerator-type=A100,ray.io/market-type=on-demand,ray.io/region=us-central2"
                "  --memory=1073741824  --metrics-export-port=8080  --num-cpus=1  --num-gpus=1",
            ),
            "spot-group": _worker(
                "ray-label-cluster",
                "--labels=cpu-family=amd,ray.io/market-type=spot  --memory=1073741824"
                "  --metrics-export-port=8080  --num-cpus=1",
            ),
        },
    ),
    "ray-cluster.auth.yaml": (
        f"{_HEAD}  --memory=8589934592  --metrics-export-port=8080  --no-monitor  --num-cpus=4 ",
        {
            "workergroup": _worker(
                "ray-cluster-with-auth",
                "--memory=8589934592  --metrics-export-port=8080  --num-cpus=4",
            )
        },
    ),
    "ray-cluster.autoscaler-v2.yaml": (
        _AUTOSCALED_HEAD,
        {"small-group": _worker("raycluster-autoscaler", _SMALL_WORKER)},
    ),
    "ray-cluster.autoscaler.yaml": (
        _AUTOSCALED_HEAD,
        {"small-group": _worker("raycluster-autoscaler", _SMALL_WORKER)},
    ),
    "ray-cluster.complete.yaml": (
        _STANDARD_HEAD,
        {"small-group": _worker("raycluster-complete", _SMALL_WORKER)},
    ),
    "ray-cluster.custom-head-service.yaml": (_STANDARD_HEAD, {}),
    "ray-cluster.embedded-gcs-ft.yaml": (
        f"{_HEAD}  --memory=5368709120  --metrics-export-port=8080  --num-cpus=0 ",
        {"small-group": _worker("raycluster-embedded-gcs-ft", _SMALL_WORKER)},
    ),
    "ray-cluster.external-redis.yaml": (
        f"{_HEAD}  --memory=5368709120  --metrics-export-port=8080  --num-cpus=0"
        "  --redis-password=$REDIS_PASSWORD ",
        {"small-group": _worker("raycluster-external-redis", _SMALL_WORKER)},
    ),
    "ray-cluster.head-command.yaml": (_STANDARD_HEAD, {}),
    "ray-cluster.overwrite-command.yaml": (
        _STANDARD_HEAD,
        {"small-group": _worker("raycluster-overwrite-cmd", _SMALL_WORKER)},
    ),
    "ray-cluster.py-spy.yaml": (_STANDARD_HEAD, {}),
    "ray-cluster.sample.yaml": (
        _STANDARD_HEAD,
        {"workergroup": _worker("raycluster-kuberay", _SMALL_WORKER)},
    ),
    "ray-cluster.separate-ingress.yaml": (_STANDARD_HEAD, {}),
    "ray-cluster.tls.yaml": (
        _STANDARD_HEAD,
        {"small-group": _worker("raycluster-tls", _SMALL_WORKER)},
    ),
    "ray-cluster.tpu-v4-multihost.yaml": (
        f"{_HEAD}  --memory=40000000000  --metrics-export-port=8080  --num-cpus=8 ",
        {
            "tpu-group": _worker(
                "raycluster-tpu-v4-multihost",
                "--memory=40000000000  --metrics-export-port=8080  --num-cpus=1"
                "  --resources='{\"TPU\":4}'",
            )
        },
    ),
    "ray-cluster.uv.yaml": (_STANDARD_HEAD, {}),
}
_DEFAULT_NAMED_PORTS = {"client": 10001, "dashboard": 8265, "gcs-server": 6379, "metrics": 8080}
_GCS_NAMED_PORTS = {"client": 10001, "dashboard": 8265, "gcs": 6379, "metrics": 8080}


# File → (head Service type, port name → number).
EXPECTED_HEAD_SERVICE: dict[str, tuple[str, dict[str, int]]] = {
    "ray-cluster-label-selector.yaml": ("ClusterIP", _GCS_NAMED_PORTS),
    "ray-cluster.auth.yaml": ("ClusterIP", _DEFAULT_NAMED_PORTS),
    "ray-cluster.autoscaler-v2.yaml": ("ClusterIP", _GCS_NAMED_PORTS),
    "ray-cluster.autoscaler.yaml": ("ClusterIP", _GCS_NAMED_PORTS),
    "ray-cluster.complete.yaml": ("ClusterIP", _GCS_NAMED_PORTS),
    "ray-cluster.custom-head-service.yaml": (
        "LoadBalancer",
        {"custom-ray-head-service-port": 12345, **_DEFAULT_NAMED_PORTS},
    ),
    "ray-cluster.embedded-gcs-ft.yaml": ("ClusterIP", _GCS_NAMED_PORTS),
    "ray-cluster.external-redis.yaml": (
        "ClusterIP",
        {"client": 10001, "dashboard": 8265, "metrics": 8080, "redis": 6379},
    ),
    "ray-cluster.head-command.yaml": ("ClusterIP", _DEFAULT_NAMED_PORTS),
    "ray-cluster.overwrite-command.yaml": ("ClusterIP", _DEFAULT_NAMED_PORTS),
    "ray-cluster.py-spy.yaml": ("ClusterIP", _DEFAULT_NAMED_PORTS),
    "ray-cluster.sample.yaml": ("ClusterIP", _DEFAULT_NAMED_PORTS),
    "ray-cluster.separate-ingress.yaml": ("NodePort", _DEFAULT_NAMED_PORTS),
    "ray-cluster.tls.yaml": ("ClusterIP", _GCS_NAMED_PORTS),
    "ray-cluster.tpu-v4-multihost.yaml": (
        "ClusterIP",
        {**_GCS_NAMED_PORTS, "mxla": 8081, "serve": 8000, "slicebuilder": 8471},
    ),
    "ray-cluster.uv.yaml": ("ClusterIP", _DEFAULT_NAMED_PORTS),
}
