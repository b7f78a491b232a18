"""``qosmos simulate inference``: replay a recorded query-rate series through SODA's inference placer.

Every slot of the series is one call of the core's :func:`~qosmos.extender.core.inference.decide`
(the function the operator's InferenceService controller calls), and the replicas it asks for are
booked as the controller would run them; a latency model judges the queries.

The replay's physics, where the controller and the seed leave it open:
- The series holds one rate a slot (the GenAI trace: one sample every 57 s). The decision at a
  slot's start sees the previous slot's rate — a controller only knows measured rates — plus the
  backlog to drain within a slot (the service manager forwards the queries, so it sees them
  queue); the load during the slot is the slot's own rate (the first slot is decided on itself).
- New replicas serve ``ready_s`` after they are asked for; until then the old ones serve and both
  are paid for (never a gap in serving, issue 12 §2). Fewer replicas in the same mode go at once.
- Queries of a slot arrive at its rate, spread evenly over the serving replicas. A replica's
  worst latency is its batch window (or the time to fill a batch) plus the batch's compute time
  (``Serving.latency_s``); above the replicas' maximum load a backlog builds (a fluid queue in
  steps of at most one second) and its wait adds to the latency. A query violates QoS when its
  latency is above the target.
- GPU-hours count every GPU replica that exists (starting ones too); CPU core-hours likewise.
- Switching ahead of the load (issue 23 §3, on by default; ``--no-forecast`` for the reactive placer):
  before each slot a :class:`~qosmos.predictors.qps_forecast.QpsForecaster` trained on the series
  up to the last complete slot only gives the upper band of the rate over the next
  ``forecast_horizon_s(ready_s, step)`` (the slot and the next replicas' start-up), and ``decide``
  plans for it (``forecast_qps``).
The baseline ("always GPU") is the same service with no CPU serving: SODA's original service mode,
under the same controller (with the same forecast when it is on).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.inference import (
    Decision,
    InferenceSpec,
    InferenceState,
    Mode,
    Serving,
    decide,
    forecast_horizon_s,
)
from qosmos.predictors.readers import CsvRows, TraceFormatError
from qosmos.simulator.services import write_timeline

if TYPE_CHECKING:
    from qosmos.predictors.qps_forecast import QpsForecaster

TIME_COLUMNS = ("timestamp_anon", "timestamp", "time")
VALUE_COLUMNS = ("value", "qps")
TYPE_COLUMN = "request_type"
CONTAINER_COLUMN = "container_ip"
ALL = "all"
CONTAINER_PREFIX = "container:"
SUB_STEP_S = 1.0  # fluid-queue resolution while a backlog exists
_EPS = 1e-9


# ---- the series ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class QpsSeries:
    """One query rate per slot: slot i covers [start + i step, start + (i + 1) step)."""

    name: str
    start: float
    step_s: float
    qps: np.ndarray
    notes: tuple[str, ...] = ()
    available: tuple[str, ...] = ()  # the request types of the file

    @property
    def times(self) -> np.ndarray:
        return self.start + self.step_s * np.arange(self.qps.size)

    @property
    def hours(self) -> float:
        return self.qps.size * self.step_s / 3600.0

    def scaled(self, factor: float) -> QpsSeries:
        if not (math.isfinite(factor) and factor > 0):
            raise InvalidInput("qps_scale", factor, "must be a finite number > 0")
        return QpsSeries(self.name, self.start, self.step_s, self.qps * factor, self.notes, self.available)


def _pick(header: list[str], names: tuple[str, ...]) -> str | None:
    return next((c for c in names if c in header), None)


def read_qps(path: Path, series: str | None = None, *, step_s: float | None = None) -> QpsSeries:
    """A QPS series from a CSV of ``time,value`` rows, optionally per ``request_type`` and ``container_ip``.

    The Alibaba GenAI trace (``timestamp_anon,value,container_ip,request_type``) holds one row per
    container and sample while the container serves queries (it holds no zero rate), so a slot's
    rate is the sum over the containers of the selected series, 0 where none reported. Several rows
    of one container in one slot are averaged. ``series``: a request type (case-insensitive, a
    unique prefix will do: ``generative``), ``all`` (every row), or ``container:HASH`` (one
    container; a unique prefix). Without one: the request type with the most queries, or every row
    when the file has no request types. The slot is ``step_s``, else the most common gap between
    the file's distinct times.
    """
    rows = CsvRows(path, what="qps")
    tcol, vcol = _pick(rows.header, TIME_COLUMNS), _pick(rows.header, VALUE_COLUMNS)
    for col, names in ((tcol, TIME_COLUMNS), (vcol, VALUE_COLUMNS)):
        if col is None:
            rows.close()
            raise TraceFormatError(rows.name, 1, names[0], rows.header, f"missing column (one of {', '.join(names)})")
    assert tcol is not None and vcol is not None
    has_type, has_container = TYPE_COLUMN in rows.header, CONTAINER_COLUMN in rows.header
    times: list[float] = []
    values: list[float] = []
    types: list[str] = []
    containers: list[str] = []
    for line, row in rows:
        at = rows.time(line, row, tcol)
        assert at is not None
        times.append(at)
        values.append(rows.num(line, row, vcol))
        types.append(rows.text(row, TYPE_COLUMN) if has_type else "")
        containers.append(rows.text(row, CONTAINER_COLUMN) if has_container else "")
    if not times:
        raise InvalidInput("qps", str(path), "no rows")
    t = np.asarray(times)
    v = np.asarray(values)
    distinct = np.unique(t)
    if step_s is None:
        gaps = np.round(np.diff(distinct), 6)
        gaps = gaps[gaps > 0]
        step_s = float(Counter(gaps.tolist()).most_common(1)[0][0]) if gaps.size else 60.0
    elif not (math.isfinite(step_s) and step_s > 0):
        raise InvalidInput("step_s", step_s, "must be a finite number of seconds > 0")

    kinds = sorted(set(types) - {""})
    notes: list[str] = []
    volume = {k: float(v[[x == k for x in types]].sum()) for k in kinds}
    if series is None:
        if kinds:
            series = max(kinds, key=lambda k: volume[k])
            notes.append(f"series: {series!r}, the request type with the most queries (of {', '.join(kinds)})")
        else:
            series = ALL
    keep, name = _select(series, kinds, types, containers)
    if not keep.any():
        raise InvalidInput("series", series, "selects no rows")

    start = float(distinct[0])
    slot = np.rint((t[keep] - start) / step_s).astype(np.int64)
    key = [f"{a}\x00{b}" for a, b, k in zip(types, containers, keep, strict=True) if k]
    sums: dict[tuple[int, str], list[float]] = {}
    for s, k, x in zip(slot.tolist(), key, v[keep].tolist(), strict=True):
        acc = sums.setdefault((s, k), [0.0, 0.0])
        acc[0] += x
        acc[1] += 1
    n = int(np.rint((distinct[-1] - start) / step_s)) + 1
    qps = np.zeros(n)
    for (s, _), (total, count) in sums.items():
        qps[s] += total / count
    notes.append(f"{n} slots of {step_s:g} s; slots without a row of the series count as 0 queries/s")
    return QpsSeries(name, start, step_s, qps, tuple(notes), tuple(kinds))


def _select(series: str, kinds: list[str], types: list[str], containers: list[str]) -> tuple[np.ndarray, str]:
    """The rows of ``series`` and its full name."""
    if series.strip().lower() == ALL:
        return np.ones(len(types), bool), ALL
    if series.startswith(CONTAINER_PREFIX):
        want = series[len(CONTAINER_PREFIX) :].strip()
        ids = sorted({c for c in containers if c and c.startswith(want)}) if want else []
        if len(ids) != 1:
            why = "no container has that id" if not ids else f"{len(ids)} containers start with it"
            raise InvalidInput("series", series, why)
        return np.fromiter((c == ids[0] for c in containers), bool, len(containers)), CONTAINER_PREFIX + ids[0]
    low = series.strip().lower()
    exact = [k for k in kinds if k.lower() == low]
    match = exact or [k for k in kinds if k.lower().startswith(low)]
    if len(match) != 1:
        known = ", ".join([*kinds, ALL, CONTAINER_PREFIX + "HASH"])
        raise InvalidInput(
            "series", series, f"{'ambiguous' if match else 'no such request type'}; the file has: {known}"
        )
    return np.fromiter((x == match[0] for x in types), bool, len(types)), match[0]


# ---- the replay ----------------------------------------------------------------------------------


@dataclass
class _Latencies:
    """Query latencies as (seconds, number of queries) pieces."""

    values: list[float] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)

    def add(self, latency: float, queries: float) -> None:
        if queries > 0:
            self.values.append(latency)
            self.weights.append(queries)

    def total(self) -> float:
        return float(sum(self.weights))

    def above(self, limit: float) -> float:
        return float(sum(w for v, w in zip(self.values, self.weights, strict=True) if v > limit + _EPS))

    def quantile(self, q: float) -> float:
        if not self.values:
            return 0.0
        order = np.argsort(self.values, kind="stable")
        cum = np.cumsum(np.asarray(self.weights)[order])
        i = int(np.searchsorted(cum, q * cum[-1] - _EPS))
        return float(np.asarray(self.values)[order][min(i, order.size - 1)])

    def mean(self) -> float:
        total = self.total()
        return float(np.dot(self.values, self.weights) / total) if total > 0 else 0.0


@dataclass(frozen=True)
class _Set:
    mode: Mode
    replicas: int


@dataclass
class ReplayResult:
    spec: InferenceSpec
    series: QpsSeries
    ready_s: float
    mode: np.ndarray  # per slot, after the slot's decision: 1 = CPU, 0 = GPU (what is asked for)
    replicas: np.ndarray  # per slot, asked for
    gpus: np.ndarray  # per slot, mean GPUs held (starting replicas included)
    cores: np.ndarray  # per slot, mean CPU cores held
    worst_ms: np.ndarray  # per slot, the slot's worst query latency (0 without queries)
    gpu_seconds: float
    core_seconds: float
    gpu_busy_seconds: float  # GPU-seconds the served queries needed at full batches
    latencies: _Latencies
    switches: int
    reasons: Counter[str]
    decisions: list[Decision]

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600.0


def _held(active: _Set, pending: _Set | None, spec: InferenceSpec) -> tuple[int, int]:
    """(GPUs, CPU cores) held while ``pending`` starts beside ``active``."""
    counts = {Mode.GPU: 0, Mode.CPU: 0}
    counts[active.mode] = active.replicas
    if pending is not None:
        counts[pending.mode] = max(counts[pending.mode], pending.replicas)
    cores = spec.cpu.cores if spec.cpu is not None else 0
    return counts[Mode.GPU] * spec.gpu.gpus, counts[Mode.CPU] * cores


def _serve(serving: Serving, n: int, lam: float, dur: float, backlog: float, lat: _Latencies) -> tuple[float, float]:
    """Queries arriving at ``lam`` for ``dur`` s on ``n`` replicas; returns (backlog after, worst latency)."""
    if dur <= 0 or (lam <= 0 and backlog <= 0):
        return backlog, 0.0
    mu = n * serving.capacity_qps
    base = serving.latency_s(lam / n)
    if backlog <= 0 and lam <= mu:
        lat.add(base, lam * dur)
        return 0.0, base if lam > 0 else 0.0
    steps = max(1, math.ceil(dur / SUB_STEP_S - _EPS))
    h = dur / steps
    worst = 0.0
    for i in range(steps):
        after = max(0.0, backlog + (lam - mu) * h)
        latency = base + (backlog + after) / 2 / mu
        lat.add(latency, lam * h)
        worst = max(worst, latency if lam > 0 else 0.0)
        backlog = after
        if backlog <= 0 and lam <= mu:  # drained: the rest of the segment is steady
            lat.add(base, lam * h * (steps - 1 - i))
            break
    return backlog, worst


def forecast_for(series: QpsSeries, ready_s: float, forecaster: QpsForecaster | None = None) -> np.ndarray:
    """The band ``decide`` gets before each slot: made from the complete slots before it only, over
    the slots that ``forecast_horizon_s(ready_s, step)`` spans from the slot's start."""
    from qosmos.predictors.qps_forecast import QpsForecaster, forecast_series

    horizon = max(1, math.ceil(forecast_horizon_s(ready_s, series.step_s) / series.step_s - _EPS))
    fc = forecaster if forecaster is not None else QpsForecaster()
    fc.horizon = horizon
    return forecast_series(series.qps, fc)


