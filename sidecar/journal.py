"""The restore point: what the agent changed on the node and what it was before, in a file on the node.

Every change goes through here first: the original text of a cgroup file before the agent's first
write to it, the resctrl group each task came from before the agent moved it, the resctrl groups the
agent created, and each device's root qdisc (as ``tc qdisc show dev X`` printed it) before the agent
put its own there. An entry is recorded once, before the change, and saved (write to a temporary file,
``fsync``, rename) before the change is made; a restarted agent loads the file, so it never records its
own changes as the originals. ``qosmos sidecar cleanup`` and the agent's SIGTERM handler restore every
entry (:mod:`qosmos.sidecar.restore`) and empty the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from qosmos.extender.core.errors import InvalidInput

STATE_FILE = "state.json"
VERSION = 1


@dataclass
class Journal:
    """Originals of everything the agent changed. ``path`` None: kept in memory only (dry runs, tests)."""

    path: Path | None = None
    files: dict[str, str] = field(default_factory=dict)  # cgroup file -> its text before our first write
    tasks: dict[str, str] = field(default_factory=dict)  # PID -> resctrl group directory it came from
    groups: list[str] = field(default_factory=list)  # resctrl groups we created
    qdiscs: dict[str, str] = field(default_factory=dict)  # device -> its root qdisc line before ours

    @classmethod
    def load(cls, path: Path | None) -> Journal:
        """The journal in ``path`` (a fresh one when the file is not there yet)."""
        j = cls(path)
        if path is None or not path.is_file():
            return j
        try:
            doc = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise InvalidInput(f"state file {path} line {e.lineno}", "", e.msg) from None
        if not isinstance(doc, dict) or doc.get("version") != VERSION:
            raise InvalidInput(f"state file {path} field version", doc.get("version") if isinstance(doc, dict) else doc,
                               f"expected {VERSION}")  # fmt: skip
        for name, kind in (("files", dict), ("tasks", dict), ("groups", list), ("qdiscs", dict)):
            v = doc.get(name, kind())
            if not isinstance(v, kind):
                raise InvalidInput(f"state file {path} field {name}", type(v).__name__, f"expected {kind.__name__}")
            setattr(j, name, v)
        return j

    def empty(self) -> bool:
        return not (self.files or self.tasks or self.groups or self.qdiscs)

    def save(self) -> None:
        """Write the file (atomically); with nothing left to restore, remove it."""
        if self.path is None:
            return
        if self.empty():
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"version": VERSION, "files": self.files, "tasks": self.tasks, "groups": self.groups,
               "qdiscs": self.qdiscs}  # fmt: skip
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".state.")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f, indent=1, sort_keys=True)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)  # a crash leaves the old file or the new one, never half of one
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)

    # -- recording (each saves before the caller changes anything)

    def remember_file(self, path: Path, original: str) -> None:
        if str(path) not in self.files:
            self.files[str(path)] = original
            self.save()

    def remember_task(self, pid: str, group: Path) -> None:
        if pid not in self.tasks:
            self.tasks[pid] = str(group)
            self.save()

    def remember_group(self, group: Path) -> None:
        if str(group) not in self.groups:
            self.groups.append(str(group))
            self.save()

    def remember_qdisc(self, dev: str, line: str) -> None:
        if dev not in self.qdiscs:
            self.qdiscs[dev] = line
            self.save()

    # -- forgetting (once restored, or once the thing is gone)

    def forget_tasks(self, pids: list[str]) -> None:
        popped = [self.tasks.pop(p, None) for p in pids]  # every one (any() would stop at the first)
        if any(v is not None for v in popped):
            self.save()

    @staticmethod
    def _tree_there(path: Path) -> bool:
        return any(a.name in ("kubepods", "kubepods.slice") and a.is_dir() for a in path.parents)

    def prune_files(self) -> None:
        """Drop files whose cgroup is gone (the pod was deleted: nothing left to restore)."""
        gone = [p for p in self.files if not Path(p).parent.is_dir() and self._tree_there(Path(p))]
        for p in gone:
            del self.files[p]
        if gone:
            self.save()


def state_path(state_dir: Path | None) -> Path | None:
    return None if state_dir is None else state_dir / STATE_FILE
