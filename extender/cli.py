"""CLI commands of the extender component: ``qosmos explain`` (one task, or ``explain queue``),
``qosmos extender serve``, ``qosmos bench``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from qosmos.extender.config import LOG_LEVELS
from qosmos.extender.core import genie
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.placement import PLACERS
from qosmos.extender.core.scoring import DEFAULT_PLACER, DEFAULT_SHORTLIST
from qosmos.extender.core.types import Platform
from qosmos.extender.explain import (
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    describe,
    describe_throughput,
    load_profiles,
    resolve_profile,
)
from qosmos.extender.explain import explain as explain_task
from rich.console import Console
from rich.table import Table

from qosmos.cli import extend_group
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
    ctx: typer.Context,
    batch: Annotated[
        int | None,
        typer.Option(help="global batch size: samples per iteration over all GPUs (default: none; required)"),
    ] = None,
    iters: Annotated[
        int | None,
        typer.Option(help="training iterations (or inference batches) the task runs (default: none; required)"),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="model type, looked up in the model database (see --db); or use --coeffs")
    ] = None,
    coeffs: Annotated[
        str | None,
        typer.Option(
            help="k0,k1,k2 of the single-GPU rate k0 + k1·b' + k2·b'² samples/s at local batch b' "
            "(GENIE Eq. 7), used exactly as given; give this or --model"
        ),
    ] = None,
    db: Annotated[
        Path | None,
        typer.Option(
            help="model database file from `qosmos profile fit` "
            "(default: $QOSMOS_MODELDB, else ~/.config/qosmos/models.json when present; built-in profiles otherwise)"
        ),
    ] = None,
    gamma: Annotated[
        float | None,
        typer.Option(help="communication cost γ: GPUs of rate lost per cross-node peer (default: the profile's)"),
    ] = None,
    lam: Annotated[
        float | None,
        typer.Option(help="cost of an intra-node peer relative to a cross-node one, λ (default: the profile's)"),
    ] = None,
    nu: Annotated[float | None, typer.Option(help="start-up time in seconds, ν (default: the profile's)")] = None,
    kind: Annotated[str, typer.Option(help="calculation type: training | inference")] = "training",
    qos: Annotated[
        str,
        typer.Option(help="QoS class: urgent (no wait) | prior (done within 1x) | normal (within 2x single-GPU time)"),
    ] = "normal",
    nodes: Annotated[int, typer.Option(help=f"nodes in the platform, 1 to {MAX_NODES:,}")] = 4,
    gpus_per_node: Annotated[int, typer.Option(help=f"GPUs per node, 1 to {MAX_GPUS_PER_NODE}")] = 4,
    gpu_model: Annotated[
        str,
        typer.Option(
            help="the platform's GPU model: its own measured profile first, else the reference, else the nearest "
            "GPU's (default: none, the reference profile)"
        ),
    ] = "",
    theta: Annotated[
        float, typer.Option(help="weight of the nodes used against the GPUs used in a placement's cost, θ >= 0")
    ] = genie.DEFAULT_THETA,
    submit: Annotated[float, typer.Option(help="submission time in seconds")] = 0.0,
    now: Annotated[float | None, typer.Option(help="current time in seconds (default: --submit)")] = None,
    rows: Annotated[
        int, typer.Option(help="placements shown in the table: the best by CER (0: all); --json always has all")
    ] = 32,
    as_json: Annotated[bool, typer.Option("--json", help="print the whole table and decision as JSON")] = False,
) -> None:
    """Every placement ⟨nodes, GPUs per node⟩ of a task with its rate, latency, cost, cost-efficiency (CER)
    and whether it meets the QoS deadline; the placement GENIE chooses and how long the task may wait.
    `qosmos explain queue` explains a whole queue instead."""
    if ctx.invoked_subcommand is not None:
        return
    for name, value in (("batch", batch), ("iters", iters)):
        if value is None:
            raise InvalidInput(name, None, f"--{name} is required (or explain a queue: qosmos explain queue --file)")
    assert batch is not None and iters is not None
    if rows < 0:
        raise InvalidInput("rows", rows, "must be >= 0 (0: all)")
    profiles = load_profiles(db) if model is not None else None
    profile, provenance = resolve_profile(model, _coeffs(coeffs), gamma, lam, nu, profiles, gpu_model)
    # kind and qos by name: Task.__post_init__ parses them (JobKind.parse, QoSClass.parse)
    task = genie.Task(model or "custom", batch, iters, kind, qos, submit)  # type: ignore[arg-type]
    platform = Platform(nodes, gpus_per_node, gpu_model)
    result = explain_task(task, profile, platform, submit if now is None else now, theta, provenance)
    if as_json:
        typer.echo(json.dumps(result, indent=2, allow_nan=False))
        return
    console = Console()
    chosen = (result["chosen"]["d_node"], result["chosen"]["d_gpn"])
    shown = result["placements"]
    if rows and len(shown) > rows:
        shown = sorted(shown, key=lambda r: (-(r["cer"] or 0.0), r["d_node"] * r["d_gpn"], r["d_node"]))[:rows]
        if not any((r["d_node"], r["d_gpn"]) == chosen for r in shown):
            shown.append(next(r for r in result["placements"] if (r["d_node"], r["d_gpn"]) == chosen))
    table = Table(
        title=f"{task.model} b={batch} iters={iters} {task.kind.value} {task.qos.name.lower()} on {nodes}x{gpus_per_node}"
    )
    for col in ("d_node", "d_gpn", "PR (samples/s)", "Lat (s)", "Cost", "CER", "feasible", "extrapolated"):
        table.add_column(col, justify="right")
    for row in shown:
        mark = (row["d_node"], row["d_gpn"]) == chosen
        table.add_row(
            str(row["d_node"]),
            str(row["d_gpn"]),
            f"{row['pr']:.1f}",
            _fmt(row["lat"], 1),
            f"{row['cost']:.4f}",
            f"{row['cer']:.1f}",
            "yes" if row["feasible"] else "no",
            "yes" if row["extrapolated"] else "",
            style="bold green" if mark else None,
        )
    console.print(table)
    if len(shown) < len(result["placements"]):
        console.print(
            f"showing {len(shown)} of {len(result['placements']):,} placements, the best by CER (--rows 0 shows all)"
        )
    console.print(f"profile: {describe(provenance)}")
    console.print(f"throughput: {describe_throughput(result['throughput'], batch)}")
    for note in result["notes"]:
        console.print(f"note: {note}")
    console.print(
        f"chosen <{chosen[0]},{chosen[1]}>  ECT {_fmt(result['ect'], 1)} s  deadline {_fmt(result['deadline'], 1)} s  "
        f"waiting allowance {_fmt(result['waiting_allowance'], 1)} s"
    )


def _fmt(x: float | None, digits: int) -> str:
    return "inf" if x is None else f"{x:.{digits}f}"


explain_app = typer.Typer(
    help="Why a task is placed as it is, or why the jobs of a queue wait.", invoke_without_command=True
)
explain_app.callback(invoke_without_command=True)(explain)


def _read_json(path: Path) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput("file", str(path), getattr(exc, "strerror", None) or str(exc)) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput("file", str(path), f"not JSON: {exc.msg} at line {exc.lineno}") from None


def _grants(spec: Any) -> str:
    return " ".join(f"{g.node}:{','.join(map(str, g.gpu_ids)) or 'cpu'}" for g in spec.grants)


@explain_app.command("queue")
@clean_errors()
def explain_queue(
    file: Annotated[
        Path,
        typer.Option(
            "--file",
            help="JSON queue description: partition, nodes, waiting and running jobs, now, carry (gRPC "
            "AdmitRequest in protobuf's JSON form; see the extender README)",
        ),
    ],
    db: Annotated[
        Path | None,
        typer.Option(
            help="model database file for GENIE policies "
            "(default: $QOSMOS_MODELDB, else ~/.config/qosmos/models.json when present; built-in profiles otherwise)"
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print the answer as JSON, as gRPC ExplainQueue returns it")
    ] = False,
) -> None:
    """The policy's order of a queue and, for every job, what one admission pass decides (start, backfill,
    wait, preempt) and why it waits: the core's admission cycle, as gRPC ExplainQueue answers. Nothing starts."""
    from qosmos.extender.admission_api import admit_input, explain_queue_response, request_from_json, response_json

    req = request_from_json(_read_json(file), "file", str(file))
    inp = admit_input(req, load_profiles(db).db)
    resp = explain_queue_response(inp.admit(explain=True), inp)
    if as_json:
        typer.echo(json.dumps(response_json(resp), indent=2))
        return
    part = inp.runtime.partition
    table = Table(title=f"{part.name}: {part.policy}, backfill {part.backfill}, now {inp.now:g} s")
    for col in ("#", "job", "decision", "code", "placement", "reason"):
        table.add_column(col, justify="right" if col == "#" else "left", overflow="fold")
    styles = {"start": "green", "backfill": "cyan", "preempt": "red"}
    for e in resp.jobs:
        where = _grants(e.allocation)
        if e.HasField("d_node"):
            where = f"<{e.d_node},{e.d_gpn}> {where}"
        table.add_row(str(e.position), e.job_id, e.decision, e.code, where, e.message, style=styles.get(e.decision))
    console = Console()
    console.print(table)
    if resp.carry.HasField("reservation"):
        r = resp.carry.reservation
        console.print(
            f"reservation: {r.job_id} projected to start at {r.start:g} s, at the latest {r.latest:g} s"
            + (f"; backfilled behind it: {', '.join(r.backfilled)}" if r.backfilled else "")
        )


