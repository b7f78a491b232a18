"""Actuators: apply desired state, one interface, one registry.

``make_actuator(kind, name, **options)`` builds one; kinds are ``cpu`` (cgroup v1 / v2 cpuset
and CFS quota), ``mba`` (resctrl MBA schemata and tasks) and ``net`` (tc HTB). Every kind also
has ``dry-run`` (records what it would do, writes nothing); the file-writing ones take an
``fs`` option, :class:`~qosmos.sidecar.fs.FakeKernelFS` in unit tests ("fake-filesystem").
``apply`` returns human-readable actions actually taken ([] when already in the desired state).

CPU ordering (koordlet-style, so that every cgroup is valid after every single write and a
kill between two writes leaves no pod with an empty or out-of-parent cpuset):
  1. widen each cpuset to old ∪ new, pod before containers (a child must stay within its parent);
  2. set the CFS quota on the container cgroups;
  3. narrow each cpuset to new, containers before pod.
So more cores: cpuset first, then quota; fewer cores: quota first, then cpuset. The pod-level
quota stays the kubelet's (it owns it: an in-place resize writes it from the spec; measured here,
the kubelet did not revert a hand-set pod quota within 40 s, so this is ownership, not a race); a container
quota above it would be refused on v1, so then the containers inherit the pod's.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from qosmos.extender.core.errors import InvalidInput
from qosmos.sidecar.cgroups import container_children, format_cpuset, parse_cpuset
from qosmos.sidecar.fs import FS, HostFS
from qosmos.sidecar.journal import Journal
from qosmos.sidecar.state import CpuTarget, HtbTarget, MbaTarget, VethTarget

CFS_PERIOD_US = 100_000


class Actuator(Protocol):
    kind: str
    name: str

    def apply(self, target: Any, where: Any = None) -> list[str]: ...


ActuatorFactory = Callable[..., Actuator]
ACTUATORS: dict[str, dict[str, ActuatorFactory]] = {"cpu": {}, "mba": {}, "net": {}}


def register_actuator(kind: str, name: str) -> Callable[[ActuatorFactory], ActuatorFactory]:
    """Class decorator adding an actuator to the registry."""

    def deco(factory: ActuatorFactory) -> ActuatorFactory:
        ACTUATORS.setdefault(kind, {})[name] = factory
        return factory

    return deco


def make_actuator(kind: str, name: str, **options: Any) -> Actuator:
    """Build a registered actuator; a clear error for unknown kinds/names."""
    if kind not in ACTUATORS:
        raise InvalidInput("actuator kind", kind, f"must be one of {', '.join(sorted(ACTUATORS))}")
    if name not in ACTUATORS[kind]:
        raise InvalidInput(f"{kind} actuator", name, f"must be one of {', '.join(sorted(ACTUATORS[kind]))}")
    return ACTUATORS[kind][name](**options)


# --------------------------------------------------------------------------- CPU


@dataclass(frozen=True)
class PodCgroups:
    """A pod's directories in the cpuset and cpu hierarchies (the same directory on v2)."""

    cpuset: Path
    cpu: Path


