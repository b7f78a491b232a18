"""``qosmos sidecar run``: the SODA node agent; ``qosmos sidecar cleanup``: undo what it changed
(registered by qosmos/cli.py)."""

from __future__ import annotations

import json
import logging
import signal
import threading
from pathlib import Path
from typing import Annotated, Any

import typer
from qosmos.extender.core.errors import InvalidInput
from qosmos.sidecar.journal import Journal, state_path
from qosmos.sidecar.podresources import DEFAULT_SOCKET as DEFAULT_POD_RESOURCES_SOCKET

from qosmos.clitools import clean_errors

DEFAULT_STATE_DIR = Path("/var/lib/qosmos-node-agent")

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
    pod_resources_socket: Annotated[
        str,
        typer.Option(
            help="the kubelet's PodResources socket: each pod's GPUs for NVML (where absent or not answering: the GPUs running the pod's processes); \"\": not used"
        ),
    ] = str(DEFAULT_POD_RESOURCES_SOCKET),
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
            help="network device whose bandwidth is split between multi-node GPU jobs (75 %) and CPU jobs (25 %) "
            "while such a GPU job runs, or 'veth': cap each CPU-job pod on its own host-side veth at an equal part "
            "of the 25 % instead, leaving the NIC's root qdisc alone (default: none, no split)"
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
        int, typer.Option(help="port of /metrics (Prometheus), /healthz and /readyz (0: no HTTP endpoint)")
    ] = 0,
    metrics_address: Annotated[
        str, typer.Option(help="address the metrics/health port binds to (0.0.0.0: every interface)")
    ] = "127.0.0.1",
    state_dir: Annotated[
        Path,
        typer.Option(
            help="where the agent records what it changed and what was there before (on the node: survives restarts)"
        ),
    ] = DEFAULT_STATE_DIR,
    net_shaping: Annotated[
        bool,
        typer.Option(
            help="allow the tc split on --tc-dev (the admin's switch; a pod's qosmos.io/multi-node annotation only asks for it)"
        ),
    ] = False,
    cpu_manager_state: Annotated[
        Path | None,
        typer.Option(
            help="the kubelet's cpu_manager_state: with the static policy its exclusive CPUs are never given to others"
        ),
    ] = Path("/var/lib/kubelet/cpu_manager_state"),
    stale_seconds: Annotated[
        float, typer.Option(help="seconds without a memory bandwidth measurement after which a throttle is lifted")
    ] = 60.0,
    request_timeout: Annotated[float, typer.Option(help="seconds before a Kubernetes API request is given up")] = 10.0,
    restore_on_exit: Annotated[
        bool, typer.Option(help="on SIGTERM, undo every change (cpusets, quotas, MBA, tc) before exiting")
    ] = True,
    dry_run: Annotated[bool, typer.Option(help="log what would change, change nothing on the node")] = False,
    passes: Annotated[int, typer.Option(help="stop after this many passes (0: run until SIGTERM)")] = 0,
) -> None:
    """Manage this node's pods labelled qosmos.io/node-agent=managed."""
    from kubernetes import client, config
    from qosmos.sidecar.actuators import detect_resctrl
    from qosmos.sidecar.agent import AgentOptions, Metrics, build_agent
    from qosmos.sidecar.health import serve
    from qosmos.sidecar.podresources import PodGpus
    from qosmos.sidecar.podwatch import PodCache
    from qosmos.sidecar.sources import (
        BandwidthSource,
        DeclaredBandwidthSource,
        NvmlGpuSource,
        ResctrlMbmSource,
        describe_gpu_source,
        make_gpu_source,
    )

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if cgroup_driver not in ("auto", "cgroupfs", "systemd"):
        raise InvalidInput("--cgroup-driver", cgroup_driver, "must be auto, cgroupfs or systemd")
    if bool(tc_dev) != (link_mbit > 0):
        raise InvalidInput("--link-mbit", link_mbit, "give --tc-dev and a positive --link-mbit together")
    if net_shaping and not tc_dev:
        raise InvalidInput("--net-shaping", True, "needs --tc-dev and --link-mbit")
    if stale_seconds <= 0 or request_timeout <= 0:
        raise InvalidInput("--stale-seconds/--request-timeout", min(stale_seconds, request_timeout), "must be > 0")
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
    opts = AgentOptions(step_seconds, warmup_seconds, interval, link_mbit, tc_dev, membw_peak, net_shaping,
                        stale_seconds, cpu_manager_state)  # fmt: skip
    gpu_source = make_gpu_source(gpu_util)
    pod_gpus = PodGpus(Path(pod_resources_socket), request_timeout) if pod_resources_socket else None
    if isinstance(gpu_source, NvmlGpuSource) and pod_gpus is not None:
        gpu_source.devices_of = pod_gpus.devices  # the kubelet's word on which GPUs are the pod's
    core = client.CoreV1Api(api_client)
    pods = PodCache(core, node, request_timeout_s=request_timeout)
    journal = Journal() if dry_run else Journal.load(state_path(state_dir))
    agent = build_agent(
        node,
        core,
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
        journal,
        pods.pods,
        pod_gpus,
    )
    agent.request_timeout_s = request_timeout
    stop = stop_on_signals()
    pods.start()
    if metrics_port:
        serve(metrics_address, metrics_port, metrics.registry, agent.healthy, lambda: pods.synced and agent.ready())
    served = agent.refresh_pod_gpus()
    logging.getLogger("qosmos.sidecar").info(
        "node %s: cgroup v%d/%s, cpus %s, MBA %s, tc %s, GPU utilisation %s, PodResources %s",
        node,
        agent.layout.version,
        agent.layout.driver,
        ",".join(map(str, agent.node_cpus)),
        "yes" if agent.mba else "no (halve cores)",
        f"{tc_dev} at {link_mbit} Mbit/s"
        if tc_dev and net_shaping
        else "off (--net-shaping not given)"
        if tc_dev
        else "off",
        describe_gpu_source(gpu_source, gpu_util),
        "off"
        if served is None
        else f"served at {pod_resources_socket}"
        if served
        else f"not served at {pod_resources_socket} (a pod's GPUs: those running its processes)",
    )
    if not wait_synced(pods, stop, request_timeout * 3):
        logging.getLogger("qosmos.sidecar").warning(
            "no pod list from the API yet: passes change nothing until it answers"
        )
    agent.run(stop.is_set, passes or None, restore_on_exit=restore_on_exit and not dry_run, wait=stop.wait)
    pods.stop()


