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
import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from qosmos.extender.core.errors import InvalidInput
from qosmos.sidecar.cgroups import container_children, format_cpuset, parse_cpuset
from qosmos.sidecar.fs import FS, HostFS
from qosmos.sidecar.state import CpuTarget, HtbTarget, MbaTarget

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


@dataclass(frozen=True)
class ResctrlInfo:
    """What a resctrl mount offers (all False/empty when not mounted)."""

    root: Path
    mounted: bool
    mba: bool
    mbm: bool
    domains: tuple[str, ...] = ()
    min_bandwidth: int = 10
    bandwidth_gran: int = 10


def detect_resctrl(root: Path = Path("/sys/fs/resctrl")) -> ResctrlInfo:
    """Memory Bandwidth Allocation (``info/MB``) and Monitoring (``mbm_total_bytes``) support."""
    if not (root / "info").is_dir() or not (root / "schemata").is_file():
        return ResctrlInfo(root, False, False, False)
    mba = (root / "info" / "MB").is_dir()
    feats = root / "info" / "L3_MON" / "mon_features"
    mbm = feats.is_file() and "mbm_total_bytes" in feats.read_text().split()
    domains: tuple[str, ...] = ()
    for line in (root / "schemata").read_text().splitlines():
        res, _, rest = line.partition(":")
        if res.strip() == "MB":
            domains = tuple(p.split("=")[0].strip() for p in rest.split(";") if "=" in p)

    def num(name: str, default: int) -> int:
        f = root / "info" / "MB" / name
        try:
            return int(f.read_text().strip())
        except (OSError, ValueError):
            return default

    return ResctrlInfo(root, True, mba, mbm, domains, num("min_bandwidth", 10), num("bandwidth_gran", 10))


@register_actuator("mba", "resctrl")
class ResctrlMba:
    """One shared resctrl group for all CPU jobs; ``None`` puts its tasks back and lifts the cap."""

    kind = "mba"
    name = "resctrl"

    def __init__(self, root: Path = Path("/sys/fs/resctrl"), fs: FS | None = None) -> None:
        self.root = Path(root)
        self.fs: FS = fs or HostFS()
        self.group = "qosmos-cpu-jobs"

    def _percent(self, info: ResctrlInfo, pct: int) -> int:
        g = max(1, info.bandwidth_gran)
        return min(100, max(info.min_bandwidth, round(pct / g) * g))

    def _tasks(self, group: Path) -> list[str]:
        f = group / "tasks"
        return self.fs.read(f).split() if f.is_file() else []

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
        for line in self.fs.read(sch).splitlines():
            res, _, rest = line.partition(":")
            if res.strip() == "MB":
                return any(p.split("=")[1].strip() != "100" for p in rest.split(";") if "=" in p)
        return False

    def apply(self, target: MbaTarget | None, where: Any = None) -> list[str]:
        info = detect_resctrl(self.root)
        if not info.mba:
            raise InvalidInput("resctrl", str(self.root), "no Memory Bandwidth Allocation (info/MB) here")
        if target is not None:
            self.group = target.group
        group = self.root / self.group
        actions: list[str] = []
        if target is None:
            if group.is_dir():
                moved = sum(self._move(self.root, p) for p in self._tasks(group))
                line = "MB:" + ";".join(f"{d}=100" for d in info.domains)
                if self.fs.read(group / "schemata").strip() != line if (group / "schemata").is_file() else True:
                    self.fs.write(group / "schemata", line)
                    actions.append(f"resctrl {self.group}: MB 100%, {moved} tasks back to the default group")
            return actions
        if not group.is_dir():
            os.mkdir(group)  # the kernel fills in schemata/tasks
            actions.append(f"resctrl: created group {self.group}")
        pct = self._percent(info, target.percent)
        line = "MB:" + ";".join(f"{d}={pct}" for d in info.domains)
        sch = group / "schemata"
        current = {ln.strip() for ln in self.fs.read(sch).splitlines()} if sch.is_file() else set()
        if line not in current:
            self.fs.write(sch, line)
            actions.append(f"resctrl {self.group}: {line}")
        have = set(self._tasks(group))
        want = {str(p) for p in target.pids}
        added = sum(self._move(group, p) for p in sorted(want - have, key=int))
        removed = sum(self._move(self.root, p) for p in sorted(have - want, key=int))
        if added or removed:
            actions.append(f"resctrl {self.group}: +{added} -{removed} tasks")
        return actions


# --------------------------------------------------------------------------- tc HTB

# qdisc 50:, classes 50:1 (link), 50:10 GPU jobs and everything that is not a CPU job (unmanaged pods,
# the host: never starved by us), 50:20 CPU jobs (§V-E: "CPU jobs can only use 25 %").
HTB_HANDLE = "50"
HTB_DEFAULT = "10"  # tc reads class minors (and "default") in hex: shown as "default 0x10"


def htb_commands(t: HtbTarget) -> list[list[str]]:
    """``tc`` argument lists for the §V-E split: GPU ``gpu_share`` / CPU the rest, both borrowing to the link."""
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
        cls(f"{h}:1", f"{h}:10", f"{gpu}mbit", "prio", "0"),  # GPU jobs (and unclassified): 75 %, borrow to the link
        cls(f"{h}:1", f"{h}:20", f"{cpu}mbit", "prio", "1"),  # CPU jobs: 25 %, may borrow up to the link
        ["filter", "del", *dev, "parent", f"{h}:"],
    ]
    for flow, ips in (("10", t.gpu_ips), ("20", t.cpu_ips)):
        for ip in sorted(ips):
            cmds.append(
                ["filter", "add", *dev, "parent", f"{h}:", "protocol", "ip", "prio", "1", "u32",
                 "match", "ip", "src", f"{ip}/32", "flowid", f"{h}:{flow}"]
            )  # fmt: skip
    return cmds


def run_tc(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tc", *args], capture_output=True, text=True, check=False)


@register_actuator("net", "tc-htb")
class TcHtb:
    """Applies :func:`htb_commands` once per change; ``None`` removes the qdisc (only when it is ours)."""

    kind = "net"
    name = "tc-htb"

    def __init__(self, dev: str = "", runner: Callable[[Sequence[str]], Any] = run_tc) -> None:
        self.dev = dev
        self.runner = runner
        self._last: HtbTarget | None = None
        self._applied_once = False

    def _root(self, dev: str) -> str:
        """Our root qdisc's line on ``dev`` ("" when the root is not ours)."""
        out = getattr(self.runner(["qdisc", "show", "dev", dev]), "stdout", "") or ""
        return next((ln for ln in out.splitlines() if f"qdisc htb {HTB_HANDLE}: root" in ln), "")

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
        root = self._root(target.dev)
        words = root.split()
        default = words[words.index("default") + 1] if "default" in words[:-1] else ""
        if root and int(default.removeprefix("0x") or "0", 16) != int(HTB_DEFAULT, 16):
            # an older agent's root (another default class): htb cannot change it in place, so renew it
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
            f"({len(target.gpu_ips)} GPU-job, {len(target.cpu_ips)} CPU-job pods)"
        ]


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
