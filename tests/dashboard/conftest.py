"""The dashboard client's tests talk to a real Ray head (see tests/ray_head.py): the `ray_head`
fixture is the suite's shared one."""

from __future__ import annotations

from tests.ray_head import ray_head

__all__ = ["ray_head"]  # a fixture, found by pytest through this import
