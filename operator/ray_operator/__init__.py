"""ray-operator: a Kubernetes operator for Ray's ray.io/v1 API (RayCluster, RayJob, RayService,
RayCronJob)."""

__version__ = "0.1.0"
