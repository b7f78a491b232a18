"""Run artefacts: summary.json, jobs.csv, trace.json (Chrome trace), PNG plots (AnalySIM §3.3).

The Chrome trace has one process per node and one thread ("lane") per set of
non-overlapping jobs on that node, a complete event (ph "X", µs) per job per node, and
metadata events naming processes and threads: it opens in Perfetto / chrome://tracing.

JSON is written with orjson and plots with matplotlib's object API (no pyplot state);
past a size the GPU timeline draws a binned per-node occupancy image instead of one
rectangle per job, so plotting stays well under a second on large runs.
"""

from __future__ import annotations

import csv
import functools
import multiprocessing
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from qosmos.predictors.readers import paused_gc
from qosmos.simulator.engine import DONE, FAILED, REJECTED, WITHDRAWN, SimResult

from qosmos import __version__

STATE_NAMES = {DONE: "done", WITHDRAWN: "withdrawn", REJECTED: "rejected", FAILED: "failed"}
MAX_TRACE_SLICES = 300_000
DETAIL_MAX_ROWS = 256  # GPU rows drawn one by one up to this many GPUs ...
DETAIL_MAX_SEGMENTS = 20_000  # ... and this many job segments; else the binned view
CDF_POINTS = 2000
DPI = 100


def _json_bytes(obj: object, indent: bool = False) -> bytes:
    opts = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
    return orjson.dumps(obj, option=opts | orjson.OPT_INDENT_2 if indent else opts)


def write_summary(path: Path, summary: Mapping[str, object]) -> None:
    """The summary as JSON, saying which qosmos wrote it (a figure is reproduced with the same one)."""
    path.write_bytes(_json_bytes({"qosmos_version": __version__, **summary}, indent=True))


JOB_COLUMNS = (
    "id",
    "vc",
    "user",
    "gpus",
    "gpu_milli",
    "model",
    "qos",
    "submit",
    "start",
    "end",
    "queue_s",
    "jct_s",
    "run_s",
    "nodes",
    "shape",
    "preemptions",
    "overhead_s",
    "cross_switch",
    "backfilled",
    "state",
    "end_state",
    "restarts",
    "lost_run_s",
    "node_lost",
)


def _fixed(values: np.ndarray, digits: int = 3) -> list[str]:
    """Numbers with ``digits`` decimals; NaN (never happened) as an empty field."""
    fmt = f"{{:.{digits}f}}".format
    return ["" if x != x else fmt(x) for x in values.tolist()]


CSV_CHUNK = 65_536  # rows built and written at a time: bounds memory on million-job runs


def write_jobs_csv(path: Path, res: SimResult) -> None:
    """One row per job. ``gpu_milli`` is 0 for CPU-only jobs (they hold no GPU)."""
    jobs = res.trace.jobs
    n = len(jobs)
    submit = np.fromiter((j.submit_time for j in jobs), float, n)
    start = np.asarray(res.start, float)
    end = np.asarray(res.end, float)
    run = np.asarray(res.run_time, float)
    overhead = np.asarray(res.overhead_s, float)
    qos_names: dict[object, str] = {}
    for j in jobs:
        if j.qos not in qos_names:
            qos_names[j.qos] = j.qos.name.lower()
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(JOB_COLUMNS)
        for a in range(0, n, CSV_CHUNK):
            b = min(a + CSV_CHUNK, n)
            part = jobs[a:b]
            columns: list[Sequence[object]] = [
                [j.id for j in part],
                [j.vc for j in part],
                [j.user for j in part],
                [j.gpus for j in part],
                [j.gpu_milli if j.gpus > 0 else 0 for j in part],
                [j.model for j in part],
                [qos_names[j.qos] for j in part],
                _fixed(submit[a:b]),
                _fixed(start[a:b]),
                _fixed(end[a:b]),
                _fixed(start[a:b] - submit[a:b]),
                _fixed(end[a:b] - submit[a:b]),
                _fixed(run[a:b]),
                res.nodes_used[a:b],
                ["" if sh is None else f"{sh[0]}x{sh[1]}" for sh in res.shape[a:b]],
                res.preemptions[a:b],
                _fixed(overhead[a:b], 1),
                [int(x) for x in res.cross_switch[a:b]],
                [int(x) for x in res.backfilled[a:b]],
                [STATE_NAMES.get(x, "unfinished") for x in res.state[a:b]],
                [j.end_state.value for j in part],
                res.restarts[a:b],
                _fixed(np.asarray(res.lost_s[a:b], float), 1),
                res.node_lost[a:b],
            ]
            w.writerows(zip(*columns, strict=True))


