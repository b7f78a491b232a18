"""Undo everything the journal lists: ``qosmos sidecar cleanup`` and the agent's SIGTERM path.

* cgroup files back to their original text: cpusets in two passes (widen every one to old ∪ original,
  parents first; then narrow to the original, children first: every write valid, as in
  :mod:`~qosmos.sidecar.actuators`), then the other files (quota, period, ``cpu.max``) retried until
  no write succeeds any more (a v1 child quota must stay within its parent's, so the order matters);
* each task the agent moved into its resctrl group back to the group it came from (the default group
  when that one is gone), then the agent's groups removed;
* on each device the agent shaped, its HTB root deleted: the kernel attaches its default root qdisc
  again, which is the only kind the agent ever replaces (it refuses any other); the result is
  compared with the recorded line.

Entries restored (or whose cgroup / task is gone) leave the journal; failures stay for the next try.
Running it twice does nothing the second time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qosmos.sidecar.actuators import (
    HTB_HANDLE,
    has_ingress,
    ifb_name,
    is_ours,
    remove_veth_cap,
    root_qdisc,
    run_ip,
    run_tc,
)
from qosmos.sidecar.cgroups import format_cpuset, parse_cpuset
from qosmos.sidecar.fs import FS, HostFS
from qosmos.sidecar.journal import Journal

log = logging.getLogger("qosmos.sidecar")


@dataclass
class RestoreReport:
    restored: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


def _depth(p: str) -> int:
    return len(Path(p).parts)


def _normal(text: str) -> str:
    return text.strip()


def _original(text: str) -> str:
    """What to write back: the text as it was read (the kernel strips the newline; a plain file keeps it)."""
    return text if text.strip() else "\n"


def _restore_files(journal: Journal, fs: FS, report: RestoreReport) -> None:
    live = {p: t for p, t in journal.files.items() if Path(p).is_file()}
    for p in set(journal.files) - set(live):
        if _pod_gone(Path(p)):
            del journal.files[p]  # the cgroup is gone with its pod: nothing to restore
        else:  # not even the kubepods folder: the cgroup file system is elsewhere than the agent saw it
            report.failed.append(f"{p}: not found (is the cgroup root where the agent had it?)")
    cpusets = sorted((p for p in live if Path(p).name == "cpuset.cpus"), key=_depth)
    done: set[str] = set()
    for p in cpusets:  # 1. widen, parents first: a child is never outside its parent
        try:
            cur, want = set(parse_cpuset(fs.read(Path(p)))), set(parse_cpuset(live[p]))
            if want and cur and not want <= cur:
                fs.write(Path(p), format_cpuset(cur | want))
        except Exception as e:
            log.warning("restore %s (widening): %s", p, e)
    for p in reversed(cpusets):  # 2. narrow to the original, children first
        try:
            if fs.read(Path(p)) != live[p]:  # as read: the kernel formats both alike
                fs.write(Path(p), _original(live[p]))
            done.add(p)
        except Exception as e:
            report.failed.append(f"{p}: {e}")
    rest = sorted((p for p in live if p not in cpusets), key=_depth)
    errors: dict[str, str] = {}
    while rest:  # quotas: each pass writes what the kernel takes now; stop when a pass writes nothing
        left = []
        for p in rest:
            try:
                if fs.read(Path(p)) != live[p]:  # as read: the kernel formats both alike
                    fs.write(Path(p), _original(live[p]))
                done.add(p)
            except Exception as e:
                errors[p] = str(e)
                left.append(p)
        if len(left) == len(rest):
            report.failed += [f"{p}: {errors[p]}" for p in left]
            break
        rest = left
    for p in sorted(done):
        report.restored.append(f"{p} = {_normal(live[p]) or '(empty)'}")
        del journal.files[p]


def _pod_gone(path: Path) -> bool:
    """The file's pod cgroup is gone but the kubelet's tree is there (so the pod was deleted)."""
    return any(a.name in ("kubepods", "kubepods.slice") and a.is_dir() for a in path.parents)


def _tasks(fs: FS, group: Path) -> list[str]:
    f = group / "tasks"
    return fs.read(f).split() if f.is_file() else []


def _restore_resctrl(journal: Journal, fs: FS, report: RestoreReport) -> None:
    ours = [Path(g) for g in journal.groups]
    inside = {pid: g for g in ours if g.is_dir() for pid in _tasks(fs, g)}
    back: list[str] = []
    for pid, orig in sorted(journal.tasks.items()):
        if pid not in inside:
            back.append(pid)  # exited, or moved by someone else since: not ours to move
            continue
        dest = Path(orig)
        if not (dest / "tasks").is_file() or dest in ours:
            dest = inside[pid].parent  # its group is gone: the default group
        try:
            fs.write(dest / "tasks", pid)
            report.restored.append(f"resctrl task {pid} -> {dest}")
            back.append(pid)
        except ProcessLookupError:
            back.append(pid)
        except Exception as e:
            report.failed.append(f"resctrl task {pid}: {e}")
    journal.forget_tasks(back)
    for g in ours:
        try:
            if g.is_dir():
                fs.rmdir(g)  # any task left (not ours) goes to the default group with it
                report.restored.append(f"resctrl group {g} removed")
            journal.groups.remove(str(g))
        except Exception as e:
            report.failed.append(f"resctrl group {g}: {e}")


def _restore_qdiscs(
    journal: Journal,
    runner: Callable[[Sequence[str]], Any],
    devices: Iterable[str],
    report: RestoreReport,
    ip: Callable[[Sequence[str]], Any],
) -> None:
    for dev in sorted(set(journal.qdiscs) | set(devices)):
        before = journal.qdiscs.get(dev)
        show = runner(["qdisc", "show", "dev", dev])
        if getattr(show, "returncode", 0):  # the device is gone (a pod's veth with its pod): its ifb may remain
            if not getattr(ip(["ip", "link", "del", ifb_name(dev)]), "returncode", 0):
                report.restored.append(f"ip {ifb_name(dev)}: removed (its veth was gone)")
            journal.qdiscs.pop(dev, None)
            continue
        text = getattr(show, "stdout", "") or ""
        if has_ingress(text):  # a per-pod cap's redirect and ifb (when ours); its tbf root goes below
            report.restored += remove_veth_cap(dev, runner, ip, root=False)
        if is_ours(root_qdisc(text)):
            r = runner(["qdisc", "del", "dev", dev, "root", "handle", f"{HTB_HANDLE}:"])
            if getattr(r, "returncode", 0):
                report.failed.append(f"tc {dev}: {getattr(r, 'stderr', '').strip()}")
                continue
            now = root_qdisc(getattr(runner(["qdisc", "show", "dev", dev]), "stdout", "") or "")
            report.restored.append(f"tc {dev}: HTB removed, root qdisc now {now!r}")
            if before is not None and _qdisc_key(now) != _qdisc_key(before):
                report.failed.append(f"tc {dev}: root qdisc {now!r} is not the recorded {before!r}")
                continue
        journal.qdiscs.pop(dev, None)


def _qdisc_key(line: str) -> list[str]:
    """A root qdisc line without its reference count (which counts users, not configuration)."""
    words = line.split()
    out, skip = [], False
    for w in words:
        if skip:
            skip = False
            continue
        if w == "refcnt":
            skip = True
            continue
        out.append(w)
    return out


def restore(
    journal: Journal,
    fs: FS | None = None,
    tc: Callable[[Sequence[str]], Any] = run_tc,
    devices: Iterable[str] = (),
    ip: Callable[[Sequence[str]], Any] = run_ip,
) -> RestoreReport:
    """Restore every journal entry (see the module docstring); ``devices``: also remove our HTB there;
    ``ip`` runs the ``ip`` command lines that remove the ifb devices of per-pod caps."""
    fs = fs or HostFS()
    report = RestoreReport()
    _restore_files(journal, fs, report)
    _restore_resctrl(journal, fs, report)
    _restore_qdiscs(journal, tc, devices, report, ip)
    journal.save()
    for line in report.restored:
        log.info("restored %s", line)
    for line in report.failed:
        log.warning("not restored: %s", line)
    return report
