"""``qosmos sidecar run``: the SODA node agent (registered by qosmos/cli.py)."""

from __future__ import annotations

import json
import logging
import signal
import threading
from pathlib import Path
from typing import Annotated, Any

import typer
from qosmos.extender.core.errors import InvalidInput

from qosmos.clitools import clean_errors

sidecar_app = typer.Typer(help="SODA node agent: adaptive CPU cores and contention elimination.", no_args_is_help=True)


def load_history(path: Path | None) -> dict[str, list[tuple[str, int]]]:
    """``{"owner": [["CV", 3], ...]}``: cores of each owner's earlier jobs per model category (§V-B-1)."""
    if path is None:
        return {}
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise InvalidInput(f"history {path} line {e.lineno}", "", e.msg) from None
    if not isinstance(doc, dict):
        raise InvalidInput(f"history {path}", type(doc).__name__, "expected an object owner -> [[category, cores]]")
    out: dict[str, list[tuple[str, int]]] = {}
    for owner, rows in doc.items():
        try:
            out[owner] = [(str(cat), int(cores)) for cat, cores in rows]
        except (TypeError, ValueError):
            raise InvalidInput(f"history {path} field {owner}", rows, "expected [[category, cores], ...]") from None
    return out


@sidecar_app.command("run")
@clean_errors(FileNotFoundError)
def run(
    node: Annotated[str, typer.Option(help="the name of the node this agent manages (as in kubectl get nodes)")],
    kubeconfig: Annotated[
        Path | None, typer.Option(help="kubeconfig file of the cluster (default: the in-cluster service account)")
    ] = None,
    cgroup_root: Annotated[Path, typer.Option(help="where the cgroup file system is mounted")] = Path("/sys/fs/cgroup"),
    cgroup_driver: Annotated[
        str, typer.Option(help="the kubelet's cgroup driver: auto (detected) | cgroupfs | systemd")
    ] = "auto",
    cgroup_parent: Annotated[
        str, typer.Option(help="the kubelet's --cgroup-root below the mount (default: none, pods directly below it)")
    ] = "",
    gpu_util: Annotated[
        str, typer.Option(help="GPU utilisation: auto (NVML if a GPU answers) | nvml | FILE | http://127.0.0.1:..")
    ] = "auto",
    membw: Annotated[str, typer.Option(help="memory bandwidth: auto (resctrl MBM) | FILE | http://.. | none")] = "auto",
    membw_peak: Annotated[
        float | None,
        typer.Option(
            help="the node's peak memory bandwidth in bytes/s, for sources that do not report it (default: none: the source's own peak; without one, contention is never detected)"
        ),
    ] = None,
    resctrl_root: Annotated[
        Path, typer.Option(help="where the resctrl file system is mounted (memory bandwidth monitoring and MBA)")
    ] = Path("/sys/fs/resctrl"),
    tc_dev: Annotated[
        str,
        typer.Option(
            help="network device whose bandwidth is split between multi-node GPU jobs (75 %) and CPU jobs (25 %) while such a GPU job runs (default: none, no split)"
        ),
    ] = "",
    link_mbit: Annotated[int, typer.Option(help="link rate of --tc-dev in Mbit/s; required with it")] = 0,
    step_seconds: Annotated[
        float,
        typer.Option(help="seconds of GPU utilisation measured for each CPU core count tried (the paper uses 60)"),
    ] = 60.0,
    warmup_seconds: Annotated[float, typer.Option(help="seconds of samples ignored after a core count changes")] = 10.0,
    interval: Annotated[float, typer.Option(help="seconds between the agent's passes over the node's pods")] = 5.0,
    history: Annotated[
        Path | None,
        typer.Option(
            help='JSON file of past core counts per owner, e.g. {"alice": \\[["CV", 3]]}: the start point for their jobs (default: none, start from the model category)'
        ),
    ] = None,
    metrics_port: Annotated[
        int, typer.Option(help="port of the Prometheus metrics on 127.0.0.1 (0: no metrics endpoint)")
    ] = 0,
    dry_run: Annotated[bool, typer.Option(help="log what would change, change nothing on the node")] = False,
    passes: Annotated[int, typer.Option(help="stop after this many passes (0: run until SIGTERM)")] = 0,
) -> None:
    """Manage this node's pods labelled qosmos.io/node-agent=managed."""
    from kubernetes import client, config
    from prometheus_client import start_http_server
    from qosmos.sidecar.actuators import detect_resctrl
    from qosmos.sidecar.agent import AgentOptions, Metrics, build_agent
    from qosmos.sidecar.sources import (
        BandwidthSource,
        DeclaredBandwidthSource,
        ResctrlMbmSource,
        describe_gpu_source,
        make_gpu_source,
    )

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if cgroup_driver not in ("auto", "cgroupfs", "systemd"):
        raise InvalidInput("--cgroup-driver", cgroup_driver, "must be auto, cgroupfs or systemd")
    if bool(tc_dev) != (link_mbit > 0):
        raise InvalidInput("--link-mbit", link_mbit, "give --tc-dev and a positive --link-mbit together")
    owner_history = load_history(history)
    bw: BandwidthSource | None
    if membw == "none":
        bw = None
    elif membw == "auto":
        bw = ResctrlMbmSource(resctrl_root, membw_peak) if detect_resctrl(resctrl_root).mbm else None
    else:
        bw = DeclaredBandwidthSource(membw, membw_peak)
    if kubeconfig is not None:
        if not kubeconfig.is_file():
            raise FileNotFoundError(f"kubeconfig {kubeconfig} not found")
        api_client: Any = config.new_client_from_config(config_file=str(kubeconfig))
    else:
        config.load_incluster_config()
        api_client = client.ApiClient()
    metrics = Metrics()
    if metrics_port:
        start_http_server(metrics_port, addr="127.0.0.1", registry=metrics.registry)
    opts = AgentOptions(step_seconds, warmup_seconds, interval, link_mbit, tc_dev, membw_peak)
    gpu_source = make_gpu_source(gpu_util)
    agent = build_agent(
        node,
        client.CoreV1Api(api_client),
        cgroup_root,
        cgroup_driver,
        cgroup_parent,
        gpu_source,
        bw,
        resctrl_root,
        dry_run,
        opts,
        owner_history,
        metrics,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    logging.getLogger("qosmos.sidecar").info(
        "node %s: cgroup v%d/%s, cpus %s, MBA %s, tc %s, GPU utilisation %s",
        node,
        agent.layout.version,
        agent.layout.driver,
        ",".join(map(str, agent.node_cpus)),
        "yes" if agent.mba else "no (halve cores)",
        tc_dev or "off",
        describe_gpu_source(gpu_source, gpu_util),
    )
    agent.run(stop.is_set, passes or None)


def register(app: typer.Typer) -> None:
    app.add_typer(sidecar_app, name="sidecar")
