"""The pure parts of measuring a training step (issue 23 §1): warm-up, windows, environment.

``qosmos profile run`` (:func:`qosmos.predictors.profiler.measure_torch`) warms a model up
until its step time is stable, then times several windows of steps and reports the median
rate with its spread, and writes the environment it ran on with every sample. What needs
no GPU and no torch lives here, so it is unit-tested without either.
"""

from __future__ import annotations

import gc
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from qosmos.extender.core.errors import InvalidInput

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
# Environment columns written with every sample (optional when reading) and carried into the
# model database's ``measured_on``: what a profile was measured on.
ENV_COLUMNS = ("device", "device_memory_mib", "driver", "cuda", "torch", "precision", "measured_at")
STAT_COLUMNS = ("rate_spread_pct", "windows")  # per sample: spread of the window rates, how many windows

STABLE_STEPS = 5  # warm-up ends when this many consecutive step times ...
STABLE_SPREAD = 0.05  # ... lie within 5 % of their median of each other ((max - min) / median)
MIN_WINDOW_S = 0.25  # a measured window lasts at least this long (see window_steps)
MAX_WARMUP = 50  # steps; a step time that never settles is measured anyway (and its spread shows it)


def parse_precision(text: str) -> str:
    value = text.strip().lower()
    if value not in PRECISIONS:
        raise InvalidInput("precision", text, f"must be one of {', '.join(PRECISIONS)}")
    return value


def relative_spread(values: Sequence[float]) -> float:
    """(max - min) / median of positive values; 0 for one value."""
    if not values or min(values) <= 0:
        raise InvalidInput("values", list(values), "need one or more positive values")
    return (max(values) - min(values)) / statistics.median(values)


def is_stable(step_times: Sequence[float], k: int = STABLE_STEPS, threshold: float = STABLE_SPREAD) -> bool:
    """Whether the last ``k`` step times agree within ``threshold`` (relative spread)."""
    if k < 2:
        raise InvalidInput("k", k, "must be >= 2")
    return len(step_times) >= k and relative_spread(step_times[-k:]) <= threshold


def warm_up(
    step: Callable[[], float],
    min_steps: int = 3,
    max_steps: int = MAX_WARMUP,
    k: int = STABLE_STEPS,
    threshold: float = STABLE_SPREAD,
) -> tuple[int, bool]:
    """Run ``step()`` (returning its time in s) until at least ``min_steps`` ran and the step time is
    stable, or ``max_steps`` ran. Returns (steps run, stable)."""
    if not 0 <= min_steps <= max_steps:
        raise InvalidInput("warm-up", (min_steps, max_steps), "need 0 <= min_steps <= max_steps")
    times: list[float] = []
    while len(times) < max_steps:
        times.append(step())
        if len(times) >= min_steps and is_stable(times, k, threshold):
            return len(times), True
    return len(times), False


def window_steps(steps: int, probe_s: float, min_window_s: float = MIN_WINDOW_S) -> int:
    """Steps per measured window: at least ``steps``, and enough that a window lasts
    ``min_window_s`` at the step time a probe window of ``steps`` steps took (``probe_s``)."""
    if steps < 1:
        raise InvalidInput("steps", steps, "must be >= 1")
    if probe_s <= 0 or min_window_s <= 0:
        return steps
    return max(steps, math.ceil(steps * min_window_s / probe_s))


def window_rounds(windows: Sequence[Callable[[], float]], rounds: int) -> list[list[float]]:
    """Each window's time over ``rounds`` rounds, one window of every measurement per round.

    Interleaved, a slow drift of the host (another tenant, the CPU's clock) moves every
    measurement alike instead of bending the curve across batch sizes. Python's garbage collector
    is off while the windows run (as ``timeit`` does): a collection lands in some windows and not
    in others, which is noise, not the model; it is back on afterwards, also on an error.
    """
    if rounds < 1:
        raise InvalidInput("windows", rounds, "must be >= 1")
    times: list[list[float]] = [[] for _ in windows]
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            for window, got in zip(windows, times, strict=True):
                got.append(window())
    finally:
        if enabled:
            gc.enable()
    return times


@dataclass(frozen=True, slots=True)
class WindowStats:
    """The rate of one batch size over repeated measured windows."""

    rate: float  # median of the window rates, samples/s
    spread_pct: float  # (max - min) / median of the window rates, in %
    windows: int
    rates: tuple[float, ...]


def window_stats(batch: int, steps: int, window_seconds: Sequence[float]) -> WindowStats:
    """Median rate and spread from the wall (or CUDA-event) time of each window of ``steps`` steps."""
    if batch <= 0 or steps <= 0:
        raise InvalidInput("batch/steps", (batch, steps), "must be > 0")
    if not window_seconds or min(window_seconds) <= 0:
        raise InvalidInput("window_seconds", list(window_seconds), "need one or more positive window times")
    rates = tuple(batch * steps / s for s in window_seconds)
    return WindowStats(statistics.median(rates), 100.0 * relative_spread(rates), len(rates), rates)


def parse_nvidia_smi(text: str) -> dict[str, str]:
    """The first GPU of ``nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits``."""
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            raise InvalidInput("nvidia-smi", line, "expected 'name, memory.total, driver_version'")
        name, memory, driver = parts
        try:
            mib = str(int(float(memory)))
        except ValueError:
            raise InvalidInput("nvidia-smi memory.total", memory, "not a number of MiB") from None
        return {"device": name, "device_memory_mib": mib, "driver": driver}
    raise InvalidInput("nvidia-smi", text, "no GPU listed")


def common_environment(envs: Sequence[Mapping[str, str]]) -> tuple[tuple[str, str], ...]:
    """The environment a set of samples shares, for a profile's ``measured_on``.

    Per ENV_COLUMNS key: its value when the samples agree, the distinct values joined with
    ' | ' when they do not, and for ``measured_at`` the first and last ('first .. last').
    """
    out = []
    for key in ENV_COLUMNS:
        values = sorted({e[key] for e in envs if e.get(key)})
        if not values:
            continue
        if key == "measured_at" and len(values) > 1:
            out.append((key, f"{values[0]} .. {values[-1]}"))
        else:
            out.append((key, " | ".join(values)))
    return tuple(out)
