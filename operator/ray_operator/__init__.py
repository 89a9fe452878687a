"""ray-operator: a Kubernetes operator for Ray's ray.io/v1 API (RayCluster, RayJob, RayService,
RayCronJob)."""

# The version's one place: pyproject.toml reads it (dynamic), so do `ray-operator --version`,
# /metrics' ray_operator_build_info and the Makefile (image tag, org.opencontainers.image.version).
__version__ = "0.1.0"