def _segments(res: SimResult) -> np.ndarray:
    """Segments as an (n, 5) float array: job, node, start, end, gpus."""
    if not res.segments:
        return np.zeros((0, 5))
    return np.array(res.segments, dtype=float)


@dataclass(frozen=True)
class TraceInput:
    """What the Chrome trace holds, as arrays: its slices (at most ``max_slices``, the earliest) sorted
    by node, start and job, and only the columns of the jobs they name (``job`` indexes those)."""

    segments: np.ndarray  # (n, 5): job (into ids...), node, start, end, gpus
    ids: list[str]
    vcs: list[str]
    job_gpus: list[int]
    submits: list[float]
    node_names: tuple[str, ...]
    node_vc: tuple[str, ...]
    node_gpus: tuple[int, ...]
    truncated_to: int | None

    @classmethod
    def of(cls, res: SimResult, max_slices: int = MAX_TRACE_SLICES, segments: np.ndarray | None = None) -> TraceInput:
        """``segments``: ``_segments(res)`` when the caller has it already (never written to here)."""
        seg = _segments(res) if segments is None else segments
        truncated = len(seg) > max_slices
        if truncated:  # the first max_slices slices by start time
            seg = seg[np.argsort(seg[:, 2], kind="stable")[:max_slices]]
        seg = seg[np.lexsort((seg[:, 0], seg[:, 2], seg[:, 1]))]  # by node, start, job
        used, seg[:, 0] = np.unique(seg[:, 0].astype(np.int64), return_inverse=True)
        jobs = res.trace.jobs
        named = [jobs[k] for k in used.tolist()]
        return cls(
            segments=seg,
            ids=[j.id for j in named],
            vcs=[j.vc for j in named],
            job_gpus=[j.gpus for j in named],
            submits=[j.submit_time for j in named],
            node_names=tuple(res.node_names),
            node_vc=tuple(res.node_vc),
            node_gpus=tuple(res.node_gpus),
            truncated_to=max_slices if truncated else None,
        )


def chrome_trace(data: TraceInput) -> dict[str, object]:
    """Chrome trace event format: {"traceEvents": [...]}; ts/dur in microseconds."""
    seg = data.segments
    ids, vcs, job_gpus, submits = data.ids, data.vcs, data.job_gpus, data.submits
    ts = np.round(seg[:, 2] * 1e6).astype(np.int64).tolist()
    dur = np.maximum(np.round((seg[:, 3] - seg[:, 2]) * 1e6), 1).astype(np.int64).tolist()
    events: list[dict[str, object]] = []
    lanes_by_node: dict[int, list[float]] = {}
    append = events.append
    for job_f, node_f, start, end, gpus, t_us, d_us in zip(*seg.T.tolist(), ts, dur, strict=True):
        node, job = int(node_f), int(job_f)
        lanes = lanes_by_node.get(node)
        if lanes is None:
            lanes = lanes_by_node[node] = []
        for k, last in enumerate(lanes):  # first lane free at start
            if last <= start:
                lanes[k] = end
                lane = k
                break
        else:
            lanes.append(end)
            lane = len(lanes) - 1
        vc = vcs[job]
        append(
            {
                "name": ids[job],
                "cat": vc,
                "ph": "X",
                "ts": t_us,
                "dur": d_us,
                "pid": node + 1,
                "tid": lane + 1,
                "args": {"gpus_on_node": int(gpus), "job_gpus": job_gpus[job], "vc": vc, "submit_s": submits[job]},
            }
        )
    meta: list[dict[str, object]] = []
    for node, lanes in sorted(lanes_by_node.items()):
        meta.append(
            {
                "name": "process_name",
                "ph": "M",
                "pid": node + 1,
                "tid": 0,
                "args": {"name": f"{data.node_names[node]} [{data.node_vc[node]}] {data.node_gpus[node]} GPUs"},
            }
        )
        meta.append({"name": "process_sort_index", "ph": "M", "pid": node + 1, "tid": 0, "args": {"sort_index": node}})
        for k in range(len(lanes)):
            meta.append(
                {"name": "thread_name", "ph": "M", "pid": node + 1, "tid": k + 1, "args": {"name": f"lane {k}"}}
            )
    out: dict[str, object] = {"traceEvents": meta + events, "displayTimeUnit": "ms"}
    if data.truncated_to is not None:
        out["otherData"] = {"note": f"truncated to the first {data.truncated_to} slices by start time"}
    return out


