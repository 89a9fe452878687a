"""Migration from Ray's legacy Python operator (`cluster.ray.io/v1` RayClusters) to `ray.io/v1`.

`conversion` is the pure mapping (a legacy object in, a RayCluster manifest and warnings out);
`convert_command` is `ray-operator convert`, the YAML and file handling around it.
"""
