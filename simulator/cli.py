"""``qosmos simulate`` and ``qosmos sweep``: replay a trace under a policy and write summary,
jobs, Chrome trace and plots; or run a grid of such replays."""

from __future__ import annotations

import enum
import inspect
import json
import math
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Protocol

import typer
from qosmos.extender.core.backfill import MODES as BACKFILL_MODES
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.failures import DEFAULT_BACKOFF_LIMIT, DEFAULT_NODE_LOST_S
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.explain import load_profiles
from qosmos.predictors import DURATION_PREDICTORS
from qosmos.simulator import options as opt
from qosmos.simulator.engine import BACKFILL_ESTIMATES, PLACEMENTS, POLICIES, SimConfig, SimResult, simulate
from qosmos.simulator.failures import DEFAULT_NODE_MTTR_H, GpuFailures, node_outage_model
from qosmos.simulator.metrics import summarize
from qosmos.simulator.outputs import Drawers, artefacts, plot_compare, write_all, write_summary
from qosmos.simulator.partitions import check_names, load_partitions
from qosmos.simulator.services import read_services
from qosmos.simulator.traces import BUILTINS, FORMATS, Trace, infer_format, load_trace, scale_nodes
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from typer.core import TyperGroup

from qosmos.clitools import clean_errors

DEFAULT_GPUS_PER_NODE = 8  # --nodes without --gpus-per-node (genie: 4, its platform default)
GENIE_DEFAULT_GPUS_PER_NODE = 4
NODE_SIZE_FORMATS = ("helios", "philly", "genie")  # formats that size their own nodes from --gpus-per-node


class PhaseUpdate(Protocol):
    """``update(done, total)`` of a phase: ``total`` None keeps the phase's total."""

    def __call__(self, done: float, total: float | None = None, /) -> None: ...


