"""``qosmos sweep``: a grid of simulations (traces × policies × placements × seeds).

Cells run in local processes (``concurrent.futures``) or, with ``--ray ADDRESS``, as Ray
tasks on an existing cluster (``pip install qosmos[ray]``; Ray is imported only then).
A cell returns its summary; the driver writes ``DIR/<cell>/summary.json``, so a cell whose
summary.json exists is finished and skipped when the sweep is run again (resumable). The summary
keeps the sweep's options and the sha256 of the trace file the cell read (and the options that of
the model database file): run again into the same folder with other options (failures,
backfilling, cluster size...) or an edited trace or database, the sweep refuses before running
anything rather than mix results of two configurations in one sweep.csv.
At the end every finished cell is one row of ``DIR/sweep.csv``, drawn in ``DIR/sweep.png``.
With Ray, every worker must be able to read the trace (builtins always can).
"""

from __future__ import annotations

import concurrent.futures as cf
import csv
import hashlib
import itertools
import multiprocessing
import os
import re
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import orjson
import typer
from qosmos.extender.core.backfill import MODES as BACKFILL_MODES
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.failures import DEFAULT_BACKOFF_LIMIT, DEFAULT_NODE_LOST_S
from qosmos.simulator import options as opt
from qosmos.simulator.engine import BACKFILL_ESTIMATES, PLACEMENTS, POLICIES, SimConfig, simulate
from qosmos.simulator.failures import DEFAULT_NODE_MTTR_H, GpuFailures, node_outage_model
from qosmos.simulator.metrics import summarize
from qosmos.simulator.traces import FORMATS, check_trace

from qosmos import __version__
from qosmos.clitools import clean_errors

SUMMARY = "summary.json"
COLUMNS = (
    "trace",
    "policy",
    "placement",
    "seed",
    "jobs",
    "avg_jct_s",
    "median_jct_s",
    "p95_jct_s",
    "p99_jct_s",
    "avg_queue_s",
    "queued_jobs",
    "makespan_s",
    "gpu_utilization",
    "fragmentation",
    "qos_guarantee",
    "avg_bounded_slowdown",
    "backfilled_jobs",
    "preemptions",
    "restarts",
    "failed_jobs",
    "lost_gpu_hours",
    "node_lost_requeues",
    "rejected_jobs",
    "unfinished_jobs",
    "wall_s",
    "cell",
)


@dataclass(frozen=True)
class Cell:
    """One point of the grid."""

    trace: str
    policy: str
    placement: str
    seed: int

    @property
    def name(self) -> str:
        """Folder name of the cell: readable and unique per grid point."""
        slug = re.sub(r"[^A-Za-z0-9.+-]+", "_", self.trace).strip("_")[-60:]
        return f"{slug}__{self.policy}__{self.placement}__s{self.seed}"


def grid(traces: Sequence[str], policies: Sequence[str], placements: Sequence[str], seeds: Sequence[int]) -> list[Cell]:
    return [Cell(*c) for c in itertools.product(traces, policies, placements, seeds)]


def cell_config(cell: Cell, options: Mapping[str, Any]) -> SimConfig:
    mtbf = options.get("mtbf_gpu_hours")
    outage_file = options.get("node_outages")
    outages = node_outage_model(
        options.get("node_mtbf_hours"),
        options.get("node_mttr_hours", DEFAULT_NODE_MTTR_H),
        None if outage_file is None else Path(outage_file),
        cell.seed,  # each seed its own draw of node outages too
    )
    cfg = SimConfig(
        policy=cell.policy,
        placement=cell.placement,
        seed=cell.seed,
        backfill=options.get("backfill", "none"),
        relax_factor=options.get("relax_factor", 0.1),
        backfill_estimates=options.get("backfill_estimates", "predicted"),
        truth_noise=options.get("truth_noise", 0.0),
        record_segments=False,  # a sweep keeps summaries only
        # each seed of the grid its own draw of failures, the same for every policy and placement
        failures=None if mtbf is None else GpuFailures(mtbf, cell.seed),
        checkpoint_interval=options.get("checkpoint_interval"),
        backoff_limit=options.get("backoff_limit", DEFAULT_BACKOFF_LIMIT),
        outages=outages,
        node_lost_seconds=options.get("node_lost_seconds", DEFAULT_NODE_LOST_S),
    )
    cfg.validate()
    return cfg


