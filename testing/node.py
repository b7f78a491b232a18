"""A real kubelet node for the tests: containerd + runc + the CNI bridge + a kubelet joined to a
:class:`~qosmos.testing.controlplane.ControlPlane`.

What it needs (``hack/node/build.sh`` provides and caches all of it): Debian's containerd, runc
and CNI plugins, a kubelet from the same Kubernetes version as the control plane, and two local
OCI images imported into containerd: ``qosmos.local/pause:3.10`` (the sandbox) and
``qosmos.local/debian:bookworm`` (debootstrap minbase + iperf3). No registry is used.

Network rule — nothing leaves the machine: the node's IP is an extra address on ``lo``, the kubelet
serves only there, pods live on a local bridge with no gateway and no masquerading (they reach
each other, nothing else), and the service CIDR gets a blackhole route.

``cluster_network=True`` (the e2e tier, for pods that talk to the apiserver and to Services): the
bridge gets the host-side address ``GATEWAY_IP`` (the kubelet's probes reach the pods), pods get one
route, the service CIDR via that address (still no default route), and the kubelet points their
DNS at ``DNS_IP``. What answers there is :class:`qosmos.testing.services.ServiceNetwork`, which
puts each Service VIP on the bridge as a local address: VIP traffic is delivered to this host and
proxied, nothing is forwarded (ip_forward stays as it is) and the rest of the service CIDR is
still blackholed.

Host state the node changes is recorded before and put back on ``stop()``: the sysctls the
kubelet sets (vm.overcommit_memory, vm.panic_on_oom, kernel.panic, kernel.panic_on_oops,
kernel.keys.*), net.ipv4.ip_forward, the iptables rules (when iptables is installed), the
node address on lo, the bridge, the blackhole route, the kubepods cgroups, mounts and network
namespaces the pods left. Needs root. ``QOSMOS_NODE_KEEP=1`` keeps the work dir for debugging.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from qosmos.testing.controlplane import (
    SERVICE_CIDR,
    Component,
    ControlPlane,
    ControlPlaneError,
    _kubeconfig,
    _pem_cert,
    _pem_key,
    free_port,
    k8s_version,
    repo_root,
)

PAUSE_IMAGE = "qosmos.local/pause:3.10"
DEBIAN_IMAGE = "qosmos.local/debian:bookworm"
NODE_IP = "10.255.255.1"  # an extra address on lo: local delivery only
NODE_IFACE = "lo"
BRIDGE = "qosmos0"
POD_CIDR = "10.244.0.0/24"
GATEWAY_IP = "10.244.0.1"  # cluster_network: the bridge's address (host side of the pod network)
DNS_IP = "10.0.0.10"  # cluster_network: the cluster DNS Service IP in the kubelet's clusterDNS
CLUSTER_DOMAIN = "cluster.local"
CNI_BIN_DIR = Path("/usr/lib/cni")
HOST_BINARIES = ("containerd", "runc", "ctr", "ip")
SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
)
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Give these to ControlPlane(extra_apiserver_args=...): the apiserver reaches the kubelet (logs,
# exec) at the node's InternalIP instead of resolving its name through the host's DNS.
APISERVER_ARGS = ("--kubelet-preferred-address-types=InternalIP",)
WORKDIR_PREFIX = "qosmos-node-"
OWNER_FILE = "owner.pid"
LOCK_PATH = "/var/lock/qosmos-node.lock"


class NodeError(ControlPlaneError):
    """The node failed to build, start or become ready."""


UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"


def node_cache() -> Path:
    base = Path(os.environ.get("QOSMOS_NODE_CACHE", Path.home() / ".cache" / "qosmos" / "node"))
    return base / k8s_version()


def kubelet_path() -> Path:
    return node_cache() / "bin" / "kubelet"


def image_archives() -> dict[str, Path]:
    d = node_cache() / "images"
    return {PAUSE_IMAGE: d / "pause.oci.tar", DEBIAN_IMAGE: d / "debian.oci.tar"}


def build_script() -> Path | None:
    root = repo_root()
    return root / "hack" / "node" / "build.sh" if root else None


def host_unsupported() -> str | None:
    """Why this host cannot run a node at all (None when it can, possibly after build.sh)."""
    if os.name != "posix" or not Path("/proc/self/cgroup").is_file():
        return "not Linux"
    if os.geteuid() != 0:
        return "needs root (containerd, runc, cgroups, network interfaces)"
    if not ((CGROUP_ROOT / "cpuset").is_dir() or (CGROUP_ROOT / "cgroup.controllers").is_file()):
        return f"no cgroup cpuset controller under {CGROUP_ROOT}"
    if not Path("/proc/filesystems").read_text().count("overlay"):
        return "kernel without overlayfs (containerd's snapshotter)"
    return None


def artefacts_missing() -> list[str]:
    missing = [b for b in HOST_BINARIES if shutil.which(b) is None]
    if not (CNI_BIN_DIR / "bridge").is_file():
        missing.append(str(CNI_BIN_DIR / "bridge"))
    if not os.access(kubelet_path(), os.X_OK):
        missing.append(str(kubelet_path()))
    missing += [str(p) for p in image_archives().values() if not p.is_file()]
    return missing


def ensure_built() -> None:
    """Run hack/node/build.sh when something is missing (idempotent, cached)."""
    if not artefacts_missing():
        return
    script = build_script()
    if script is None or os.environ.get("QOSMOS_K8S_NO_BUILD") == "1":
        raise NodeError(f"node artefacts missing: {', '.join(artefacts_missing())}; run hack/node/build.sh")
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    if proc.returncode != 0 or artefacts_missing():
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-40:])
        raise NodeError(f"hack/node/build.sh failed (rc={proc.returncode}):\n{tail}")


_T = TypeVar("_T")


def wait_for(pred: Callable[[], _T | None], timeout: float = 60, what: str = "condition", every: float = 0.2) -> _T:
    """Poll ``pred`` until it returns something truthy (and return that); on timeout an AssertionError
    naming ``what`` and the last value seen. Every test tier polls through this one."""
    deadline = time.monotonic() + timeout
    last: _T | None = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def unreachable_marks(now: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """What the node-lifecycle controller (off in the test clusters) writes for a node whose kubelet stopped
    posting, as of ``now`` (RFC 3339): its Ready condition (Unknown) and the unreachable taints."""
    ready = {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown", "lastHeartbeatTime": now,
             "lastTransitionTime": now, "message": "Kubelet stopped posting node status."}  # fmt: skip
    taints = [{"key": UNREACHABLE_TAINT, "effect": e, "timeAdded": now} for e in ("NoSchedule", "NoExecute")]
    return ready, taints


def _run(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise NodeError(f"{' '.join(argv)} failed (rc={p.returncode}): {p.stderr.strip() or p.stdout.strip()}")
    return p


def kubepods_present() -> set[str]:
    """The kubelet's top cgroups (``kubepods``/``kubepods.slice``) in every hierarchy now."""
    out = set()
    for d in CGROUP_ROOT.iterdir():
        for name in ("kubepods", "kubepods.slice"):
            if (d / name).is_dir():
                out.add(str(d / name))
        if d.name == "kubepods":
            out.add(str(d))
    return out


