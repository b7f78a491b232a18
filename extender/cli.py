"""CLI commands of the extender component: ``qosmos explain``, ``qosmos extender serve``, ``qosmos bench``."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from qosmos.extender.core import genie
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.types import Platform
from qosmos.extender.explain import explain as explain_task
from qosmos.extender.explain import resolve_profile
from rich.console import Console
from rich.table import Table

from qosmos.clitools import clean_errors


def _coeffs(text: str | None) -> tuple[float, float, float] | None:
    if text is None:
        return None
    parts = text.split(",")
    if len(parts) != 3:
        raise InvalidInput("coeffs", text, "expected k0,k1,k2")
    try:
        return float(parts[0]), float(parts[1]), float(parts[2])
    except ValueError:
        raise InvalidInput("coeffs", text, "k0,k1,k2 must be numbers") from None


@clean_errors()
def explain(
    batch: Annotated[int, typer.Option(help="global batch size b")],
    iters: Annotated[int, typer.Option(help="iterations")],
    model: Annotated[str | None, typer.Option(help="model type from the model database")] = None,
    coeffs: Annotated[str | None, typer.Option(help="k0,k1,k2 of sPR(b') (Eq. 7) instead of --model")] = None,
    gamma: Annotated[float | None, typer.Option(help="Comm γ (Eq. 8)")] = None,
    lam: Annotated[float | None, typer.Option(help="Comm λ (Eq. 8)")] = None,
    nu: Annotated[float | None, typer.Option(help="start-up overhead ν in s (Eq. 4)")] = None,
    kind: Annotated[str, typer.Option(help="training | inference")] = "training",
    qos: Annotated[str, typer.Option(help="urgent | prior | normal")] = "normal",
    nodes: Annotated[int, typer.Option(help="platform nodes N")] = 4,
    gpus_per_node: Annotated[int, typer.Option(help="platform GPUs per node G")] = 4,
    theta: Annotated[float, typer.Option(help="cost weight θ (Eq. 10)")] = genie.DEFAULT_THETA,
    submit: Annotated[float, typer.Option(help="submission time, s")] = 0.0,
    now: Annotated[float | None, typer.Option(help="current time, s (default: submit)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Every placement of a task with PR, Lat, Cost, CER and feasibility; the chosen one and its waiting allowance."""
    profile, provenance = resolve_profile(model, _coeffs(coeffs), gamma, lam, nu)
    task = genie.Task(model or "custom", batch, iters, kind, qos, submit)
    result = explain_task(task, profile, Platform(nodes, gpus_per_node), submit if now is None else now, theta)
    if as_json:
        typer.echo(json.dumps(result, indent=2, allow_nan=False))
        return
    console = Console()
    table = Table(
        title=f"{task.model} b={batch} iters={iters} {task.kind.value} {task.qos.name.lower()} on {nodes}x{gpus_per_node}"
    )
    for col in ("d_node", "d_gpn", "PR (samples/s)", "Lat (s)", "Cost", "CER", "feasible"):
        table.add_column(col, justify="right")
    chosen = (result["chosen"]["d_node"], result["chosen"]["d_gpn"])
    for row in result["placements"]:
        mark = (row["d_node"], row["d_gpn"]) == chosen
        table.add_row(
            str(row["d_node"]),
            str(row["d_gpn"]),
            f"{row['pr']:.1f}",
            f"{row['lat']:.1f}",
            f"{row['cost']:.4f}",
            f"{row['cer']:.1f}",
            "yes" if row["feasible"] else "no",
            style="bold green" if mark else None,
        )
    console.print(table)
    console.print(f"profile: {provenance}")
    console.print(
        f"chosen <{chosen[0]},{chosen[1]}>  ECT {_fmt(result['ect'], 1)} s  deadline {_fmt(result['deadline'], 1)} s  "
        f"waiting allowance {_fmt(result['waiting_allowance'], 1)} s"
    )


def _fmt(x: float | None, digits: int) -> str:
    return "inf" if x is None else f"{x:.{digits}f}"


extender_app = typer.Typer(
    help="The scheduler extender (HTTP for kube-scheduler, gRPC for qosmos).", no_args_is_help=True
)
bench_app = typer.Typer(help="Benchmarks.", no_args_is_help=True)