class _CgroupCpu:
    kind = "cpu"
    name = ""
    version = 1

    def __init__(self, fs: FS | None = None, period_us: int = CFS_PERIOD_US) -> None:
        self.fs: FS = fs or HostFS()
        self.period_us = period_us

    # -- per-version file formats
    def _read_cpus(self, d: Path) -> set[int]:
        raise NotImplementedError

    def _read_quota(self, d: Path) -> int:
        raise NotImplementedError

    def _write_quota(self, d: Path, quota: int) -> None:
        raise NotImplementedError

    def read_cpus(self, d: Path) -> set[int]:
        """The cpuset of a cgroup directory."""
        return self._read_cpus(d)

    def has_cpuset(self, d: Path) -> bool:
        """v1: always; v2: only where the parent's ``cgroup.subtree_control`` enables cpuset (else the
        file is absent, e.g. a systemd that does not delegate it: then only the quota is set)."""
        return True

    def read_quota(self, d: Path) -> int:
        """CFS quota in µs per period, -1 for none."""
        return self._read_quota(d)

    def apply(self, target: CpuTarget, where: PodCgroups | None = None) -> list[str]:
        if where is None:
            raise InvalidInput("pod cgroups", target.key, "missing")
        if not target.cpus:
            raise InvalidInput("cpus", target.key, "a pod's cpuset must never be empty")
        new = set(target.cpus)
        sets = [where.cpuset, *container_children(where.cpuset)]  # parent first
        sets = [d for d in sets if self.has_cpuset(d)]
        old = {d: self._read_cpus(d) for d in sets}
        actions: list[str] = []
        for d in sets:  # 1. widen, parent first
            if not new <= old[d]:
                self.fs.write(d / "cpuset.cpus", format_cpuset(old[d] | new))
        quota = -1 if target.quota_cores is None else max(1000, round(target.quota_cores * self.period_us))
        podq = self._read_quota(where.cpu)
        if podq != -1 and (quota == -1 or quota > podq):
            quota = -1  # the pod's own (kubelet) quota is the tighter one: inherit it (v1 refuses more)
        changed = [d for d in container_children(where.cpu) if self._read_quota(d) != quota]
        for d in changed:  # 2. quota on the containers: siblings, no ordering among them
            self._write_quota(d, quota)
        if changed:
            actions.append(f"{target.key}: CFS quota {'none' if quota == -1 else f'{quota / self.period_us:g} CPUs'}")
        for d in reversed(sets):  # 3. narrow, children first
            if self._read_cpus(d) != new:
                self.fs.write(d / "cpuset.cpus", format_cpuset(new))
        if any(old[d] != new for d in sets):
            actions.insert(0, f"{target.key}: cpuset {format_cpuset(new)}")
        return actions


@register_actuator("cpu", "cgroup-v1")
class CgroupV1Cpu(_CgroupCpu):
    """cgroup v1: ``cpuset/…/cpuset.cpus`` and ``cpu/…/cpu.cfs_quota_us``."""

    name = "cgroup-v1"
    version = 1

    def _read_cpus(self, d: Path) -> set[int]:
        return set(parse_cpuset(self.fs.read(d / "cpuset.cpus")))

    def _read_quota(self, d: Path) -> int:
        return int(self.fs.read(d / "cpu.cfs_quota_us").strip() or -1)

    def _write_quota(self, d: Path, quota: int) -> None:
        period = d / "cpu.cfs_period_us"
        if quota != -1 and period.is_file() and int(self.fs.read(period).strip()) != self.period_us:
            self.fs.write(period, str(self.period_us))
        self.fs.write(d / "cpu.cfs_quota_us", str(quota))


@register_actuator("cpu", "cgroup-v2")
class CgroupV2Cpu(_CgroupCpu):
    """cgroup v2: ``cpuset.cpus`` (empty means the parent's, read ``cpuset.cpus.effective``) and ``cpu.max``."""

    name = "cgroup-v2"
    version = 2

    def has_cpuset(self, d: Path) -> bool:
        return (d / "cpuset.cpus").is_file()

    def _read_cpus(self, d: Path) -> set[int]:
        own = self.fs.read(d / "cpuset.cpus").strip()
        if own:
            return set(parse_cpuset(own))
        eff = d / "cpuset.cpus.effective"
        return set(parse_cpuset(self.fs.read(eff))) if eff.is_file() else set()

    def _read_quota(self, d: Path) -> int:
        q, *_ = self.fs.read(d / "cpu.max").split()
        return -1 if q == "max" else int(q)

    def _write_quota(self, d: Path, quota: int) -> None:
        self.fs.write(d / "cpu.max", f"{'max' if quota == -1 else quota} {self.period_us}")


# --------------------------------------------------------------------------- resctrl (MBA)