def _procs_matching(mark: bytes) -> list[int]:
    pids = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if mark in Path(f"/proc/{pid}/cmdline").read_bytes():
                    pids.append(int(pid))
            except OSError:
                continue
    return pids


def teardown_host(workdir: Path, host: HostState) -> None:
    """Everything a node left on the host, given its work dir and the state saved before it started:
    containerd shims (by PID: their command line names the work dir), processes still in the pod
    cgroups the node created, mounts under the work dir, new ``cni-*`` network namespaces, the
    cgroups, the bridge, the node address, the blackhole route; then sysctls and iptables."""
    mark = str(workdir).encode()
    for pid in _procs_matching(mark):
        if b"containerd-shim" in Path(f"/proc/{pid}/cmdline").read_bytes():
            with contextlib.suppress(ProcessLookupError, OSError):
                os.kill(pid, 9)
    new_trees = sorted(kubepods_present() - host.cgroups)
    for _ in range(3):
        left = []
        for top in new_trees:
            for tasks in Path(top).rglob("tasks"):
                with contextlib.suppress(OSError, ValueError):
                    left += [int(t) for t in tasks.read_text().split()]
        for pid in set(left):  # processes of pods this node started (their shims are gone)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        if not left:
            break
        time.sleep(0.3)
    Node._unmount_under(workdir)
    d = Path("/var/run/netns")
    for ns in sorted(set(os.listdir(d)) - host.netns) if d.is_dir() else []:
        if ns.startswith("cni-"):
            subprocess.run(["umount", "-l", str(d / ns)], capture_output=True)
            with contextlib.suppress(OSError):
                (d / ns).unlink()
    for top in new_trees:
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda t: -t[0].count("/")):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)
    for cmd in (
        ("ip", "link", "del", BRIDGE),
        ("ip", "addr", "del", f"{NODE_IP}/32", "dev", NODE_IFACE),
        ("ip", "route", "del", "blackhole", SERVICE_CIDR),
    ):
        _run(*cmd, check=False)
    host.restore()


