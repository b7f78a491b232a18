"""Plots a person can read, drawn so that large runs stay fast; exact binned occupancy; JSON via orjson."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from qosmos.simulator import outputs
from qosmos.simulator.engine import SimConfig, simulate
from qosmos.simulator.metrics import summarize
from qosmos.simulator.traces import load_native, load_trace

import qosmos


def test_binned_busy_hand_computed() -> None:
    # node 0: 2 GPUs over [0, 15); node 1: 1 GPU over [5, 25) (past the last edge) and 3 GPUs over [12, 14)
    seg = np.array([[0, 0, 0.0, 15.0, 2], [1, 1, 5.0, 25.0, 1], [2, 1, 12.0, 14.0, 3]], float)
    grid = outputs.binned_busy(seg, 3, np.array([0.0, 10.0, 20.0]))
    assert grid.tolist() == [[20.0, 10.0], [5.0, 10.0 + 6.0], [0.0, 0.0]]


def test_binned_busy_matches_brute_force() -> None:
    rng = np.random.default_rng(3)
    n = 400
    start = rng.uniform(0, 1000, n)
    seg = np.column_stack(
        [np.arange(n), rng.integers(0, 7, n), start, start + rng.exponential(80, n), rng.integers(1, 9, n)]
    )
    edges = np.linspace(0, 1200, 37)
    grid = outputs.binned_busy(seg, 7, edges)
    brute = np.zeros_like(grid)
    for _, node, s, e, g in seg:
        for k in range(edges.size - 1):
            brute[int(node), k] += g * max(0.0, min(e, edges[k + 1]) - max(s, edges[k]))
    assert grid == pytest.approx(brute, rel=1e-9, abs=1e-6)


def test_cdf_starts_at_the_fraction_of_zero_length_jobs() -> None:
    from matplotlib.figure import Figure

    ax = Figure().subplots()
    zeros, frac = outputs._cdf(ax, np.array([0.0, 0.0, 1.0, 10.0]), "x")
    assert (zeros, frac) == (2, 0.5)
    line = ax.lines[0]
    assert line.get_ydata()[0] == 0.5 and line.get_ydata()[-1] == 1.0
    assert min(line.get_xdata()) == 1.0  # nothing drawn at a fake 1e-3 s


def test_jct_cdf_states_zero_length_jobs(tiny) -> None:  # type: ignore[no-untyped-def]
    res = simulate(load_native(tiny("id,submit,gpus,duration\nA,0,1,0\nB,0,1,100\nC,5,1,0")), SimConfig())
    fig = outputs.jct_cdf_figure(outputs.PlotInput.of(res))
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    # one GPU: A runs 0 s at 0 (JCT 0); B 0-100; C (0 s) waits for B: JCT 95
    assert any("JCT = 0 s" in t and "1 jobs" in t and "33.3%" in t for t in labels), labels
    assert "jobs.csv" in ax.get_title() and "fifo" in ax.get_title()
    assert ax.get_xlabel() and ax.get_ylabel()


def test_gpu_timeline_small_run_one_collection_with_node_lines(tiny) -> None:  # type: ignore[no-untyped-def]
    res = simulate(
        load_native(tiny("id,submit,gpus,duration\nA,0,2,10\nB,0,1,5\nC,1,3,4", "name,gpus\nn0,2\nn1,2")),
        SimConfig(policy="fifo"),
    )
    fig, view = outputs.gpu_timeline_figure(outputs.PlotInput.of(res))
    ax = fig.axes[0]
    assert view == "gpus"
    assert len(ax.patches) == 0
    rects = [c for c in ax.collections if type(c).__name__ == "PolyCollection"]
    assert len(rects) == 1 and len(rects[0].get_paths()) == 2 + 1 + 3  # one rectangle per GPU held
    node_lines = [c for c in ax.collections if type(c).__name__ == "LineCollection"]
    assert len(node_lines) == 1 and len(node_lines[0].get_segments()) == 1  # the boundary between n0 and n1
    assert "jobs.csv" in ax.get_title() and "fifo" in ax.get_title()


def test_gpu_timeline_large_run_is_one_image() -> None:
    res = simulate(load_trace("builtin:helios-synth", jobs=3000), SimConfig())
    fig, view = outputs.gpu_timeline_figure(outputs.PlotInput.of(res))
    ax = fig.axes[0]
    assert view == "nodes" and len(ax.images) == 1
    img = ax.images[0].get_array()
    assert img.shape == (len(res.node_gpus), 400) and img.min() >= 0 and img.max() <= 1 + 1e-9
    # the image holds every GPU-second the run used
    width = (ax.images[0].get_extent()[1] - ax.images[0].get_extent()[0]) * 3600 / 400
    used = float((np.asarray(img) * np.array(res.node_gpus)[:, None] * width).sum())
    assert used == pytest.approx(sum(res.gpu_seconds), rel=1e-6)
    assert "helios-synth" in ax.get_title()


def test_compare_one_panel_per_metric_with_titles_and_labels(tmp_path: Path) -> None:
    tr = lambda: load_trace("builtin:genie", "genie", density=5, seed=1)  # noqa: E731
    results = {p: simulate(tr(), SimConfig(policy=p, placement="cer")) for p in ("fifo", "swaf")}
    summaries = {p: summarize(r) for p, r in results.items()}
    fig = outputs.compare_figure(results, summaries)
    titles = [ax.get_title() for ax in fig.axes]
    for needle in ("JCT CDF", "average JCT", "average queuing delay", "makespan", "GPU utilisation", "QoS guarantee"):
        assert sum(needle == t or t.startswith(needle) for t in titles) == 1, (needle, titles)
    assert all(ax.get_ylabel() for ax in fig.axes)
    cdf = fig.axes[0]
    assert [t.get_text() for t in cdf.get_legend().get_texts()] == ["fifo", "swaf"]
    qos = fig.axes[titles.index(next(t for t in titles if t.startswith("QoS")))]
    heights = [b.get_height() for b in qos.patches]
    assert heights == pytest.approx([summaries[p]["qos_guarantee"] for p in ("fifo", "swaf")])
    assert all(ax.get_ylim()[0] == 0 for ax in fig.axes[1:])  # bars start at zero
    outputs.plot_compare(tmp_path / "c.png", results, summaries)
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    # no queuing under either policy: the panel still starts at 0 (not at -0.05)
    idle = {p: {**s, "avg_queue_s": 0.0} for p, s in summaries.items()}
    queue = next(ax for ax in outputs.compare_figure(results, idle).axes if ax.get_title() == "average queuing delay")
    assert queue.get_ylim()[0] == 0


def test_summary_json_is_plain_json_with_nulls(tmp_path: Path) -> None:
    outputs.write_summary(tmp_path / "s.json", {"a": float("nan"), "b": np.float64(1.5), "c": [1, None]})
    got = json.loads((tmp_path / "s.json").read_text())
    assert got == {"qosmos_version": qosmos.__version__, "a": None, "b": 1.5, "c": [1, None]}


def test_write_all_draws_plots_beside_the_data_files_and_surfaces_a_plot_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plots drawn by a forked child (issue 9 §4) are all there, steps are reported for every file, and a
    plot that fails in the child fails the call here with its own error (the parent redraws it)."""
    res = simulate(load_trace("builtin:helios-synth", None, jobs=200), SimConfig())
    steps: list[str] = []
    files = outputs.write_all(tmp_path / "ok", res, summarize(res), on_step=steps.append)
    assert steps == outputs.artefacts() and [f.name for f in files] == steps
    assert all(f.stat().st_size > 0 for f in files)
    monkeypatch.setattr(outputs, "CHILD_TRACE_SEGMENTS", 0)  # a large run: the child writes the trace too
    steps.clear()
    files = outputs.write_all(tmp_path / "large", res, summarize(res), on_step=steps.append)
    assert steps == outputs.artefacts() and all(f.stat().st_size > 0 for f in files)
    trace = json.loads((tmp_path / "large" / "trace.json").read_bytes())
    assert trace == json.loads((tmp_path / "ok" / "trace.json").read_bytes())

    def broken(path: Path, _res: object) -> None:
        raise ValueError("cannot draw this")

    monkeypatch.setattr(outputs, "PLOTS", (*outputs.PLOTS[:1], ("broken.png", broken)))
    with pytest.raises(ValueError, match="cannot draw this"):
        outputs.write_all(tmp_path / "bad", res, summarize(res))
    assert (tmp_path / "bad" / "trace.json").exists()


