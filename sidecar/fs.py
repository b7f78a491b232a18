"""The file writes actuators make, behind one small interface.

:class:`HostFS` writes the real cgroup/resctrl files (one ``write(2)`` per value, as the kernel
wants). :class:`FakeKernelFS` writes into an ordinary directory tree a test builds but refuses
what the kernel would refuse, so ordering bugs fail in unit tests as they would on a node:

* cgroup v1 cpuset: an empty ``cpuset.cpus`` (once tasks exist), a child not within its parent,
  a parent narrowed below one of its children (EINVAL / EBUSY in the kernel);
* cgroup v1 CFS: a child quota above its parent's, or a parent below a child's
  (``tg_cfs_schedulable_down``; -1 means "inherit" and is always allowed in a child);
* resctrl: ``tasks`` takes one PID per write; ``schemata`` lines must name known resources.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from qosmos.sidecar.cgroups import parse_cpuset


class KernelRefused(OSError):
    """A write the kernel would reject."""


class FS(Protocol):
    def read(self, path: Path) -> str: ...

    def write(self, path: Path, value: str) -> None: ...


class HostFS:
    """The real files."""

    def read(self, path: Path) -> str:
        return path.read_text()

    def write(self, path: Path, value: str) -> None:
        with open(path, "w") as f:  # one write(2): cgroup files reject partial writes
            f.write(value)


def _quota(text: str) -> int:
    return int(text.strip() or "-1")


@dataclass
class FakeKernelFS:
    """Files in a test-built tree, with the kernel's refusals. ``log`` lists (path, value) written."""

    log: list[tuple[Path, str]] = field(default_factory=list)

    def read(self, path: Path) -> str:
        return path.read_text()

    def _children(self, path: Path) -> list[Path]:
        return [d / path.name for d in path.parent.iterdir() if d.is_dir() and (d / path.name).is_file()]

    def _check(self, path: Path, value: str) -> None:
        name = path.name
        if name == "cpuset.cpus" and not (path.parent / "cgroup.controllers").exists():  # v1 semantics
            cpus = set(parse_cpuset(value))
            tasks = path.parent / "tasks"
            if not cpus and tasks.is_file() and tasks.read_text().strip():
                raise KernelRefused(f"{path}: empty cpuset with tasks attached")
            parent = path.parent.parent / name
            if parent.is_file() and not cpus <= set(parse_cpuset(parent.read_text())):
                raise KernelRefused(f"{path}: {value!r} not within parent {parent.read_text().strip()!r}")
            for child in self._children(path):
                if not set(parse_cpuset(child.read_text())) <= cpus:
                    raise KernelRefused(f"{path}: {value!r} would leave child {child} outside (EBUSY)")
        elif name == "cpu.cfs_quota_us":
            q = _quota(value)
            parent = path.parent.parent / name
            if parent.is_file() and (pq := _quota(parent.read_text())) != -1 and q > pq:  # -1 inherits
                raise KernelRefused(f"{path}: quota {q} above parent's {pq}")
            for child in self._children(path):
                cq = _quota(child.read_text())
                if q != -1 and cq > q:
                    raise KernelRefused(f"{path}: quota {q} below child {child} ({cq})")
        elif name == "tasks" and len(value.split()) != 1:
            raise KernelRefused(f"{path}: one PID per write")
        elif name == "schemata":
            for line in value.strip().splitlines():
                res = line.split(":", 1)[0].strip()
                if not (path.parent / "info" / res).exists() and not self._resctrl_info(path, res):
                    raise KernelRefused(f"{path}: unknown resource {res!r}")

    @staticmethod
    def _resctrl_info(path: Path, res: str) -> bool:
        for p in [path.parent, *path.parents]:
            if (p / "info").is_dir():
                return (p / "info" / res).is_dir()
        return False

    def write(self, path: Path, value: str) -> None:
        if not path.parent.is_dir():
            raise KernelRefused(f"{path}: no such cgroup")
        self._check(path, value)
        self.log.append((path, value))
        if path.name == "tasks":  # the kernel appends a task; it also leaves its previous group
            self._move_task(path, value.strip())
            return
        path.write_text(value if value.endswith("\n") else value + "\n")

    def _move_task(self, path: Path, pid: str) -> None:
        root = next((p for p in [path.parent, *path.parents] if (p / "info").is_dir()), path.parent)
        for tasks in [root / "tasks", *root.glob("*/tasks")]:
            if tasks != path and tasks.is_file():
                kept = [t for t in tasks.read_text().split() if t != pid]
                tasks.write_text("".join(f"{t}\n" for t in kept))
        have = path.read_text().split() if path.is_file() else []
        if pid not in have:
            have.append(pid)
        path.write_text("".join(f"{t}\n" for t in have))