@explain_app.command("inference")
@clean_errors()
def explain_inference(
    model: Annotated[str, typer.Option(help="model type served (e.g. ResNet50)")],
    qos_target_ms: Annotated[
        float, typer.Option(min=0.001, help="latency target of every query, milliseconds (SODA's: 200)")
    ] = 200.0,
    gpu_model: Annotated[
        str | None,
        typer.Option(
            help="GPU model of the serving nodes: its inference profile first, else the nearest measured "
            "(default: the newest measured)"
        ),
    ] = None,
    cpu_cores: Annotated[int, typer.Option(min=1, help="CPU cores of a CPU replica")] = 16,
    gpu_switch_batch: Annotated[
        int | None,
        typer.Option(min=1, help="override bs_gpu, an InferenceService's gpuSwitchBatch (default: derived from C(b))"),
    ] = None,
    cpu_max_batch: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="override the CPU replica's max batch, cpu.maxBatch; 0 = never on CPU (default: derived from C(b))",
        ),
    ] = None,
    inference_profile: Annotated[
        bool,
        typer.Option(
            help="use measured inference profiles (built-in and the database's); --no-inference-profile: the "
            "model database's training rate and SODA's CPU measurements"
        ),
    ] = True,
    db: Annotated[
        Path | None,
        typer.Option(
            help="model database file (default: $QOSMOS_MODELDB, else ~/.config/qosmos/models.json when present)"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the thresholds and their sources as JSON")] = False,
) -> None:
    """SODA's inference thresholds for a model (seed 002 §V-D1): the GPU switching batch bs_gpu, the
    largest CPU batch within T/2 on the replica's cores, each replica's maximum load, and where each
    came from (an override, a measured inference profile, the model database, the seed)."""
    from qosmos.extender.core.inference import resolve_spec
    from qosmos.extender.core.inference_profiles import InferenceProfiles
    from qosmos.predictors.inference_profiles import load_inference_profiles

    measured = load_inference_profiles(db) if inference_profile else InferenceProfiles()
    spec = resolve_spec(
        model,
        qos_target_ms,
        db=load_profiles(db).db,
        gpu_switch_batch=gpu_switch_batch,
        cpu_cores_per_replica=cpu_cores,
        cpu_max_batch=cpu_max_batch,
        inference_profiles=measured,
        gpu_model=gpu_model,
    )
    out = {
        "model": model,
        "qos_target_ms": qos_target_ms,
        "gpu_model": gpu_model,
        "thresholds": spec.thresholds(),
        "notes": list(spec.notes),
    }
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    table = Table(title=f"{model}, QoS target {qos_target_ms:g} ms" + (f", {gpu_model}" if gpu_model else ""))
    for col in ("threshold", "value", "source"):
        table.add_column(col, justify="right" if col == "value" else "left", overflow="fold")
    for name, th in spec.thresholds().items():
        v = th["value"]
        table.add_row(name, "-" if v is None else f"{v:g}", str(th["source"]))
    console = Console()
    console.print(table)
    for note in spec.notes:
        console.print(f"note: {note}")


extender_app = typer.Typer(
    help="The scheduler extender: HTTP for kube-scheduler, gRPC for qosmos tools.", no_args_is_help=True
)
bench_app = typer.Typer()  # commands of the shared ``qosmos bench`` group (qosmos.cli.extend_group)


@extender_app.command("serve")
def serve(
    config: Annotated[
        Path | None,
        typer.Option(help="YAML file of settings, keys as the options below with _ (e.g. http_port) (default: none)"),
    ] = None,
    kubeconfig: Annotated[
        str | None,
        typer.Option(help="kubeconfig of the cluster to watch (default: in-cluster, then $KUBECONFIG, ~/.kube/config)"),
    ] = None,
    node_list: Annotated[
        Path | None,
        typer.Option(
            help="serve a fixed node set from an openb node list CSV (e.g. openb_node_list_gpu_node.csv) "
            "instead of watching a cluster: for demos and protocol tests; no binding (default: watch the cluster)"
        ),
    ] = None,
    http_host: Annotated[
        str | None, typer.Option(help="address the HTTP extender listens on (default: 127.0.0.1)")
    ] = None,
    http_port: Annotated[
        int | None, typer.Option(help="HTTP port kube-scheduler calls, 0 to 65535 (0: any free) (default: 8888)")
    ] = None,
    grpc_host: Annotated[str | None, typer.Option(help="address the gRPC API listens on (default: 127.0.0.1)")] = None,
    grpc_port: Annotated[
        int | None, typer.Option(help="gRPC port, 0 to 65535 (0: any free; -1: no gRPC) (default: 9090)")
    ] = None,
    tls_cert_file: Annotated[
        str | None,
        typer.Option(
            help="PEM certificate the extender presents on HTTPS and gRPC (default: none; needed unless --insecure)"
        ),
    ] = None,
    tls_key_file: Annotated[
        str | None, typer.Option(help="PEM private key of --tls-cert-file (default: none; needed unless --insecure)")
    ] = None,
    tls_client_ca_file: Annotated[
        str | None,
        typer.Option(
            help="PEM CA bundle: only clients with a certificate it signed may call, e.g. kube-scheduler "
            "with its tlsConfig certFile (default: none; needed unless --insecure)"
        ),
    ] = None,
    scheduler_clients: Annotated[
        str | None,
        typer.Option(
            help="certificate CNs allowed to call /filter, /prioritize and /bind, comma-separated "
            "(e.g. qosmos-scheduler); others get 403 (default: any client the CA signed)"
        ),
    ] = None,
    metrics_clients: Annotated[
        str | None,
        typer.Option(help="certificate CNs allowed to GET /metrics, comma-separated (default: any CA-signed client)"),
    ] = None,
    api_clients: Annotated[
        str | None,
        typer.Option(
            help="certificate CNs allowed to call the gRPC API, comma-separated; others get PERMISSION_DENIED "
            "(default: any CA-signed client)"
        ),
    ] = None,
    insecure: Annotated[
        bool | None,
        typer.Option(
            "--insecure",
            help="plaintext, no client authentication, loopback addresses only: for local use "
            "(a scheduler in the same pod, demos, tests); without it the TLS files are required (default: off)",
        ),
    ] = None,
    placer: Annotated[
        str | None,
        typer.Option(help=f"how pods are placed: {' | '.join(PLACERS)} (default: {DEFAULT_PLACER})"),
    ] = None,
    shortlist: Annotated[
        int | None,
        typer.Option(
            help="/filter passes on only the best-ranked feasible nodes, at most this many (0: all) "
            f"(default: {DEFAULT_SHORTLIST})"
        ),
    ] = None,
    assume_ttl_s: Annotated[
        float | None,
        typer.Option(
            help="seconds a pod's GPUs stay held between the scheduler's choice and the binding, (0, 3600] "
            "(default: 30)"
        ),
    ] = None,
    max_assumed_gpus: Annotated[
        int | None,
        typer.Option(help="GPUs one caller may hold that way at a time (0: no cap) (default: 1024)"),
    ] = None,
    request_timeout_s: Annotated[
        float | None, typer.Option(help="longest a gRPC call may compute, seconds, (0, 600] (default: 5)")
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(help="model database file (default: $QOSMOS_MODELDB, else ~/.config/qosmos/models.json)"),
    ] = None,
    log_level: Annotated[str | None, typer.Option(help=f"log level: {' | '.join(LOG_LEVELS)} (default: INFO)")] = None,
) -> None:
    """Serve /filter, /prioritize, /bind, /healthz, /readyz, /metrics and the gRPC API until SIGTERM.

    Settings: options > environment QOSMOS_EXTENDER_<SETTING> (e.g. QOSMOS_EXTENDER_HTTP_PORT) > --config file.
    """
    from qosmos.extender.config import ExtenderConfig
    from qosmos.extender.runner import serve as run

    @clean_errors()
    def start() -> None:
        cfg = ExtenderConfig.load(
            config,
            kubeconfig=kubeconfig,
            node_list=None if node_list is None else str(node_list),
            http_host=http_host,
            http_port=http_port,
            grpc_host=grpc_host,
            grpc_port=grpc_port,
            tls_cert_file=tls_cert_file,
            tls_key_file=tls_key_file,
            tls_client_ca_file=tls_client_ca_file,
            scheduler_clients=scheduler_clients,
            metrics_clients=metrics_clients,
            api_clients=api_clients,
            insecure=insecure,
            placer=placer,
            shortlist=shortlist,
            assume_ttl_s=assume_ttl_s,
            max_assumed_gpus=max_assumed_gpus,
            request_timeout_s=request_timeout_s,
            db=db,
            log_level=log_level,
        )
        run(cfg)

    start()


@bench_app.command("extender")
def bench_extender(
    nodes: Annotated[
        int, typer.Option(help="nodes the extender knows: the 1,523 openb nodes, repeated beyond that; >= 1")
    ] = 1523,
    requests: Annotated[
        int, typer.Option(help="pods to send; each pod is one /filter and one /prioritize request; >= 1")
    ] = 1000,
    assume: Annotated[
        bool,
        typer.Option(help="let the extender hold the GPUs of each scored pod, as in production (fills the cluster)"),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as one line of JSON")] = False,
) -> None:
    """Latency of the extender's /filter and /prioritize with N nodes, next to a server that only
    parses and returns the same JSON (the floor any JSON extender pays)."""
    from qosmos.extender.bench import bench_extender as run

    if nodes < 1 or requests < 1:
        typer.echo("error: --nodes and --requests must be >= 1", err=True)
        raise typer.Exit(2)
    result = run(nodes=nodes, requests=requests, assume=assume)
    typer.echo(json.dumps(result, indent=None if as_json else 2))


@bench_app.command("scheduling")
def bench_scheduling(
    pods: Annotated[int, typer.Option(help="openb GPU pods to schedule in each run; >= 2")] = 1000,
    timeout: Annotated[float, typer.Option(help="longest wait for one run to bind its pods, seconds")] = 300.0,
    noop_floor: Annotated[
        bool, typer.Option(help="also run with an extender that only speaks the protocol (the throughput floor)")
    ] = False,
    shortlist: Annotated[
        int | None,
        typer.Option(
            help=f"the extender's --shortlist: best-ranked nodes /filter passes on (default: {DEFAULT_SHORTLIST})"
        ),
    ] = None,
    percentage_of_nodes_to_score: Annotated[
        int | None,
        typer.Option(
            help="share of nodes, 0 to 100, kube-scheduler checks before it stops looking (its "
            "percentageOfNodesToScore; 0: its adaptive default) (default: the shipped profile's 20)"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the result as one line of JSON")] = False,
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
    app.add_typer(explain_app, name="explain")
    app.add_typer(extender_app, name="extender")
    extend_group(app, "bench", bench_app)
