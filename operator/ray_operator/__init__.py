"""ray-operator: a Kubernetes operator for Ray's ray.io/v1 API (RayCluster, RayJob, RayService)."""

__version__ = "0.1.0"
