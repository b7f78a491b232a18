"""CLI commands of the operator component: ``qosmos crds generate``, ``qosmos operator run``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer
from qosmos.operator import crds

from qosmos.clitools import clean_errors

_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")

crds_app = typer.Typer(
    help="The qosmos.io/v1alpha1 CustomResourceDefinitions (VirtualCluster, DLJob).", no_args_is_help=True
)


@crds_app.command("generate")
@clean_errors(OSError)
def generate(
    out: Annotated[Path, typer.Option(help="folder the CRD YAML files are written to (created)")] = Path("crds"),
    check: Annotated[
        bool,
        typer.Option("--check", help="write nothing; exit 1 when a file in --out is missing or differs (for CI)"),
    ] = False,
) -> None:
    """Render the CRDs from the pydantic models in qosmos.operator.crds."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out} is not a folder")
    if check:
        bad = crds.stale(out)
        for path in bad:
            typer.echo(f"stale: {path} (run `qosmos crds generate --out {out}`)", err=True)
        if bad:
            raise typer.Exit(1)
        typer.echo(f"up to date: {len(crds.RESOURCES)} CRDs in {out}")
        return
    for path in crds.write(out):
        typer.echo(f"wrote {path}")


operator_app = typer.Typer(
    help="The qosmos operator: VirtualCluster queues admitting DLJobs through the core's admission cycle.",
    no_args_is_help=True,
)


@operator_app.command("run")
@clean_errors(OSError)
def run(
    kubeconfig: Annotated[
        Path | None, typer.Option(help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
    ] = None,
    namespace: Annotated[
        str | None, typer.Option(help="watch DLJobs and their pods in this namespace only (default: all namespaces)")
    ] = None,
    metrics_port: Annotated[
        int, typer.Option(help="serve Prometheus metrics on --metrics-host:PORT/metrics (default 0: no metrics server)")
    ] = 0,
    metrics_host: Annotated[
        str, typer.Option(help="address of the metrics server (0.0.0.0 in a pod, for Prometheus)")
    ] = "127.0.0.1",
    interval: Annotated[
        float, typer.Option(help="seconds between passes without events (waiting allowances move with time)")
    ] = 10.0,
    history_namespace: Annotated[
        str, typer.Option(help="namespace of the ConfigMap holding the QSSF duration history")
    ] = "default",
    history_save_interval: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="write the QSSF duration history (up to 1 MB, one ConfigMap) at most every this many seconds; "
            "a graceful stop writes what is held back",
        ),
    ] = 30.0,
    db: Annotated[
        Path | None,
        typer.Option(
            help="model database for GENIE policies and deadlines "
            "(default: $QOSMOS_MODELDB, else ~/.config/qosmos/models.json, over the built-in profiles)"
        ),
    ] = None,
    ces: Annotated[
        bool,
        typer.Option("--ces", help="Cluster Energy Saving: idle GPU nodes sleep when demand falls (Helios Alg. 2)"),
    ] = False,
    ces_minute: Annotated[float, typer.Option(help="seconds in a CES minute (tests compress time)")] = 60.0,
    ces_interval: Annotated[int, typer.Option(help="minutes between CES periodic checks")] = 10,
    ces_sigma: Annotated[
        str, typer.Option(help="CES buffer nodes: a number, or 'auto' (chosen on the recorded history)")
    ] = "auto",
    ces_wake_latency: Annotated[float, typer.Option(help="seconds a woken node stays unschedulable (booting)")] = 300.0,
    power_driver: Annotated[str, typer.Option(help="none, command or webhook: what sleeps and wakes nodes")] = "none",
    power_command: Annotated[
        str, typer.Option(help="--power-driver command: template with {node}, {action} (sleep|wake), {power} (off|on)")
    ] = "",
    power_webhook: Annotated[
        str, typer.Option(help='--power-driver webhook: URL POSTed {"node": ..., "action": "sleep"|"wake"}')
    ] = "",
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING or ERROR")] = "INFO",
    peering: Annotated[
        str | None,
        typer.Option(
            help="kopf peering object (ClusterKopfPeering NAME; KopfPeering with --namespace), created if missing: "
            "the oldest live replica runs the passes, the others stand by (default: none, one replica only)"
        ),
    ] = None,
    peering_priority: Annotated[
        int | None,
        typer.Option(help="kopf peering priority, the highest runs (default: by start time, the oldest first)"),
    ] = None,
) -> None:
    """Run the operator until interrupted (SIGINT/SIGTERM)."""
    import logging

    from qosmos.extender.core.errors import InvalidInput
    from qosmos.extender.explain import load_profiles
    from qosmos.operator.runner import RunOptions
    from qosmos.operator.runner import run as run_operator

    if kubeconfig is not None and not kubeconfig.is_file():
        raise InvalidInput("kubeconfig", str(kubeconfig), "no such file")
    if not 0 <= metrics_port <= 65535:
        raise InvalidInput("metrics_port", metrics_port, "must be in [0, 65535]")
    if not interval > 0:
        raise InvalidInput("interval", interval, "must be > 0")
    if peering is not None and not _DNS_NAME.match(peering):
        raise InvalidInput("peering", peering, "must be a DNS subdomain name (lower case, digits, '-', '.')")
    if log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise InvalidInput("log_level", log_level, "expected DEBUG, INFO, WARNING or ERROR")
    from qosmos.operator.ces import options as ces_options

    energy = ces_options(
        ces, ces_minute, ces_interval, ces_sigma, ces_wake_latency, power_driver, power_command, power_webhook,
        history_namespace,
    )  # fmt: skip
    profiles = load_profiles(db)  # the one model database explain, simulate and the extender read
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("qosmos.operator").info(
        "model database: %s", f"{profiles.file} over the built-in profiles" if profiles.file else "built-in profiles"
    )
    for noisy in ("kopf", "kubernetes", "urllib3", "aiohttp"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(log_level.upper())))
    run_operator(
        RunOptions(
            kubeconfig=str(kubeconfig) if kubeconfig else None,
            namespace=namespace,
            metrics_port=metrics_port,
            interval_s=interval,
            history_namespace=history_namespace,
            history_save_interval_s=history_save_interval,
            ces=energy,
            modeldb=profiles.db,
            metrics_host=metrics_host,
            peering=peering,
            peering_priority=peering_priority,
        )
    )


def register(app: typer.Typer) -> None:
    app.add_typer(crds_app, name="crds")
    app.add_typer(operator_app, name="operator")
