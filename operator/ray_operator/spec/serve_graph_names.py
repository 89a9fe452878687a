"""Names of the RayServeGraph API: its group, annotations, labels, conditions and reasons.

Identities only, no I/O: builders, validation, status, the controller, the webhook and the event
endpoint all agree through this module.
"""

from __future__ import annotations

SERVE_GRAPH_GROUP = "ray-operator.io"
"""Our API group; KubeRay owns `ray.io`, so a kind of our own lives elsewhere."""
SERVE_GRAPH_VERSION = "v1alpha1"

GRAPH_LABEL = f"{SERVE_GRAPH_GROUP}/serve-graph"
"""On what a RayServeGraph creates (its RayService, its builder ConfigMap): the graph's name."""

REFRESH_REQUESTED_ANNOTATION = f"{SERVE_GRAPH_GROUP}/refresh-requested-at"
"""Set by the event endpoint (RFC 3339, microseconds, UTC) to ask for a fetch; the controller
fetches once when it is newer than `status.lastRefreshHandled`."""

SECRET_HOSTS_ANNOTATION = f"{SERVE_GRAPH_GROUP}/serve-graph-hosts"
"""On a token Secret: the comma-separated origins it may be sent to, `host[:port]` for https
and `http://host[:port]` for clear text (`spec.fetch_origins`). A Secret without it is never
sent anywhere (no confused deputy)."""
SECRET_GRAPHS_ANNOTATION = f"{SERVE_GRAPH_GROUP}/serve-graphs"
"""On a token Secret, optional: the comma-separated RayServeGraph names allowed to use it."""

BUILDER_MODULE = "ray_operator_serve_graph"
"""The module the Ray containers import to build the DAG (shipped in a ConfigMap)."""
BUILDER_IMPORT_PATH = f"{BUILDER_MODULE}:build"
BUILDER_MOUNT_PATH = "/home/ray/.ray-operator/serve-graph"
BUILDER_VOLUME = "ray-operator-serve-graph"
GRAPH_FORMAT = f"{SERVE_GRAPH_GROUP}/{SERVE_GRAPH_VERSION}"
MAX_DOCUMENT_BYTES = 256 * 1024
"""The largest graph document accepted (its compiled Serve config must fit in a RayService)."""
"""`args.format` of the compiled application: which builder schema the args follow."""

# Condition types.
FETCHED = "Fetched"
PARSED = "Parsed"
DEPLOYED = "Deployed"
READY = "Ready"
