"""Checks on a replay's run segments that several simulator tests make."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable


def peak_gpus(segments: Iterable[tuple[int, int, float, float, int]]) -> dict[int, int]:
    """Per node, the most GPUs the run segments ((job, node, start, end, GPUs), as ``SimResult.segments``)
    hold at once; a segment that ends at an instant frees its GPUs before one that starts then takes them."""
    held: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for _, node, start, end, gpus in segments:
        held[node] += [(start, gpus), (end, -gpus)]
    peaks: dict[int, int] = {}
    for node, changes in held.items():
        now = peak = 0
        for _, change in sorted(changes):
            now += change
            peak = max(peak, now)
        peaks[node] = peak
    return peaks
