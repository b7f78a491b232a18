"""The file writes actuators make, behind one small interface.

:class:`HostFS` writes the real cgroup/resctrl files (one ``write(2)`` per value, as the kernel
wants). :class:`FakeKernelFS` writes into an ordinary directory tree a test builds but refuses
what the kernel would refuse, so ordering bugs fail in unit tests as they would on a node:

* cgroup v1 cpuset: an empty ``cpuset.cpus`` (once tasks exist), a child not within its parent,
  a parent narrowed below one of its children (EINVAL / EBUSY in the kernel);
* cgroup v1 CFS: a child quota above its parent's, or a parent below a child's
  (``tg_cfs_schedulable_down``; -1 means "inherit" and is always allowed in a child);
* cgroup v2 (a directory with ``cgroup.controllers``): ``cpuset.cpus`` exists only where the parent's
  ``cgroup.subtree_control`` enables ``cpuset`` (so a write elsewhere fails, ENOENT); any list is
  accepted and ``cpuset.cpus.effective`` follows, for the directory and every descendant: its own
  list within the parent's effective one, or the parent's when that is empty; ``cpu.max`` takes
  ``max|<quota> <period>`` and is not checked against the parent (v2 clamps, it does not refuse);
  the v1 files (``cpu.cfs_quota_us``) do not exist;
* resctrl: ``tasks`` takes one PID per write; ``schemata`` lines must name known resources;
  removing a group puts its tasks back in the default group.

:class:`JournalFS` wraps either and records each file's original text in the
:class:`~qosmos.sidecar.journal.Journal` before the first write to it (the restore point).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from qosmos.sidecar.cgroups import format_cpuset, parse_cpuset
from qosmos.sidecar.journal import Journal


class KernelRefused(OSError):
    """A write the kernel would reject."""


class FS(Protocol):
    def read(self, path: Path) -> str: ...

    def write(self, path: Path, value: str) -> None: ...

    def mkdir(self, path: Path) -> None: ...

    def rmdir(self, path: Path) -> None: ...


class HostFS:
    """The real files."""

    def read(self, path: Path) -> str:
        return path.read_text()

    def write(self, path: Path, value: str) -> None:
        with open(path, "w") as f:  # one write(2): cgroup files reject partial writes
            f.write(value or "\n")  # "" would be no write(2) at all; v2 reads "\n" as "the parent's"

    def mkdir(self, path: Path) -> None:
        os.mkdir(path)  # the kernel fills in a new cgroup's / resctrl group's files

    def rmdir(self, path: Path) -> None:
        os.rmdir(path)  # resctrl: the group's tasks go back to the default group


@dataclass
class JournalFS:
    """Writes through ``inner``, first recording each file's original text in ``journal`` (once)."""

    inner: FS
    journal: Journal

    def read(self, path: Path) -> str:
        return self.inner.read(path)

    def write(self, path: Path, value: str) -> None:
        if str(path) not in self.journal.files:
            self.journal.remember_file(path, self.inner.read(path))
        self.inner.write(path, value)

    def mkdir(self, path: Path) -> None:
        self.inner.mkdir(path)

    def rmdir(self, path: Path) -> None:
        self.inner.rmdir(path)


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

    @staticmethod
    def _v2(d: Path) -> bool:
        return (d / "cgroup.controllers").is_file()

    def _check_v2(self, path: Path, value: str) -> None:
        name = path.name
        if name == "cpuset.cpus":
            sub = path.parent.parent / "cgroup.subtree_control"
            if self._v2(path.parent.parent) and not (sub.is_file() and "cpuset" in sub.read_text().split()):
                raise KernelRefused(f"{path}: no such file (cpuset not in the parent's cgroup.subtree_control)")
            parse_cpuset(value)
        elif name == "cpu.max":
            words = value.split()
            if len(words) not in (1, 2) or not (words[0] == "max" or words[0].isdigit()):
                raise KernelRefused(f"{path}: {value!r} is not 'max|<quota> [<period>]'")
        elif name.startswith("cpu.cfs_") or name == "tasks":
            raise KernelRefused(f"{path}: no such file on cgroup v2")

    def _effective_v2(self, d: Path) -> None:
        """Recompute ``cpuset.cpus.effective`` of ``d`` and its descendants (v2's inheritance)."""
        parent_eff = d.parent / "cpuset.cpus.effective"
        inherited = set(parse_cpuset(parent_eff.read_text())) if parent_eff.is_file() else set()
        own = set(parse_cpuset((d / "cpuset.cpus").read_text())) if (d / "cpuset.cpus").is_file() else set()
        eff = (own & inherited if inherited else own) or inherited
        if eff and (d / "cpuset.cpus.effective").is_file():
            (d / "cpuset.cpus.effective").write_text(format_cpuset(eff) + "\n")
        for c in sorted(d.iterdir()):
            if c.is_dir() and (c / "cpuset.cpus.effective").is_file():
                self._effective_v2(c)

    def _check(self, path: Path, value: str) -> None:
        name = path.name
        if self._v2(path.parent):
            self._check_v2(path, value)
            return
        if name == "cpuset.cpus":  # v1 semantics
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
        if path.name == "cpuset.cpus" and self._v2(path.parent):
            self._effective_v2(path.parent)

    def mkdir(self, path: Path) -> None:
        """A new resctrl group: the kernel gives it every resource at its default value and no tasks."""
        root = path.parent
        if not (root / "info").is_dir():
            raise KernelRefused(f"{path}: not in a resctrl mount")
        path.mkdir()
        # every resource at its default control value: the (untouched) default group's, in the fakes
        (path / "schemata").write_text((root / "schemata").read_text())
        (path / "tasks").write_text("")

    def rmdir(self, path: Path) -> None:
        """Removing a resctrl group puts its tasks back in the default group (as the kernel does)."""
        root = path.parent
        tasks = (path / "tasks").read_text().split() if (path / "tasks").is_file() else []
        have = (root / "tasks").read_text().split() if (root / "tasks").is_file() else []
        (root / "tasks").write_text("".join(f"{t}\n" for t in [*have, *[t for t in tasks if t not in have]]))
        shutil.rmtree(path)

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