class Phases:
    """Rich progress bars, one per phase (loading, simulating, writing, plotting).

    Shown only on a terminal (stderr) and never with ``quiet``; otherwise every method is a no-op.
    """

    def __init__(self, quiet: bool, console: Console | None = None) -> None:
        if console is None and not quiet and sys.stderr.isatty():
            console = Console(stderr=True)
        self.enabled = console is not None and not quiet
        self.bar: Progress | None = None
        if self.enabled:
            self.bar = Progress(
                TextColumn("{task.description:<28}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=False,
            )

    def __enter__(self) -> Phases:
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    @contextmanager
    def phase(self, description: str, total: float | None) -> Iterator[PhaseUpdate]:
        """Yields ``update(done, total)``; the phase is marked complete on exit."""
        if self.bar is None:
            yield lambda done, total=None: None
            return
        bar = self.bar
        task: TaskID = bar.add_task(description, total=total)
        state = {"total": total}

        def update(done: float, new_total: float | None = None) -> None:
            if new_total is not None:
                state["total"] = new_total
            bar.update(task, completed=done, total=state["total"])

        try:
            yield update
        finally:
            end = state["total"] or 1
            bar.update(task, completed=end, total=end)


def _partition(values: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        if "=" not in v:
            raise InvalidInput("partition_policy", v, "expected VC=POLICY")
        vc, pol = v.split("=", 1)
        out[vc.strip()] = pol.strip()
    return out


def comma_list(option: str, value: str) -> list[str]:
    """``a,b,c`` → [a, b, c]; an empty list is an error, not a silent no-op."""
    items = [p.strip() for p in value.split(",") if p.strip()]
    if not items:
        raise InvalidInput(option, value, "names nothing; give one or more comma-separated values")
    return items


def cluster_notes(fmt: str | None, nodes: int | None, gpus_per_node: int | None) -> list[str]:
    """Check --nodes/--gpus-per-node against the trace format; return the defaults applied, as notes."""
    if nodes is not None and nodes < 1:
        raise InvalidInput("nodes", nodes, "must be at least 1")
    if gpus_per_node is not None and gpus_per_node < 1:
        raise InvalidInput("gpus_per_node", gpus_per_node, "must be at least 1")
    notes: list[str] = []
    if nodes is not None and gpus_per_node is None:
        g = GENIE_DEFAULT_GPUS_PER_NODE if fmt == "genie" else DEFAULT_GPUS_PER_NODE
        notes.append(f"--nodes {nodes} without --gpus-per-node: {g} GPUs per node (the default)")
    if gpus_per_node is not None and nodes is None and fmt not in NODE_SIZE_FORMATS:
        raise InvalidInput(
            "gpus_per_node",
            gpus_per_node,
            f"the {fmt} trace brings its own nodes; give --nodes N too to replace them "
            f"(--gpus-per-node alone only sizes {', '.join(NODE_SIZE_FORMATS)} clusters)",
        )
    if fmt == "genie" and nodes is None:
        notes.append(f"genie platform: 4 nodes x {gpus_per_node or GENIE_DEFAULT_GPUS_PER_NODE} GPUs (the default)")
    return notes


def check_sizes(*, scale: float | None, density: float, hours: float) -> None:
    if scale is not None and not (0 < scale <= 1):
        raise InvalidInput("scale", scale, "must be in (0, 1]")
    if not density > 0:
        raise InvalidInput("density", density, "jobs per hour must be > 0")
    if not hours > 0:
        raise InvalidInput("hours", hours, "the arrival window must be > 0 hours")


def check_partitions(trace: Trace, partition_policy: dict[str, str]) -> None:
    """Every VC named by --partition-policy must exist in the trace's cluster or jobs."""
    vcs = {n.vc for n in trace.nodes} | {j.vc for j in trace.jobs}
    unknown = sorted(set(partition_policy) - vcs)
    if unknown:
        raise InvalidInput(
            "partition_policy", ",".join(unknown), f"no such VC in {trace.name}; its VCs: {', '.join(sorted(vcs))}"
        )


def load(
    trace: str, fmt: str | None, phases: Phases | None = None, *, scale: float | None = None, **kw: Any
) -> tuple[Trace, float]:
    """Load (fully validated) with a progress phase when the loader reports progress; returns (trace, seconds)."""
    t0 = time.perf_counter()
    phases = phases or Phases(quiet=True)
    with phases.phase("loading trace", None) as update:
        if "progress" in inspect.signature(load_trace).parameters:
            kw["progress"] = lambda done, total: update(done, total)
        tr = load_trace(trace, fmt, **kw)
        if scale is not None:
            scale_nodes(tr, scale)
    return tr, time.perf_counter() - t0


def run_one(tr: Trace, cfg: SimConfig, phases: Phases, modeldb: ModelDB | None = None) -> SimResult:
    with phases.phase(f"simulating {cfg.policy}", len(tr.jobs)) as update:
        return simulate(tr, cfg, modeldb, progress=update if phases.enabled else None)


def write_outputs(
    out: Path, res: SimResult, summary: dict[str, object], plots: bool, phases: Phases, drawers: Drawers | None = None
) -> None:
    names = artefacts(plots)
    with phases.phase(f"writing {out.name or out}", len(names)) as update:
        done = [0]

        def step(_name: str) -> None:
            done[0] += 1
            update(done[0], None)

        write_all(out, res, summary, plots=plots, on_step=step, drawers=drawers)


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
    backfill_estimates: str = "predicted",
    truth_noise: float = 0.0,
    predictor: str = "qssf",
    predictor_fallback: bool = False,
    services: list[Path] | None = None,
    db: str | None = None,
    plots: bool = True,
    quiet: bool = True,
    console: Console | None = None,
    partitions: Path | None = None,
    mtbf_gpu_hours: float | None = None,
    checkpoint_interval: float | None = None,
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT,
    node_mtbf_hours: float | None = None,
    node_mttr_hours: float = DEFAULT_NODE_MTTR_H,
    node_outages: Path | None = None,
    node_lost_seconds: float = DEFAULT_NODE_LOST_S,
) -> dict[str, dict[str, object]]:
    """Load once (fully validated) per policy, simulate, write artefacts; returns summaries."""
    if fmt is not None and fmt not in FORMATS:
        raise InvalidInput("format", fmt, f"expected one of {', '.join(FORMATS)}")
    if not policies:
        raise InvalidInput("compare", "", "names no policy")
    check_sizes(scale=scale, density=density, hours=hours)
    notes = cluster_notes(fmt or infer_format(trace), nodes, gpus_per_node)
    profiles = load_profiles(db)  # the one model database, as explain and the extender read it
    if profiles.file is not None:
        notes.append(f"model database {profiles.file} over the built-in profiles")
    timelines = tuple(read_services(services)) if services else ()
    if timelines:
        names = ", ".join(t.name for t in timelines)
        notes.append(f"inference services {names} beside the jobs, times from the trace's first submission")
    specs = load_partitions(partitions, [p for p in POLICIES if p != "recorded"]) if partitions is not None else ()
    # one failure model for every policy: each job meets the same failures in its run (GpuFailures)
    failures = None if mtbf_gpu_hours is None else GpuFailures(mtbf_gpu_hours, seed)
    outages = node_outage_model(node_mtbf_hours, node_mttr_hours, node_outages, seed)
    if outages is not None:
        notes.append(
            f"node outages: {outages!r}, NodeLost after {node_lost_seconds:g} s (times from the first submission)"
        )
    cfgs = []
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
            backfill_estimates=backfill_estimates,
            truth_noise=truth_noise,
            predictor=predictor,
            predictor_fallback=predictor_fallback,
            services=timelines,
            partitions=specs,
            failures=failures,
            checkpoint_interval=checkpoint_interval,
            backoff_limit=backoff_limit,
            outages=outages,
            node_lost_seconds=node_lost_seconds,
        )
        cfg.validate()  # every policy checked before anything runs
        cfgs.append(cfg)
    summaries: dict[str, dict[str, object]] = {}
    results: dict[str, SimResult] = {}
    compare = len(policies) > 1
    # drawing processes first: they import matplotlib while the trace loads and the run is simulated
    with Drawers(0 if not plots else None) as drawers, Phases(quiet, console) as phases:
        for cfg in cfgs:
            pol = cfg.policy
            tr, load_s = load(
                trace,
                fmt,
                phases,
                scale=scale,
                nodes=nodes,
                gpus_per_node=gpus_per_node,
                seed=seed,
                density=density,
                hours=hours,
                jobs=jobs,
                node_list=node_list,
                include_cpu=include_cpu,
            )
            check_partitions(tr, cfg.partition_policy)
            check_names(specs, {n.vc for n in tr.nodes}, str(partitions))
            if not quiet and not summaries:
                # the defaults applied (ours, then the trace reader's, e.g. a cluster of 4 x 8 GPUs), said once
                # and only once the trace is known good: a bad run prints its one error line alone
                for n in [*notes, *tr.notes]:
                    typer.echo(f"note: {n}")
            res = run_one(tr, cfg, phases, profiles.db)
            with phases.phase("summarizing", 1):  # about 1.5 s for a million jobs
                summary = summarize(res, profiles.db)
            summary["load_s"] = load_s
            summary["notes"] = [*notes, *summary.get("notes", [])]  # type: ignore[misc]
            target = out / pol if compare else out
            write_outputs(target, res, summary, plots, phases, drawers)
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
                with phases.phase("plotting compare.png", 1):
                    plot_compare(out / "compare.png", results, summaries)
            # the first policy's artefacts also at the top level, so DIR/summary.json always exists
            first = policies[0]
            write_outputs(out, results[first], summaries[first], False, phases)
    return summaries