def sweep_stale_nodes() -> list[str]:
    """Tear down nodes whose owning process died without stopping them (SIGKILLed test runs)."""
    swept = []
    for d in Path("/var/tmp").glob(f"{WORKDIR_PREFIX}*"):
        try:
            pid = int((d / OWNER_FILE).read_text())
            os.kill(pid, 0)
            continue  # its owner is alive
        except ProcessLookupError:
            pass
        except (OSError, ValueError):
            continue  # kept on purpose (QOSMOS_NODE_KEEP) or not ours
        with contextlib.suppress(OSError, ValueError, KeyError):
            teardown_host(d, HostState.from_json((d / "host.json").read_text()))
        shutil.rmtree(d, ignore_errors=True)
        swept.append(str(d))
    return swept


def _rules(iptables_save: str) -> list[str]:
    """iptables-save output (``-c`` or not) without comments, packet counters and tables that hold
    nothing (no rule, no chain of their own, every policy ACCEPT: as if there were no such table)."""
    out: list[str] = []
    table: list[str] = []
    for ln in iptables_save.splitlines():
        if not ln or ln.startswith("#"):
            continue
        if ln.startswith("["):  # a rule's counters (-c)
            ln = ln.partition("] ")[2]
        table.append(ln.split(" [")[0] if ln.startswith(":") else ln)
        if ln == "COMMIT":
            if any(not (t.startswith(("*", "COMMIT")) or (t.startswith(":") and t.endswith(" ACCEPT"))) for t in table):
                out += table
            table = []
    return out + table


def restore_input(saved: str, counted: str) -> str:
    """What ``iptables-restore --counters`` reads to put the rules of ``saved`` (``iptables-save``
    output, no counters) back, given ``counted`` (``iptables-save -c`` output, now): a table created
    since (nf_tables lists only the tables that exist) is emptied, and the rules and chains that
    stayed keep their packet counters (an admin's accounting, the suite's egress count) instead of
    being zeroed. A rule there several times takes the counters in order."""
    rules: dict[tuple[str, str], list[str]] = {}
    chains: dict[tuple[str, str], str] = {}
    builtin: dict[str, list[str]] = {}  # table -> its built-in chains' lines (a policy, not "-")
    table = ""
    for line in counted.splitlines():
        if line.startswith("*"):
            table = line
            builtin[table] = []
        elif line.startswith(":") and " [" in line:
            head, _, count = line.partition(" [")
            chains[table, head] = f"[{count}"
            if not head.endswith(" -"):  # emptied: as if absent, every policy ACCEPT
                builtin[table].append(f"{head.rsplit(' ', 1)[0]} ACCEPT [{count}")
        elif line.startswith("[") and "] " in line:
            count, _, rule = line.partition("] ")
            rules.setdefault((table, rule), []).append(f"{count}]")
    out = []
    for line in saved.splitlines():
        if line.startswith("*"):
            table = line
            builtin.pop(table, None)
        elif line.startswith(":") and " [" in line:
            head = line.partition(" [")[0]
            line = f"{head} {chains.get((table, head), '[0:0]')}"
        elif line.startswith("-A ") and (kept := rules.get((table, line))):
            line = f"{kept.pop(0)} {line}"
        out.append(line)
    for table, lines in builtin.items():  # not in the snapshot: there was no such table
        out += [table, *lines, "COMMIT"]
    return "\n".join(out) + "\n"


