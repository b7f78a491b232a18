"""``qosmos simulate``: replay a trace under a policy and write summary, jobs, Chrome trace and plots."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from qosmos.extender.core.errors import InvalidInput
from qosmos.simulator.engine import SimConfig, simulate
from qosmos.simulator.metrics import summarize
from qosmos.simulator.outputs import plot_compare, write_all, write_summary
from qosmos.simulator.traces import FORMATS, load_trace, scale_nodes

from qosmos.clitools import clean_errors


def _partition(values: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        if "=" not in v:
            raise InvalidInput("partition_policy", v, "expected VC=POLICY")
        vc, pol = v.split("=", 1)
        out[vc.strip()] = pol.strip()
    return out


def run_simulation(
    trace: str,
    fmt: str | None,
    policies: list[str],
    placement: str,
    out: Path,
    *,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    backfill: str = "none",
    relax: float = 0.1,
    seed: int = 0,
    density: float = 10.0,
    hours: float = 24.0,
    jobs: int = 10000,
    scale: float | None = None,
    overhead: float = 8.0,
    migration: bool = False,
    penalty: float = 1.1,
    partition_policy: dict[str, str] | None = None,
    tick: float = 0.0,
    node_list: str | None = None,
    include_cpu: bool = False,
    plots: bool = True,
    quiet: bool = True,
) -> dict[str, dict[str, object]]:
    """Load once (fully validated) per policy, simulate, write artefacts; returns summaries."""
    if fmt is not None and fmt not in FORMATS:
        raise InvalidInput("format", fmt, f"expected one of {', '.join(FORMATS)}")
    summaries: dict[str, dict[str, object]] = {}
    results = {}
    compare = len(policies) > 1
    for pol in policies:
        cfg = SimConfig(
            policy=pol,
            placement=placement,
            backfill=backfill,
            relax_factor=relax,
            preemption_overhead=overhead,
            migration=migration,
            cross_switch_penalty=penalty,
            partition_policy=partition_policy or {},
            seed=seed,
            tick=tick,
        )
        cfg.validate()
        t0 = time.perf_counter()
        tr = load_trace(
            trace,
            fmt,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            seed=seed,
            density=density,
            hours=hours,
            jobs=jobs,
            node_list=node_list,
            include_cpu=include_cpu,
        )
        if scale is not None:
            scale_nodes(tr, scale)
        load_s = time.perf_counter() - t0
        res = _run_with_progress(tr, cfg, quiet)
        summary = summarize(res)
        summary["load_s"] = load_s
        target = out / pol if compare else out
        write_all(target, res, summary, plots=plots)
        summaries[pol] = summary
        results[pol] = res
        if not quiet:
            typer.echo(
                f"{pol:12s} jobs={summary['jobs']} avg_jct={_fmt(summary['avg_jct_s'])}s "
                f"avg_queue={_fmt(summary['avg_queue_s'])}s queued={summary['queued_jobs']} "
                f"qos={_fmt(summary['qos_guarantee'])} makespan={_fmt(summary['makespan_s'])}s "
                f"util={_fmt(summary['gpu_utilization'])} wall={res.wall_s:.2f}s"
            )
    if compare:
        out.mkdir(parents=True, exist_ok=True)
        write_summary(out / "compare.json", {"policies": summaries})
        if plots:
            plot_compare(out / "compare.png", results, summaries)
        # the first policy's artefacts also at the top level, so DIR/summary.json always exists
        first = policies[0]
        write_all(out, results[first], summaries[first], plots=False)
    return summaries


def _fmt(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, int | float) else "n/a"


def _run_with_progress(tr, cfg: SimConfig, quiet: bool):  # type: ignore[no-untyped-def]
    if quiet or not sys.stdout.isatty() or len(tr.jobs) < 20000:
        return simulate(tr, cfg)
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task(f"simulating {cfg.policy}", total=len(tr.jobs))

        def cb(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return simulate(tr, cfg, progress=cb)


def register(app: typer.Typer) -> None:
    @app.command("simulate")
    @clean_errors(OSError, json.JSONDecodeError)
    def simulate_cmd(
        trace: Annotated[str, typer.Option(help="PATH or builtin:openb-sample | builtin:genie | builtin:helios-synth")],
        out: Annotated[Path, typer.Option(help="output directory")],
        format: Annotated[
            str | None, typer.Option("--format", help=f"one of {', '.join(FORMATS)}; inferred for builtins")
        ] = None,
        policy: Annotated[
            str,
            typer.Option(help="fifo sjf srtf qssf swaf minmin wfair tetris-perf tetris-cer capacity las mlfq recorded"),
        ] = "fifo",
        placement: Annotated[str, typer.Option(help="consolidate first-fit best-fit free-gpu cer")] = "consolidate",
        compare: Annotated[str | None, typer.Option(help="P1,P2,... run several policies on one trace")] = None,
        nodes: Annotated[int | None, typer.Option(help="replace the cluster by N nodes (genie: platform N)")] = None,
        gpus_per_node: Annotated[int | None, typer.Option(help="GPUs per node")] = None,
        backfill: Annotated[str, typer.Option(help="none easy relaxed adaptive")] = "none",
        relax_factor: Annotated[float, typer.Option(help="base relax factor for relaxed/adaptive")] = 0.1,
        seed: Annotated[int, typer.Option()] = 0,
        density: Annotated[float, typer.Option(help="genie: jobs per hour")] = 10.0,
        hours: Annotated[float, typer.Option(help="genie: arrival window (h)")] = 24.0,
        jobs: Annotated[int, typer.Option(help="helios-synth: number of jobs")] = 10000,
        scale: Annotated[float | None, typer.Option(help="keep every round(1/F)-th node per VC")] = None,
        preemption_overhead: Annotated[float, typer.Option(help="seconds per resume (AnalySIM: 8)")] = 8.0,
        migration: Annotated[bool, typer.Option(help="migrate on completion to free whole nodes")] = False,
        cross_switch_penalty: Annotated[
            float, typer.Option(help="run-time ratio for multi-node jobs across switches")
        ] = 1.1,
        partition_policy: Annotated[list[str] | None, typer.Option(help="VC=POLICY (repeatable)")] = None,
        tick: Annotated[float, typer.Option(help="periodic scheduling pass every S seconds (0: off)")] = 0.0,
        node_list: Annotated[str | None, typer.Option(help="node CSV (openb/native)")] = None,
        include_cpu: Annotated[bool, typer.Option(help="helios: keep CPU jobs")] = False,
        plots: Annotated[bool, typer.Option(help="write PNG plots")] = True,
        quiet: Annotated[bool, typer.Option(help="no progress bar or table")] = False,
    ) -> None:
        """Replay a trace through the scheduling core and write summary.json, jobs.csv, trace.json and plots."""
        policies = [p.strip() for p in compare.split(",") if p.strip()] if compare else [policy]
        summaries = run_simulation(
            trace,
            format,
            policies,
            placement,
            out,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            backfill=backfill,
            relax=relax_factor,
            seed=seed,
            density=density,
            hours=hours,
            jobs=jobs,
            scale=scale,
            overhead=preemption_overhead,
            migration=migration,
            penalty=cross_switch_penalty,
            partition_policy=_partition(partition_policy or []),
            tick=tick,
            node_list=node_list,
            include_cpu=include_cpu,
            plots=plots,
            quiet=quiet,
        )
        if not quiet:
            typer.echo(f"wrote {out} ({', '.join(summaries)})")