def replay(
    spec: InferenceSpec,
    series: QpsSeries,
    *,
    ready_s: float = 30.0,
    prefer_gpu: bool = False,
    forecast: np.ndarray | None = None,
) -> ReplayResult:
    """Drive ``decide`` with the series, slot by slot; book replicas, latency and cost.

    ``forecast``: per slot, the band to plan for (:func:`forecast_for`); None: the observed rate alone."""
    if not (math.isfinite(ready_s) and ready_s >= 0):
        raise InvalidInput("ready_s", ready_s, "must be a finite number of seconds >= 0")
    q = np.asarray(series.qps, float)
    if forecast is not None and np.shape(forecast) != q.shape:
        raise InvalidInput("forecast", np.shape(forecast), f"need one value per slot ({q.size})")
    n_slots, step = q.size, series.step_s
    mode = np.zeros(n_slots, np.int8)
    replicas = np.zeros(n_slots, np.int64)
    gpus, cores, worst_ms = np.zeros(n_slots), np.zeros(n_slots), np.zeros(n_slots)
    lat = _Latencies()
    reasons: Counter[str] = Counter()
    decisions: list[Decision] = []
    state: InferenceState | None = None
    active: _Set | None = None
    pending: tuple[_Set, float] | None = None  # (set, ready at)
    backlog = 0.0
    gpu_s = core_s = busy_s = 0.0
    for i in range(n_slots):
        t0 = float(series.start + i * step)
        seen = float(q[i - 1] if i > 0 else q[0]) + backlog / step
        band = None if forecast is None or i == 0 else float(forecast[i])
        d = decide(spec, state, seen, t0, prefer_gpu=prefer_gpu, forecast_qps=band)
        decisions.append(d)
        reasons[d.reason.value] += 1
        state = d.state
        want = _Set(d.mode, d.replicas)
        mode[i], replicas[i] = int(d.mode is Mode.CPU), d.replicas
        if active is None:
            active = want  # the service starts Ready with its first size
        elif want == active:
            pending = None
        elif want.mode is active.mode and want.replicas < active.replicas:
            active, pending = want, None  # scale in: at once
        elif pending is None or pending[0] != want:
            same = pending is not None and pending[0].mode is want.mode and want.replicas <= pending[0].replicas
            pending = (want, pending[1] if same and pending is not None else t0 + ready_s)
        # the slot, split where the pending set becomes Ready
        t, end = t0, t0 + step
        while t < end - _EPS:
            if pending is not None and pending[1] <= t + _EPS:
                active, pending = pending[0], None  # Ready: the old replicas go
            cut = min(end, pending[1]) if pending is not None else end
            dur = cut - t
            g, c = _held(active, pending[0] if pending is not None else None, spec)
            gpu_s += g * dur
            core_s += c * dur
            gpus[i] += g * dur / step
            cores[i] += c * dur / step
            serving = spec.serving(active.mode)
            backlog, worst = _serve(serving, active.replicas, float(q[i]), dur, backlog, lat)
            worst_ms[i] = max(worst_ms[i], worst * 1000.0)
            if active.mode is Mode.GPU:
                busy_s += float(q[i]) * dur / serving.capacity_qps
            t = cut
    return ReplayResult(
        spec=spec,
        series=series,
        ready_s=ready_s,
        mode=mode,
        replicas=replicas,
        gpus=gpus,
        cores=cores,
        worst_ms=worst_ms,
        gpu_seconds=gpu_s,
        core_seconds=core_s,
        gpu_busy_seconds=busy_s,
        latencies=lat,
        switches=state.switches if state is not None else 0,
        reasons=reasons,
        decisions=decisions,
    )