# MBA's unit, from what the mount says (Documentation/filesystems/resctrl.rst, "Memory bandwidth
# Allocation"; the kernel's rdt_get_mem_config / rdt_get_mem_config_amd): Intel's default mode is a
# percentage (default 100, ``min_bandwidth`` e.g. 10, ``bandwidth_gran`` e.g. 10); AMD's values are
# absolute, in multiples of 1/8 GB/s (default, i.e. no cap, 2^bw_len such as 2048; ``min_bandwidth`` 0,
# ``bandwidth_gran`` 1); with the ``mba_MBps`` mount option (the software controller) values are MiB/s
# (MBM bytes / 2^20; default 2^32 - 1). Read from the info files, the default group's schemata and
# /proc/mounts, never from the CPU vendor. Anything else: the agent halves cores instead (§V-E).
MBA_PERCENT_MODE, MBA_AMD_MODE, MBA_MBPS_MODE = "percent", "amd-1/8GBps", "MiBps"
AMD_UNIT_BYTES = 1e9 / 8  # one AMD MBA unit: 1/8 GB/s
MIB = 1 << 20


@dataclass(frozen=True)
class ResctrlInfo:
    """What a resctrl mount offers (all False/empty when not mounted).

    ``mba`` is True only when the unit of its values is recognised (``mode``); ``reason`` says why not.
    ``max_value``: the control value meaning "no cap" in that unit (the default group's)."""

    root: Path
    mounted: bool
    mba: bool
    mbm: bool
    domains: tuple[str, ...] = ()
    min_bandwidth: int = 10
    bandwidth_gran: int = 10
    mode: str = ""
    max_value: int = 100
    reason: str = ""


def _mount_options(mounts: Path, root: Path) -> list[str]:
    """The options of the resctrl mount (the one at ``root`` if listed, else any: in a container the
    host's /sys/fs/resctrl appears under another path)."""
    found: list[list[str]] = []
    try:
        for line in mounts.read_text().splitlines():
            f = line.split()
            if len(f) >= 4 and f[2] == "resctrl":
                opts = f[3].split(",")
                if f[1] == str(root):
                    return opts
                found.append(opts)
    except OSError:
        pass
    return found[0] if found else []


MBPS_DEFAULT = (1 << 32) - 1  # the kernel's MBA_MAX_MBPS: mba_MBps's "no cap"


def detect_resctrl(root: Path = Path("/sys/fs/resctrl"), mounts: Path = Path("/proc/mounts")) -> ResctrlInfo:
    """Memory Bandwidth Allocation (``info/MB``, its unit) and Monitoring (``mbm_total_bytes``) support."""
    if not (root / "info").is_dir() or not (root / "schemata").is_file():
        return ResctrlInfo(root, False, False, False, reason="resctrl not mounted")
    has_mb = (root / "info" / "MB").is_dir()
    feats = root / "info" / "L3_MON" / "mon_features"
    mbm = feats.is_file() and "mbm_total_bytes" in feats.read_text().split()
    domains: tuple[str, ...] = ()
    values: list[int] = []
    for line in (root / "schemata").read_text().splitlines():
        res, _, rest = line.partition(":")
        if res.strip() == "MB":
            parts = [q.split("=", 1) for q in rest.split(";") if "=" in q]
            domains = tuple(d.strip() for d, _ in parts)
            values = [int(v) for _, v in parts if v.strip().isdigit()]

    def num(name: str, default: int) -> int:
        f = root / "info" / "MB" / name
        try:
            return int(f.read_text().strip())
        except (OSError, ValueError):
            return default

    lo, gran = num("min_bandwidth", 10), num("bandwidth_gran", 10)
    top = max(values) if values else 0
    mode, reason = "", ""
    if not has_mb:
        reason = "no info/MB (no Memory Bandwidth Allocation)"
    elif "mba_MBps" in _mount_options(mounts, root) or top == MBPS_DEFAULT:
        mode = MBA_MBPS_MODE
    elif lo == 0 and gran == 1 and top > 100:
        mode = MBA_AMD_MODE
    elif top == 100 and 1 <= lo <= 100 and gran >= 1:
        mode = MBA_PERCENT_MODE
    else:
        reason = f"MBA of an unrecognised kind (min_bandwidth {lo}, bandwidth_gran {gran}, default MB {top})"
    maximum = {MBA_PERCENT_MODE: 100, MBA_MBPS_MODE: MBPS_DEFAULT}.get(mode, top)
    return ResctrlInfo(root, True, bool(mode), mbm, domains, lo, gran, mode, maximum, reason)