def write_chrome_trace(path: Path, data: TraceInput) -> None:
    with paused_gc():  # up to MAX_TRACE_SLICES dicts, none cyclic: the collector would walk them ~40% of the time
        events = chrome_trace(data)
    path.write_bytes(_json_bytes(events))


# ---- plots ---------------------------------------------------------------------------------


def _figure(w: float, h: float) -> Any:
    """A matplotlib Figure on the Agg canvas, without pyplot's global state."""
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), dpi=DPI)


def _save(fig: Any, path: Path) -> None:
    # zlib level 1: a third of the encoding time of the default 6, files about 10 % larger
    fig.savefig(path, dpi=DPI, pil_kwargs={"compress_level": 1})


def _title(res: SimResult) -> str:
    c = res.config
    bf = f", backfill {c.backfill}" if c.backfill != "none" else ""
    return f"{res.trace.name} — {c.policy} / {c.placement}{bf}"


def _jct(res: SimResult) -> np.ndarray:
    """JCT (end − submit) of finished jobs."""
    state = np.asarray(res.state)
    done = np.flatnonzero(state == DONE)
    end = np.asarray(res.end, float)[done]
    submit = np.fromiter((res.trace.jobs[i].submit_time for i in done), float, done.size)
    jct: np.ndarray = end - submit
    return jct


@dataclass(frozen=True)
class PlotInput:
    """What the run's plots draw, as arrays: cheap to send to a drawing process (a SimResult is not:
    pickling 20,000 jobs' result takes 0.3 s, this takes milliseconds)."""

    title: str
    policy: str
    jct: np.ndarray  # finished jobs, end - submit
    samples: dict[str, np.ndarray]  # t, waiting, running, used_gpus, used_nodes
    total_gpus: int
    segments: np.ndarray  # (n, 5): job, node, start, end, gpus
    node_gpus: np.ndarray
    node_names: tuple[str, ...]
    node_vc: tuple[str, ...]

    @classmethod
    def of(cls, res: SimResult, segments: np.ndarray | None = None) -> PlotInput:
        keys = ("t", "waiting", "running", "used_gpus", "used_nodes")
        return cls(
            title=_title(res),
            policy=res.config.policy,
            jct=_jct(res),
            samples={k: np.asarray(res.samples[k], float) for k in keys},
            total_gpus=res.total_gpus,
            segments=_segments(res) if segments is None else segments,
            node_gpus=np.asarray(res.node_gpus, int),
            node_names=tuple(res.node_names),
            node_vc=tuple(res.node_vc),
        )


def _cdf(ax: Any, values: np.ndarray, label: str) -> tuple[int, float]:
    """CDF over all ``values``, drawn on a log x axis over the positive ones.

    Zero-length entries cannot sit on a log axis: the curve starts at their fraction.
    Returns (number of zero entries, their fraction).
    """
    n = values.size
    if n == 0:
        return 0, 0.0
    x = np.sort(values)
    zeros = int(np.searchsorted(x, 0.0, side="right"))
    frac0 = zeros / n
    x = x[zeros:]
    if x.size == 0:
        return zeros, frac0
    y = frac0 + np.arange(1, x.size + 1) / n
    if x.size > CDF_POINTS:
        pick = np.unique(np.linspace(0, x.size - 1, CDF_POINTS).astype(int))
        x, y = x[pick], y[pick]
    ax.step(np.concatenate([[x[0]], x]), np.concatenate([[frac0], y]), where="post", label=label)
    return zeros, frac0


DURATION_TICKS = (
    (1.0, "1 s"),
    (10.0, "10 s"),
    (60.0, "1 min"),
    (600.0, "10 min"),
    (3600.0, "1 h"),
    (86400.0, "1 d"),
    (864000.0, "10 d"),
    (8640000.0, "100 d"),
)


