"""``qosmos dev up`` / ``qosmos dev down``: a local cluster without Docker."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from qosmos.dev.binaries import BIN_DIR_ENV, BinariesMissing, ControlPlaneError
from qosmos.dev.cluster import (
    DEFAULT_GPU_MODEL,
    DEFAULT_GPUS_PER_NODE,
    DEFAULT_NODES,
    DEFAULT_POOLS,
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    DevError,
    DevOptions,
)
from qosmos.extender.core.errors import InvalidInput
from rich.console import Console

from qosmos.cli import extend_group

dev_app = typer.Typer(
    help="A local Kubernetes cluster with qosmos and fake GPU nodes, without Docker.", no_args_is_help=True
)


class _RichProgress:
    """A spinner naming what ``up`` waits for, and one line per component once it is ready."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.status = console.status("starting")
        self.t0 = time.monotonic()
        self.since: dict[str, float] = {}

    def begin(self, what: str) -> None:
        self.since.setdefault(what, time.monotonic())
        self.status.update(f"waiting for {what}")

    def done(self, what: str, detail: str = "") -> None:
        took = time.monotonic() - self.since.get(what, self.t0)
        self.console.print(f"[green]✓[/green] {what} ready ({took:.1f} s){' — ' + detail if detail else ''}")


def _fail(message: str, code: int, suffix: str = "") -> typer.Exit:
    """One line on stderr (a component's log tail stays in its log file, which the line names)."""
    first = message.strip().splitlines()[0].removesuffix("; last log lines:") if message.strip() else "failed"
    typer.echo(f"error: {first}{suffix}", err=True)
    return typer.Exit(code)


NodesOpt = Annotated[
    int | None,
    typer.Option(
        help=f"fake GPU nodes, 1 to {MAX_NODES:,} (default: {DEFAULT_NODES}; with --node-list every row, "
        "or this many spread over the list)"
    ),
]
GpusOpt = Annotated[int, typer.Option(help=f"GPUs per synthetic node, 0 to {MAX_GPUS_PER_NODE}")]
GpuModelOpt = Annotated[
    str, typer.Option(help="GPU model label of the synthetic nodes (openb names: V100M32, V100M16, P100, T4, G2...)")
]
NodeListOpt = Annotated[
    Path | None,
    typer.Option(
        help="openb node list CSV (sn,cpu_milli,memory_mib,gpu,model) naming the nodes instead of node-0..N-1"
    ),
]
PoolsOpt = Annotated[
    str,
    typer.Option(
        help="comma-separated values of the node label qosmos.io/pool, given to the nodes in turn (the "
        "examples/ VirtualClusters select pools a and b; empty: no pool label)"
    ),
]


DEFAULT_POOLS_TEXT = ",".join(DEFAULT_POOLS)


