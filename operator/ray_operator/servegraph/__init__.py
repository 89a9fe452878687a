"""RayServeGraph: a Ray Serve DAG described in protobuf, fetched over authenticated HTTP(S) and
kept deployed as a RayService. The pure names and the address policy live on the floor below
(`spec.serve_graph_names`, `spec.fetch_addresses`), so the pure layers use them without pulling in
aiohttp; the I/O (`fetch`, `events`) is here."""
