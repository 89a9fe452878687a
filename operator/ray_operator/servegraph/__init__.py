"""RayServeGraph: a Ray Serve DAG described in protobuf, fetched over authenticated HTTP(S) and
kept deployed as a RayService. Pure names live in `names`; I/O (`fetch`, `events`) in their own
modules, so the pure layers may import `names` without pulling in aiohttp."""