def _log_time_axis(ax: Any, values: np.ndarray) -> None:
    """Log x axis with duration ticks (1 s, 1 min, 1 h, 1 d ...): readable, and no mathtext to typeset."""
    from matplotlib.ticker import FixedLocator, NullLocator

    pos = values[values > 0]
    if pos.size == 0:
        return
    ax.set_xscale("log")
    lo, hi = float(pos.min()), float(pos.max())
    ticks = [(v, name) for v, name in DURATION_TICKS if lo / 10 <= v <= hi * 10] or [DURATION_TICKS[0]]
    ax.xaxis.set_major_locator(FixedLocator([v for v, _ in ticks]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks([v for v, _ in ticks], [name for _, name in ticks])
    ax.set_xlim(lo / 1.5, hi * 1.5)


def plot_jct_cdf(path: Path, data: PlotInput) -> None:
    _save(jct_cdf_figure(data), path)


def jct_cdf_figure(data: PlotInput) -> Any:
    """JCT CDF of finished jobs; zero-length jobs (no wait, zero run time) stated and marked."""
    fig = _figure(7, 4.5)
    ax = fig.subplots()
    jct = data.jct
    zeros, frac0 = _cdf(ax, jct, f"{data.policy} ({jct.size:,} finished jobs)")
    if zeros:
        ax.axhline(frac0, color="grey", ls=":", lw=1, label=f"{zeros:,} jobs with JCT = 0 s ({frac0:.1%})")
    if jct.size == 0:
        ax.text(0.5, 0.5, "no finished jobs", ha="center", transform=ax.transAxes)
    else:
        _log_time_axis(ax, jct)
    ax.set_xlabel("job completion time, submit to end (log scale)")
    ax.set_ylabel("fraction of finished jobs")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"JCT CDF — {data.title}", fontsize=10)
    ax.grid(alpha=0.3)
    if jct.size:
        ax.legend(loc="lower right", fontsize=8)
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.12, top=0.9)
    return fig


def plot_timeseries(path: Path, data: PlotInput) -> None:
    """Queue length, running jobs, GPU utilisation and used GPUs / used nodes over time (AnalySIM Fig. 4)."""
    d = data.samples
    t = d["t"] / 3600.0
    fig = _figure(9, 7)
    axes = fig.subplots(3, 1, sharex=True)
    axes[0].step(t, d["waiting"], where="post", label="waiting")
    axes[0].step(t, d["running"], where="post", label="running")
    axes[0].set_ylabel("jobs")
    axes[0].legend(fontsize=8, loc="upper right")
    axes[0].set_title("jobs waiting and running")
    used = d["used_gpus"]
    axes[1].step(t, used / max(data.total_gpus, 1), where="post")
    axes[1].set_ylabel("busy GPU fraction")
    axes[1].set_ylim(0, 1.05)
    axes[1].set_title(f"GPU utilisation ({data.total_gpus:,} GPUs)")
    nodes = d["used_nodes"]
    ratio = np.divide(used, nodes, out=np.zeros_like(nodes), where=nodes > 0)
    axes[2].step(t, ratio, where="post")
    axes[2].set_ylabel("GPUs per used node")
    axes[2].set_title("packing: busy GPUs / nodes in use (higher = less fragmented)")
    axes[2].set_xlabel("simulated time (h)")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(data.title, fontsize=11)
    fig.subplots_adjust(left=0.09, right=0.97, bottom=0.08, top=0.89, hspace=0.4)
    _save(fig, path)


def binned_busy(seg: np.ndarray, n_nodes: int, edges: np.ndarray) -> np.ndarray:
    """GPU-seconds busy per node and time bin, exactly (no per-segment Python loop).

    Per node the busy-GPU level is a step function (+gpus at a start, −gpus at an end);
    its integral is piecewise linear, so its value at the bin edges is a linear interpolation
    of the integral at the events.
    """
    grid = np.zeros((n_nodes, edges.size - 1))
    if seg.size == 0:
        return grid
    node = np.concatenate([seg[:, 1], seg[:, 1]]).astype(np.int64)
    t = np.concatenate([seg[:, 2], seg[:, 3]])
    dg = np.concatenate([seg[:, 4], -seg[:, 4]])
    order = np.lexsort((t, node))
    node, t, dg = node[order], t[order], dg[order]
    level = np.cumsum(dg)  # every node's changes sum to zero, so this is the per-node level
    integral = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(t))])
    bounds = np.searchsorted(node, np.arange(n_nodes + 1))
    for n in range(n_nodes):
        a, b = bounds[n], bounds[n + 1]
        if a == b:
            continue
        f = np.interp(edges, t[a:b], integral[a:b] - integral[a])
        grid[n] = np.diff(f)
    return grid


