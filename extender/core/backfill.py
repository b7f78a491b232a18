"""EASY, relaxed and adaptive relaxed backfilling (seed 004 §VI-B; Mu'alem & Feitelson; Ward et al.).

When the head of a queue cannot start, it gets a reservation at the shadow time: the
earliest moment enough GPUs are released by running jobs. Later jobs may start now if
they finish by the reservation (plus a relaxation slack) or only use GPUs the head will
not need. Relaxed backfilling tolerates a delay of ``factor`` x the head's expected wait;
adaptive relaxed backfilling scales that factor with the queue length (formula (1)).
Counts only: node fit is the placer's job, done by the caller for each admitted job.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from qosmos.extender.core.errors import InvalidInput

MODES = ("none", "easy", "relaxed", "adaptive")


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


def shadow_time(need: int, free_now: int, releases: Iterable[tuple[float, int]], now: float) -> tuple[float, int]:
    """Earliest time at least ``need`` GPUs are free, and how many are free then.

    ``releases`` are (expected end, GPUs) of running jobs. Returns (inf, free) when even
    every release is not enough (the head can never start with what is running).
    """
    if need < 0 or free_now < 0:
        raise InvalidInput("gpus", (need, free_now), "must be >= 0")
    free = free_now
    if free >= need:
        return now, free
    for end, gpus in sorted(releases):
        free += gpus
        if free >= need:
            return max(end, now), free
    return math.inf, free


@dataclass(slots=True)
class Backfiller:
    """One backfilling pass behind a blocked head job.

    ``admit`` answers whether a candidate that fits now may start, and books the GPUs it
    takes from the head's spare ("extra") GPUs when it would still run at the reservation.
    """

    reservation: float
    extra: int
    limit: float

    @classmethod
    def plan(
        cls,
        head_gpus: int,
        head_submit: float,
        free_now: int,
        releases: Iterable[tuple[float, int]],
        now: float,
        factor: float = 0.0,
    ) -> Backfiller:
        shadow, free_then = shadow_time(head_gpus, free_now, releases, now)
        slack = factor * max(shadow - head_submit, 0.0) if math.isfinite(shadow) else 0.0
        return cls(reservation=shadow, extra=free_then - head_gpus, limit=shadow + slack)

    def admit(self, gpus: int, expected_end: float) -> bool:
        if expected_end <= self.limit:
            return True
        if gpus <= self.extra:
            self.extra -= gpus
            return True
        return False

    def violated(self, head_start: float) -> bool:
        """A backfill violation: the head started later than its (unrelaxed) reservation."""
        return head_start > self.reservation