def network_state() -> list[str]:
    """Routes of every table (v4, v6), addresses and link names: what a node adds and must remove."""
    out = []
    for argv, tag in (
        (("ip", "route", "show", "table", "all"), "route"),
        (("ip", "-6", "route", "show", "table", "all"), "route6"),
        (("ip", "-o", "addr", "show"), "addr"),
        (("ip", "-o", "link", "show"), "link"),
    ):
        p = _run(*argv, check=False)
        for ln in p.stdout.splitlines():
            f = ln.split()
            if tag == "addr":
                ln = " ".join(f[1:4])  # "lo inet 10.255.255.1/32": no lifetimes
            elif tag == "link":
                ln = f[1].rstrip(":").split("@")[0]  # the name only: counters and states change
            out.append(f"{tag}: {ln.strip()}")
    return out


class HostState:
    """Snapshot of the host settings a node changes, and their restoration."""

    def __init__(self) -> None:
        self.sysctls: dict[str, str] = {}
        for key in SYSCTLS:
            with contextlib.suppress(OSError):
                self.sysctls[key] = (Path("/proc/sys") / key).read_text().strip()
        self.iptables: dict[str, str] = {}
        for tool in ("iptables", "ip6tables"):
            if shutil.which(f"{tool}-save"):
                p = _run(f"{tool}-save", check=False)
                if p.returncode == 0:
                    self.iptables[tool] = p.stdout
        self.netns = set(os.listdir("/var/run/netns")) if os.path.isdir("/var/run/netns") else set()
        self.cgroups = kubepods_present()
        self.network = network_state()

    def to_json(self) -> str:
        return json.dumps({"sysctls": self.sysctls, "iptables": self.iptables, "netns": sorted(self.netns),
                           "cgroups": sorted(self.cgroups), "network": self.network})  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> HostState:
        doc = json.loads(text)
        h = cls.__new__(cls)
        h.sysctls, h.iptables = dict(doc["sysctls"]), dict(doc["iptables"])
        h.netns, h.cgroups = set(doc["netns"]), set(doc["cgroups"])
        h.network = list(doc.get("network", []))  # absent in work dirs of older runs
        return h

    def diff(self) -> list[str]:
        """What differs from the snapshot now (empty after a clean teardown): sysctls, iptables
        rules, routes (every table, v4 and v6), addresses, links, ``cni-*`` netns, kubepods cgroups."""
        out = [f"sysctl {k}: {old} -> {now}" for k, (old, now) in self.changed_sysctls().items()]
        for tool, saved in self.iptables.items():
            if _rules(_run(f"{tool}-save", check=False).stdout) != _rules(saved):
                out.append(f"{tool} rules differ")
        now = network_state()
        out += [f"network: - {ln}" for ln in self.network if ln not in now]
        out += [f"network: + {ln}" for ln in now if ln not in self.network]
        netns = set(os.listdir("/var/run/netns")) if os.path.isdir("/var/run/netns") else set()
        out += [f"netns: + {n}" for n in sorted(netns - self.netns) if n.startswith("cni-")]
        out += [f"cgroup: + {c}" for c in sorted(kubepods_present() - self.cgroups)]
        return out

    def changed_sysctls(self) -> dict[str, tuple[str, str]]:
        out = {}
        for key, old in self.sysctls.items():
            with contextlib.suppress(OSError):
                now = (Path("/proc/sys") / key).read_text().strip()
                if now != old:
                    out[key] = (old, now)
        return out

    def restore(self) -> list[str]:
        """Put everything back; returns what had changed."""
        changed = []
        for key, (old, now) in self.changed_sysctls().items():
            with contextlib.suppress(OSError):
                (Path("/proc/sys") / key).write_text(old)
                changed.append(f"{key}: {now} -> {old}")
        for tool, saved in self.iptables.items():
            counted = _run(f"{tool}-save", "-c", check=False).stdout
            if _rules(counted) != _rules(saved):
                restore = [f"{tool}-restore", "--counters"]
                subprocess.run(restore, input=restore_input(saved, counted), text=True, capture_output=True)
                changed.append(f"{tool} rules restored")
        return changed