def mba_value(info: ResctrlInfo, fraction: float, peak_bytes_per_second: float | None) -> int:
    """The MB schemata value capping each domain at ``fraction`` of its bandwidth, in the mount's unit.

    percent: ``fraction`` x 100 on the ``bandwidth_gran`` grid, at least ``min_bandwidth``; AMD and
    MiB/s are absolute, so the node's peak (split evenly over the domains) is needed."""
    if not 0 < fraction <= 1:
        raise InvalidInput("MBA fraction", fraction, "must be in (0, 1]")
    if info.mode == MBA_PERCENT_MODE:
        g = max(1, info.bandwidth_gran)
        return min(100, max(info.min_bandwidth, round(fraction * 100 / g) * g))
    if info.mode not in (MBA_AMD_MODE, MBA_MBPS_MODE):
        raise InvalidInput("resctrl MBA", str(info.root), info.reason or "unit not recognised")
    if not peak_bytes_per_second or peak_bytes_per_second <= 0:
        raise InvalidInput("peak memory bandwidth", peak_bytes_per_second,
                           f"MBA in {info.mode} is absolute: give --membw-peak")  # fmt: skip
    per_domain = fraction * peak_bytes_per_second / max(1, len(info.domains))
    unit = AMD_UNIT_BYTES if info.mode == MBA_AMD_MODE else MIB
    return min(info.max_value, max(1, info.min_bandwidth, round(per_domain / unit)))


@register_actuator("mba", "resctrl")
class ResctrlMba:
    """One shared resctrl group for all CPU jobs; ``None`` puts its tasks back where each came from
    and lifts the cap. Each task's original group, and the group itself, go to the journal first."""

    kind = "mba"
    name = "resctrl"

    def __init__(
        self,
        root: Path = Path("/sys/fs/resctrl"),
        fs: FS | None = None,
        journal: Journal | None = None,
        info: ResctrlInfo | None = None,
    ) -> None:
        self.root = Path(root)
        self.fs: FS = fs or HostFS()
        self.journal = journal if journal is not None else Journal()
        self.group = "qosmos-cpu-jobs"
        self._info = info

    def info(self) -> ResctrlInfo:
        return self._info or detect_resctrl(self.root)

    def _tasks(self, group: Path) -> list[str]:
        f = group / "tasks"
        return self.fs.read(f).split() if f.is_file() else []

    def _groups(self) -> list[Path]:
        """The default group and every control group (the directories holding a ``tasks`` file)."""
        return [self.root, *sorted(d for d in self.root.iterdir() if d.is_dir() and (d / "tasks").is_file())]

    def _move(self, dest: Path, pid: str) -> bool:
        try:
            self.fs.write(dest / "tasks", pid)
            return True
        except ProcessLookupError:  # the task exited meanwhile
            return False

    def throttled(self) -> bool:
        """Whether the shared group holds tasks under a cap (what a restarted agent resumes from)."""
        group = self.root / self.group
        sch = group / "schemata"
        if not self._tasks(group) or not sch.is_file():
            return False
        top = str(self.info().max_value)
        for line in self.fs.read(sch).splitlines():
            res, _, rest = line.partition(":")
            if res.strip() == "MB":
                return any(p.split("=")[1].strip() != top for p in rest.split(";") if "=" in p)
        return False

    def _release(self, info: ResctrlInfo, group: Path) -> list[str]:
        actions: list[str] = []
        if not group.is_dir():
            return actions
        back: list[str] = []
        for pid in self._tasks(group):
            orig = Path(self.journal.tasks.get(pid, str(self.root)))
            dest = orig if (orig / "tasks").is_file() and orig != group else self.root
            if self._move(dest, pid):
                back.append(pid)
        self.journal.forget_tasks(back)
        line = "MB:" + ";".join(f"{d}={info.max_value}" for d in info.domains)
        sch = group / "schemata"
        if not sch.is_file() or self.fs.read(sch).strip() != line or back:
            if sch.is_file() and line not in {ln.strip() for ln in self.fs.read(sch).splitlines()}:
                self.fs.write(sch, line)
            actions.append(
                f"resctrl {self.group}: MB {info.max_value} (no cap), {len(back)} tasks back to their groups"
            )
        return actions

    def apply(self, target: MbaTarget | None, where: Any = None) -> list[str]:
        info = self.info()
        if not info.mba:
            raise InvalidInput(
                "resctrl", str(self.root), info.reason or "no Memory Bandwidth Allocation (info/MB) here"
            )
        if target is not None:
            self.group = target.group
        group = self.root / self.group
        if target is None:
            return self._release(info, group)
        actions: list[str] = []
        self.journal.remember_group(group)  # ours by name: removed on cleanup
        if not group.is_dir():
            self.fs.mkdir(group)  # the kernel fills in schemata/tasks
            actions.append(f"resctrl: created group {self.group}")
        value = mba_value(info, target.percent / 100, target.peak_bytes_per_second)
        line = "MB:" + ";".join(f"{d}={value}" for d in info.domains)
        sch = group / "schemata"
        current = {ln.strip() for ln in self.fs.read(sch).splitlines()} if sch.is_file() else set()
        if line not in current:
            self.fs.write(sch, line)
            actions.append(f"resctrl {self.group}: {line} ({info.mode})")
        have = set(self._tasks(group))
        want = {str(p) for p in target.pids}
        if want - have:
            where_now = {pid: g for g in self._groups() if g != group for pid in self._tasks(g)}
            added = 0
            for pid in sorted(want - have, key=int):
                # a task listed in no other group is in the default one (an exited one: ESRCH, skipped)
                self.journal.remember_task(pid, where_now.get(pid, self.root))
                added += self._move(group, pid)
        else:
            added = 0
        removed = []
        for pid in sorted(have - want, key=int):
            orig = Path(self.journal.tasks.get(pid, str(self.root)))
            if self._move(orig if (orig / "tasks").is_file() and orig != group else self.root, pid):
                removed.append(pid)
        self.journal.forget_tasks(removed)
        if added or removed:
            actions.append(f"resctrl {self.group}: +{added} -{len(removed)} tasks")
        return actions


