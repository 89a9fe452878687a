"""The floor under the pure layers: what a spec says, and the Kubernetes and Ray value types.

KubeRay's labels, annotations, env vars and ports (`kuberay_names`), reading a RayCluster's spec
(`raycluster`), quantities, the names and hashes KubeRay gives the objects it owns, Go's JSON
encoding, replica arithmetic, what a Pod's status says, and the plain data exchanged with Ray's
dashboard and the serve-graph fetcher, and the memo of what was computed from one version of an
object (`version_memo`). Builders, validation, status and the runtime all stand on it; it imports
none of them, does no I/O, and keeps no module state (a memo is an object its controller owns).
This `__init__` imports nothing, so importing one module here loads only what that module needs.
"""