# ---- summary and plot --------------------------------------------------------------------------------


def _r(x: float, digits: int = 6) -> float:
    return round(float(x), digits)


def _side(res: ReplayResult) -> dict[str, float]:
    target = res.spec.qos_target_s
    total = res.latencies.total()
    return {
        "gpu_hours": _r(res.gpu_hours),
        "cpu_core_hours": _r(res.core_seconds / 3600.0),
        "qos_violation_fraction": _r(res.latencies.above(target) / total if total > 0 else 0.0, 9),
        "p99_latency_ms": _r(res.latencies.quantile(0.99) * 1000.0, 3),
        "max_latency_ms": _r(float(res.worst_ms.max(initial=0.0)), 3),
        "mean_latency_ms": _r(res.latencies.mean() * 1000.0, 3),
        "gpu_utilization": _r(res.gpu_busy_seconds / res.gpu_seconds if res.gpu_seconds > 0 else 0.0),
    }


def summarize(soda: ReplayResult, always_gpu: ReplayResult, *, wall_s: float = 0.0, **extra: Any) -> dict[str, Any]:
    """summary.json: SODA's placer next to the same service always on GPU."""
    spec, series = soda.spec, soda.series
    days = series.qps.size * series.step_s / 86400.0
    a, b = _side(soda), _side(always_gpu)
    saved = (always_gpu.gpu_seconds - soda.gpu_seconds) / 3600.0
    base_hours = always_gpu.gpu_seconds / 3600.0
    out: dict[str, Any] = {
        "model": spec.model,
        "qos_target_ms": spec.qos_target_ms,
        "series": series.name,
        "hours": _r(series.hours),
        "step_s": series.step_s,
        "slots": int(series.qps.size),
        "peak_qps": _r(float(series.qps.max(initial=0.0))),
        "mean_qps": _r(float(series.qps.mean()) if series.qps.size else 0.0),
        **a,
        "gpu_hours_always_gpu": b["gpu_hours"],
        "gpu_hours_saved": _r(saved),
        "gpu_hours_saved_fraction": _r(saved / base_hours if base_hours > 0 else 0.0),
        "switches": soda.switches,
        "switches_per_day": _r(soda.switches / days if days > 0 else 0.0),
        "cpu_mode_fraction": _r(float(soda.mode.mean()) if soda.mode.size else 0.0),
        "always_gpu": b,
        "decisions": dict(sorted(soda.reasons.items())),
        "serving": _serving(spec),
        "config": {
            "min_replicas": spec.min_replicas,
            "max_replicas": spec.max_replicas,
            "cpu_max_replicas": spec.cpu_max_replicas,
            "scale_out_threshold": spec.scale_out_threshold,
            "hysteresis": spec.hysteresis,
            "switch_cooldown_s": spec.switch_cooldown_s,
            "scale_out_after_s": spec.scale_out_after_s,
            "scale_in_after_s": spec.scale_in_after_s,
            "ready_s": soda.ready_s,
            **extra,
        },
        "notes": [*series.notes, *spec.notes],
        "wall_s": _r(wall_s, 3),
    }
    return out