@extender_app.command("serve")
def serve(
    config: Annotated[str | None, typer.Option(help="YAML config file (keys as the flags, with _)")] = None,
    kubeconfig: Annotated[
        str | None, typer.Option(help="kubeconfig (default: in-cluster, then ~/.kube/config)")
    ] = None,
    http_host: Annotated[str | None, typer.Option(help="HTTP listen address [0.0.0.0]")] = None,
    http_port: Annotated[int | None, typer.Option(help="HTTP port for kube-scheduler [8888]")] = None,
    grpc_port: Annotated[int | None, typer.Option(help="gRPC port [9090]; 0 any free port, -1 disables")] = None,
    placer: Annotated[str | None, typer.Option(help="core placer deciding the planned nodes [cer]")] = None,
    shortlist: Annotated[
        int | None,
        typer.Option(help="/filter passes on the top tier of at most this many feasible nodes [8]; 0 keeps all"),
    ] = None,
    assume_ttl_s: Annotated[
        float | None, typer.Option(help="seconds an assumed (not yet seen bound) pod holds GPUs [30]")
    ] = None,
    log_level: Annotated[str | None, typer.Option(help="log level [INFO]")] = None,
) -> None:
    """Serve /filter, /prioritize, /bind, /healthz, /readyz, /metrics and the gRPC API. Env: QOSMOS_EXTENDER_*."""
    from qosmos.extender.config import ExtenderConfig
    from qosmos.extender.runner import serve as run

    # bad config is bad input (exit 2); errors while serving keep their traceback
    cfg = clean_errors()(ExtenderConfig.load)(
        config,
        kubeconfig=kubeconfig,
        http_host=http_host,
        http_port=http_port,
        grpc_port=grpc_port,
        placer=placer,
        shortlist=shortlist,
        assume_ttl_s=assume_ttl_s,
        log_level=log_level,
    )
    run(cfg)


@bench_app.command("extender")
def bench_extender(
    nodes: Annotated[int, typer.Option(help="nodes in the cache (openb nodes, repeated past 1,523)")] = 1523,
    requests: Annotated[int, typer.Option(help="pods; each sends one /filter and one /prioritize")] = 1000,
    assume: Annotated[
        bool, typer.Option(help="hold GPUs of prioritized pods (fills the cluster over a long run)")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """HTTP /filter + /prioritize latency at N nodes vs a bare JSON echo server (the floor)."""
    from qosmos.extender.bench import bench_extender as run

    if nodes < 1 or requests < 1:
        typer.echo("error: --nodes and --requests must be >= 1", err=True)
        raise typer.Exit(2)
    result = run(nodes=nodes, requests=requests, assume=assume)
    typer.echo(json.dumps(result, indent=None if as_json else 2))


@bench_app.command("scheduling")
def bench_scheduling(
    pods: Annotated[int, typer.Option(help="openb GPU pods to schedule in each run")] = 1000,
    timeout: Annotated[float, typer.Option(help="seconds to wait for each run")] = 300.0,
    noop_floor: Annotated[bool, typer.Option(help="also run a protocol-only extender (the throughput floor)")] = False,
    shortlist: Annotated[
        int | None, typer.Option(help="the extender's --shortlist (default: the extender's own default)")
    ] = None,
    percentage_of_nodes_to_score: Annotated[
        int | None,
        typer.Option(
            help="percentageOfNodesToScore of the qosmos-scheduler profile [shipped: 20]; 0 is kube-scheduler's adaptive"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Scheduling throughput on 1,523 fake openb nodes: qosmos-scheduler (extender) vs the default profile."""
    from qosmos.extender.bench import bench_scheduling as run

    if pods < 2:
        typer.echo("error: --pods must be >= 2", err=True)
        raise typer.Exit(2)
    if percentage_of_nodes_to_score is not None and not 0 <= percentage_of_nodes_to_score <= 100:
        typer.echo("error: --percentage-of-nodes-to-score must be in [0, 100]", err=True)
        raise typer.Exit(2)
    result = run(
        pods=pods,
        timeout=timeout,
        noop_floor=noop_floor,
        shortlist=shortlist,
        percentage=percentage_of_nodes_to_score,
    )
    typer.echo(json.dumps(result, indent=None if as_json else 2))


def register(app: typer.Typer) -> None:
    app.command("explain")(explain)
    app.add_typer(extender_app, name="extender")
    app.add_typer(bench_app, name="bench")
