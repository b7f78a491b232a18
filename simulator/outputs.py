"""Run artefacts: summary.json, jobs.csv, trace.json (Chrome trace), PNG plots (AnalySIM §3.3).

The Chrome trace has one process per node and one thread ("lane") per set of
non-overlapping jobs on that node, a complete event (ph "X", µs) per job per node, and
metadata events naming processes and threads: it opens in Perfetto / chrome://tracing.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from qosmos.simulator.engine import DONE, REJECTED, WITHDRAWN, SimResult

STATE_NAMES = {DONE: "done", WITHDRAWN: "withdrawn", REJECTED: "rejected"}
MAX_TRACE_SLICES = 300_000


def write_summary(path: Path, summary: Mapping[str, object]) -> None:
    path.write_text(json.dumps(summary, indent=2, sort_keys=False))


def write_jobs_csv(path: Path, res: SimResult) -> None:
    cols = [
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
    ]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        for i, j in enumerate(res.trace.jobs):
            s, e = res.start[i], res.end[i]
            started = s == s
            ended = e == e
            shape = res.shape[i]
            w.writerow(
                [
                    j.id,
                    j.vc,
                    j.user,
                    j.gpus,
                    j.gpu_milli,
                    j.model,
                    j.qos.name.lower(),
                    f"{j.submit_time:.3f}",
                    f"{s:.3f}" if started else "",
                    f"{e:.3f}" if ended else "",
                    f"{s - j.submit_time:.3f}" if started else "",
                    f"{e - j.submit_time:.3f}" if ended else "",
                    f"{res.run_time[i]:.3f}",
                    res.nodes_used[i],
                    f"{shape[0]}x{shape[1]}" if shape else "",
                    res.preemptions[i],
                    f"{res.overhead_s[i]:.1f}",
                    int(res.cross_switch[i]),
                    int(res.backfilled[i]),
                    STATE_NAMES.get(res.state[i], "unfinished"),
                    j.end_state.value,
                ]
            )


def chrome_trace(res: SimResult, max_slices: int = MAX_TRACE_SLICES) -> dict[str, object]:
    """Chrome trace event format: {"traceEvents": [...]}; ts/dur in microseconds."""
    segs = sorted(res.segments, key=lambda s: (s[1], s[2], s[0]))
    truncated = len(segs) > max_slices
    if truncated:
        first = sorted(res.segments, key=lambda s: s[2])[:max_slices]
        segs = sorted(first, key=lambda s: (s[1], s[2], s[0]))
    jobs = res.trace.jobs
    events: list[dict[str, object]] = []
    lanes_by_node: dict[int, list[float]] = {}
    for job, node, start, end, gpus in segs:
        lanes = lanes_by_node.setdefault(node, [])
        for k, last in enumerate(lanes):
            if last <= start:
                lanes[k] = end
                lane = k
                break
        else:
            lanes.append(end)
            lane = len(lanes) - 1
        j = jobs[job]
        events.append(
            {
                "name": j.id,
                "cat": j.vc,
                "ph": "X",
                "ts": round(start * 1e6),
                "dur": max(round((end - start) * 1e6), 1),
                "pid": node + 1,
                "tid": lane + 1,
                "args": {"gpus_on_node": gpus, "job_gpus": j.gpus, "vc": j.vc, "submit_s": j.submit_time},
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
                "args": {"name": f"{res.node_names[node]} [{res.node_vc[node]}] {res.node_gpus[node]} GPUs"},
            }
        )
        meta.append({"name": "process_sort_index", "ph": "M", "pid": node + 1, "tid": 0, "args": {"sort_index": node}})
        for k in range(len(lanes)):
            meta.append(
                {"name": "thread_name", "ph": "M", "pid": node + 1, "tid": k + 1, "args": {"name": f"lane {k}"}}
            )
    out: dict[str, object] = {"traceEvents": meta + events, "displayTimeUnit": "ms"}
    if truncated:
        out["otherData"] = {"note": f"truncated to the first {max_slices} slices by start time"}
    return out


def write_chrome_trace(path: Path, res: SimResult) -> None:
    with path.open("w") as fh:
        json.dump(chrome_trace(res), fh, separators=(",", ":"))


# ---- plots ---------------------------------------------------------------------------------


def _plt():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _cdf(ax, values: np.ndarray, label: str) -> None:  # type: ignore[no-untyped-def]
    if values.size == 0:
        return
    x = np.sort(values)
    y = np.arange(1, x.size + 1) / x.size
    if x.size > 5000:
        pick = np.linspace(0, x.size - 1, 5000).astype(int)
        x, y = x[pick], y[pick]
    ax.plot(np.maximum(x, 1e-3), y, label=label)


def _jct(res: SimResult) -> np.ndarray:
    jobs = res.trace.jobs
    return np.array([res.end[i] - jobs[i].submit_time for i, s in enumerate(res.state) if s == DONE], float)


def plot_jct_cdf(path: Path, res: SimResult) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    _cdf(ax, _jct(res), res.config.policy)
    ax.set_xscale("log")
    ax.set_xlabel("JCT (s)")
    ax.set_ylabel("CDF")
    ax.set_title(f"JCT CDF — {res.trace.name}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_timeseries(path: Path, res: SimResult) -> None:
    """Queue length, running jobs, GPU utilisation and used GPUs / used nodes over time (AnalySIM Fig. 4)."""
    plt = _plt()
    d = res.samples
    t = np.array(d["t"], float) / 3600.0
    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    axes[0].step(t, d["waiting"], where="post", label="waiting")
    axes[0].step(t, d["running"], where="post", label="running")
    axes[0].set_ylabel("jobs")
    axes[0].legend()
    axes[1].step(t, np.array(d["used_gpus"], float) / max(res.total_gpus, 1), where="post")
    axes[1].set_ylabel("GPU utilisation")
    axes[1].set_ylim(0, 1.05)
    nodes = np.array(d["used_nodes"], float)
    ratio = np.divide(np.array(d["used_gpus"], float), nodes, out=np.zeros_like(nodes), where=nodes > 0)
    axes[2].step(t, ratio, where="post")
    axes[2].set_ylabel("used GPUs / used nodes")
    axes[2].set_xlabel("time (h)")
    for ax in axes:
        ax.grid(alpha=0.3)
    fig.suptitle(f"{res.trace.name} — {res.config.policy}/{res.config.placement}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_gpu_timeline(path: Path, res: SimResult, max_rows: int = 256, bins: int = 400) -> None:
    """GPU-level timeline (AnalySIM Fig. 3 over time): one row per GPU, a colour per job.

    Larger clusters are aggregated: one row per node, colour = fraction of its GPUs busy
    in each of ``bins`` time bins.
    """
    plt = _plt()
    segs = res.segments
    fig, ax = plt.subplots(figsize=(10, 6))
    total_rows = sum(res.node_gpus)
    if not segs:
        ax.text(0.5, 0.5, "no jobs ran", ha="center")
    elif total_rows <= max_rows and len(segs) <= 20000:
        offset = np.concatenate([[0], np.cumsum(res.node_gpus)])
        cmap = plt.get_cmap("tab20")
        used_rows: dict[int, list[float]] = {}
        for job, node, start, end, gpus in segs:
            base = int(offset[node])
            placed = 0
            for r in range(base, base + res.node_gpus[node]):  # first GPU rows free at start
                if used_rows.get(r, -1.0) <= start and placed < max(gpus, 1):
                    ax.broken_barh([(start / 3600, max(end - start, 1e-6) / 3600)], (r, 0.9), color=cmap(job % 20))
                    used_rows[r] = end
                    placed += 1
        ax.set_ylabel("GPU (node-major)")
        ax.set_ylim(0, total_rows)
    else:
        t_end = max(s[3] for s in segs)
        t0 = min(s[2] for s in segs)
        edges = np.linspace(t0, t_end, bins + 1)
        grid = np.zeros((len(res.node_gpus), bins))
        width = edges[1] - edges[0]
        for _, node, start, end, gpus in segs:
            a = int((start - t0) // width)
            b = min(int((end - t0) // width), bins - 1)
            if a == b:
                grid[node, a] += gpus * (end - start)
            else:
                grid[node, a] += gpus * (edges[a + 1] - start)
                grid[node, b] += gpus * (end - edges[b])
                if b > a + 1:
                    grid[node, a + 1 : b] += gpus * width
        cap = np.maximum(np.array(res.node_gpus, float), 1)[:, None] * width
        im = ax.imshow(
            grid / cap,
            aspect="auto",
            interpolation="nearest",
            cmap="viridis",
            vmin=0,
            vmax=1,
            extent=(t0 / 3600, t_end / 3600, len(res.node_gpus), 0),
        )
        fig.colorbar(im, ax=ax, label="busy GPU fraction")
        ax.set_ylabel("node")
    ax.set_xlabel("time (h)")
    ax.set_title("GPU timeline")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_compare(path: Path, results: Mapping[str, SimResult], summaries: Mapping[str, Mapping[str, object]]) -> None:
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, res in results.items():
        _cdf(ax1, _jct(res), name)
    ax1.set_xscale("log")
    ax1.set_xlabel("JCT (s)")
    ax1.set_ylabel("CDF")
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=8)
    names = list(summaries)
    keys = [
        k for k in ("avg_jct_s", "avg_queue_s", "makespan_s") if all(summaries[n].get(k) is not None for n in names)
    ]
    x = np.arange(len(names))
    w = 0.8 / max(len(keys), 1)
    for k_i, k in enumerate(keys):
        vals = np.array([float(summaries[n][k]) for n in names]) / 3600  # type: ignore[arg-type]
        ax2.bar(x + k_i * w, vals, w, label=k.replace("_s", " (h)"))
    ax2.set_xticks(x + w * (len(keys) - 1) / 2, names, rotation=30, ha="right")
    ax2.legend(fontsize=8)
    ax2.grid(alpha=0.3, axis="y")
    q = [summaries[n].get("qos_guarantee") for n in names]
    if all(v is not None for v in q):
        ax3 = ax2.twinx()
        ax3.plot(x + w * (len(keys) - 1) / 2, q, "ko-", label="QoS guarantee %")
        ax3.set_ylabel("QoS guarantee %")
        ax3.set_ylim(0, 105)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_all(out: Path, res: SimResult, summary: Mapping[str, object], plots: bool = True) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "summary.json", out / "jobs.csv", out / "trace.json"]
    write_summary(files[0], summary)
    write_jobs_csv(files[1], res)
    write_chrome_trace(files[2], res)
    if plots:
        for name, fn in (
            ("jct_cdf.png", plot_jct_cdf),
            ("timeseries.png", plot_timeseries),
            ("gpu_timeline.png", plot_gpu_timeline),
        ):
            fn(out / name, res)
            files.append(out / name)
    return files
