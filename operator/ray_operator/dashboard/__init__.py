"""The Ray dashboard client: the only code that speaks HTTP to Ray (Jobs and Serve REST APIs).

    models    plain data: job submissions, job info, Serve application statuses (pure, no I/O)
    errors    the exception tree every failure is mapped to (drawn in its docstring)
    client    `DashboardClient`: one dashboard, aiohttp, short timeouts, bounded responses
    resolver  where a RayCluster's dashboard is: in-cluster Service DNS, or explicit overrides

This package's `__init__` imports nothing, so pure layers may import `dashboard.models` without
pulling in aiohttp.
"""
