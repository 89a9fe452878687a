"""The fake node's kubelet endpoint under `ray-operator dev`: `kubectl logs`, `exec` and
`port-forward` of the Pods the local Ray agent runs (`server.py` says how; `spdy.py` and
`session.py` speak the wire protocol the API server uses toward a kubelet)."""