def _vc_spans(node_vc: Sequence[str]) -> list[tuple[str, int, int]]:
    spans: list[tuple[str, int, int]] = []
    for k, vc in enumerate(node_vc):
        if spans and spans[-1][0] == vc:
            spans[-1] = (vc, spans[-1][1], k + 1)
        else:
            spans.append((vc, k, k + 1))
    return spans


def plot_gpu_timeline(path: Path, data: PlotInput) -> str:
    """Write the GPU timeline; returns the view drawn ("gpus" or "nodes")."""
    fig, view = gpu_timeline_figure(data)
    _save(fig, path)
    return view


def gpu_timeline_figure(
    data: PlotInput, max_rows: int = DETAIL_MAX_ROWS, max_segments: int = DETAIL_MAX_SEGMENTS, bins: int = 400
) -> tuple[Any, str]:
    """GPU-level timeline (AnalySIM Fig. 3 over time) and the view drawn: "gpus" or "nodes".

    Small runs: one row per GPU, one rectangle (coloured by job) per job segment, node
    boundaries as lines. Larger ones: one row per node, colour = fraction of its GPUs busy
    in each of ``bins`` time bins, partition (VC) boundaries as lines.
    """
    from matplotlib.collections import PolyCollection

    seg = data.segments
    seg = seg[seg[:, 4] > 0]  # CPU-only jobs hold no GPU
    fig = _figure(11, 6.5)
    ax = fig.subplots()
    n_nodes = len(data.node_gpus)
    gpus = data.node_gpus
    offset = np.concatenate([[0], np.cumsum(gpus)])
    total_rows = int(offset[-1])
    view = "gpus" if total_rows <= max_rows and len(seg) <= max_segments else "nodes"
    if len(seg) == 0:
        ax.text(0.5, 0.5, "no job held a GPU", ha="center", transform=ax.transAxes)
    elif view == "gpus":
        import matplotlib

        cmap = matplotlib.colormaps["tab20"]
        free_at = np.full(total_rows, -np.inf)
        verts, colors = [], []
        for job, node, start, end, g in seg[np.argsort(seg[:, 2], kind="stable")].tolist():
            base = int(offset[int(node)])
            rows = [r for r in range(base, base + int(gpus[int(node)])) if free_at[r] <= start][: int(g)]
            x0, x1 = start / 3600, max(end, start + 1e-6) / 3600
            for r in rows:
                free_at[r] = end
                verts.append(((x0, r), (x1, r), (x1, r + 0.9), (x0, r + 0.9)))
                colors.append(cmap(int(job) % 20))
        ax.add_collection(PolyCollection(verts, facecolors=colors, edgecolors="none"))
        ax.set_xlim(seg[:, 2].min() / 3600, seg[:, 3].max() / 3600)
        ax.set_ylim(total_rows, 0)
        ax.hlines(offset[1:-1], 0, 1, transform=ax.get_yaxis_transform(), colors="k", lw=0.6)
        if n_nodes <= 40:
            ax.set_yticks((offset[:-1] + offset[1:]) / 2, list(data.node_names), fontsize=7)
        ax.set_ylabel(f"GPU, grouped by node ({n_nodes} nodes, {total_rows} GPUs; lines = node boundaries)")
        ax.set_title(f"GPU timeline, one colour per job — {data.title}", fontsize=10)
    else:
        t0, t1 = float(seg[:, 2].min()), float(seg[:, 3].max())
        t1 = max(t1, t0 + 1e-6)
        edges = np.linspace(t0, t1, bins + 1)
        busy = binned_busy(seg, n_nodes, edges)
        frac = busy / (np.maximum(gpus, 1)[:, None] * (edges[1] - edges[0]))
        im = ax.imshow(
            frac,
            aspect="auto",
            interpolation="nearest",
            cmap="viridis",
            vmin=0,
            vmax=1,
            extent=(t0 / 3600, t1 / 3600, n_nodes, 0),
        )
        fig.colorbar(im, ax=ax, label="fraction of the node's GPUs busy")
        spans = _vc_spans(data.node_vc)
        ax.hlines([b for _, _, b in spans[:-1]], 0, 1, transform=ax.get_yaxis_transform(), colors="w", lw=0.8)
        if len(spans) <= 40:
            ax.set_yticks([(a + b) / 2 for _, a, b in spans], [vc for vc, _, _ in spans], fontsize=7)
        ax.set_ylabel(f"node ({n_nodes} nodes, {total_rows} GPUs; lines = partition boundaries)")
        ax.set_title(f"GPU occupancy per node, {bins} time bins — {data.title}", fontsize=10)
    ax.set_xlabel("simulated time (h)")
    fig.subplots_adjust(left=0.14, right=0.97, bottom=0.09, top=0.93)
    return fig, view


