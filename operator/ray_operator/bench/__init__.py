"""Benchmarks of the operator: how fast, how lean, how economical (issue 9). They print figures.

`python -m ray_operator.bench` (`make bench`) starts an embedded control plane (or uses
`--kubeconfig`), runs `ray-operator run` as a separate process and measures it from outside —
RSS and CPU from /proc, requests and reconciles from its /metrics, object arrivals from the
harness's own watches — then prints one table (or JSON) of figures beside their targets:

    M1 convergence  N RayClusters (1 head + 3 workers) → all Pods and head Services exist;
                    the bare-client create ceiling; duplicates; 409s
    M2 scale        PATCH replicas +1/+10/+100 → first / all new Pods; fairness under 0 → 500
    M3 economy      requests by verb to create one cluster; at idle; LISTs
    M4 memory       RSS with 0, N and the largest N clusters; with unrelated Pods around
    M5 CPU          idle CPU share; CPU per watch event during M1
    M6 restart      time to ready and to every cluster reconciled; writes on restart

Modules: `config` (sizes), `cli` (flags, control plane, output), `runner` (the order of a run),
`session` (shared state, operator start, quiet detection), `operator_process` (the process under
test, /proc and /metrics), `watching` (arrival timestamps), `kube` (bulk creates, wiping),
`manifests` (what gets created), `convergence` (M1, M5/event), `scaling` (M2), `steady` (M3, M4,
M5 idle), `restart` (M6), `report` (figures, targets, table/JSON/markdown).

`--compare-with CMD` runs another operator ("theirs", e.g. KubeRay's) and ours through the same
few scenarios, alternating, each on a fresh control plane, measured from outside only:
`compare` (the runs and scenarios), `external` (any operator from a command line with
placeholders; /proc of its process tree), `audit` (one client's requests from the API server's
audit log), `compare_report` (the side-by-side table).
The test suite runs a small-N smoke version (tests/bench/); figures of a full run are in
RESULTS.md next to this file.
"""