def _serving(spec: InferenceSpec) -> dict[str, Any]:
    def one(s: Serving | None) -> dict[str, Any] | None:
        if s is None:
            return None
        return {
            "max_batch": s.batch,
            "window_ms": _r(s.window_s * 1000.0, 3),
            "compute_ms": _r(s.compute_s * 1000.0, 3),
            "replica_max_qps": _r(s.capacity_qps),
            "gpus_per_replica": s.gpus,
            "cores_per_replica": s.cores,
        }

    return {
        "gpu_switch_batch": spec.gpu_switch_batch,
        "gpu": one(spec.gpu),
        "cpu": one(spec.cpu),
        "thresholds": spec.thresholds(),
    }


def plot(path: Path, soda: ReplayResult, always_gpu: ReplayResult) -> None:
    """Load with the switching point, CPU-mode spans, replicas of both runs, worst latency per slot."""
    from matplotlib.figure import Figure

    spec, series = soda.spec, soda.series
    hours = (series.times - series.start) / 3600.0
    edges = np.append(hours, hours[-1] + series.step_s / 3600.0) if hours.size else hours
    fig = Figure(figsize=(11, 8), dpi=100)
    ax_load, ax_rep, ax_lat = fig.subplots(3, 1, sharex=True)

    def shade(ax: Any) -> None:
        for a, b in _runs(soda.mode):
            ax.axvspan(edges[a], edges[b], color="tab:orange", alpha=0.12, lw=0)

    ax_load.step(edges[:-1], series.qps, where="post", color="black", lw=0.8, label="load")
    point = spec.gpu_switch_batch / spec.gpu.compute_s
    ax_load.axhline(point, color="tab:red", ls="--", lw=0.9, label=f"bs_gpu {spec.gpu_switch_batch} (one GPU's load)")
    ax_load.axhline((1 - spec.hysteresis) * point, color="tab:red", ls=":", lw=0.9, label="back to CPU below")
    ax_load.set_ylabel("queries/s")
    ax_load.legend(loc="upper right", fontsize=8)
    shade(ax_load)

    gpu_rep = np.where(soda.mode == 0, soda.replicas, 0)
    cpu_rep = np.where(soda.mode == 1, soda.replicas, 0)
    ax_rep.step(edges[:-1], gpu_rep, where="post", color="tab:green", lw=1.2, label="SODA: GPU replicas")
    ax_rep.step(edges[:-1], cpu_rep, where="post", color="tab:orange", lw=1.2, label="SODA: CPU replicas")
    ax_rep.step(edges[:-1], always_gpu.replicas, where="post", color="black", ls="--", lw=0.9, label="always GPU")
    ax_rep.set_ylabel("replicas")
    ax_rep.legend(loc="upper right", fontsize=8)
    shade(ax_rep)

    for res, color, label in ((always_gpu, "tab:gray", "always GPU"), (soda, "tab:blue", "SODA")):
        shown = np.where(res.worst_ms > 0, res.worst_ms, np.nan)  # slots without queries: no point
        ax_lat.step(edges[:-1], shown, where="post", color=color, lw=0.8, label=label)
    ax_lat.axhline(spec.qos_target_ms, color="tab:red", ls="--", lw=0.9, label="QoS target")
    if max(soda.worst_ms.max(initial=0.0), always_gpu.worst_ms.max(initial=0.0)) > 5 * spec.qos_target_ms:
        ax_lat.set_yscale("log")  # backlogs of seconds beside a target of milliseconds
    ax_lat.set_ylabel("worst latency (ms)")
    ax_lat.set_xlabel("hours from the series' start (CPU mode shaded)")
    ax_lat.legend(loc="upper right", fontsize=8)
    shade(ax_lat)
    fig.suptitle(f"{series.name} — {spec.model}, QoS {spec.qos_target_ms:g} ms", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _runs(flags: Iterable[int]) -> list[tuple[int, int]]:
    """[start, end) index runs where ``flags`` is set."""
    out: list[tuple[int, int]] = []
    start: int | None = None
    i = -1
    for i, f in enumerate(flags):
        if f and start is None:
            start = i
        elif not f and start is not None:
            out.append((start, i))
            start = None
    if start is not None:
        out.append((start, i + 1))
    return out


def run(
    spec: InferenceSpec,
    series: QpsSeries,
    out: Path,
    *,
    ready_s: float = 30.0,
    plots: bool = True,
    extra: dict[str, Any] | None = None,
    service: str | None = None,
    forecaster: QpsForecaster | None = None,
    forecast: bool = True,
) -> dict[str, Any]:
    """Replay with SODA's placer and always on GPU; write OUT/summary.json, OUT/timeline.csv (SODA's
    replicas per slot, for ``qosmos simulate --services``; ``service`` names it, default the model)
    and OUT/inference.png. ``forecast``: switch ahead of the load with ``forecaster`` (default
    :class:`QpsForecaster`'s settings); both runs plan for the same band."""
    from qosmos.simulator.outputs import write_summary

    began = time.perf_counter()
    band: np.ndarray | None = None
    info: dict[str, Any] = {"enabled": forecast}
    if forecast:
        from qosmos.predictors.qps_forecast import QpsForecaster

        fc = forecaster if forecaster is not None else QpsForecaster()
        t_fc = time.perf_counter()
        band = forecast_for(series, ready_s, fc)
        q = np.asarray(series.qps, float)
        peak = np.array([q[i : i + fc.horizon].max() for i in range(1, q.size)])
        info |= {
            "horizon_slots": fc.horizon,
            "horizon_s": forecast_horizon_s(ready_s, series.step_s),
            "quantile": fc.quantile,
            "retrain_every_slots": fc.retrain_every,
            "min_history_slots": fc.min_history,
            "coverage": _r(float(np.mean(band[1:] >= peak - _EPS)) if peak.size else 0.0),
            "seconds": _r(time.perf_counter() - t_fc, 3),
        }
    soda = replay(spec, series, ready_s=ready_s, forecast=band)
    base = replay(spec.gpu_only(), series, ready_s=ready_s, forecast=band)
    summary = summarize(soda, base, wall_s=time.perf_counter() - began, **(extra or {}))
    summary["forecast"] = info
    out.mkdir(parents=True, exist_ok=True)
    write_summary(out / "summary.json", summary)
    write_replicas(out / "timeline.csv", soda, service or spec.model)
    if plots:
        plot(out / "inference.png", soda, base)
    return summary


def write_replicas(path: Path, res: ReplayResult, service: str) -> None:
    """The replicas SODA's placer asks for in each mode, one row per slot from the series' start, and
    none from the series' end (a last row): the timeline a training replay takes with ``--services``
    (while a switch waits for the new mode's replicas to be Ready, the old ones still serve here; the
    timeline holds only what is asked for)."""
    series, spec = res.series, res.spec
    cpu = res.mode == 1
    write_timeline(
        path,
        service,
        np.append(series.times - series.start, series.qps.size * series.step_s),
        np.append(np.where(cpu, 0, res.replicas), 0),
        np.append(np.where(cpu, res.replicas, 0), 0),
        spec.cpu.cores * 1000 if spec.cpu is not None else 0,
    )