COMPARE_METRICS = (
    ("avg_jct_s", "average JCT", "time"),
    ("avg_queue_s", "average queuing delay", "time"),
    ("makespan_s", "makespan", "time"),
    ("gpu_utilization", "GPU utilisation", "%"),
)


def _time_unit(vals: np.ndarray) -> tuple[float, str]:
    top = float(np.nanmax(vals)) if vals.size and np.isfinite(vals).any() else 0.0
    if top >= 2 * 86400:
        return 86400.0, "days"
    if top >= 2 * 3600:
        return 3600.0, "h"
    if top >= 120:
        return 60.0, "min"
    return 1.0, "s"


def plot_compare(path: Path, results: Mapping[str, SimResult], summaries: Mapping[str, Mapping[str, object]]) -> None:
    _save(compare_figure(results, summaries), path)


def compare_figure(results: Mapping[str, SimResult], summaries: Mapping[str, Mapping[str, object]]) -> Any:
    """One panel per metric: JCT CDFs, then a bar chart each for average JCT, queuing delay,
    makespan, GPU utilisation and QoS guarantee (or bounded slowdown without GENIE jobs)."""
    names = list(summaries)
    metrics = list(COMPARE_METRICS)
    if any(summaries[n].get("qos_guarantee") is not None for n in names):
        metrics.append(("qos_guarantee", "QoS guarantee (jobs meeting their deadline)", "pct"))
    else:
        metrics.append(("avg_bounded_slowdown", "average bounded slowdown", "x"))
    fig = _figure(15, 8.5)
    axes = fig.subplots(2, 3).ravel()
    ax = axes[0]
    all_jct = []
    for name, res in results.items():
        all_jct.append(_jct(res))
        _cdf(ax, all_jct[-1], name)
    _log_time_axis(ax, np.concatenate(all_jct) if all_jct else np.zeros(0))
    ax.set_xlabel("job completion time (log scale)")
    ax.set_ylabel("fraction of finished jobs")
    ax.set_title("JCT CDF")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    colors = [f"C{k % 10}" for k in range(len(names))]
    x = np.arange(len(names))
    for ax, (key, label, kind) in zip(axes[1:], metrics, strict=True):
        raw = [summaries[n].get(key) for n in names]
        vals = np.array([float(v) if isinstance(v, int | float) else np.nan for v in raw])
        if kind == "time":
            scale, unit = _time_unit(vals)
        elif kind == "%":
            scale, unit = 0.01, "%"
        elif kind == "pct":
            scale, unit = 1.0, "%"
        else:
            scale, unit = 1.0, "×"
        shown = vals / scale
        bars = ax.bar(x, np.nan_to_num(shown), color=colors)
        ax.bar_label(bars, labels=["n/a" if np.isnan(v) else f"{v:.3g}" for v in shown], fontsize=8)
        ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
        ax.set_title(label)
        ax.set_ylabel(f"{label.split(' (')[0]} ({unit})")
        if unit == "%":
            ax.set_ylim(0, 110)
        else:
            ax.set_ylim(bottom=0)  # bars start at zero, also when every policy's value is 0
        ax.grid(alpha=0.3, axis="y")
    first = next(iter(results.values()), None)
    if first is not None:
        c = first.config
        fig.suptitle(f"Policies compared on {first.trace.name} — placement {c.placement}, backfill {c.backfill}")
    fig.subplots_adjust(left=0.05, right=0.98, bottom=0.11, top=0.9, hspace=0.45, wspace=0.28)
    return fig


# The longest to draw first: two drawing processes take one each, and the short JCT CDF goes to
# whichever is free first (drawn in this order, 20,000 jobs: 0.16, 0.13-0.18 and 0.07 CPU-s).
PLOTS: tuple[tuple[str, Callable[[Path, PlotInput], object]], ...] = (
    ("timeseries.png", plot_timeseries),
    ("gpu_timeline.png", plot_gpu_timeline),
    ("jct_cdf.png", plot_jct_cdf),
)