def run_cell(cell: Cell, options: Mapping[str, Any]) -> dict[str, object]:
    """Load, simulate and summarise one cell (in a worker process or a Ray task)."""
    from qosmos.extender.explain import load_profiles
    from qosmos.simulator.traces import load_trace, scale_nodes

    cfg = cell_config(cell, options)
    tr = load_trace(
        cell.trace,
        options.get("format"),
        nodes=options.get("nodes"),
        gpus_per_node=options.get("gpus_per_node"),
        seed=cell.seed,
        jobs=options.get("synth_jobs", 10000),
        density=options.get("density", 10.0),
        hours=options.get("hours", 24.0),
    )
    if options.get("scale") is not None:
        scale_nodes(tr, options["scale"])
    # the database file the sweep resolved (None: built-ins), so every worker reads the same profiles
    modeldb = load_profiles(options["db"]).db if options.get("db") else None
    summary = summarize(simulate(tr, cfg, modeldb), modeldb)
    summary["cell"] = asdict(cell)
    summary["sweep_options"] = dict(options)
    summary["trace_sha256"] = input_digest(cell.trace)  # what this cell read, for a resumed sweep's check
    summary["qosmos_version"] = __version__  # and what computed it
    summary["ran_on"] = _where()
    return summary


def _where() -> dict[str, object]:
    """Where a cell ran: a Ray worker (its node id) or a local process."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return {"runner": "ray", "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}
    return {"runner": "local", "pid": os.getpid()}


def finished(out: Path, cell: Cell) -> bool:
    return (out / cell.name / SUMMARY).is_file()


_DIGESTS: dict[tuple[str, int, int], str] = {}  # a worker runs many cells of one trace: each file hashed once


def input_digest(spec: str | None) -> str | None:
    """sha256 of a trace or database file (a folder: of its files' names and contents); None for a
    builtin trace or no file."""
    if spec is None or spec.startswith("builtin:"):
        return None
    path = Path(spec)
    if path.is_file():
        st = path.stat()
        key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
        if key not in _DIGESTS:
            _DIGESTS[key] = _sha256(path)
        return _DIGESTS[key]
    return _sha256(path)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]:
        if f != path:
            h.update(str(f.relative_to(path)).encode() + b"\0")
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()


def check_resumable(out: Path, cells: Sequence[Cell], options: Mapping[str, Any]) -> None:
    """InvalidInput when a finished cell in ``out`` ran with other options than these, read another
    version of its trace file, or was computed by another qosmos version (summaries written before these
    were kept say nothing, and stay finished)."""
    want = orjson.loads(orjson.dumps(dict(options)))  # as the summary stores them (a tuple reads back a list)
    digests: dict[str, str | None] = {}
    differ: dict[str, list[str]] = {}
    for c in cells:
        if not finished(out, c):
            continue
        summary = orjson.loads((out / c.name / SUMMARY).read_bytes())
        had, why = summary.get("sweep_options"), []
        if isinstance(had, dict) and had != want:
            keys = sorted(k for k in want.keys() | had.keys() if want.get(k) != had.get(k))
            why = [f"{k} {had.get(k)!r} (now {want.get(k)!r})" for k in keys]
        if summary.get("qosmos_version", __version__) != __version__:  # one sweep.csv, one qosmos's numbers
            why.append(f"qosmos {summary['qosmos_version']} (now {__version__})")
        if summary.get("trace_sha256") is not None:
            if c.trace not in digests:
                digests[c.trace] = input_digest(c.trace)
            if digests[c.trace] != summary["trace_sha256"]:
                why.append(f"the trace {c.trace} has changed since (sha256)")
        if why:
            differ[c.name] = why
    if differ:
        first, why = next(iter(differ.items()))
        raise InvalidInput(
            "out",
            str(out),
            f"{len(differ)} finished cell(s) there ran with other options or inputs, e.g. {first}: {', '.join(why)}; "
            "give another --out, or remove those cells' folders to run them again",
        )


def save_cell(out: Path, cell: Cell, summary: Mapping[str, object]) -> None:
    """Write the cell's summary.json atomically: it is the marker that the cell is finished."""
    d = out / cell.name
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / (SUMMARY + ".tmp")
    tmp.write_bytes(orjson.dumps(dict(summary), option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    tmp.replace(d / SUMMARY)


Progress = Callable[[Cell, BaseException | None], None]


def run_local(
    cells: Sequence[Cell], options: Mapping[str, Any], out: Path, workers: int, done: Progress
) -> dict[Cell, BaseException]:
    """Run cells in ``workers`` fresh processes; returns the cells that failed."""
    failed: dict[Cell, BaseException] = {}
    ctx = multiprocessing.get_context("spawn")  # no fork of a process holding progress-bar threads
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {pool.submit(run_cell, c, dict(options)): c for c in cells}
        for fut in cf.as_completed(futures):
            cell = futures[fut]
            exc = fut.exception()
            if exc is None:
                save_cell(out, cell, fut.result())
            else:
                failed[cell] = exc
            done(cell, exc)
    return failed


RAY_PROBE_TIMEOUT_S = 5.0


def reachable(address: str, timeout_s: float = RAY_PROBE_TIMEOUT_S) -> None:
    """InvalidInput at once when nothing listens at a ``host:port`` Ray address: ``ray.init`` would
    retry the connection for a minute or more, printing each retry. ``auto`` and ``ray://`` addresses
    are left to Ray (the first is resolved from this machine's Ray session, the second is Ray Client)."""
    if address == "auto" or "://" in address:
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise InvalidInput("ray", address, "expected HOST:PORT of the Ray head's GCS (e.g. 127.0.0.1:6379), or auto")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise InvalidInput("ray", address, f"no Ray cluster at {address} ({exc.strerror or exc})") from None


def run_ray(
    cells: Sequence[Cell], options: Mapping[str, Any], out: Path, address: str, done: Progress
) -> dict[Cell, BaseException]:
    """Run cells as tasks on the Ray cluster at ``address``; returns the cells that failed."""
    try:
        import ray
    except ImportError:
        raise InvalidInput("ray", address, "Ray is not installed; pip install 'qosmos[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        reachable(address)
        try:
            # ray.init annotates logging_level as int but takes a level name too (its own default is "info")
            ray.init(address=address, log_to_driver=False, logging_level="ERROR")  # type: ignore[arg-type]
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise InvalidInput("ray", address, f"cannot connect to a Ray cluster there: {exc}") from None
    failed: dict[Cell, BaseException] = {}
    try:
        task = ray.remote(run_cell)
        refs = {task.remote(c, dict(options)): c for c in cells}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                cell = refs[ref]
                try:
                    save_cell(out, cell, ray.get(ref))
                    done(cell, None)
                except Exception as exc:  # a task's failure is reported per cell, the sweep goes on
                    cause = getattr(exc, "cause", None)
                    failed[cell] = cause if isinstance(cause, BaseException) else exc
                    done(cell, failed[cell])
    finally:
        if started_here:
            ray.shutdown()
    return failed


def collect(out: Path, cells: Sequence[Cell]) -> list[dict[str, object]]:
    """sweep.csv rows of the finished cells, in grid order."""
    rows = []
    for c in cells:
        p = out / c.name / SUMMARY
        if not p.is_file():
            continue
        s = orjson.loads(p.read_bytes())
        row: dict[str, object] = {**asdict(c), "cell": c.name}
        row.update({k: s.get(k) for k in COLUMNS if k not in row})
        rows.append(row)
    return rows


def write_csv(path: Path, rows: Sequence[Mapping[str, object]]) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if r.get(k) is None else r.get(k) for k in COLUMNS})


PLOT_METRICS = (
    ("avg_jct_s", "average JCT (h)", 3600.0),
    ("avg_queue_s", "average queuing delay (h)", 3600.0),
    ("makespan_s", "makespan (h)", 3600.0),
    ("gpu_utilization", "GPU utilisation (%)", 0.01),
)


def plot_sweep(path: Path, rows: Sequence[Mapping[str, object]]) -> None:
    """One row of panels per trace, one panel per metric; bars per policy, one colour per
    placement; bar = mean over seeds, whisker = min..max over seeds."""
    from matplotlib.figure import Figure

    traces = list(dict.fromkeys(str(r["trace"]) for r in rows))
    policies = list(dict.fromkeys(str(r["policy"]) for r in rows))
    placements = list(dict.fromkeys(str(r["placement"]) for r in rows))
    n_seeds = len({r["seed"] for r in rows})
    fig = Figure(figsize=(4.2 * len(PLOT_METRICS), 3.6 * len(traces) + 0.8), dpi=100)
    axes = np.atleast_2d(fig.subplots(len(traces), len(PLOT_METRICS), squeeze=False))
    x = np.arange(len(policies))
    width = 0.8 / max(len(placements), 1)
    for ti, trace in enumerate(traces):
        for mi, (key, label, scale) in enumerate(PLOT_METRICS):
            ax = axes[ti, mi]
            for pi, pl in enumerate(placements):
                mean, lo, hi = [], [], []
                for pol in policies:
                    v = [
                        float(r[key]) / scale  # type: ignore[arg-type]
                        for r in rows
                        if r["trace"] == trace and r["policy"] == pol and r["placement"] == pl and r[key] is not None
                    ]
                    mean.append(float(np.mean(v)) if v else np.nan)
                    lo.append(mean[-1] - min(v) if v else 0.0)
                    hi.append(max(v) - mean[-1] if v else 0.0)
                ax.bar(
                    x + (pi - (len(placements) - 1) / 2) * width,
                    np.nan_to_num(mean),
                    width,
                    yerr=[lo, hi] if n_seeds > 1 else None,
                    capsize=2,
                    label=pl,
                    color=f"C{pi % 10}",
                )
            ax.set_xticks(x, policies, rotation=30, ha="right", fontsize=8)
            ax.set_ylabel(label)
            ax.set_title(f"{label.split(' (')[0]} — {Path(trace).name or trace}", fontsize=9)
            ax.grid(alpha=0.3, axis="y")
            ax.set_ylim(0, max(ax.get_ylim()[1], 1e-9) if np.nanmax(np.nan_to_num(ax.get_ylim())) > 0 else 1)
            if ti == 0 and mi == 0:
                ax.legend(title="placement", fontsize=7, title_fontsize=7)
    seeds = f"mean of {n_seeds} seeds, whiskers min..max" if n_seeds > 1 else "one seed"
    fig.suptitle(f"Sweep: {len(rows)} runs ({seeds})")
    fig.tight_layout()
    fig.savefig(path)


def _ints(option: str, value: str) -> list[int]:
    from qosmos.simulator.cli import comma_list

    out = []
    for v in comma_list(option, value):
        try:
            out.append(int(v))
        except ValueError:
            raise InvalidInput(option, v, "expected an integer") from None
    return out


def _checked(option: str, value: str, allowed: Sequence[str]) -> list[str]:
    from qosmos.simulator.cli import comma_list

    items = comma_list(option, value)
    for v in items:
        if v not in allowed:
            raise InvalidInput(option, v, f"expected one of {', '.join(allowed)}")
    return list(dict.fromkeys(items))


def run_sweep(
    cells: Sequence[Cell],
    options: Mapping[str, Any],
    out: Path,
    *,
    workers: int = 1,
    ray_address: str | None = None,
    plot: bool = True,
    quiet: bool = True,
    console: Any = None,
) -> tuple[list[dict[str, object]], dict[Cell, BaseException], int]:
    """Run the unfinished cells, then write sweep.csv (and sweep.png); returns (rows, failures, cells run)."""
    from qosmos.simulator.cli import Phases

    for c in cells:  # every configuration is checked before anything runs
        cell_config(c, options)
    check_resumable(out, cells, options)
    out.mkdir(parents=True, exist_ok=True)
    todo = [c for c in cells if not finished(out, c)]
    if not quiet:
        typer.echo(f"{len(cells)} cells: {len(cells) - len(todo)} already finished, {len(todo)} to run")
    failed: dict[Cell, BaseException] = {}
    with Phases(quiet, console) as phases, phases.phase("sweep", len(todo)) as update:
        count = [0]

        def done(cell: Cell, exc: BaseException | None) -> None:
            count[0] += 1
            update(count[0], None)
            if exc is not None and not quiet:
                typer.echo(f"cell {cell.name} failed: {exc}", err=True)

        if todo:
            if ray_address:
                failed = run_ray(todo, options, out, ray_address, done)
            else:
                failed = run_local(todo, options, out, workers, done)
    rows = collect(out, cells)
    write_csv(out / "sweep.csv", rows)
    if plot and rows:
        plot_sweep(out / "sweep.png", rows)
    return rows, failed, len(todo)


def register(app: typer.Typer) -> None:
    @app.command("sweep")
    @clean_errors(OSError)
    def sweep_cmd(
        trace: Annotated[
            str, typer.Option(help="traces, comma-separated (paths or builtin:NAME; see qosmos simulate --help)")
        ],
        out: Annotated[Path, typer.Option(help="output folder: one sub-folder per cell, sweep.csv and sweep.png")],
        policy: Annotated[str, typer.Option(help=f"policies, comma-separated, of: {', '.join(POLICIES)}")] = "fifo",
        placement: Annotated[
            str, typer.Option(help=f"placements, comma-separated, of: {', '.join(PLACEMENTS)}")
        ] = "consolidate",
        seed: Annotated[str, typer.Option(help="seeds, comma-separated integers (e.g. 0,1,2)")] = "0",
        jobs: Annotated[
            int, typer.Option("--jobs", "-j", min=1, help="local worker processes running cells in parallel")
        ] = 1,
        ray: Annotated[
            str | None,
            typer.Option(
                help="run cells on the existing Ray cluster at this address (e.g. 127.0.0.1:6379 or auto) "
                "instead of local processes; needs pip install 'qosmos\\[ray]'"  # rich shows \\[ as [
            ),
        ] = None,
        format: Annotated[
            str | None,
            typer.Option(
                "--format",
                help=f"trace format for every trace, one of: {', '.join(FORMATS)} (default: inferred per trace)",
            ),
        ] = None,
        synth_jobs: opt.SynthJobs = 10000,
        density: opt.Density = 10.0,
        hours: opt.Hours = 24.0,
        nodes: opt.Nodes = None,
        gpus_per_node: opt.GpusPerNode = None,
        scale: opt.Scale = None,
        backfill: Annotated[
            str, typer.Option(help=f"backfilling for every cell, one of: {', '.join(BACKFILL_MODES)}")
        ] = "none",
        relax_factor: opt.RelaxFactor = 0.1,
        backfill_estimates: Annotated[
            str, typer.Option(help=f"run times backfilling plans with, one of: {', '.join(BACKFILL_ESTIMATES)}")
        ] = "predicted",
        truth_noise: opt.TruthNoise = 0.0,
        mtbf_gpu_hours: opt.MtbfGpuHours = None,
        checkpoint_interval: opt.CheckpointInterval = None,
        backoff_limit: opt.BackoffLimit = DEFAULT_BACKOFF_LIMIT,
        node_mtbf_hours: opt.NodeMtbfHours = None,
        node_mttr_hours: opt.NodeMttrHours = DEFAULT_NODE_MTTR_H,
        node_outages: opt.NodeOutages = None,
        node_lost_seconds: opt.NodeLostSeconds = DEFAULT_NODE_LOST_S,
        db: opt.ModelDb = None,
        plot: Annotated[bool, typer.Option(help="write sweep.png")] = True,
        quiet: Annotated[bool, typer.Option(help="print nothing but errors")] = False,
    ) -> None:
        """Run a grid of simulations (every trace × policy × placement × seed); resumable: finished cells are kept."""
        from qosmos.extender.explain import load_profiles
        from qosmos.simulator.cli import check_sizes, cluster_notes, comma_list

        traces = list(dict.fromkeys(comma_list("trace", trace)))
        if format is not None and format not in FORMATS:
            raise InvalidInput("format", format, f"expected one of {', '.join(FORMATS)}")
        # The whole grid is checked here, before a worker starts: a bad trace is exit 2 naming it.
        check_sizes(scale=scale, density=density, hours=hours)
        for t in traces:
            cluster_notes(check_trace(t, format), nodes, gpus_per_node)
        cells = grid(
            traces,
            _checked("policy", policy, POLICIES),
            _checked("placement", placement, PLACEMENTS),
            list(dict.fromkeys(_ints("seed", seed))),
        )
        db_file = load_profiles(db).file  # checked here, before any cell runs
        options = {
            "format": format,
            "synth_jobs": synth_jobs,
            "density": density,
            "hours": hours,
            "nodes": nodes,
            "gpus_per_node": gpus_per_node,
            "scale": scale,
            "backfill": backfill,
            "relax_factor": relax_factor,
            "backfill_estimates": backfill_estimates,
            "truth_noise": truth_noise,
            "mtbf_gpu_hours": mtbf_gpu_hours,
            "checkpoint_interval": checkpoint_interval,
            "backoff_limit": backoff_limit,
            "db": db_file,
            "db_sha256": input_digest(db_file),
        }
        if node_mtbf_hours is not None or node_outages is not None:  # (kept out otherwise: older summaries resume)
            options |= {
                "node_mtbf_hours": node_mtbf_hours,
                "node_mttr_hours": node_mttr_hours,
                "node_outages": None if node_outages is None else str(node_outages),
                "node_outages_sha256": None if node_outages is None else input_digest(str(node_outages)),
                "node_lost_seconds": node_lost_seconds,
            }
        for c in cells:  # (a bad value is exit 2 here, not a failed cell)
            cell_config(c, options)
        rows, failed, ran = run_sweep(cells, options, out, workers=jobs, ray_address=ray, plot=plot, quiet=quiet)
        if not quiet:
            typer.echo(f"wrote {out / 'sweep.csv'} ({len(rows)} of {len(cells)} cells finished, {ran} run now)")
        if failed:
            first = next(iter(failed.values()))
            typer.echo(f"error: {len(failed)} cell(s) failed, e.g. {first}; run again to retry them", err=True)
            raise typer.Exit(2 if isinstance(first, InvalidInput) else 1)
