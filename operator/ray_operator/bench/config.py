"""What one benchmark run measures and how big: the frozen `BenchConfig`.

Defaults are the issue's full sizes (N = 100 and 1000, 200 trials, 600 s idle, 5000 unrelated
Pods); the test suite and development runs pass small ones. The largest N is the "N=1000" of
M2..M6: those metrics run once, on the clusters of the largest M1 run.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """The sizes and knobs of one benchmark run."""

    clusters: tuple[int, ...] = (100, 1000)
    """N of each M1 run (1 head + 3 workers per cluster); M2..M6 use the largest."""
    concurrency: int = 16
    """Creates in flight at once, for the RayClusters of M1 and for the bare-client ceiling."""
    trials: int = 200
    """M2: trials of +1 worker (each on a different cluster when there are enough)."""
    scale_steps: tuple[int, ...] = (1, 10, 100)
    """M2: the scale-ups measured, in workers added per PATCH."""
    large_trials: int = 10
    """M2: trials of each step larger than 1 (step 1 gets `trials`)."""
    trial_gap: float = 0.5
    """M2: pause after each trial, so the next one starts with the operator idle again (the last
    trial's Pods are being scheduled and made Running, and the cluster's status follows)."""
    fairness_replicas: int = 500
    """M2 fairness: cluster A scales from 0 to this many workers while B is scaled by +1."""
    fairness_trials: int = 50
    """M2 fairness: at most this many +1 trials on cluster B while A scales."""
    workers: int = 10
    """M3: workers of the one cluster whose creation is counted request by request."""
    idle_seconds: float = 600.0
    """M3/M5: length of the idle period with the largest N present."""
    unrelated_pods: int = 5000
    """M4: bare Pods (no operator labels) created in another namespace."""
    quiet_seconds: float = 3.0
    """How long the operator must do nothing (no watch event, reconcile or write) to be idle."""
    settle_timeout: float = 600.0
    """Upper bound of any wait for convergence or quiet; a run never hangs longer than this."""
    leader_elect: bool = True
    """Run the operator with leader election, so idle traffic shows the lease renewals."""
    max_concurrent_reconciles: int | None = None
    """Passed to `ray-operator run` when set; else the operator's default."""
    operator_log_level: str = "INFO"
    """The operator's log level (its log goes to a file in the work directory)."""

    def __post_init__(self) -> None:
        if not self.scale_steps or min(self.scale_steps) < 1:
            raise ValueError(f"scale steps must be positive, got {self.scale_steps}")
        if not self.clusters or min(self.clusters) < 1:
            raise ValueError(f"clusters must be positive sizes, got {self.clusters}")
        if self.concurrency < 1 or self.trials < 1 or self.large_trials < 0:
            raise ValueError("concurrency and trials must be at least 1")
        if self.idle_seconds <= 0 or self.quiet_seconds <= 0 or self.trial_gap < 0:
            raise ValueError("idle and quiet periods must be positive")

    @property
    def largest(self) -> int:
        """The N on which M2..M6 run."""
        return max(self.clusters)