def _pools(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


@dev_app.command("up")
def up(
    dir: Annotated[
        Path, typer.Option("--dir", help="folder for the cluster's state, certificates, kubeconfig and logs")
    ],
    nodes: NodesOpt = None,
    gpus_per_node: GpusOpt = DEFAULT_GPUS_PER_NODE,
    gpu_model: GpuModelOpt = DEFAULT_GPU_MODEL,
    node_list: NodeListOpt = None,
    pools: PoolsOpt = DEFAULT_POOLS_TEXT,
    no_operator: Annotated[
        bool, typer.Option("--no-operator", help="do not start the operator (`qosmos operator run`)")
    ] = False,
    api_port: Annotated[int, typer.Option(help="kube-apiserver port on 127.0.0.1 (0: any free port)")] = 0,
    bin_dir: Annotated[
        Path | None,
        typer.Option(
            help=f"folder with the Kubernetes binaries and kwok (default: ${BIN_DIR_ENV}, else the "
            "hack/k8s/build.sh cache ~/.cache/qosmos/k8s/<version>/bin)"
        ),
    ] = None,
    timeout: Annotated[float, typer.Option(help="longest wait for one component to become ready, seconds")] = 90.0,
    as_json: Annotated[
        bool, typer.Option("--json", help='print {"kubeconfig": PATH, "pids": {COMPONENT: PID}, ...} as one line')
    ] = False,
) -> None:
    """Start etcd, kube-apiserver, kube-controller-manager, kube-scheduler, the qosmos-scheduler
    (kube-scheduler calling the extender over TLS), the extender, KWOK with fake GPU nodes, the
    CRDs and the operator; return once all are ready. The processes keep running: stop them with
    `qosmos dev down --dir DIR`."""
    from qosmos.dev import cluster

    err = Console(stderr=True)
    opts = DevOptions(
        dir=dir,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        gpu_model=gpu_model,
        node_list=node_list,
        pools=_pools(pools),
        operator=not no_operator,
        api_port=api_port,
        bin_dir=bin_dir,
        start_timeout=timeout,
    )
    progress = _RichProgress(err)
    try:
        with progress.status:
            state, already = cluster.up(opts, progress)
    except (InvalidInput, DevError, BinariesMissing, OSError) as exc:
        raise _fail(str(exc), 2) from None
    except ControlPlaneError as exc:
        raise _fail(str(exc), 1, "; everything started was stopped") from None
    except KeyboardInterrupt:
        raise _fail("interrupted — everything started was stopped", 130) from None
    summary = state.summary(already)
    if already:
        err.print(f"already up in {state.dir} (since {state.started_at}); `qosmos dev down --dir {dir}` stops it")
    else:
        _print_next_steps(err, summary)
    if as_json:
        typer.echo(json.dumps(summary))


def _print_next_steps(err: Console, s: dict[str, Any]) -> None:
    op = s["operator"]
    if not op.get("started"):
        err.print(f"[yellow]operator not started:[/yellow] {op.get('reason', '')}")
    err.print(f"cluster up in {s['dir']}: {s['nodes']} nodes, API {s['server']}")
    err.print(f"  kubectl --kubeconfig {s['kubeconfig']} get nodes")
    err.print(f"  qosmos dev down --dir {s['dir']}")


@dev_app.command("down")
def down(
    dir: Annotated[Path, typer.Option("--dir", help="the folder given to `qosmos dev up`")],
    grace: Annotated[
        float, typer.Option(help="seconds between SIGTERM and SIGKILL for a process that does not stop")
    ] = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="print what was stopped as one line of JSON")] = False,
) -> None:
    """Stop everything `qosmos dev up --dir DIR` started (SIGTERM, then SIGKILL after --grace).
    Running it again, or on a folder where nothing runs, does nothing."""
    from qosmos.dev import cluster

    if not 0 <= grace <= 600:
        raise _fail(f"invalid grace={grace!r}: must be in [0, 600] seconds", 2)
    try:
        result = cluster.down(dir, grace)
    except (InvalidInput, DevError, OSError) as exc:
        raise _fail(str(exc), 2) from None
    if as_json:
        typer.echo(json.dumps(result))
    elif result["was_running"]:
        extra = f" ({', '.join(result['killed'])} needed SIGKILL)" if result["killed"] else ""
        typer.echo(f"stopped {len(result['stopped'])} processes in {result['dir']}{extra}", err=True)
    else:
        typer.echo(f"nothing running in {result['dir']}", err=True)


@dev_app.command("nodes")
def nodes_cmd(
    kubeconfig: Annotated[Path, typer.Option(help="kubeconfig of the cluster to add the nodes to")],
    nodes: NodesOpt = None,
    gpus_per_node: GpusOpt = DEFAULT_GPUS_PER_NODE,
    gpu_model: GpuModelOpt = DEFAULT_GPU_MODEL,
    node_list: NodeListOpt = None,
    pools: PoolsOpt = DEFAULT_POOLS_TEXT,
) -> None:
    """Create (or update) fake GPU nodes in any cluster, as `up` does: for a cluster whose KWOK
    manages nodes annotated kwok.x-k8s.io/node=fake (hack/kind/up.sh uses it)."""
    from qosmos.dev import cluster

    spec = cluster.NodeSpec(
        nodes=nodes, gpus_per_node=gpus_per_node, gpu_model=gpu_model, node_list=node_list, pools=_pools(pools)
    )
    try:
        names = cluster.add_nodes(kubeconfig, spec)
    except (InvalidInput, OSError) as exc:
        raise _fail(str(exc), 2) from None
    except Exception as exc:  # the API refused (kubernetes ApiException, connection errors): one line
        raise _fail(f"creating the nodes failed: {type(exc).__name__}: {exc}", 1) from None
    typer.echo(f"{len(names)} fake GPU nodes: {', '.join(names[:5])}{' ...' if len(names) > 5 else ''}", err=True)


