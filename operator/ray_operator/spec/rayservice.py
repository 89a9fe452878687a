"""A RayService's spec, read once: the Serve config parsed and the hashes its clusters carry."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class SpecReading:
    """What a RayService's spec says, worked out once per spec rather than once per reconcile:
    parsing `serveConfigV2` (PyYAML, several times: validation, the config, its hash) costs
    seconds of event loop for a config of a megabyte, and a RayService requeues every 2 s."""

    digest: str
    """sha256 of the name, annotations and spec this reading was made from."""
    problem: str | None
    """What makes the spec unusable (None when it is fine)."""
    serve_config: Mapping[str, Any]
    """`serveConfigV2` parsed: the body of the PUT (empty when there is a problem or none)."""
    serve_config_hash: str
    """`builders.rayservice.serve_config_hash` of it ("" when there is a problem)."""
    cluster_config_hash: str
    """`builders.rayservice.cluster_config_hash`: the hash its clusters carry ("" when there is a
    problem)."""