def test_chrome_trace_truncated_keeps_the_earliest_slices_with_their_own_jobs() -> None:
    """The trace sent to a drawing process holds only the columns of the jobs its slices name: each
    slice must still carry its own job's name, VC, GPUs and submit time."""
    res = simulate(load_trace("builtin:helios-synth", jobs=300), SimConfig())
    full = outputs.chrome_trace(outputs.TraceInput.of(res))
    cut = outputs.chrome_trace(outputs.TraceInput.of(res, max_slices=50))
    jobs = {j.id: j for j in res.trace.jobs}
    slices = [e for e in cut["traceEvents"] if e["ph"] == "X"]  # type: ignore[attr-defined]
    assert len(slices) == 50 and cut["otherData"] == {"note": "truncated to the first 50 slices by start time"}
    assert "otherData" not in full
    for e in slices:
        job = jobs[e["name"]]
        assert (e["cat"], e["args"]["job_gpus"], e["args"]["submit_s"]) == (job.vc, job.gpus, job.submit_time)
    starts = sorted(s[2] for s in res.segments)
    assert max(e["ts"] for e in slices) == round(starts[49] * 1e6)  # the 50 earliest starts, none later


def test_drawers_draw_what_this_process_would_and_die_at_once_on_failure(tmp_path: Path) -> None:
    """The drawing processes get only PlotInput/TraceInput: every file they write must be byte for byte
    the one this process writes from the whole result. A failed run kills them (not waiting for their
    matplotlib import)."""
    res = simulate(load_trace("builtin:helios-synth", None, jobs=400), SimConfig())
    summary = summarize(res)
    with outputs.Drawers(0) as none:
        assert none.pool is None
        outputs.write_all(tmp_path / "here", res, summary, drawers=none)
    with outputs.Drawers(2) as drawers:
        assert drawers.pool is not None
        outputs.write_all(tmp_path / "there", res, summary, drawers=drawers)
        # a large run: the trace too is written by a drawing process
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(outputs, "CHILD_TRACE_SEGMENTS", 0)
            outputs.write_all(tmp_path / "large", res, summary, drawers=drawers)
    for name in outputs.artefacts():
        here = (tmp_path / "here" / name).read_bytes()
        assert here == (tmp_path / "there" / name).read_bytes() == (tmp_path / "large" / name).read_bytes(), name
    with pytest.raises(RuntimeError, match="bad run"), outputs.Drawers(2) as doomed:
        procs = list(doomed.pool._processes.values())  # type: ignore[union-attr]
        assert len(procs) == 2 and all(p.is_alive() for p in procs)
        raise RuntimeError("bad run")
    assert doomed.pool is None and not any(p.is_alive() for p in procs)
    assert all(p.exitcode == -9 for p in procs)  # killed, not left to finish


DRAWN_HERE: list[int] = []  # pids that drew through _timeline_here (only this process's own calls land here)


def _timeline_here(path: Path, data: outputs.PlotInput) -> str:
    DRAWN_HERE.append(os.getpid())
    return outputs.plot_gpu_timeline(path, data)  # returns the view drawn, as the real one does


def test_a_file_drawn_elsewhere_is_not_drawn_again_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer's return value (the GPU timeline returns its view) is not a failure: the file a drawing
    process wrote is not drawn a second time by this process."""
    res = simulate(load_trace("builtin:helios-synth", None, jobs=300), SimConfig())
    plots = tuple((n, _timeline_here if n == "gpu_timeline.png" else fn) for n, fn in outputs.PLOTS)
    monkeypatch.setattr(outputs, "PLOTS", plots)
    DRAWN_HERE.clear()
    with outputs.Drawers(2) as drawers:
        outputs.write_all(tmp_path, res, summarize(res), drawers=drawers)
    assert (tmp_path / "gpu_timeline.png").stat().st_size > 0
    assert DRAWN_HERE == []