bench_app = typer.Typer()  # commands of the shared ``qosmos bench`` group (qosmos.cli.extend_group)
PolicyOpt = Annotated[str, typer.Option(help="ordering policy of the bench's VirtualCluster (the core's registry)")]
PlacementOpt = Annotated[str, typer.Option(help="placement of the bench's VirtualCluster (cer, consolidate, ...)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="print the result as one line of JSON")]


def _bench_progress(err: Console, what: str) -> Any:
    """A bar of finished DLJobs on stderr (stdout keeps the JSON)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err)
    task = bar.add_task(what, total=None)
    return bar, lambda done, total: bar.update(task, completed=done, total=total)


def _bench_run(fn: Any, what: str, **kw: Any) -> dict[str, Any]:
    """Run a live bench with a spinner while the cluster starts and a bar while the jobs run; bad
    input and missing binaries as one error line (exit 2), a cluster that fails as exit 1."""
    err = Console(stderr=True)
    bar, tick = _bench_progress(err, what)
    try:
        with bar:
            return dict(fn(progress=_RichProgress(err), tick=tick, **kw))
    except InvalidInput as exc:
        raise _fail(str(exc), 2) from None
    except BinariesMissing as exc:
        hint = getattr(exc, "hint", f" (build them with hack/k8s/build.sh or set {BIN_DIR_ENV})")
        raise _fail(str(exc), 2, suffix=hint) from None
    except (ControlPlaneError, RuntimeError, OSError) as exc:
        raise _fail(str(exc), 1) from None


@bench_app.command("operator")
def bench_operator_cmd(
    jobs: Annotated[int, typer.Option(help="DLJobs applied at once (the first pods of the openb trace); >= 1")] = 1000,
    nodes: Annotated[int, typer.Option(help="openb nodes of the cluster, 1 to 1,523 (spread over the list)")] = 1523,
    run_seconds: Annotated[
        float, typer.Option(help="mean seconds each DLJob runs (uniform within +-50 %), as qosmos.io/run-duration")
    ] = 30.0,
    policy: PolicyOpt = "fifo",
    placement: PlacementOpt = "consolidate",
    timeout: Annotated[float, typer.Option(help="longest wait for every DLJob to finish, seconds")] = 1200.0,
    against: Annotated[
        str,
        typer.Option(
            help="also run the same jobs as suspended batch/v1 Jobs under this admission controller, on a fresh "
            'cluster of the same nodes: "kueue" (hack/kueue/build.sh); prints {"qosmos": {...}, "kueue": {...}}'
        ),
    ] = "",
    as_json: JsonOpt = False,
) -> None:
    """The operator under load on a qosmos dev cluster of openb nodes: admissions/s, apply-to-Running
    latency, operator CPU and peak memory; exit 1 unless every DLJob Succeeded."""
    from qosmos.dev.bench import bench_operator

    if jobs < 1 or not 1 <= nodes <= 1523 or not run_seconds > 0 or not timeout > 0:
        raise _fail("--jobs must be >= 1, --nodes in [1, 1523], --run-seconds and --timeout > 0", 2)
    if against not in ("", "kueue"):
        raise _fail(f"invalid against={against!r}: the only controller measured beside qosmos is kueue", 2)
    run: Callable[..., dict[str, Any]]
    run, label = bench_operator, "DLJobs finished"
    if against == "kueue":
        from qosmos.dev.kueue import bench_against_kueue

        run, label = bench_against_kueue, "jobs finished"  # {"qosmos": ..., "kueue": ...}, the same work
    res = _bench_run(
        run,
        label,
        jobs=jobs,
        nodes=nodes,
        run_s=run_seconds,
        policy=policy,
        placement=placement,
        timeout=timeout,
    )
    typer.echo(json.dumps(res, indent=None if as_json else 2))
    if not res["all_succeeded"]:
        raise typer.Exit(1)


@bench_app.command("fidelity")
def bench_fidelity_cmd(
    trace: Annotated[
        str, typer.Option(help="the trace, as qosmos simulate --trace takes it (e.g. builtin:helios-synth)")
    ],
    jobs: Annotated[int, typer.Option(help="GPU jobs of the slice, >= 2")] = 40,
    offset: Annotated[int, typer.Option(help="jobs of the trace (by submit time) skipped before the slice")] = 0,
    trace_format: Annotated[
        str | None, typer.Option("--format", help="trace format (default: inferred as qosmos simulate does)")
    ] = None,
    nodes: Annotated[int, typer.Option(help="synthetic nodes of the cluster (live and simulated)")] = 4,
    gpus_per_node: Annotated[int, typer.Option(help="GPUs of each synthetic node")] = 8,
    span: Annotated[
        float, typer.Option(help="seconds the slice's arrivals are compressed into (unless --speedup is given)")
    ] = 120.0,
    speedup: Annotated[
        float | None,
        typer.Option(help="divide arrival and run times by this (default: what fits the arrivals into --span)"),
    ] = None,
    min_run: Annotated[float, typer.Option(help="shortest run time after compression, seconds")] = 60.0,
    max_run: Annotated[float, typer.Option(help="longest run time after compression, seconds")] = 240.0,
    policy: PolicyOpt = "fifo",
    placement: PlacementOpt = "consolidate",
    backfill: Annotated[str, typer.Option(help="backfilling of both sides: none, easy, relaxed, adaptive")] = "none",
    out: Annotated[
        Path | None,
        typer.Option(help="folder for the slice, the simulation and fidelity.csv per job (default: a temporary one)"),
    ] = None,
    seed: Annotated[int, typer.Option(help="seed of generated traces (builtin:helios-synth)")] = 0,
    timeout: Annotated[float, typer.Option(help="longest wait for the live side, seconds")] = 3600.0,
    eta_history: Annotated[
        int,
        typer.Option(
            min=0, help="ETAs seen once this many jobs had finished are also summarized apart (eta.after_history)"
        ),
    ] = 50,
    eta_lead: Annotated[
        float, typer.Option(min=0.0, help="the second ETA judged: the last one seen this many seconds before the start")
    ] = 60.0,
    as_json: JsonOpt = False,
) -> None:
    """The same trace slice live on qosmos dev (arrival times, run times as qosmos.io/run-duration) and
    replayed by qosmos simulate: the share of job pairs started in the same order and the mean relative
    JCT difference; and the ETA error of every job (status.eta at submission and --eta-lead s before its
    start, against its real start; per job in fidelity.csv)."""
    from qosmos.dev.bench import bench_fidelity

    res = _bench_run(
        bench_fidelity,
        "DLJobs finished",
        trace=trace,
        jobs=jobs,
        fmt=trace_format,
        offset=offset,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        span_s=span,
        speedup=speedup,
        min_run_s=min_run,
        max_run_s=max_run,
        policy=policy,
        placement=placement,
        backfill=backfill,
        timeout=timeout,
        out=out,
        seed=seed,
        eta_history=eta_history,
        eta_lead_s=eta_lead,
    )
    typer.echo(json.dumps(res, indent=None if as_json else 2))
    if res["succeeded"] != res["jobs"]:
        raise typer.Exit(1)


@bench_app.command("kueue-baseline")
def bench_kueue_baseline_cmd(
    generator: Annotated[
        Path | None,
        typer.Option(help="Kueue generator file (default: the module's configs/baseline/generator.yaml)"),
    ] = None,
    range_file: Annotated[
        Path | None,
        typer.Option("--range", help="rangespec for Kueue's checker (default: the baseline's, with the baseline)"),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="folder for the runner's summary, CSVs and logs (default: a temporary one)")
    ] = None,
    timeout: Annotated[float, typer.Option(help="the runner's --timeout (longest recording), seconds")] = 900.0,
    as_json: JsonOpt = False,
) -> None:
    """Kueue's own scalability scenario: its runner with minimalkueue on our etcd and kube-apiserver
    (envtest mode, loopback), then its checker; wall time, per-class average time to admission, cohort
    usage, minimalkueue CPU seconds and peak memory. Needs hack/kueue/build.sh."""
    from qosmos.dev.kueue import kueue_baseline

    if not timeout > 0:
        raise _fail(f"invalid timeout={timeout!r}: must be > 0", 2)
    for name, p in (("generator", generator), ("range", range_file)):
        if p is not None and not p.is_file():
            raise _fail(f"invalid {name}={str(p)!r}: no such file", 2)
    err = Console(stderr=True)
    try:
        with err.status("Kueue's runner with minimalkueue (about 6.5 min for the baseline on 2 cores)"):
            res = kueue_baseline(generator, out, range_file=range_file, timeout_s=timeout)
    except InvalidInput as exc:
        raise _fail(str(exc), 2) from None
    except BinariesMissing as exc:
        raise _fail(str(exc), 2, suffix=getattr(exc, "hint", " (build them with hack/k8s/build.sh)")) from None
    except (ControlPlaneError, OSError) as exc:
        raise _fail(str(exc), 1) from None
    typer.echo(json.dumps(res, indent=None if as_json else 2))
    if res.get("checker") and not res["checker"]["passed"]:
        raise typer.Exit(1)


@bench_app.command("scenario")
def bench_scenario_cmd(
    kueue_generator: Annotated[
        Path, typer.Option(help="Kueue generator file (test/performance/scheduler/configs/*/generator.yaml)")
    ],
    scale: Annotated[float, typer.Option(help="fraction of each workload set to create, in (0, 1]")] = 1.0,
    policy: PolicyOpt = "priority",
    placement: PlacementOpt = "consolidate",
    backfill: Annotated[
        str,
        typer.Option(
            help="behind a blocked head: none (Kueue's StrictFIFO), easy (the nearest to its BestEffortFIFO that "
            "keeps the head's start), relaxed, adaptive"
        ),
    ] = "easy",
    with_kueue: Annotated[
        bool,
        typer.Option(
            "--with-kueue", help="first run Kueue's runner with minimalkueue on the same (scaled) file, reported beside"
        ),
    ] = False,
    out: Annotated[
        Path | None, typer.Option(help="folder for the cluster and Kueue's output (default: temporary)")
    ] = None,
    timeout: Annotated[float, typer.Option(help="longest wait for every DLJob to finish, seconds")] = 3600.0,
    as_json: JsonOpt = False,
) -> None:
    """Kueue's generator file on a qosmos dev cluster: every ClusterQueue a VirtualCluster over its own KWOK
    nodes (nominal quota in GPUs), every Workload a DLJob at its creation time; per-class average time to
    admission, wall time, cohort usage. Exit 1 unless every DLJob Succeeded."""
    from qosmos.dev.kueue import bench_scenario

    if not 0 < scale <= 1 or not timeout > 0:
        raise _fail(f"invalid scale={scale!r} or timeout={timeout!r}: scale in (0, 1], timeout > 0", 2)
    if not kueue_generator.is_file():
        raise _fail(f"invalid kueue_generator={str(kueue_generator)!r}: no such file", 2)
    res = _bench_run(
        bench_scenario,
        "DLJobs finished",
        generator=kueue_generator,
        scale=scale,
        policy=policy,
        placement=placement,
        backfill=backfill,
        timeout=timeout,
        with_kueue=with_kueue,
        out=out,
    )
    typer.echo(json.dumps(res, indent=None if as_json else 2))
    if res["qosmos"]["succeeded"] != res["qosmos"]["workloads"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(dev_app, name="dev")
    extend_group(app, "bench", bench_app)