def _fmt(v: object) -> str:
    return f"{v:.4g}" if isinstance(v, int | float) and math.isfinite(v) else "n/a"


def choices(name: str, values: tuple[str, ...] | list[str]) -> type[enum.Enum]:
    """A choice type for typer, built from the engine's own list (the CLI keeps no second list)."""
    return enum.Enum(name, {v: v for v in values}, type=str)  # type: ignore[return-value]


Format = choices("Format", FORMATS)
Policy = choices("Policy", POLICIES)
Placement = choices("Placement", PLACEMENTS)
Backfill = choices("Backfill", BACKFILL_MODES)
Estimates = choices("Estimates", BACKFILL_ESTIMATES)
Predictor = choices("Predictor", DURATION_PREDICTORS)


def _value(v: object) -> Any:
    return v.value if isinstance(v, enum.Enum) else v


TRACE_HELP = (
    "the trace: a file or folder, or one of "
    + ", ".join(f"builtin:{b}" for b in BUILTINS)
    + " (openb pod CSV or folder, Helios cluster_log.csv, Philly JSON, native CSV)"
)


class SimulateGroup(TyperGroup):
    """``qosmos simulate --trace ...`` replays a trace (the group's own options, as before the group
    existed); ``qosmos simulate inference ...`` runs a sub-command, and then the trace replay's
    required options are not asked for."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] in self.commands:
            for param in self.get_params(ctx):
                if param.expose_value and param.name:
                    ctx.params.setdefault(param.name, None)
            ctx._protected_args, ctx.args = args[:1], args[1:]  # what TyperGroup.parse_args leaves
            return list(ctx.args)
        rest = super().parse_args(ctx, args)
        if ctx._protected_args:  # `simulate --trace T --out O inference ...`: which one was meant?
            name = ctx._protected_args[0]
            if name in self.commands:
                ctx.fail(f"the trace replay's options go without a sub-command; run 'qosmos simulate {name} ...'")
        return rest


def register(app: typer.Typer) -> None:
    simulate = typer.Typer(
        cls=SimulateGroup,
        invoke_without_command=True,
        subcommand_metavar="[inference ...]",
    )
    app.add_typer(simulate, name="simulate")

    @simulate.callback()
    @clean_errors(OSError, json.JSONDecodeError)
    def simulate_cmd(
        ctx: typer.Context,
        trace: Annotated[str, typer.Option(help=TRACE_HELP)],
        out: Annotated[Path, typer.Option(help="output folder (created; files in it are replaced)")],
        format: Annotated[
            Format | None,  # type: ignore[valid-type]
            typer.Option(
                "--format",
                help="trace format (default: inferred from builtins, folder contents, file names and CSV columns)",
            ),
        ] = None,
        policy: Annotated[
            Policy,  # type: ignore[valid-type]
            typer.Option(help="the order in which waiting jobs start"),
        ] = "fifo",
        placement: Annotated[
            Placement,  # type: ignore[valid-type]
            typer.Option(help="which nodes and GPUs a starting job gets"),
        ] = "consolidate",
        compare: Annotated[
            str | None,
            typer.Option(
                help="several policies, comma-separated (e.g. fifo,sjf,qssf): each runs on the same trace, "
                "results in OUT/<policy>/ and OUT/compare.png; replaces --policy (default: one run with --policy)"
            ),
        ] = None,
        nodes: opt.Nodes = None,
        gpus_per_node: opt.GpusPerNode = None,
        backfill: Annotated[
            Backfill,  # type: ignore[valid-type]
            typer.Option(
                help="let later jobs start while the first waiting job is blocked: none, easy (never delay it), "
                "relaxed/adaptive (delay it by at most a factor of its wait)",
            ),
        ] = "none",
        relax_factor: opt.RelaxFactor = 0.1,
        backfill_estimates: Annotated[
            Estimates,  # type: ignore[valid-type]
            typer.Option(
                help="run times backfilling plans with: predicted by the duration predictor, requested by users, "
                "or the true ones (oracle)",
            ),
        ] = "predicted",
        predictor: Annotated[
            Predictor,  # type: ignore[valid-type]
            typer.Option(help="duration predictor for qssf and predicted backfill estimates"),
        ] = "qssf",
        predictor_fallback: Annotated[
            bool,
            typer.Option(
                help="if the predictor fails, fall back to a noisy stand-in (said in summary.json notes) "
                "instead of stopping"
            ),
        ] = False,
        truth_noise: opt.TruthNoise = 0.0,
        seed: Annotated[int, typer.Option(help="random seed for generated traces and noise")] = 0,
        density: opt.Density = 10.0,
        hours: opt.Hours = 24.0,
        jobs: opt.SynthJobs = 10000,
        scale: opt.Scale = None,
        preemption_overhead: Annotated[
            float, typer.Option(min=0.0, help="seconds a preempted job loses when it resumes (AnalySIM: 8)")
        ] = 8.0,
        migration: Annotated[
            bool, typer.Option(help="when a job ends, move jobs off partly used nodes if that frees a whole node")
        ] = False,
        cross_switch_penalty: Annotated[
            float, typer.Option(min=1.0, help="run-time factor for multi-node jobs whose nodes span network switches")
        ] = 1.1,
        partition_policy: Annotated[
            list[str] | None,
            typer.Option(
                help="VC=POLICY: a different policy for one partition (VC) of the trace; repeatable "
                "(default: every partition uses --policy)"
            ),
        ] = None,
        tick: Annotated[
            float, typer.Option(min=0.0, help="also run a scheduling pass every this many seconds (0 = only on events)")
        ] = 0.0,
        node_list: Annotated[
            str | None, typer.Option(help="node CSV for openb or native traces (default: the one beside the trace)")
        ] = None,
        include_cpu: Annotated[bool, typer.Option(help="helios traces: keep CPU-only jobs too")] = False,
        services: Annotated[
            list[Path] | None,
            typer.Option(
                help="inference services to replay beside the jobs: a CSV time_s,service,gpu_replicas,cpu_replicas "
                "(as `qosmos simulate inference` writes timeline.csv; times from the trace's first submission); "
                "their replicas go first and preempt the last-submitted job where resources lack; repeatable (default: none)",
            ),
        ] = None,
        db: opt.ModelDb = None,
        plots: Annotated[bool, typer.Option(help="write PNG plots")] = True,
        quiet: Annotated[bool, typer.Option(help="print nothing but errors: no progress bars, notes or table")] = False,
        partitions: Annotated[
            Path | None,
            typer.Option(
                help="YAML/JSON list of the trace's VCs as partitions: name, cohort (VCs of one cohort share their "
                "nodes), nominalGpus, borrowingLimit, lendingLimit, policy, preemption {withinVirtualCluster, "
                "reclaimWithinCohort}; see simulator/README.md (default: every VC on its own nodes)",
            ),
        ] = None,
        mtbf_gpu_hours: opt.MtbfGpuHours = None,
        checkpoint_interval: opt.CheckpointInterval = None,
        backoff_limit: opt.BackoffLimit = DEFAULT_BACKOFF_LIMIT,
        node_mtbf_hours: opt.NodeMtbfHours = None,
        node_mttr_hours: opt.NodeMttrHours = DEFAULT_NODE_MTTR_H,
        node_outages: opt.NodeOutages = None,
        node_lost_seconds: opt.NodeLostSeconds = DEFAULT_NODE_LOST_S,
    ) -> None:
        """Replay a trace through the scheduling core; write summary.json, jobs.csv, trace.json and plots.

        `qosmos simulate inference` replays a query-rate series through the inference placer instead.
        """
        if ctx.invoked_subcommand is not None:
            return
        policies = list(dict.fromkeys(comma_list("compare", compare))) if compare is not None else [_value(policy)]
        summaries = run_simulation(
            trace,
            _value(format),
            policies,
            _value(placement),
            out,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            backfill=_value(backfill),
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
            backfill_estimates=_value(backfill_estimates),
            truth_noise=truth_noise,
            predictor=_value(predictor),
            predictor_fallback=predictor_fallback,
            services=services,
            db=db,
            plots=plots,
            quiet=quiet,
            partitions=partitions,
            mtbf_gpu_hours=mtbf_gpu_hours,
            checkpoint_interval=checkpoint_interval,
            backoff_limit=backoff_limit,
            node_mtbf_hours=node_mtbf_hours,
            node_mttr_hours=node_mttr_hours,
            node_outages=node_outages,
            node_lost_seconds=node_lost_seconds,
        )
        if not quiet:
            typer.echo(f"wrote {out} ({', '.join(summaries)})")

    from qosmos.simulator.sweep import register as register_sweep

    register_inference(simulate)
    register_sweep(app)


def _check_scaling(qps_scale: float | None, peak_gpus: float | None) -> None:
    if qps_scale is not None and peak_gpus is not None:
        raise InvalidInput("peak_gpus", peak_gpus, "give --qps-scale or --peak-gpus, not both")
    for name, v in (("qps_scale", qps_scale), ("peak_gpus", peak_gpus)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise InvalidInput(name, v, "must be a finite number > 0")


def register_inference(simulate: typer.Typer) -> None:
    """``qosmos simulate inference``: a query-rate series through SODA's inference placer (issue 12 §3)."""

    @simulate.command("inference")
    @clean_errors(OSError, json.JSONDecodeError)
    def inference_cmd(
        qps: Annotated[
            Path,
            typer.Option(
                help="query-rate CSV: a time column (timestamp_anon, timestamp or time) and a value column "
                "(value or qps), optionally request_type and container_ip, as the Alibaba GenAI trace has them"
            ),
        ],
        model: Annotated[str, typer.Option(help="model type served, looked up in the model database (e.g. ResNet50)")],
        out: Annotated[Path, typer.Option(help="output folder (created; files in it are replaced)")],
        qos_target_ms: Annotated[
            float, typer.Option(min=0.001, help="latency target of every query, milliseconds (SODA's: 200)")
        ] = 200.0,
        series: Annotated[
            str | None,
            typer.Option(
                help="which rows make the load: a request type (a unique prefix will do, e.g. generative), "
                "all, or container:HASH for one container (default: the request type with the most queries, "
                "or every row when the file has no request types)"
            ),
        ] = None,
        qps_scale: Annotated[
            float | None,
            typer.Option(
                help="multiply every rate by this (the GenAI rates are scaled; default 1, or use --peak-gpus)"
            ),
        ] = None,
        peak_gpus: Annotated[
            float | None,
            typer.Option(
                help="scale the series so that its peak is this many GPU replicas' maximum load, instead of --qps-scale"
            ),
        ] = None,
        gpu_switch_batch: Annotated[
            int | None,
            typer.Option(
                min=1,
                help="largest batch one GPU serves within the target, the CPU/GPU switching point "
                "(default: from the model's throughput profile)",
            ),
        ] = None,
        cpu_cores: Annotated[int, typer.Option(min=1, help="CPU cores of a CPU replica")] = 16,
        cpu_max_batch: Annotated[
            int | None,
            typer.Option(
                min=0,
                help="largest batch a CPU replica serves within the target; 0 = never on CPU "
                "(default: from the per-core rate)",
            ),
        ] = None,
        cpu_per_core_qps: Annotated[
            float | None,
            typer.Option(
                min=0.0,
                help="queries per second one CPU core computes; 0 = never on CPU (default: implied by "
                "--cpu-max-batch, else SODA's measurement for the model)",
            ),
        ] = None,
        min_replicas: Annotated[int, typer.Option(min=1, help="fewest replicas, in either mode")] = 1,
        max_replicas: Annotated[int, typer.Option(min=1, help="most GPU replicas")] = 8,
        cpu_min_replicas: Annotated[
            int | None, typer.Option(min=1, help="fewest CPU replicas while on CPU (default: --min-replicas)")
        ] = None,
        cpu_max_replicas: Annotated[
            int | None, typer.Option(min=1, help="most CPU replicas (default: --max-replicas)")
        ] = None,
        scale_out_threshold: Annotated[
            float,
            typer.Option(min=0.0, max=1.0, help="add replicas when the load passes this share of their maximum load"),
        ] = 0.8,
        hysteresis: Annotated[
            float,
            typer.Option(
                min=0.0,
                max=0.99,
                help="steps down (to CPU, fewer replicas) need the load this share below the point they cross",
            ),
        ] = 0.2,
        switch_cooldown_s: Annotated[
            float, typer.Option(min=0.0, help="seconds between two CPU/GPU switches, unless replicas are overloaded")
        ] = 300.0,
        scale_out_after_s: Annotated[
            float, typer.Option(min=0.0, help="seconds the load must ask for more before it gets it (0 = at once)")
        ] = 0.0,
        scale_in_after_s: Annotated[
            float, typer.Option(min=0.0, help="seconds the load must ask for less, without a break, before it gets it")
        ] = 300.0,
        ready_s: Annotated[
            float, typer.Option(min=0.0, help="seconds from asking for a replica to its serving (old ones serve till)")
        ] = 30.0,
        step_s: Annotated[
            float | None,
            typer.Option(min=0.001, help="slot length in seconds (default: the most common gap between the times)"),
        ] = None,
        service_name: Annotated[
            str | None,
            typer.Option(help="the service's name in timeline.csv (default: the model)"),
        ] = None,
        db: opt.ModelDb = None,
        gpu_model: Annotated[
            str | None,
            typer.Option(
                help="GPU model of the serving nodes: its inference profile first, else the nearest measured "
                "(default: the newest measured)"
            ),
        ] = None,
        inference_profile: Annotated[
            bool,
            typer.Option(
                help="derive C(b) from measured inference profiles (built-in and the database's); "
                "--no-inference-profile: the model database's training rate and SODA's CPU measurements"
            ),
        ] = True,
        forecast: Annotated[
            bool,
            typer.Option(
                help="switch ahead of the load: plan for the forecast upper band of the rate over the next "
                "replica start-up (LightGBM on the series' past only); --no-forecast: the observed rate alone"
            ),
        ] = True,
        forecast_quantile: Annotated[
            float, typer.Option(min=0.5, max=0.999, help="the forecast band's quantile (LightGBM quantile loss)")
        ] = 0.95,
        plots: Annotated[bool, typer.Option(help="write the PNG plot inference.png")] = True,
        quiet: Annotated[bool, typer.Option(help="print nothing but errors")] = False,
    ) -> None:
        """Replay a query-rate series through SODA's CPU/GPU inference placer, next to always-GPU serving;
        write summary.json (GPU-hours, CPU core-hours, QoS violations, switches, p99 latency, the
        thresholds and where each came from), a plot and timeline.csv (the replicas asked for per slot,
        for `qosmos simulate --services`)."""
        from qosmos.extender.core.inference import resolve_spec
        from qosmos.extender.core.inference_profiles import InferenceProfiles
        from qosmos.predictors.inference_profiles import load_inference_profiles
        from qosmos.predictors.qps_forecast import QpsForecaster
        from qosmos.simulator.inference import read_qps, run

        _check_scaling(qps_scale, peak_gpus)
        profiles = load_profiles(db)
        measured = load_inference_profiles(db) if inference_profile else InferenceProfiles()
        spec = resolve_spec(
            model,
            qos_target_ms,
            db=profiles.db,
            gpu_switch_batch=gpu_switch_batch,
            cpu_cores_per_replica=cpu_cores,
            cpu_max_batch=cpu_max_batch,
            cpu_per_core_qps=cpu_per_core_qps,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            cpu_min_replicas=cpu_min_replicas,
            cpu_max_replicas=cpu_max_replicas,
            scale_out_threshold=scale_out_threshold,
            hysteresis=hysteresis,
            switch_cooldown_s=switch_cooldown_s,
            scale_out_after_s=scale_out_after_s,
            scale_in_after_s=scale_in_after_s,
            inference_profiles=measured,
            gpu_model=gpu_model,
        )
        load = read_qps(qps, series, step_s=step_s)
        peak = float(load.qps.max(initial=0.0))
        if peak_gpus is not None:
            if peak <= 0:
                raise InvalidInput("peak_gpus", peak_gpus, f"the series {load.name!r} has no queries to scale")
            factor = peak_gpus * spec.gpu.capacity_qps / peak
        else:
            factor = qps_scale if qps_scale is not None else 1.0
        extra = {"qps_file": str(qps), "qps_scale": factor, "model_db": profiles.file, "gpu_model": gpu_model}
        summary = run(
            spec,
            load.scaled(factor),
            out,
            ready_s=ready_s,
            plots=plots,
            extra=extra,
            service=service_name,
            forecaster=QpsForecaster(quantile=forecast_quantile),
            forecast=forecast,
        )
        if not quiet:
            for note in summary["notes"]:
                typer.echo(f"note: {note}", err=True)
            for name, th in summary["serving"]["thresholds"].items():
                typer.echo(f"{name:<26} {_fmt(th['value']) if th['value'] is not None else '-':<10} {th['source']}")
            keys: tuple[str, ...] = ("gpu_hours", "gpu_hours_always_gpu", "gpu_hours_saved_fraction", "cpu_core_hours")
            keys += ("qos_violation_fraction", "p99_latency_ms", "switches_per_day")
            for k in keys:
                typer.echo(f"{k:<26} {_fmt(summary[k])}")
            typer.echo(f"wrote {out}")
