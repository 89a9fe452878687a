"""Loopback ports of a local control plane: one per component, chosen free together."""

from __future__ import annotations

import dataclasses
import socket


@dataclasses.dataclass(frozen=True)
class Ports:
    """Loopback ports of one control plane."""

    etcd_client: int
    etcd_peer: int
    apiserver: int
    scheduler: int
    kwok: int
    # Default for a state.json written before the controller-manager joined.
    controller_manager: int = 0
    # The fake node's kubelet endpoint (served by `ray-operator dev`'s local Ray, if it runs).
    kubelet: int = 0


def pick_ports() -> Ports:
    """Free loopback ports for every component."""
    return Ports(*reserve_ports(len(dataclasses.fields(Ports)), host="127.0.0.1"))


def reserve_ports(count: int, *, host: str) -> list[int]:
    """`count` distinct ports free on `host` right now, held open together while chosen so no
    two are the same (another program may still take one before its user binds it)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))  # never listened on: bound only to learn a free port
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
