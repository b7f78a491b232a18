"""``qosmos dev up`` / ``qosmos dev down``: a whole qosmos cluster on loopback, in one folder.

``up`` starts, each waited for before the next: etcd, kube-apiserver, kube-controller-manager,
the default kube-scheduler (``qosmos.dev.controlplane``); the extender over HTTPS, accepting
only client certificates of its own CA; a second kube-scheduler whose ``qosmos-scheduler``
profile calls it with such a certificate (``qosmos.extender.schedconfig``); the fake GPU nodes
and KWOK (``qosmos.dev.fakenodes``, ``qosmos.dev.kwok``; ready once KWOK holds every node's
lease); the CRDs of ``crds/*.yaml`` (server-side apply, then Established); and the operator
(``qosmos operator run``) when that command exists. Every process is detached and recorded
(pid and kernel start time) in ``DIR/state.json`` as soon as it starts, so ``down`` stops
exactly what ``up`` started, even after a failed or interrupted ``up``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import shutil
import ssl
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from qosmos.dev.binaries import DEV_BINARIES, ControlPlaneError, repo_root, require_binaries
from qosmos.dev.controlplane import ControlPlane, new_api_client
from qosmos.dev.fakenodes import create_nodes, fake_node_manifest, spread_sample, synthetic_nodes
from qosmos.dev.kwok import start_kwok
from qosmos.dev.pki import PKI, write_private
from qosmos.dev.process import LOOPBACK, Component, ProcessRef, free_port, port_in_use, stop_all
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.schedconfig import SCHEDULER_NAME, ExtenderClientTLS, qosmos_scheduler_config

if TYPE_CHECKING:
    from kubernetes.client import V1ObjectMeta

STATE_FILE = "state.json"
MARKER_FILE = ".qosmos-dev"  # a folder holding it was made by `qosmos dev up`: `up` may clear it
KUBECONFIG = "kubeconfig"
STATE_VERSION = 1
DEFAULT_NODES = 4
DEFAULT_GPUS_PER_NODE = 8
DEFAULT_GPU_MODEL = "V100M32"
# examples/ VirtualClusters select their nodes by this label (vc-a: pool a, vc-b: pool b).
POOL_LABEL = "qosmos.io/pool"
DEFAULT_POOLS = ("a", "b")
MAX_NODES = 5000
MAX_GPUS_PER_NODE = 64
OPERATOR_SETTLE_S = 2.0  # still alive this long after its metrics endpoint answers: started
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


class DevError(ControlPlaneError):
    """``up`` or ``down`` refuses before touching anything (one line; the CLI exits 2).

    A component that fails while starting raises ControlPlaneError instead (the CLI exits 1).
    """


class Progress(Protocol):
    """Where ``up`` reports what it waits for (the CLI shows it with rich)."""

    def begin(self, what: str) -> None: ...

    def done(self, what: str, detail: str = "") -> None: ...


class _Quiet:
    def begin(self, what: str) -> None:
        pass

    def done(self, what: str, detail: str = "") -> None:
        pass


@dataclass(slots=True, kw_only=True)
class NodeSpec:
    """The fake GPU nodes to create; ``validate`` refuses bad values (InvalidInput)."""

    nodes: int | None = None  # None: DEFAULT_NODES synthetic nodes, or every row of node_list
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    gpu_model: str = DEFAULT_GPU_MODEL
    node_list: Path | None = None
    pools: tuple[str, ...] = DEFAULT_POOLS  # nodes take these POOL_LABEL values in turn; () for none

    def validate(self) -> None:
        if self.nodes is not None and not 1 <= self.nodes <= MAX_NODES:
            raise InvalidInput("nodes", self.nodes, f"must be in [1, {MAX_NODES}]")
        if not 0 <= self.gpus_per_node <= MAX_GPUS_PER_NODE:
            raise InvalidInput("gpus_per_node", self.gpus_per_node, f"must be in [0, {MAX_GPUS_PER_NODE}]")
        if not _LABEL_VALUE.match(self.gpu_model):
            raise InvalidInput(
                "gpu_model", self.gpu_model, "must be a label value such as V100M32 (letters, digits, -_.)"
            )
        for pool in self.pools:
            if not _LABEL_VALUE.match(pool):
                raise InvalidInput(
                    "pools", ",".join(self.pools), f"{pool!r} is not a label value (letters, digits, -_.)"
                )
        if self.node_list is not None and not self.node_list.is_file():
            raise InvalidInput("node_list", str(self.node_list), "no such file")

    def node_rows(self) -> list[dict[str, Any]]:
        """The nodes to create: synthetic ``node-i``, or rows of the openb node list (``--nodes``: spread sample)."""
        if self.node_list is None:
            return synthetic_nodes(self.nodes or DEFAULT_NODES, self.gpus_per_node, self.gpu_model)
        from qosmos.simulator.traces import load_openb_nodes  # the one openb node-list reader

        rows: list[dict[str, Any]] = [
            {"sn": n.name, "cpu_milli": n.cpu_milli, "memory_mib": n.memory_mib, "gpu": n.gpus, "model": n.gpu_model}
            for n in load_openb_nodes(self.node_list)
        ]
        for r in rows:
            if not _DNS1123.match(r["sn"].lower()) or len(r["sn"]) > 253:
                raise InvalidInput("node_list", str(self.node_list), f"node name {r['sn']!r} is not a DNS-1123 name")
            if r["model"] and not _LABEL_VALUE.match(r["model"]):
                raise InvalidInput("node_list", str(self.node_list), f"GPU model {r['model']!r} is not a label value")
        return spread_sample(rows, self.nodes) if self.nodes else rows

    def node_manifests(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """Node objects for ``rows``, each labelled with its pool (round robin over ``pools``)."""
        return [
            fake_node_manifest(r, i, extra_labels={POOL_LABEL: self.pools[i % len(self.pools)]} if self.pools else None)
            for i, r in enumerate(rows)
        ]


@dataclass(slots=True, kw_only=True)
class DevOptions(NodeSpec):
    """What ``qosmos dev up`` was asked for: the nodes, and the cluster around them."""

    dir: Path
    operator: bool = True
    api_port: int = 0  # 0: any free port
    bin_dir: Path | None = None
    start_timeout: float = 90.0
    # False (tests calling up() in-process): every process dies with this one, even on SIGKILL.
    detached: bool = True

    def validate(self) -> None:
        NodeSpec.validate(self)  # slots dataclasses cannot use zero-argument super()
        if not (self.api_port == 0 or 1024 <= self.api_port <= 65535):
            raise InvalidInput("api_port", self.api_port, "must be 0 (any free port) or in [1024, 65535]")


def add_nodes(kubeconfig: Path, spec: NodeSpec) -> list[str]:
    """Create (or update) the fake GPU nodes of ``spec`` in any cluster; KWOK there must manage nodes
    annotated ``kwok.x-k8s.io/node=fake`` (its in-cluster default) for them to stay Ready."""
    from kubernetes import config

    spec.validate()
    rows = spec.node_rows()
    if not kubeconfig.is_file():
        raise InvalidInput("kubeconfig", str(kubeconfig), "no such file")
    try:
        api = new_api_client(str(kubeconfig))
    except (config.ConfigException, ValueError, KeyError, TypeError) as exc:
        raise InvalidInput("kubeconfig", str(kubeconfig), f"not a usable kubeconfig ({exc})") from None
    return create_nodes(api, spec.node_manifests(rows))


@dataclass(slots=True)
class DevState:
    """``DIR/state.json``: what runs (in start order) and where to reach it."""

    dir: Path
    phase: str = "starting"  # starting -> up
    started_at: str = ""
    kubeconfig: str = ""
    server: str = ""
    components: list[ProcessRef] = field(default_factory=list)
    extender: dict[str, Any] = field(default_factory=dict)
    operator: dict[str, Any] = field(default_factory=dict)
    nodes: int = 0
    crds: list[str] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return self.dir / STATE_FILE

    def pids(self) -> dict[str, int]:
        return {r.name: r.pid for r in self.components}

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "phase": self.phase,
            "started_at": self.started_at,
            "kubeconfig": self.kubeconfig,
            "server": self.server,
            "components": [{"name": r.name, "pid": r.pid, "ticks": r.ticks, "log": r.log} for r in self.components],
            "extender": self.extender,
            "operator": self.operator,
            "nodes": self.nodes,
            "crds": self.crds,
        }

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2))
        tmp.replace(self.path)  # atomic: `down` never reads half a file

    @classmethod
    def load(cls, directory: Path) -> DevState | None:
        """The state in ``directory``, None when there is none; DevError when it is unreadable."""
        path = directory / STATE_FILE
        try:
            raw = json.loads(path.read_text())
            comps = [ProcessRef(c["name"], int(c["pid"]), int(c["ticks"]), c.get("log", "")) for c in raw["components"]]
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DevError(f"{path} is unreadable ({type(exc).__name__}: {exc}); remove it by hand") from None
        return cls(
            directory,
            phase=raw.get("phase", "starting"),
            started_at=raw.get("started_at", ""),
            kubeconfig=raw.get("kubeconfig", ""),
            server=raw.get("server", ""),
            components=comps,
            extender=raw.get("extender", {}),
            operator=raw.get("operator", {}),
            nodes=int(raw.get("nodes", 0)),
            crds=list(raw.get("crds", [])),
        )

    def summary(self, already_up: bool = False) -> dict[str, Any]:
        """What ``up --json`` prints."""
        return {
            "kubeconfig": self.kubeconfig,
            "pids": self.pids(),
            "dir": str(self.dir),
            "server": self.server,
            "nodes": self.nodes,
            "crds": self.crds,
            "extender": self.extender,
            "operator": self.operator,
            "already_up": already_up,
        }


# --------------------------------------------------------------------------- helpers


def _operator_run() -> Any:
    """The click command of ``qosmos operator run``, None when this installation has none."""
    import typer.main

    from qosmos.cli import app

    operator = getattr(typer.main.get_command(app), "commands", {}).get("operator")
    return getattr(operator, "commands", {}).get("run")


def operator_command() -> tuple[bool, str]:
    """Whether ``qosmos operator run`` exists in this installation, and if not, why."""
    if _operator_run() is None:
        return False, "`qosmos operator run` does not exist in this version of qosmos (the operator is not built yet)"
    return True, ""


def _operator_options() -> set[str]:
    cmd = _operator_run()
    return {o for p in getattr(cmd, "params", []) for o in getattr(p, "opts", [])}


def crd_files() -> list[Path]:
    """The generated CRDs (``crds/*.yaml`` of the checkout); none outside a checkout."""
    root = repo_root()
    return sorted((root / "crds").glob("*.yaml")) if root else []


def _python(*args: str) -> list[str]:
    # -P: the working directory is not put on sys.path, so a checkout's operator/ folder can never
    # shadow the standard library's operator module.
    return [sys.executable, "-P", "-m", "qosmos", *args]


def _wait(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = pred()
            if value:
                return value
        except Exception as exc:  # the API may refuse while it warms up; report the last reason
            last = exc
        time.sleep(interval)
    raise ControlPlaneError(
        f"timed out after {timeout:.0f}s waiting for {what}" + (f" (last error: {last})" if last else "")
    )


def _clear(directory: Path) -> None:
    """Empty a folder made by an earlier ``up`` (its marker is kept)."""
    for p in directory.iterdir():
        if p.name == MARKER_FILE:
            continue
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


# --------------------------------------------------------------------------- up / down


def check_dir(directory: Path) -> DevState | None:
    """The running state in ``directory`` (``up`` then says it is already up), or None when ``up`` may start.

    A folder that is not empty and not made by ``up`` is refused (``up`` would clear it later);
    one where only some processes still run must be stopped with ``down`` first.
    """
    if directory.exists() and not directory.is_dir():
        raise InvalidInput("dir", str(directory), "exists and is not a folder")
    if not directory.exists():
        return None
    if any(directory.iterdir()) and not (directory / MARKER_FILE).exists():
        raise InvalidInput("dir", str(directory), "is not empty and was not made by `qosmos dev up`; choose another")
    state = DevState.load(directory)
    if state is None:
        return None
    alive = [r.name for r in state.components if r.alive()]
    if not alive:
        return None  # stale: an earlier cluster is gone, start afresh
    dead = [r.name for r in state.components if not r.alive()]
    if state.phase == "up" and not dead:
        return state
    why = f"{', '.join(dead)} exited" if dead else "an earlier `up` is still starting or was interrupted"
    raise DevError(
        f"the cluster in {directory} is only partly running ({why}); run `qosmos dev down --dir {directory}` first"
    )


@dataclass
class _Extender:
    url: str
    grpc: str
    tls: ExtenderClientTLS
    ca: Path


def _extender_pki(directory: Path) -> tuple[_Extender, list[str], ssl.SSLContext]:
    """The extender's own CA, its server certificate (127.0.0.1) and kube-scheduler's client certificate."""
    pki = PKI("qosmos-extender-ca", days=365)
    d = directory / "extender-pki"
    d.mkdir(exist_ok=True)
    (d / "ca.crt").write_bytes(pki.ca_pem)
    cert, key = pki.issue("qosmos-extender", dns=["localhost"], ips=[LOOPBACK])
    (d / "server.crt").write_bytes(cert)
    write_private(d / "server.key", key)
    cert, key = pki.issue("kube-scheduler")
    (d / "client.crt").write_bytes(cert)
    write_private(d / "client.key", key)
    port, grpc = free_port(), free_port()
    tls = ExtenderClientTLS(str(d / "client.crt"), str(d / "client.key"), str(d / "ca.crt"))
    args = [
        "--tls-cert-file",
        str(d / "server.crt"),
        "--tls-key-file",
        str(d / "server.key"),
        "--tls-client-ca-file",
        str(d / "ca.crt"),
        "--scheduler-clients",  # the routes kube-scheduler calls answer its certificate only
        "kube-scheduler",
        "--http-host",
        LOOPBACK,
        "--http-port",
        str(port),
        "--grpc-host",
        LOOPBACK,
        "--grpc-port",
        str(grpc),
    ]
    ctx = ssl.create_default_context(cafile=str(d / "ca.crt"))
    ctx.load_cert_chain(tls.cert_file, tls.key_file)
    return _Extender(f"https://{LOOPBACK}:{port}", f"{LOOPBACK}:{grpc}", tls, d / "ca.crt"), args, ctx


def up(opts: DevOptions, progress: Progress | None = None) -> tuple[DevState, bool]:
    """Start the cluster in ``opts.dir``; returns (state, already_up). Bad input raises InvalidInput
    or DevError (nothing started); a component that fails stops everything started and raises."""
    progress = progress or _Quiet()
    opts.validate()
    directory = opts.dir.expanduser().absolute()
    running = check_dir(directory)
    if running is not None:
        return running, True
    bin_dir = require_binaries(opts.bin_dir, DEV_BINARIES)
    if opts.api_port and port_in_use(opts.api_port):
        raise InvalidInput("api_port", opts.api_port, f"port {opts.api_port} on {LOOPBACK} is in use")
    rows = opts.node_rows()
    op_ok, op_reason = (False, "--no-operator") if not opts.operator else operator_command()
    crds = crd_files()

    directory.mkdir(parents=True, exist_ok=True)
    if (directory / MARKER_FILE).exists():
        _clear(directory)
    (directory / MARKER_FILE).write_text("made by `qosmos dev up`; `qosmos dev down --dir` stops it\n")
    state = DevState(directory, started_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    state.save()

    def record(comp: Component) -> None:
        state.components.append(comp.ref)
        state.save()
        progress.begin(comp.name)

    def ready(comp: Component) -> None:
        progress.done(comp.name, f"pid {comp.pid}")

    cp = ControlPlane(
        bin_dir,
        directory,
        opts.start_timeout,
        api_port=opts.api_port,
        detached=opts.detached,
        on_spawn=record,
        on_ready=ready,
    )
    try:
        cp.start()
        kubeconfig = directory / KUBECONFIG
        write_private(kubeconfig, cp.kubeconfig_path.read_bytes())
        state.kubeconfig, state.server = str(kubeconfig), cp.server_url
        state.save()

        ext, ext_args, ext_ctx = _extender_pki(directory)
        comp = cp.spawn(
            "qosmos-extender",
            _python("extender", "serve", "--kubeconfig", str(kubeconfig), *ext_args),
            f"{ext.url}/readyz",
        )
        cp.wait_ready(comp, ext_ctx)
        state.extender = {
            "url": ext.url,
            "grpc": ext.grpc,
            "ca": str(ext.ca),
            "client_cert": ext.tls.cert_file,
            "client_key": ext.tls.key_file,
        }
        state.save()
        cp.start_scheduler(SCHEDULER_NAME, qosmos_scheduler_config(ext.url, tls=ext.tls), component=SCHEDULER_NAME)

        api = cp.api_client()
        nodes = f"{len(rows)} fake GPU nodes"
        progress.begin(nodes)
        names = create_nodes(api, opts.node_manifests(rows))
        state.nodes = len(names)
        start_kwok(cp)
        progress.begin(nodes)
        _wait(lambda: _leased(api, names), opts.start_timeout, "KWOK to take over the nodes (node leases)")
        progress.done(nodes, f"Ready and leased by KWOK, {sum(r['gpu'] for r in rows)} GPUs")

        if crds:
            progress.begin("CRDs")
            state.crds = _apply_crds(cp, crds)
            progress.done("CRDs", ", ".join(state.crds))
        _wait(lambda: _default_service_account(api), opts.start_timeout, "the default ServiceAccount")

        if op_ok:
            args, health = ["operator", "run", "--kubeconfig", str(kubeconfig)], None
            if "--metrics-port" in _operator_options():  # its Prometheus endpoint doubles as the health probe
                port = free_port()
                args += ["--metrics-port", str(port)]
                health = f"http://{LOOPBACK}:{port}/metrics"
            comp = cp.spawn("qosmos-operator", _python(*args), health)
            cp.wait_ready(comp, None)
            time.sleep(OPERATOR_SETTLE_S)  # an operator that cannot reach the cluster exits within this
            if not comp.running:
                raise ControlPlaneError(
                    f"qosmos-operator exited with code {comp.proc.returncode} (log: {comp.log_path})"
                )
            state.operator = {"started": True, "pid": comp.pid, "log": str(comp.log_path)}
            if health:
                state.operator["metrics"] = health
        else:
            state.operator = {"started": False, "reason": op_reason}
        state.phase = "up"
        state.save()
        return state, False
    except BaseException:
        with contextlib.suppress(Exception):
            stop_all(list(reversed(state.components)), grace=5)
            state.path.unlink(missing_ok=True)
        raise


def _leased(api: Any, names: Sequence[str]) -> bool:
    from kubernetes import client

    leases = client.CoordinationV1Api(api).list_namespaced_lease("kube-node-lease").items
    # the apiserver sets the metadata of every object it lists
    return set(names) <= {cast("V1ObjectMeta", lease.metadata).name for lease in leases}


def _default_service_account(api: Any) -> bool:
    from kubernetes import client

    client.CoreV1Api(api).read_namespaced_service_account("default", "default")
    return True


def _apply_crds(cp: ControlPlane, files: list[Path]) -> list[str]:
    """Server-side apply the CRD files and wait until each is Established; returns the CRD names."""
    args = [a for f in files for a in ("-f", str(f))]
    for cmd in (
        ["apply", "--server-side", "--force-conflicts", *args, "-o", "name"],
        ["wait", "--for=condition=Established", "--timeout=60s", *args],
    ):
        proc = cp.kubectl(*cmd, check=False, timeout=90)
        if proc.returncode != 0:
            first = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
            raise ControlPlaneError(
                f"kubectl {cmd[0]} of {', '.join(f.name for f in files)} failed: {first[0] if first else ''}"
            )
        if cmd[0] == "apply":
            names = [line.split("/", 1)[-1] for line in proc.stdout.split()]
    return names


def down(directory: Path, grace: float = 10.0) -> dict[str, Any]:
    """Stop what ``up`` started in ``directory`` (SIGTERM, SIGKILL after ``grace`` s); idempotent."""
    directory = directory.expanduser().absolute()
    if directory.exists() and not directory.is_dir():
        raise InvalidInput("dir", str(directory), "exists and is not a folder")
    state = DevState.load(directory) if directory.is_dir() else None
    if state is None:
        return {"dir": str(directory), "stopped": [], "killed": [], "was_running": False}
    refs = list(reversed(state.components))  # newest first: the apiserver outlives its clients
    running = [r.name for r in refs if r.alive()]
    killed = stop_all(refs, grace)
    left = [r.name for r in refs if r.alive()]
    if left:
        raise DevError(f"could not stop {', '.join(left)} in {directory}")
    state.path.unlink(missing_ok=True)
    return {"dir": str(directory), "stopped": running, "killed": killed, "was_running": bool(running)}
