"""Pure plans of the writes that bring what a cluster has back to what its spec asks for.

`scaling`: which Pods to create and delete (`plan_scaling` → `ScalingPlan`); `kuberay_version`:
which head Pods another KubeRay version stamped get a merge patch instead of a recreate; `drift`:
the merge patch that repairs an owned object someone edited. A controller reads the cache, asks
these, and performs what they return (`controllers/scaling_executor.py`,
`controllers/owned_objects.py`). Beside `status/`, which computes what is reported; no I/O. This
`__init__` imports nothing, so importing one module here loads only what that module needs.
"""
