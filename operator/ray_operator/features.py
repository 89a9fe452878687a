"""KubeRay's feature gates (`--feature-gates=RayCronJob=true,...`): the same names, so a KubeRay
user's flags carry over, and what each one means here.

A gate is one of:
- honoured: turning it on or off changes what this operator does (`RayCronJob`: the RayCronJob
  controller and its admission; `RayServiceIncrementalUpgrade`: RayService upgrades through the
  Gateway API);
- always on: KubeRay's beta gates whose behaviour this operator always has (status conditions,
  deletion policy, multi-host indexing); turning one off is refused, since the operator cannot
  behave otherwise;
- not yet implemented: KubeRay's alpha gates whose fields the webhook refuses today; turning one
  on is refused by name instead of being silently ignored.

Pure: parsing and lookups only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Final


class GateSupport(Enum):
    HONOURED = "honoured"
    ALWAYS_ON = "always on"
    NOT_IMPLEMENTED = "not implemented"


@dataclass(frozen=True)
class Gate:
    """One of KubeRay's feature gates, with this operator's default and support."""

    name: str
    default: bool
    support: GateSupport


RAY_CRON_JOB: Final = "RayCronJob"
RAY_CLUSTER_NETWORK_POLICY: Final = "RayClusterNetworkPolicy"
RAY_CLUSTER_MTLS: Final = "RayClusterMTLS"
RAY_CLUSTER_HISTORY_SERVER: Final = "RayClusterHistoryServer"
RAY_SERVICE_INCREMENTAL_UPGRADE: Final = "RayServiceIncrementalUpgrade"
SIDECAR_SUBMITTER_RESTART: Final = "SidecarSubmitterRestart"

GATES: Final[Mapping[str, Gate]] = {
    gate.name: gate
    for gate in (
        Gate("RayClusterStatusConditions", True, GateSupport.ALWAYS_ON),
        Gate("RayJobDeletionPolicy", True, GateSupport.ALWAYS_ON),
        Gate("RayMultiHostIndexing", True, GateSupport.ALWAYS_ON),
        # KubeRay's default is off (alpha); RayCronJob is a kind users ask for, so it is on here.
        Gate(RAY_CRON_JOB, True, GateSupport.HONOURED),
        # KubeRay's beta gate, on by default as there: Gateway API traffic shifting.
        Gate(RAY_SERVICE_INCREMENTAL_UPGRADE, True, GateSupport.HONOURED),
        Gate(SIDECAR_SUBMITTER_RESTART, False, GateSupport.HONOURED),
        Gate(RAY_CLUSTER_NETWORK_POLICY, False, GateSupport.HONOURED),
        # The embedded RocksDB GCS backend is accepted without a gate (see validation).
        Gate("GCSFaultToleranceEmbeddedStorage", True, GateSupport.ALWAYS_ON),
        Gate(RAY_CLUSTER_MTLS, False, GateSupport.HONOURED),
        Gate(RAY_CLUSTER_HISTORY_SERVER, False, GateSupport.HONOURED),
        Gate("KubernetesWAS", False, GateSupport.NOT_IMPLEMENTED),
    )
}

MAX_FLAG_LENGTH: Final = 4096


class InvalidFeatureGatesError(ValueError):
    """A `--feature-gates` value this operator cannot run with; the message names the gate."""


@dataclass(frozen=True)
class FeatureGates:
    """Which gates are on: the defaults, overridden by `--feature-gates`."""

    overrides: Mapping[str, bool] = field(default_factory=dict)

    def enabled(self, name: str) -> bool:
        """Whether gate `name` (one of `GATES`) is on."""
        return self.overrides.get(name, GATES[name].default)

    def merged(self, later: FeatureGates) -> FeatureGates:
        """These gates with `later`'s settings on top (a repeated `--feature-gates`)."""
        return FeatureGates({**self.overrides, **later.overrides})


def gate_off_detail(name: str) -> str:
    """Why a field behind gate `name` is refused while the gate is off, and what turns it on."""
    gate = GATES[name]
    if gate.support is GateSupport.NOT_IMPLEMENTED:
        return f"not implemented by this operator yet (KubeRay's {name} feature gate)"
    return (
        f"the {name} feature gate is off in this operator (--feature-gates={name}=true turns it on)"
    )


def parse_feature_gates(text: str) -> FeatureGates:
    """`Name=true,Other=false` (KubeRay's form; spaces around items allowed); every problem is
    named in one InvalidFeatureGatesError."""
    if len(text) > MAX_FLAG_LENGTH:
        raise InvalidFeatureGatesError(
            f"--feature-gates is longer than {MAX_FLAG_LENGTH} characters"
        )
    overrides: dict[str, bool] = {}
    problems: list[str] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, equals, raw = (piece.strip() for piece in item.partition("="))
        value = {"true": True, "false": False}.get(raw.lower())
        if not equals or value is None:
            problems.append(f"{item[:80]!r}: expected <gate>=true or <gate>=false")
        elif name not in GATES:
            problems.append(f"unknown feature gate {name[:80]!r} (known: {', '.join(GATES)})")
        else:
            problems.extend(_unsupported(GATES[name], value))
            overrides[name] = value
    if problems:
        raise InvalidFeatureGatesError("; ".join(problems))
    return FeatureGates(overrides)


def _unsupported(gate: Gate, value: bool) -> list[str]:
    if gate.support is GateSupport.ALWAYS_ON and not value:
        return [f"{gate.name}=false: this operator always behaves as KubeRay with the gate on"]
    if gate.support is GateSupport.NOT_IMPLEMENTED and value:
        return [f"{gate.name}=true: not implemented by this operator yet"]
    return []
