"""The Ray dashboard client: the only code that speaks HTTP to Ray (Jobs and Serve REST APIs).

    client    `DashboardClient`: one dashboard, aiohttp, short timeouts, bounded responses
    resolver  where a RayCluster's dashboard is: in-cluster Service DNS, or explicit overrides

What it exchanges with Ray and how a failure is told are value types of the floor below, so the
pure layers use them without this package: `spec.dashboard_models` (job submissions, job info,
Serve application statuses) and `spec.dashboard_errors` (the exception tree every failure is
mapped to, drawn in its docstring).
"""
