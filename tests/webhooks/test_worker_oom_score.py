"""When the operator's Pod runs out of memory, the kernel's OOM killer takes a review worker first
(issue 28, finding 5): what a large review expands to in a worker depends on its shape, and a
worker that dies fails one review, while the operator's process carries everything else."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from ray_operator.webhooks.review import validate_review
from ray_operator.webhooks.workers import OOM_SCORE_ADJ, ReviewWorkers

from tests.webhooks.conftest import load_sample
from tests.webhooks.reviews import RAYCLUSTER, pool_pids, review_bytes


def proc_number(pid: int, name: str) -> int:
    return int(Path(f"/proc/{pid}/{name}").read_text())


def test_a_worker_offers_itself_to_the_oom_killer_before_the_operator() -> None:
    workers = ReviewWorkers(processes=1)
    review = review_bytes(load_sample("ray-cluster.mini.yaml"))
    try:
        asyncio.run(workers.answer(review, RAYCLUSTER, validate_review))
        [pid] = pool_pids(workers)
        assert proc_number(pid, "oom_score_adj") == OOM_SCORE_ADJ == 1000
        assert proc_number(pid, "oom_score") > proc_number(os.getpid(), "oom_score")
    finally:
        workers.stop()