def stop_on_signals() -> threading.Event:
    """An Event set by SIGTERM (the kubelet stopping the pod, uninstall) or SIGINT."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def wait_synced(pods: Any, stop: threading.Event, timeout: float) -> bool:
    """Wait (at most ``timeout`` s) for the first pod list: a pass before it would see no pods at all."""
    import time

    end = time.monotonic() + timeout
    while not pods.synced and not stop.is_set() and time.monotonic() < end:
        stop.wait(0.1)
    return bool(pods.synced)


@sidecar_app.command("cleanup")
@clean_errors()
def cleanup(
    state_dir: Annotated[
        Path, typer.Option(help="the agent's --state-dir: what it changed and what was there before")
    ] = DEFAULT_STATE_DIR,
    tc_dev: Annotated[
        str, typer.Option(help="also remove the agent's HTB root (handle 50:) from this device if it is there")
    ] = "",
) -> None:
    """Undo everything the agent changed on this node: cpusets and quotas back to the kubelet's, MBA tasks
    back to their groups and the agent's group removed, its tc qdisc removed. Idempotent: exit 0 when
    nothing is left to restore, 1 when something could not be."""
    from qosmos.sidecar.restore import restore

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    journal = Journal.load(state_path(state_dir))
    if journal.empty() and not tc_dev:
        typer.echo("nothing to restore")
        return
    report = restore(journal, devices=[tc_dev] if tc_dev else [])
    typer.echo(f"restored {len(report.restored)}, not restored {len(report.failed)}")
    for line in report.failed:
        typer.echo(f"not restored: {line}", err=True)
    if not report.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(sidecar_app, name="sidecar")
