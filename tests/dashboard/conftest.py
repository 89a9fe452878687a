"""The dashboard client's tests talk to a real Ray head (see tests/ray_head.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ray_head import RayHead, acquire_shared_head, release_shared_head


@pytest.fixture(scope="session")
def ray_head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayHead]:
    """The run's real Ray head on 127.0.0.1 (started on first use)."""
    head = acquire_shared_head(tmp_path_factory.mktemp("ray-head"))
    try:
        yield head
    finally:
        release_shared_head()
