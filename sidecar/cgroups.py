"""Kubelet pod cgroups: layout detection and path derivation for cgroupfs/systemd drivers, v1/v2.

The kubelet puts every pod under ``kubepods`` (cgroupfs) or ``kubepods.slice`` (systemd), in a
QoS-class sub-group for Burstable and BestEffort pods (Guaranteed pods sit directly under it),
then one child per container (sandbox included). Container children are named by the container
ID (cgroupfs) or ``<runtime>-<id>.scope`` (systemd). When a pod is not where the layout says,
``/proc/<pid>/cgroup`` of one of its processes gives the path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from qosmos.extender.core.errors import InvalidInput

QOS_CLASSES = ("guaranteed", "burstable", "besteffort")
SCOPE_PREFIXES = ("cri-containerd-", "crio-", "docker-")
_CONTAINER_ID = re.compile(r"^[0-9a-f]{64}$")


# --------------------------------------------------------------------------- cpusets


def parse_cpuset(text: str) -> tuple[int, ...]:
    """``"0-2,5"`` -> ``(0, 1, 2, 5)``; empty text -> ``()``."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        try:
            a, b = int(lo), int(hi) if hi else int(lo)
        except ValueError:
            raise InvalidInput("cpuset", text, "expected a list like 0-2,5") from None
        if a < 0 or b < a:
            raise InvalidInput("cpuset", text, "ranges must be ascending and non-negative")
        cpus.update(range(a, b + 1))
    return tuple(sorted(cpus))


def format_cpuset(cpus: Iterable[int]) -> str:
    """``(0, 1, 2, 5)`` -> ``"0-2,5"``. Refuses an empty set (a cpuset must never be empty)."""
    s = sorted(set(cpus))
    if not s:
        raise InvalidInput("cpuset", "", "a cpuset must never be empty")
    runs: list[str] = []
    start = prev = s[0]
    for c in [*s[1:], None]:
        if c is not None and c == prev + 1:
            prev = c
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if c is not None:
            start = prev = c
    return ",".join(runs)


# --------------------------------------------------------------------------- layout


@dataclass(frozen=True)
class CgroupLayout:
    """Where the kubelet's cgroups live: ``root`` (/sys/fs/cgroup), version 1 or 2, driver."""

    root: Path
    version: int
    driver: str  # cgroupfs | systemd
    parent: str = ""  # the kubelet's --cgroup-root below the hierarchy root ("" for "/")

    def __post_init__(self) -> None:
        if self.version not in (1, 2):
            raise InvalidInput("cgroup version", self.version, "must be 1 or 2")
        if self.driver not in ("cgroupfs", "systemd"):
            raise InvalidInput("cgroup driver", self.driver, "must be cgroupfs or systemd")

    def hierarchy(self, controller: str) -> Path:
        """The mount of ``controller`` (v1: ``root/<controller>``; v2: the unified root)."""
        return self.root / controller if self.version == 1 else self.root

    def kubepods(self, controller: str) -> Path:
        base = self.hierarchy(controller)
        if self.parent:
            base = base / self.parent.strip("/")
        return base / ("kubepods.slice" if self.driver == "systemd" else "kubepods")

    def pod_dir_candidates(self, controller: str, uid: str) -> list[Path]:
        """Possible pod cgroup directories for a pod UID, one per QoS class."""
        kp = self.kubepods(controller)
        if self.driver == "cgroupfs":
            return [kp / f"pod{uid}", kp / "burstable" / f"pod{uid}", kp / "besteffort" / f"pod{uid}"]
        u = uid.replace("-", "_")
        return [
            kp / f"kubepods-pod{u}.slice",
            kp / "kubepods-burstable.slice" / f"kubepods-burstable-pod{u}.slice",
            kp / "kubepods-besteffort.slice" / f"kubepods-besteffort-pod{u}.slice",
        ]

    def pod_dir(self, controller: str, uid: str, qos: str | None = None) -> Path | None:
        """The existing pod cgroup directory (``qos`` narrows the search), else None."""
        cands = self.pod_dir_candidates(controller, uid)
        if qos:
            q = qos.lower()
            if q not in QOS_CLASSES:
                raise InvalidInput("qosClass", qos, f"must be one of {', '.join(QOS_CLASSES)}")
            cands = [cands[QOS_CLASSES.index(q)]]
        return next((c for c in cands if c.is_dir()), None)

    def container_dir(self, pod_dir: Path, container_id: str) -> Path | None:
        """The container's cgroup under ``pod_dir`` (``containerd://<id>`` accepted)."""
        cid = container_id.split("://", 1)[-1]
        names = [cid] if self.driver == "cgroupfs" else [f"{p}{cid}.scope" for p in SCOPE_PREFIXES]
        names += [cid] if self.driver == "systemd" else [f"{p}{cid}.scope" for p in SCOPE_PREFIXES]
        return next((pod_dir / n for n in names if (pod_dir / n).is_dir()), None)