# --------------------------------------------------------------------------- tc HTB

# qdisc 50: with no default class: a packet no filter classifies (the host, unmanaged pods, anything
# that is not a managed pod's) goes to HTB's direct queue, sent at once and never shaped. Classes
# 50:1 (the link), 50:10 GPU-job pods (§V-E: 75 %), 50:20 CPU-job pods ("CPU jobs can only use
# 25 %"); both borrow up to the link.
HTB_HANDLE = "50"
HTB_DEFAULT = "0"  # no default class: unclassified traffic is direct (tc prints "default 0")


def htb_commands(t: HtbTarget) -> list[list[str]]:
    """``tc`` argument lists for the §V-E split: GPU ``gpu_share`` / CPU the rest, both borrowing to the link;
    pods classified by source address, IPv4 (``match ip src a/32``) and IPv6 (``match ip6 src a/128``)."""
    if not 0 < t.gpu_share < 1:
        raise InvalidInput("gpu_share", t.gpu_share, "must be in (0, 1)")
    if t.link_mbit <= 0:
        raise InvalidInput("link_mbit", t.link_mbit, "must be > 0")
    h, link = HTB_HANDLE, t.link_mbit
    gpu = max(1, round(link * t.gpu_share))
    cpu = max(1, link - gpu)
    dev = ["dev", t.dev]

    def cls(parent: str, classid: str, rate: str, *prio: str) -> list[str]:
        return ["class", "replace", *dev, "parent", parent, "classid", classid, "htb", "rate", rate,
                "ceil", f"{link}mbit", *prio]  # fmt: skip

    cmds = [
        ["qdisc", "replace", *dev, "root", "handle", f"{h}:", "htb", "default", HTB_DEFAULT],
        cls(f"{h}:", f"{h}:1", f"{link}mbit"),
        cls(f"{h}:1", f"{h}:10", f"{gpu}mbit", "prio", "0"),  # GPU jobs: 75 %, borrow to the link
        cls(f"{h}:1", f"{h}:20", f"{cpu}mbit", "prio", "1"),  # CPU jobs: 25 %, may borrow up to the link
        ["filter", "del", *dev, "parent", f"{h}:"],
    ]
    for flow, ips in (("10", t.gpu_ips), ("20", t.cpu_ips)):
        for raw in sorted(ips):
            try:
                ip = ipaddress.ip_address(raw)
            except ValueError:
                raise InvalidInput("pod IP", raw, "not an IPv4 or IPv6 address") from None
            proto, match, bits, prio = ("ip", "ip", 32, "1") if ip.version == 4 else ("ipv6", "ip6", 128, "2")
            cmds.append(
                ["filter", "add", *dev, "parent", f"{h}:", "protocol", proto, "prio", prio, "u32",
                 "match", match, "src", f"{ip}/{bits}", "flowid", f"{h}:{flow}"]
            )  # fmt: skip
    return cmds


