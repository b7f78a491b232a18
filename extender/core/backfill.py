"""Backfilling modes and the relax factor (seed 004 §VI-B; Mu'alem & Feitelson; Ward et al.).

EASY reserves the blocked head's start; relaxed backfilling tolerates a delay of ``factor`` ×
the head's expected wait; adaptive relaxed backfilling scales that factor with the queue length
(formula (1)). The reservation itself is node-aware and lives in the admission cycle
(:mod:`qosmos.extender.core.admission`).
"""

from __future__ import annotations

import math

from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Job

MODES = ("none", "easy", "relaxed", "adaptive")


def remaining_run(predicted: float, job: Job) -> float:
    """Run seconds left of ``job``, predicted (or asked by its user) to run ``predicted`` in all, after its
    finished segments: what a live scheduler knows of a requeued job that resumes (backfilling's estimate,
    a running job's expected end), in the simulator as in the operator."""
    return max(predicted - job.executed, 0.0)


def relax_factor(mode: str, base: float, queue_len: int, max_queue_len: int) -> float:
    """none/easy: 0; relaxed: base; adaptive: base x queue length / max queue length (004 §VI-B (1))."""
    if mode not in MODES:
        raise InvalidInput("backfill", mode, f"expected one of {', '.join(MODES)}")
    if base < 0 or not math.isfinite(base):
        raise InvalidInput("relax_factor", base, "must be a finite number >= 0")
    if mode in ("none", "easy"):
        return 0.0
    if mode == "relaxed":
        return base
    if max_queue_len <= 0:
        return 0.0
    return base * min(queue_len, max_queue_len) / max_queue_len