def artefacts(plots: bool = True) -> list[str]:
    """File names write_all produces, in order."""
    return ["summary.json", "jobs.csv", "trace.json"] + ([name for name, _ in PLOTS] if plots else [])


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no sched_getaffinity (macOS)
        return os.cpu_count() or 1


# Past this many job segments the Chrome trace costs more than the plots: a drawing process writes it too.
CHILD_TRACE_SEGMENTS = 100_000


def _warm() -> None:
    """Import what drawing needs (a third of a second), so it is done before there is anything to draw;
    at a lower priority, so that the simulation it overlaps keeps its core."""
    os.nice(10)
    from matplotlib.backends import backend_agg  # noqa: F401
    from matplotlib.collections import PolyCollection  # noqa: F401
    from matplotlib.figure import Figure  # noqa: F401
    from matplotlib.ticker import FixedLocator  # noqa: F401


class Drawers:
    """Processes that draw the plots (and a large run's Chrome trace) beside this one.

    Started before the trace loads, they import matplotlib while this process loads and simulates,
    and then draw from small arrays (PlotInput, TraceInput) while this process writes the CSV and
    JSON. Forked, so nothing is re-imported; none without fork or a second core.
    """

    def __init__(self, workers: int | None = None) -> None:
        n = workers if workers is not None else min(len(PLOTS), _cores())
        self.pool: ProcessPoolExecutor | None = None
        if n > 0 and _cores() > 1 and "fork" in multiprocessing.get_all_start_methods():
            ctx = multiprocessing.get_context("fork")
            self.pool = ProcessPoolExecutor(n, mp_context=ctx, initializer=_warm)
            self.pool.submit(int)  # a fork pool starts all its processes on the first task

    def submit(self, write: Callable[[Path, Any], object], path: Path, data: object) -> Future[object] | None:
        if self.pool is None:
            return None
        try:
            return self.pool.submit(write, path, data)
        except BrokenProcessPool:
            return None

    def close(self, abort: bool = False) -> None:
        """Stop the processes; with ``abort`` (the run failed) at once, not after they finish importing."""
        pool, self.pool = self.pool, None
        if pool is None:
            return
        if abort:
            for proc in list(getattr(pool, "_processes", {}).values()):  # the executor has no public kill
                proc.kill()
        pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Drawers:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.close(abort=kind is not None)


def write_all(
    out: Path,
    res: SimResult,
    summary: Mapping[str, object],
    plots: bool = True,
    on_step: Callable[[str], None] | None = None,
    drawers: Drawers | None = None,
) -> list[Path]:
    """Write every artefact into ``out``; ``on_step(name)`` is called after each file, in order.

    ``drawers`` (else a pool started here) draw the plots, and on large runs write the Chrome trace,
    while this process writes the other files. A file a drawing process failed to write is written
    here again, so any error surfaces as it would have here.
    """
    out.mkdir(parents=True, exist_ok=True)
    segments = functools.cache(lambda: _segments(res))  # one array for the trace and the plots
    writers: list[tuple[str, Callable[[Path, Any], object], Callable[[], object]]] = [
        ("summary.json", write_summary, lambda: summary),
        ("jobs.csv", write_jobs_csv, lambda: res),
        ("trace.json", write_chrome_trace, lambda: TraceInput.of(res, segments=segments())),
    ]
    if plots:
        plot_input = functools.cache(lambda: PlotInput.of(res, segments()))  # built once, for every plot
        writers += [(name, fn, plot_input) for name, fn in PLOTS]
    own = drawers is None and plots
    if own:
        drawers = Drawers()
    # drawing processes take a suffix of the list, so steps are still reported in order
    split = len(writers)
    if plots and drawers is not None and drawers.pool is not None:
        split = 2 if len(res.segments) > CHILD_TRACE_SEGMENTS else 3
    try:
        futures = {
            name: drawers.submit(fn, out / name, make()) for name, fn, make in writers[split:] if drawers is not None
        }
        files = []
        for name, fn, make in writers[:split]:
            fn(out / name, make())
            files.append(out / name)
            if on_step is not None:
                on_step(name)
        for name, fn, make in writers[split:]:
            future, ok = futures.get(name), False
            if future is not None:
                try:
                    future.result()
                    ok = True
                except Exception:  # redrawn below, where its error (if any) surfaces
                    pass
            if not ok:
                fn(out / name, make())
            files.append(out / name)
            if on_step is not None:
                on_step(name)
    finally:
        if own and drawers is not None:
            drawers.close()
    return files