def run_tc(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tc", *args], capture_output=True, text=True, check=False, timeout=30)


def run_ip(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """A whole command line (``["ip", ...]``): the ifb devices of per-pod caps."""
    return subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=30)


def root_qdisc(show: str) -> str:
    """The root qdisc's line in ``tc qdisc show dev X`` output ("" when none is listed)."""
    return next((ln.strip() for ln in show.splitlines() if " root " in f"{ln} "), "")


def is_ours(line: str) -> bool:
    """Our root qdisc: the HTB on one device, or a per-pod veth's tbf, both with our handle."""
    return line.split()[1:3] in (["htb", f"{HTB_HANDLE}:"], ["tbf", f"{HTB_HANDLE}:"]) if line else False


VETH_FILTER_PRIO = "50"  # our ingress redirect's preference: what marks a veth's ingress qdisc as ours


def has_ingress(show: str) -> bool:
    return any(ln.split()[1:3] == ["ingress", "ffff:"] for ln in show.splitlines() if ln.startswith("qdisc "))


def our_redirect(filters: str) -> bool:
    """Whether ``tc filter show dev D ingress`` lists our redirect to the pod's ifb."""
    return any(f"pref {VETH_FILTER_PRIO} " in f"{ln} " for ln in filters.splitlines())


def ifb_name(dev: str) -> str:
    """The ifb device that shapes what the pod behind veth ``dev`` sends (15 characters at most)."""
    return "qsm" + hashlib.sha1(dev.encode()).hexdigest()[:10]


def veth_commands(dev: str, mbit: int) -> tuple[list[list[str]], list[list[str]]]:
    """A pod's cap on its host veth, as (ip, tc) argument lists: a tbf root on the veth (what the pod
    receives) and, for what it sends, the veth's ingress redirected to its own ifb with the same tbf
    (a redirect, not a police action: the kernel's police module is not everywhere, and shaping queues
    where policing drops). Burst: 10 ms at the rate, at least 32 kB."""
    if mbit <= 0:
        raise InvalidInput("mbit", mbit, "must be > 0")
    burst, rate, ifb = f"{max(32, mbit * 10 // 8)}kb", f"{mbit}mbit", ifb_name(dev)
    tbf = ["root", "handle", f"{HTB_HANDLE}:", "tbf", "rate", rate, "burst", burst, "latency", "50ms"]
    ip = [["ip", "link", "add", ifb, "type", "ifb"], ["ip", "link", "set", ifb, "up"]]
    tc = [
        ["qdisc", "replace", "dev", dev, *tbf],
        ["qdisc", "replace", "dev", ifb, *tbf],
        ["qdisc", "replace", "dev", dev, "handle", "ffff:", "ingress"],
        ["filter", "replace", "dev", dev, "parent", "ffff:", "protocol", "all", "prio", VETH_FILTER_PRIO, "u32",
         "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", ifb],
    ]  # fmt: skip
    return ip, tc


def remove_veth_cap(
    dev: str, tc: Callable[[Sequence[str]], Any], ip: Callable[[Sequence[str]], Any], root: bool = True
) -> list[str]:
    """Undo :func:`veth_commands` on ``dev`` (what of it is there; the veth may be gone with its pod);
    ``root=False`` leaves our root tbf to the caller (restore, which checks what the root is then)."""
    done = []
    r = tc(["qdisc", "show", "dev", dev])
    show = "" if getattr(r, "returncode", 0) else getattr(r, "stdout", "") or ""
    if has_ingress(show) and our_redirect(getattr(tc(["filter", "show", "dev", dev, "ingress"]), "stdout", "") or ""):
        tc(["qdisc", "del", "dev", dev, "handle", "ffff:", "ingress"])
        done.append(f"tc {dev}: ingress redirect removed")
    if root and is_ours(root_qdisc(show)):
        tc(["qdisc", "del", "dev", dev, "root", "handle", f"{HTB_HANDLE}:"])
        done.append(f"tc {dev}: tbf removed")
    if not getattr(ip(["ip", "link", "del", ifb_name(dev)]), "returncode", 0):
        done.append(f"ip {ifb_name(dev)}: removed")
    return done


def is_kernel_default(show: str) -> bool:
    """Whether every egress qdisc on the device is one the kernel attached itself (handle ``0:``: noqueue,
    pfifo_fast, mq and its per-queue children, the ``net.core.default_qdisc`` one). A qdisc someone
    added (an fq, a CNI's bandwidth manager, an mq with a tuned child) gets another handle."""
    lines = [ln.split() for ln in show.splitlines() if ln.startswith("qdisc ")]
    egress = [w for w in lines if w[1] not in ("ingress", "clsact")]
    return bool(egress) and all(len(w) > 2 and w[2] == "0:" for w in egress)


class TcRefused(InvalidInput):
    """The device's root qdisc is someone else's: the agent does not touch it."""


@register_actuator("net", "tc-htb")
class TcHtb:
    """Applies :func:`htb_commands` once per change; ``None`` removes the qdisc (only when it is ours).

    Only over the kernel's default root qdisc (recorded in the journal first, and restored by deleting
    ours) or its own; any other root qdisc is refused (:class:`TcRefused`), nothing changed."""

    kind = "net"
    name = "tc-htb"

    def __init__(
        self, dev: str = "", runner: Callable[[Sequence[str]], Any] = run_tc, journal: Journal | None = None
    ) -> None:
        self.dev = dev
        self.runner = runner
        self.journal = journal if journal is not None else Journal()
        self._last: HtbTarget | None = None
        self._applied_once = False

    def _show(self, dev: str) -> str:
        r = self.runner(["qdisc", "show", "dev", dev])
        if getattr(r, "returncode", 0):
            raise OSError(f"tc qdisc show dev {dev}: {getattr(r, 'stderr', '').strip()}")
        return getattr(r, "stdout", "") or ""

    def _root(self, dev: str) -> str:
        """Our root qdisc's line on ``dev`` ("" when the root is not ours)."""
        line = root_qdisc(self._show(dev))
        return line if is_ours(line) else ""

    def _ours(self, dev: str) -> bool:
        return bool(self._root(dev))

    def apply(self, target: HtbTarget | None, where: Any = None) -> list[str]:
        if target is None:
            dev = self._last.dev if self._last else self.dev
            if dev and (self._last is not None or not self._applied_once) and self._ours(dev):
                self.runner(["qdisc", "del", "dev", dev, "root", "handle", f"{HTB_HANDLE}:"])
                self._last, self._applied_once = None, True
                return [f"tc {dev}: removed HTB"]
            self._last, self._applied_once = None, True
            return []
        if target == self._last:
            return []
        show = self._show(target.dev)
        root = root_qdisc(show)
        if not is_ours(root):
            if not is_kernel_default(show):
                raise TcRefused("tc root qdisc", f"{target.dev}: {root}",
                                "neither the kernel's default nor ours: left alone")  # fmt: skip
            self.journal.remember_qdisc(target.dev, root)  # before the first change: the restore point
            root = ""
        words = root.split()
        default = words[words.index("default") + 1] if "default" in words[:-1] else ""
        if root and int(default.removeprefix("0x") or "0", 16) != int(HTB_DEFAULT, 16):
            # an older agent's root (a default class): htb cannot change it in place, so renew it
            self.runner(["qdisc", "del", "dev", target.dev, "root", "handle", f"{HTB_HANDLE}:"])
            root = ""
        ours = bool(root)
        for args in htb_commands(target):
            if ours and args[:2] == ["qdisc", "replace"]:
                continue  # htb cannot "change" its root in place; the classes are replaced below
            r = self.runner(args)
            rc = getattr(r, "returncode", 0)
            if rc and args[:2] != ["filter", "del"]:
                raise OSError(f"tc {' '.join(args)}: {getattr(r, 'stderr', '').strip()}")
        self._last, self._applied_once = target, True
        gpu = round(100 * target.gpu_share)
        return [
            f"tc {target.dev}: HTB {gpu}/{100 - gpu} of {target.link_mbit} Mbit/s "
            f"({len(target.gpu_ips)} GPU-job, {len(target.cpu_ips)} CPU-job pod addresses; the rest unshaped)"
        ]


@register_actuator("net", "tc-veth")
class TcVeth:
    """Per-pod caps on host veths (:class:`VethTarget`): :func:`veth_commands` on each listed device,
    :func:`remove_veth_cap` on devices no longer listed. A device is touched only over the kernel's
    default root qdisc and no ingress qdisc (recorded in the journal first), or our own; anything else
    is refused for that device (:class:`TcRefused` after the others are done)."""

    kind = "net"
    name = "tc-veth"

    def __init__(
        self,
        runner: Callable[[Sequence[str]], Any] = run_tc,
        journal: Journal | None = None,
        ip: Callable[[Sequence[str]], Any] = run_ip,
    ) -> None:
        self.runner, self.ip = runner, ip
        self.journal = journal if journal is not None else Journal()
        self._caps: dict[str, int] = {}

    def apply(self, target: VethTarget | None, where: Any = None) -> list[str]:
        want = dict(target.caps) if target is not None else {}
        done: list[str] = []
        for dev in sorted(set(self._caps) - set(want)):
            done += remove_veth_cap(dev, self.runner, self.ip)
            del self._caps[dev]
        refused: list[str] = []
        for dev, mbit in sorted(want.items()):
            if self._caps.get(dev) == mbit:
                continue
            r = self.runner(["qdisc", "show", "dev", dev])
            if getattr(r, "returncode", 0):
                continue  # gone between the pod list and now
            show = getattr(r, "stdout", "") or ""
            root = root_qdisc(show)
            if not is_ours(root):
                if not is_kernel_default(show) or has_ingress(show):
                    refused.append(f"{dev}: {root or 'an ingress qdisc'}")
                    continue
                self.journal.remember_qdisc(dev, root)  # before the first change: the restore point
            ip_cmds, tc_cmds = veth_commands(dev, mbit)
            for args in ip_cmds:
                self.ip(args)  # "add" fails when our ifb is already there: fine, the tbf is replaced
            for args in tc_cmds:
                r = self.runner(args)
                if getattr(r, "returncode", 0):
                    raise OSError(f"tc {' '.join(args)}: {getattr(r, 'stderr', '').strip()}")
            self._caps[dev] = mbit
            done.append(f"tc {dev}: pod capped at {mbit} Mbit/s both ways")
        if refused:
            raise TcRefused("tc qdiscs", "; ".join(refused), "neither the kernel's default nor ours: left alone")
        return done


# --------------------------------------------------------------------------- dry run


@dataclass
class DryRun:
    """Writes nothing; ``applied`` keeps every (target, where) it was given."""

    kind: str = "cpu"
    name: str = "dry-run"
    applied: list[tuple[Any, Any]] = field(default_factory=list)
    _last: dict[str, Any] = field(default_factory=dict)

    def apply(self, target: Any, where: Any = None) -> list[str]:
        key = getattr(target, "uid", "") or self.kind
        if self._last.get(key, object()) == target:
            return []
        self._last[key] = target
        self.applied.append((target, where))
        return [f"dry-run {self.kind}: {target}"]


for _kind in ACTUATORS:
    register_actuator(_kind, "dry-run")(lambda _k=_kind, **_: DryRun(kind=_k))

with contextlib.suppress(Exception):
    del _kind