def container_children(pod_dir: Path) -> list[Path]:
    """Every container cgroup under a pod directory (sandbox included), sorted by name."""
    out: list[Path] = []
    if not pod_dir.is_dir():
        return out
    for d in sorted(pod_dir.iterdir()):
        name = d.name
        for p in SCOPE_PREFIXES:
            if name.startswith(p) and name.endswith(".scope"):
                name = name[len(p) : -len(".scope")]
        if d.is_dir() and _CONTAINER_ID.match(name):
            out.append(d)
    return out


def detect_layout(root: Path = Path("/sys/fs/cgroup"), driver: str = "auto", parent: str = "") -> CgroupLayout:
    """v2 when ``root`` is a unified mount (``cgroup.controllers``), or holds one as its kubepods tree (the
    chart mounts only that subtree at the same path), else v1 with a cpuset hierarchy.

    ``driver="auto"`` picks systemd when ``kubepods.slice`` exists, else cgroupfs.
    """
    base = root / parent.strip("/") if parent.strip("/") else root
    kubepods_v2 = any((base / k / "cgroup.controllers").is_file() for k in ("kubepods.slice", "kubepods"))
    if (root / "cgroup.controllers").is_file() or kubepods_v2:
        version = 2
    elif (root / "cpuset").is_dir():
        version = 1
    else:
        raise InvalidInput("cgroup root", str(root), "neither a cgroup v2 mount nor a v1 tree with cpuset")
    if driver == "auto":
        probe = CgroupLayout(root, version, "systemd", parent)
        driver = "systemd" if probe.kubepods("cpuset").is_dir() else "cgroupfs"
    return CgroupLayout(root, version, driver, parent)


def proc_cgroup_path(pid: int, controller: str, proc: Path = Path("/proc")) -> str | None:
    """The cgroup path of ``pid`` for ``controller`` from ``/proc/<pid>/cgroup`` (v2: the ``0::`` line)."""
    try:
        lines = (proc / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return None
    unified = None
    for line in lines:
        hier, _, rest = line.partition(":")
        ctrls, _, path = rest.partition(":")
        if hier == "0" and ctrls == "":
            unified = path
        elif controller in ctrls.split(","):
            return path
    return unified


def pod_dir_from_pids(
    layout: CgroupLayout, controller: str, pids: Sequence[int], proc: Path = Path("/proc")
) -> Path | None:
    """Fallback: the pod directory containing a process's cgroup (the container's parent)."""
    for pid in pids:
        path = proc_cgroup_path(pid, controller, proc)
        if not path:
            continue
        d = layout.hierarchy(controller) / path.lstrip("/")
        parent = d.parent
        if parent.is_dir() and (parent.name.startswith("pod") or "-pod" in parent.name):
            return parent
    return None


def pids_of_container(container_id: str, proc: Path = Path("/proc")) -> list[int]:
    """PIDs whose cgroup path names the container ID (the fallback when the layout has no match)."""
    cid = container_id.split("://", 1)[-1]
    if not cid:
        return []
    out = []
    for d in proc.iterdir():
        if not d.name.isdigit():
            continue
        try:
            if cid in (d / "cgroup").read_text():
                out.append(int(d.name))
        except OSError:
            continue
    return sorted(out)