class Node:
    """One kubelet node named ``name`` joined to ``cp``; use as a context manager."""

    def __init__(
        self,
        cp: ControlPlane,
        name: str = "qosmos-node-0",
        start_timeout: float = 90.0,
        pod_cidr: str = POD_CIDR,
        cluster_network: bool = False,
    ) -> None:
        self.cp, self.name, self.start_timeout, self.pod_cidr = cp, name, start_timeout, pod_cidr
        self.cluster_network = cluster_network  # see the module docstring
        self.workdir = Path()
        self.components: list[Component] = []
        self.host: HostState | None = None
        self._started = False
        self.sock = ""
        self.kubelet_port = 0
        self.timings: dict[str, float] = {}
        self.leftovers: list[str] = []  # host differences left after stop() (HostState.diff)
        self._lock_file: Any = None

    # -- public -----------------------------------------------------------------------------

    def __enter__(self) -> Node:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def ctr(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``ctr`` against this node's containerd, namespace k8s.io."""
        return _run("ctr", "--address", self.sock, "-n", "k8s.io", *args, check=check, timeout=timeout)

    def start(self) -> None:
        why = host_unsupported()
        if why:
            raise NodeError(why)
        t0 = time.monotonic()
        ensure_built()
        self.timings["build_check_s"] = time.monotonic() - t0
        self._lock()  # one node per host: the bridge, node address and kubepods cgroups are host-wide
        sweep_stale_nodes()
        self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir="/var/tmp"))
        (self.workdir / "logs").mkdir()
        self.host = HostState()
        (self.workdir / "host.json").write_text(self.host.to_json())
        (self.workdir / OWNER_FILE).write_text(str(os.getpid()))
        self._started = True
        atexit.register(self.stop)
        try:
            t = time.monotonic()
            self._network_up()
            self._start_containerd()
            self.timings["containerd_s"] = time.monotonic() - t
            t = time.monotonic()
            for archive in image_archives().values():
                self.ctr("images", "import", "--no-unpack=false", str(archive), timeout=300)
            self.timings["image_import_s"] = time.monotonic() - t
            t = time.monotonic()
            self._start_kubelet()
            self.wait_ready()
            self.timings["kubelet_ready_s"] = time.monotonic() - t
        except BaseException:
            self.stop()
            raise
        self.timings["start_s"] = time.monotonic() - t0

    def _lock(self, timeout: float = 900.0) -> None:
        import fcntl

        self._lock_file = open(LOCK_PATH, "w")  # noqa: SIM115 - held until stop()
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    self._lock_file.close()
                    raise NodeError(f"another test node holds {LOCK_PATH} for more than {timeout:.0f}s") from None
                time.sleep(1)

    def wait_ready(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or self.start_timeout)
        last = ""
        while time.monotonic() < deadline:
            kubelet = self.components[-1]
            if not kubelet.running:
                raise NodeError(f"kubelet exited ({kubelet.proc.returncode}); log:\n{kubelet.log_tail()}")
            p = self.cp.kubectl("get", "node", self.name, "-o", "json", check=False)
            if p.returncode == 0:
                conds = {c["type"]: c for c in json.loads(p.stdout)["status"].get("conditions", [])}
                ready = conds.get("Ready", {})
                if ready.get("status") == "True":
                    return
                last = f"{ready.get('reason')}: {ready.get('message')}"
            else:
                last = p.stderr.strip()
            time.sleep(0.5)
        raise NodeError(f"node {self.name} not Ready after {timeout or self.start_timeout:.0f}s ({last}); "
                        f"kubelet log:\n{self.components[-1].log_tail()}")  # fmt: skip

    def pod_manifest(
        self,
        name: str,
        command: str,
        namespace: str = "default",
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        cpu_limit: str | None = None,
        image: str = DEBIAN_IMAGE,
        cpu_request: str | None = None,
    ) -> dict[str, Any]:
        """A pod bound to this node running ``sh -c command`` in the local Debian image.

        ``cpu_limit`` makes it Guaranteed, ``cpu_request`` alone Burstable, neither BestEffort."""
        res: dict[str, Any] = {}
        if cpu_limit:
            res = {"limits": {"cpu": cpu_limit, "memory": "256Mi"}, "requests": {"cpu": cpu_limit, "memory": "256Mi"}}
        elif cpu_request:
            res = {"requests": {"cpu": cpu_request}}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": labels or {},
                "annotations": annotations or {},
            },
            "spec": {
                "nodeName": self.name,
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                "terminationGracePeriodSeconds": 1,
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": image,
                        "imagePullPolicy": "Never",
                        "command": ["/bin/sh", "-c", command],
                        "resources": res,
                    }
                ],
            },
        }

    def run_pod(self, manifest: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        """Create a pod and wait until it runs; returns its JSON."""
        deadline = time.monotonic() + timeout
        while True:
            p = subprocess.run(
                [
                    self.cp.bin("kubectl"),
                    "--kubeconfig",
                    str(self.cp.kubeconfig_path),
                    "create",
                    "-f",
                    "-",
                    "-o",
                    "json",
                ],
                input=json.dumps(manifest),
                capture_output=True,
                text=True,
            )
            # a fresh control plane: the ServiceAccount admission refuses pods until the
            # controller-manager has created the namespace's default ServiceAccount
            if p.returncode == 0 or "serviceaccount" not in p.stderr or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if p.returncode != 0:
            raise NodeError(f"create pod: {p.stderr.strip()}")
        ns, name = manifest["metadata"].get("namespace", "default"), manifest["metadata"]["name"]
        return self.wait_pod(name, ns, timeout)

    def wait_pod(self, name: str, namespace: str = "default", timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        pod: dict[str, Any] = {}
        while time.monotonic() < deadline:
            p = self.cp.kubectl("get", "pod", "-n", namespace, name, "-o", "json", check=False)
            if p.returncode == 0:
                pod = json.loads(p.stdout)
                phase = pod.get("status", {}).get("phase")
                if phase == "Running" and pod["status"].get("podIP"):
                    return pod
                if phase in ("Failed", "Succeeded"):
                    raise NodeError(f"pod {namespace}/{name} {phase}: {self.pod_log(pod)}")
            time.sleep(0.3)
        raise NodeError(f"pod {namespace}/{name} not Running after {timeout}s: {json.dumps(pod.get('status'))[:2000]}")

    def exec_argv(self, name: str, *cmd: str, namespace: str = "default") -> list[str]:
        """``kubectl exec`` argv for a command in the pod's main container (apiserver -> this kubelet)."""
        return [self.cp.bin("kubectl"), "--kubeconfig", str(self.cp.kubeconfig_path), "exec", "-n", namespace,
                name, "-c", "main", "--", *cmd]  # fmt: skip

    def wait_finished(self, name: str, namespace: str = "default", timeout: float = 120) -> dict[str, Any]:
        """Wait until a pod has Succeeded or Failed; returns its JSON."""

        def done() -> dict[str, Any] | None:
            p = self.cp.kubectl("get", "pod", "-n", namespace, name, "-o", "json", check=False)
            if p.returncode == 0:
                pod: dict[str, Any] = json.loads(p.stdout)
                if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                    return pod
            return None

        return wait_for(done, timeout, f"pod {namespace}/{name} to finish", every=0.5)

    def delete_pods(self, *names: str, namespace: str = "default") -> None:
        if names:
            self.cp.kubectl("delete", "pod", "-n", namespace, "--grace-period=0", "--force", "--wait=false",
                            *names, check=False)  # fmt: skip

    def pod_log(self, pod: dict[str, Any], container: str = "main") -> str:
        """The container's log read from the kubelet's log directory (no apiserver round trip)."""
        md = pod["metadata"]
        d = self.workdir / "pod-logs" / f"{md['namespace']}_{md['name']}_{md['uid']}" / container
        out = []
        for f in sorted(d.glob("*.log")) if d.is_dir() else []:
            for line in f.read_text(errors="replace").splitlines():
                parts = line.split(" ", 3)  # CRI format: <time> <stream> <P|F> <text>
                out.append(parts[3] if len(parts) == 4 else "")
        return "\n".join(out)

    def pod_cgroup(self, pod: dict[str, Any], controller: str) -> Path:
        """The pod's cgroup directory for ``controller`` (cgroupfs driver)."""
        from qosmos.sidecar.cgroups import detect_layout

        layout = detect_layout(CGROUP_ROOT, "cgroupfs")
        d = layout.pod_dir(controller, pod["metadata"]["uid"], pod["status"].get("qosClass"))
        if d is None:
            raise NodeError(f"no {controller} cgroup for pod {pod['metadata']['name']}")
        return d

    def host_veth(self, pod: dict[str, Any]) -> str:
        """The host side of the pod's eth0 (the agent's own discovery, :func:`qosmos.sidecar.netdev.host_veth`)."""
        from qosmos.sidecar.cgroups import container_children
        from qosmos.sidecar.netdev import host_veth

        cgroups = container_children(self.pod_cgroup(pod, "cpuset"))
        task = next(t for c in cgroups for t in (c / "tasks").read_text().split())
        dev = host_veth(task)
        if dev is None:
            raise NodeError(f"no host veth for pod {pod['metadata']['name']}")
        return dev

    # -- start --------------------------------------------------------------------------------

    def _network_up(self) -> None:
        _run("ip", "addr", "replace", f"{NODE_IP}/32", "dev", NODE_IFACE)
        _run("ip", "route", "replace", "blackhole", SERVICE_CIDR)
        cni = self.workdir / "cni"
        cni.mkdir()
        ipam_range: dict[str, str] = {"subnet": self.pod_cidr}
        routes: list[dict[str, str]] = []
        if self.cluster_network:
            # the bridge exists before the first pod with the host's address on it; the plugin
            # (isGateway false) keeps it and installs only the service CIDR route in each pod
            prefix = self.pod_cidr.split("/")[1]
            _run("ip", "link", "add", BRIDGE, "type", "bridge")
            _run("ip", "addr", "add", f"{GATEWAY_IP}/{prefix}", "dev", BRIDGE)
            _run("ip", "link", "set", BRIDGE, "up")
            ipam_range["gateway"] = GATEWAY_IP
            routes = [{"dst": SERVICE_CIDR, "gw": GATEWAY_IP}]
        ipam: dict[str, Any] = {
            "type": "host-local",
            "ranges": [[ipam_range]],
            "dataDir": str(self.workdir / "cni-ipam"),
        }
        if routes:
            ipam["routes"] = routes
        conf = {
            "cniVersion": "0.4.0",
            "name": "qosmos",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": False,  # no gateway: pods reach only each other (and the host's
                    "ipMasq": False,  # address on the bridge with cluster_network)
                    "hairpinMode": True,
                    "ipam": ipam,
                }
            ],
        }
        (cni / "10-qosmos.conflist").write_text(json.dumps(conf, indent=1))

    def _spawn(self, name: str, argv: list[str]) -> Component:
        comp = Component(name, argv, self.workdir / "logs" / f"{name}.log", None)
        self.components.append(comp)
        return comp

    def _start_containerd(self) -> None:
        w = self.workdir
        self.sock = str(w / "containerd.sock")
        cfg = f"""version = 2
root = "{w}/containerd/root"
state = "{w}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{self.sock}.ttrpc"
[debug]
  level = "info"
[plugins."io.containerd.internal.v1.opt"]
  path = "{w}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{w}/cni"
    max_conf_num = 1
"""
        (w / "containerd.toml").write_text(cfg)
        comp = self._spawn("containerd", ["containerd", "--config", str(w / "containerd.toml")])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not comp.running:
                raise NodeError(f"containerd exited; log:\n{comp.log_tail()}")
            if os.path.exists(self.sock) and self.ctr("version", check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise NodeError(f"containerd not answering on {self.sock}; log:\n{comp.log_tail()}")

    def _node_credentials(self) -> Path:
        """A client certificate O=system:nodes, CN=system:node:<name>, signed by the control plane's CA."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        cw = self.cp.workdir
        ca_pem = (cw / "ca.crt").read_bytes()
        ca = x509.load_pem_x509_certificate(ca_pem)
        ca_key = serialization.load_pem_private_key((cw / "ca.key").read_bytes(), None)
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        subject = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{self.name}"),
            ]
        )
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
        )
        kc = self.workdir / "kubelet.kubeconfig"
        kc.write_text(
            _kubeconfig(self.cp.server_url, ca_pem, _pem_cert(cert), _pem_key(key), f"system:node:{self.name}")
        )
        (self.workdir / "ca.crt").write_bytes(ca_pem)
        return kc

    def stop_kubelet(self) -> None:
        """Stop the kubelet only, as a machine whose kubelet died or lost the network shows it: its pods'
        containers run on under containerd, nothing reports for the node any more."""
        kubelet = next(c for c in self.components if c.name == "kubelet")
        kubelet.stop()
        self.components.remove(kubelet)

    def start_kubelet(self) -> None:
        """Start the kubelet again on its state (root dir, credentials): it adopts the pods still running,
        carries out what was decided for them meanwhile (a deletion: their grace period) and reports the
        node Ready."""
        self._start_kubelet()
        self.wait_ready()

    def _start_kubelet(self) -> None:
        w = self.workdir
        kc = self._node_credentials()
        self.kubelet_port = free_port()
        root_dir = w / "kubelet"
        cfg = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_IP,
            "port": self.kubelet_port,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "authentication": {
                "anonymous": {"enabled": True},  # served on the node address only (on lo)
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(w / "ca.crt")},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "failSwapOn": False,
            "oomScoreAdj": 0,
            "containerRuntimeEndpoint": f"unix://{self.sock}",
            "podLogsDir": str(w / "pod-logs"),
            "resolvConf": "",
            "evictionHard": {
                "memory.available": "50Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "makeIPTablesUtilChains": False,
            "protectKernelDefaults": False,
            "cpuManagerPolicy": "none",
            "maxPods": 30,
            "serializeImagePulls": False,
            "nodeStatusUpdateFrequency": "4s",
            "syncFrequency": "10s",
            "fileCheckFrequency": "60s",
            "volumeStatsAggPeriod": "0s",
            "localStorageCapacityIsolation": False,
        }
        if self.cluster_network:
            cfg["clusterDNS"] = [DNS_IP]
            cfg["clusterDomain"] = CLUSTER_DOMAIN
        (w / "kubelet.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        self._spawn(
            "kubelet",
            [
                str(kubelet_path()),
                f"--config={w / 'kubelet.yaml'}",
                f"--kubeconfig={kc}",
                f"--hostname-override={self.name}",
                f"--node-ip={NODE_IP}",
                f"--root-dir={root_dir}",
                f"--cert-dir={w / 'kubelet-pki'}",
                "--v=1",
            ],
        )

    # -- stop -----------------------------------------------------------------------------------

    def _pods_gone(self) -> bool:
        """No running task left: the kubelet stopped every container and sandbox (CNI DEL done)."""
        p = self.ctr("tasks", "ls", "-q", check=False, timeout=20)
        return p.returncode == 0 and not p.stdout.strip()

    def stop(self) -> None:
        """Tear the node down and restore the host (idempotent)."""
        if not self._started:
            return
        self._started = False
        kubelet = next((c for c in self.components if c.name == "kubelet"), None)
        containerd = next((c for c in self.components if c.name == "containerd"), None)
        with contextlib.suppress(Exception):  # let the kubelet tear the pods down properly first
            if kubelet and kubelet.running:
                self.cp.kubectl("delete", "pods", "--all-namespaces", "--all", "--grace-period=0", "--force",
                                f"--field-selector=spec.nodeName={self.name}", "--wait=false", check=False, timeout=30)  # fmt: skip
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and not self._pods_gone():
                    time.sleep(0.5)
        if kubelet:
            kubelet.stop()
        with contextlib.suppress(Exception):
            self.cp.kubectl("delete", "node", self.name, "--wait=false", check=False, timeout=20)
        if containerd and containerd.running:
            with contextlib.suppress(Exception):
                self._force_remove_containers()
        if containerd:
            containerd.stop()
        if self.host is not None:
            teardown_host(self.workdir, self.host)
            self.leftovers = self.host.diff()  # before the lock goes: no other node changes the host yet
        self.components.clear()
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if os.environ.get("QOSMOS_NODE_KEEP") != "1":
            shutil.rmtree(self.workdir, ignore_errors=True)
        else:
            (self.workdir / OWNER_FILE).unlink(missing_ok=True)  # kept on purpose: never swept
        if self._lock_file is not None:
            self._lock_file.close()  # releases the host-wide lock
            self._lock_file = None

    def _force_remove_containers(self) -> None:
        tasks = self.ctr("tasks", "ls", "-q", check=False, timeout=20).stdout.split()
        for t in tasks:
            self.ctr("tasks", "kill", "-s", "SIGKILL", t, check=False, timeout=20)
        for t in tasks:
            for _ in range(20):
                if self.ctr("tasks", "delete", t, check=False, timeout=20).returncode == 0:
                    break
                time.sleep(0.2)
        for c in self.ctr("containers", "ls", "-q", check=False, timeout=20).stdout.split():
            self.ctr("containers", "delete", c, check=False, timeout=20)

    @staticmethod
    def _unmount_under(base: Path) -> None:
        prefix = str(base)
        mounts = []
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/mounts").read_text().splitlines():
                target = line.split()[1].replace("\\040", " ")
                if target.startswith(prefix):
                    mounts.append(target)
        for m in sorted(mounts, key=len, reverse=True):
            subprocess.run(["umount", "-l", m], capture_output=True)
