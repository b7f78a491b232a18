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
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from qosmos.extender.core.errors import InvalidInput

T = TypeVar("T")

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
# Environment columns written with every sample (optional when reading) and carried into the
# model database's ``measured_on``: what a profile was measured on.
ENV_COLUMNS = ("device", "device_memory_mib", "driver", "cuda", "torch", "precision", "host_cpus", "measured_at")
STAT_COLUMNS = ("rate_spread_pct", "windows")  # per sample: spread of the window rates, how many windows

STABLE_STEPS = 5  # warm-up ends when this many consecutive step times ...
STABLE_SPREAD = 0.05  # ... lie within 5 % of their median of each other ((max - min) / median)
MIN_WINDOW_S = 0.25  # a measured window lasts at least this long (see window_steps)
MAX_WARMUP = 50  # steps; a step time that never settles is measured anyway (and its spread shows it)
STEP_QUANTILE = 0.25  # a sample's step time: this quantile of its measured steps (see window_stats)


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


def window_rounds(windows: Sequence[Callable[[], T]], rounds: int) -> list[list[T]]:
    """What each window returned over ``rounds`` rounds, one window of every measurement per round.

    Interleaved, a slow drift of the host (another tenant, the CPU's clock) moves every
    measurement alike instead of bending the curve across batch sizes. Python's garbage collector
    is off while the windows run (as ``timeit`` does): a collection lands in some windows and not
    in others, which is noise, not the model; it is back on afterwards, also on an error.
    """
    if rounds < 1:
        raise InvalidInput("windows", rounds, "must be >= 1")
    times: list[list[T]] = [[] for _ in windows]
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

    rate: float  # batch / the lower quartile of the step times, samples/s
    spread_pct: float  # (max - min) / median of the window rates, in %
    windows: int
    rates: tuple[float, ...]  # each window's rate


def window_stats(batch: int, window_steps: Sequence[Sequence[float]]) -> WindowStats:
    """The rate and the windows' spread from each window's step times (seconds).

    A launch-bound step (the host thread issuing kernels sets its time) is slowed now and then by
    the host, in stretches of a second or more; on an H200 VM, between 2 s stretches of one run, the
    median of 0.2 s windows of one size moved by 28 % on average (12 % pinned to one core), the
    lower quartile of its step times by 23 % (7 % pinned) (``benchmarks/launch_noise.py``). So the rate is the batch over
    the lower quartile (STEP_QUANTILE) of all step times: the step undisturbed by the host, as
    reproducible as a compute-bound one, for which it is the median within a percent. A window
    timed as a whole (one time for its steps) gives its mean step time for each of its steps.
    """
    if batch <= 0:
        raise InvalidInput("batch", batch, "must be > 0")
    if not window_steps or any(not w or min(w) <= 0 for w in window_steps):
        raise InvalidInput("window_steps", [list(w) for w in window_steps], "need windows of positive step times")
    rates = tuple(batch * len(w) / math.fsum(w) for w in window_steps)
    step = float(np.quantile([t for w in window_steps for t in w], STEP_QUANTILE))
    return WindowStats(batch / step, 100.0 * relative_spread(rates), len(rates), rates)


def cpu_list(cpus: Collection[int]) -> str:
    """Linux's cpu-list notation of a set of CPUs: [0, 1, 2, 3, 8] -> '0-3,8'."""
    if not cpus or min(cpus) < 0:
        raise InvalidInput("cpus", list(cpus), "need one or more CPU numbers >= 0")
    ordered = sorted(set(cpus))
    runs: list[list[int]] = [[ordered[0], ordered[0]]]
    for c in ordered[1:]:
        if c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def parse_cpu_list(text: str) -> set[int]:
    """The CPUs of a cpu-list ('8', '0-3,8'); InvalidInput names what is wrong."""
    cpus: set[int] = set()
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        try:
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise InvalidInput("cpus", text, "a cpu-list such as '8' or '0-3,8'") from None
        if a < 0 or b < a:
            raise InvalidInput("cpus", text, f"range {part.strip()!r} must be 0 <= first <= last")
        cpus.update(range(a, b + 1))
    return cpus


def cpu_share(cpus: set[int], index: int, parts: int) -> set[int]:
    """The ``index``-th of ``parts`` contiguous shares of ``cpus`` (in CPU order), as even as they go:
    the CPUs a data-parallel process on this node pins itself to (``--cpus`` with several processes)."""
    if not 0 <= index < parts:
        raise InvalidInput("index", index, f"must be 0 <= index < {parts}")
    ordered = sorted(cpus)
    if len(ordered) < parts:
        raise InvalidInput("cpus", cpu_list(ordered) if ordered else "", f"need one CPU per process, {parts} here")
    base, extra = divmod(len(ordered), parts)
    start = index * base + min(index, extra)
    return set(ordered[start : start + base + (1 if index < extra else 0)])


@dataclass(frozen=True, slots=True)
class World:
    """Where a data-parallel process stands: its global and node-local rank and the sizes."""

    rank: int
    size: int
    local_rank: int = 0
    local_size: int = 1

    @property
    def nodes(self) -> int:
        return self.size // self.local_size


WORLD_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def process_world(environ: Mapping[str, str]) -> World | None:
    """The data-parallel world this process was started in, read from the variables PyTorch's
    ``env://`` reads (RANK, WORLD_SIZE) and torchrun adds (LOCAL_RANK, LOCAL_WORLD_SIZE; without
    them one process per node, as a DLJob's pods are told). None without RANK and WORLD_SIZE or
    with a world of one: a single process. A partial or inconsistent set names the variable."""
    present = {k: environ[k] for k in WORLD_VARS if environ.get(k, "").strip()}
    if not present:
        return None
    if "RANK" not in present and "WORLD_SIZE" not in present:
        key = next(iter(present))
        raise InvalidInput(key, present[key], "set without RANK and WORLD_SIZE")
    for key in ("RANK", "WORLD_SIZE"):
        if key not in present:
            raise InvalidInput(key, "", "unset, but the other of RANK and WORLD_SIZE is set")
    values: dict[str, int] = {}
    for key, text in present.items():
        try:
            values[key] = int(text)
        except ValueError:
            raise InvalidInput(key, text, "not an integer") from None
    size, local_size = values["WORLD_SIZE"], values.get("LOCAL_WORLD_SIZE", 1)
    world = World(values["RANK"], size, values.get("LOCAL_RANK", 0), local_size)
    if size < 1 or not 0 <= world.rank < size:
        raise InvalidInput("RANK", world.rank, f"must be 0 <= RANK < WORLD_SIZE ({size})")
    if local_size < 1 or size % local_size or not 0 <= world.local_rank < local_size:
        why = f"needs 0 <= LOCAL_RANK < LOCAL_WORLD_SIZE, which divides WORLD_SIZE ({size})"
        raise InvalidInput("LOCAL_RANK", f"{world.local_rank} of {local_size}", why)
    return None if size == 1 else world


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
