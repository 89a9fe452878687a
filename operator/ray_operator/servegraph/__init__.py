"""RayServeGraph: a Ray Serve DAG described in protobuf, fetched over authenticated HTTP(S) and
kept deployed as a RayService. The pure names, the fetch's values and the rules that need no
network live on the floor below (`spec.serve_graph_names`, `spec.fetch_types`, `spec.fetch_urls`,
`spec.fetch_origins`, `spec.fetch_addresses`), so the pure layers use them without pulling in
aiohttp; the I/O is here: the fetch (`fetch`, reading its answer in `fetch_responses`, names
resolved by `resolution`) and the event endpoint (`events`, with `event_requests`,
`event_coalescing` and `signatures`)."""
