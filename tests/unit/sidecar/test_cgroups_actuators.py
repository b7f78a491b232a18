"""cgroup paths, the CPU actuator's safe ordering (crash at every write), resctrl MBA and tc HTB."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.sidecar.actuators import (
    ACTUATORS,
    CgroupV1Cpu,
    CgroupV2Cpu,
    DryRun,
    PodCgroups,
    ResctrlMba,
    TcHtb,
    detect_resctrl,
    htb_commands,
    make_actuator,
)
from qosmos.sidecar.cgroups import (
    CgroupLayout,
    container_children,
    detect_layout,
    format_cpuset,
    parse_cpuset,
    pids_of_container,
    pod_dir_from_pids,
    proc_cgroup_path,
)
from qosmos.sidecar.fakes import container_id, make_resctrl_tree
from qosmos.sidecar.fs import FakeKernelFS, KernelRefused
from qosmos.sidecar.state import CpuTarget, HtbTarget, MbaTarget

UID = "0b7d2a4e-1111-2222-3333-444455556666"


def test_cpuset_round_trip_and_never_empty() -> None:
    assert parse_cpuset("0-2,5,7-8\n") == (0, 1, 2, 5, 7, 8)
    assert format_cpuset([8, 7, 5, 0, 1, 2]) == "0-2,5,7-8"
    assert format_cpuset([3]) == "3"
    assert parse_cpuset("") == ()
    with pytest.raises(InvalidInput):
        format_cpuset([])
    with pytest.raises(InvalidInput):
        parse_cpuset("3-1")


@pytest.mark.parametrize(
    ("version", "driver", "qos", "expected"),
    [
        (1, "cgroupfs", "burstable", "cpuset/kubepods/burstable/pod{uid}"),
        (1, "cgroupfs", "guaranteed", "cpuset/kubepods/pod{uid}"),
        (2, "cgroupfs", "besteffort", "kubepods/besteffort/pod{uid}"),
        (1, "systemd", "burstable", "cpuset/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice"),
        (2, "systemd", "guaranteed", "kubepods.slice/kubepods-pod{u}.slice"),
        (2, "systemd", "besteffort", "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice"),
    ],
)
def test_pod_and_container_dirs(tmp_path: Path, version: int, driver: str, qos: str, expected: str) -> None:
    rel = expected.format(uid=UID, u=UID.replace("-", "_"))
    pod = tmp_path / rel
    cid = container_id(7)
    child = pod / (cid if driver == "cgroupfs" else f"cri-containerd-{cid}.scope")
    child.mkdir(parents=True)
    (pod / "not-a-container").mkdir()
    layout = CgroupLayout(tmp_path, version, driver)
    assert layout.pod_dir("cpuset", UID) == pod
    assert layout.pod_dir("cpuset", UID, qos) == pod
    assert layout.pod_dir("cpuset", "other-uid") is None
    assert layout.container_dir(pod, f"containerd://{cid}") == child
    assert container_children(pod) == [child]


def test_detect_layout(tmp_path: Path) -> None:
    (tmp_path / "v1" / "cpuset" / "kubepods").mkdir(parents=True)
    assert detect_layout(tmp_path / "v1") == CgroupLayout(tmp_path / "v1", 1, "cgroupfs")
    (tmp_path / "v2" / "kubepods.slice").mkdir(parents=True)
    (tmp_path / "v2" / "cgroup.controllers").write_text("cpuset cpu\n")
    assert detect_layout(tmp_path / "v2") == CgroupLayout(tmp_path / "v2", 2, "systemd")
    with pytest.raises(InvalidInput, match="cgroup root"):
        detect_layout(tmp_path / "nothing")


def test_proc_cgroup_fallback(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "42").mkdir(parents=True)
    path = f"/kubepods/besteffort/pod{UID}/{container_id(1)}"
    (proc / "42" / "cgroup").write_text(f"5:cpu,cpuacct:{path}\n3:cpuset:{path}\n0::/\n")
    assert proc_cgroup_path(42, "cpuset", proc) == path
    assert proc_cgroup_path(42, "memory", proc) == "/"  # falls back to the unified line
    layout = CgroupLayout(tmp_path / "cg", 1, "cgroupfs")
    (layout.root / "cpuset" / path.lstrip("/")).mkdir(parents=True)
    assert pod_dir_from_pids(layout, "cpuset", [7, 42], proc) == layout.root / "cpuset" / path.lstrip("/")[:-65]
    assert pids_of_container(f"containerd://{container_id(1)}", proc) == [42]
    assert pids_of_container(f"containerd://{container_id(2)}", proc) == []


# --------------------------------------------------------------------------- CPU actuator


def _cgroups(root: Path, uid: str = UID) -> PodCgroups:
    layout = CgroupLayout(root, 1, "cgroupfs")
    d1, d2 = layout.pod_dir("cpuset", uid), layout.pod_dir("cpu", uid)
    assert d1 and d2
    return PodCgroups(d1, d2)


def _all_cpusets(cg: PodCgroups) -> dict[Path, set[int]]:
    return {d: set(parse_cpuset((d / "cpuset.cpus").read_text())) for d in [cg.cpuset, *container_children(cg.cpuset)]}


def _assert_valid(cg: PodCgroups) -> None:
    sets = _all_cpusets(cg)
    parent = set(parse_cpuset((cg.cpuset.parent / "cpuset.cpus").read_text()))
    assert sets[cg.cpuset] and sets[cg.cpuset] <= parent
    for d, s in sets.items():
        assert s, f"{d} empty"
        assert s <= sets[cg.cpuset], f"{d} outside its pod"


def test_fake_kernel_refuses_what_the_kernel_refuses(v1_tree: Callable[..., Path]) -> None:
    cg = _cgroups(v1_tree({UID: ("burstable", 2)}))
    fs = FakeKernelFS()
    child = container_children(cg.cpuset)[0]
    with pytest.raises(KernelRefused, match="EBUSY"):
        fs.write(cg.cpuset / "cpuset.cpus", "0")  # parent narrowed below its children
    fs.write(child / "cpuset.cpus", "0")
    with pytest.raises(KernelRefused, match="parent"):
        fs.write(container_children(cg.cpuset)[1] / "cpuset.cpus", "5")
    with pytest.raises(KernelRefused, match="empty"):
        fs.write(child / "cpuset.cpus", "")
    fs.write(cg.cpu / "cpu.cfs_quota_us", "100000")
    with pytest.raises(KernelRefused, match="above parent"):
        fs.write(container_children(cg.cpu)[0] / "cpu.cfs_quota_us", "200000")


@pytest.mark.parametrize(
    ("steps", "final"),
    [
        ([(0,)], (0,)),  # shrink
        ([(0,), (0, 1, 2, 3)], (0, 1, 2, 3)),  # shrink then grow
        ([(0, 1), (2, 3)], (2, 3)),  # move to disjoint CPUs
        ([(1, 2), (0,), (3,), (0, 1, 2)], (0, 1, 2)),
    ],
)
def test_cpu_actuator_orders_writes_like_the_kernel_needs(
    v1_tree: Callable[..., Path], steps: list[tuple[int, ...]], final: tuple[int, ...]
) -> None:
    cg = _cgroups(v1_tree({UID: ("burstable", 2)}))
    act = CgroupV1Cpu(FakeKernelFS())
    for cpus in steps:
        actions = act.apply(CpuTarget(UID, "ns/p", cpus, float(len(cpus))), cg)
        assert actions and "cpuset" in actions[0]
        _assert_valid(cg)
    assert all(s == set(final) for s in _all_cpusets(cg).values())
    quota = len(final) * 100_000
    assert act.read_quota(cg.cpu) == -1  # the pod level stays the kubelet's
    assert all(act.read_quota(d) == quota for d in container_children(cg.cpu))
    assert act.apply(CpuTarget(UID, "ns/p", final, float(len(final))), cg) == []  # idempotent


class CrashAfter(FakeKernelFS):
    """Dies (like a SIGKILL) after ``n`` successful writes."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def write(self, path: Path, value: str) -> None:
        if len(self.log) >= self.n:
            raise SystemExit("killed")
        super().write(path, value)


@pytest.mark.parametrize(("old", "new"), [((0, 1, 2, 3), (1,)), ((0,), (2, 3)), ((0, 1), (1, 2, 3))])
def test_killed_at_any_write_leaves_valid_cpusets_and_a_restart_converges(
    v1_tree: Callable[..., Path], old: tuple[int, ...], new: tuple[int, ...]
) -> None:
    root = v1_tree({UID: ("besteffort", 3)})
    cg = _cgroups(root)
    CgroupV1Cpu(FakeKernelFS()).apply(CpuTarget(UID, "p", old, float(len(old))), cg)
    probe = FakeKernelFS()
    snapshot = {p: p.read_text() for p in root.rglob("*") if p.is_file()}
    CgroupV1Cpu(probe).apply(CpuTarget(UID, "p", new, float(len(new))), cg)
    total = len(probe.log)
    assert total >= 4
    for k in range(total + 1):
        for p, text in snapshot.items():
            p.write_text(text)
        with pytest.raises(SystemExit) if k < total else _nullcontext():
            CgroupV1Cpu(CrashAfter(k)).apply(CpuTarget(UID, "p", new, float(len(new))), cg)
        _assert_valid(cg)  # every intermediate state is one the kernel accepted and is non-empty
        CgroupV1Cpu(FakeKernelFS()).apply(CpuTarget(UID, "p", new, float(len(new))), cg)  # the restart
        assert all(s == set(new) for s in _all_cpusets(cg).values())


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: object) -> None:
        return None


def test_cgroup_v2_cpu_max_and_effective(tmp_path: Path) -> None:
    pod = tmp_path / "kubepods" / f"pod{UID}"
    child = pod / container_id(1)
    child.mkdir(parents=True)
    (tmp_path / "kubepods" / "cpuset.cpus.effective").write_text("0-3\n")
    (tmp_path / "kubepods" / "cgroup.controllers").write_text("cpuset cpu\n")
    (tmp_path / "kubepods" / "cgroup.subtree_control").write_text("cpuset cpu\n")
    (pod / "cgroup.subtree_control").write_text("cpuset cpu\n")
    for d in (pod, child):
        (d / "cpuset.cpus").write_text("\n")  # v2: empty means the parent's
        (d / "cpuset.cpus.effective").write_text("0-3\n")
        (d / "cpu.max").write_text("max 100000\n")
        (d / "cgroup.controllers").write_text("cpuset cpu\n")
    act = CgroupV2Cpu(FakeKernelFS())
    act.apply(CpuTarget(UID, "p", (2, 3), 1.5), PodCgroups(pod, pod))
    assert (child / "cpuset.cpus").read_text().strip() == "2-3"
    assert (child / "cpuset.cpus.effective").read_text().strip() == "2-3"  # v2's rule, kept by the fake
    assert (child / "cpu.max").read_text().strip() == "150000 100000"
    assert (pod / "cpu.max").read_text().strip() == "max 100000"
    act.apply(CpuTarget(UID, "p", (2, 3), None), PodCgroups(pod, pod))
    assert (child / "cpu.max").read_text().strip() == "max 100000"


def test_registry_and_dry_run() -> None:
    assert {"cgroup-v1", "cgroup-v2", "dry-run"} <= set(ACTUATORS["cpu"])
    assert {"resctrl", "dry-run"} <= set(ACTUATORS["mba"])
    assert {"tc-htb", "dry-run"} <= set(ACTUATORS["net"])
    dry = make_actuator("cpu", "dry-run")
    assert isinstance(dry, DryRun)
    t = CpuTarget(UID, "p", (0,), 1.0)
    assert dry.apply(t) and dry.apply(t) == []
    with pytest.raises(InvalidInput, match="cpu actuator"):
        make_actuator("cpu", "nope")


# --------------------------------------------------------------------------- resctrl


def test_resctrl_detection(tmp_path: Path) -> None:
    assert not detect_resctrl(tmp_path / "none").mounted
    info = detect_resctrl(make_resctrl_tree(tmp_path / "rdt"))
    assert (info.mounted, info.mba, info.mbm, info.domains) == (True, True, True, ("0", "1"))
    nombm = detect_resctrl(make_resctrl_tree(tmp_path / "rdt2", ("0",), mbm=False))
    assert nombm.mba and not nombm.mbm


def test_resctrl_one_shared_group_schemata_and_tasks(tmp_path: Path) -> None:
    root = make_resctrl_tree(tmp_path / "rdt")
    fs = FakeKernelFS()
    act = ResctrlMba(root, fs)
    acts = act.apply(MbaTarget("qosmos-cpu-jobs", 47, (2, 3)))
    group = root / "qosmos-cpu-jobs"
    assert acts and (group / "schemata").read_text().strip() == "MB:0=50;1=50"  # rounded to the granularity
    assert (group / "tasks").read_text().split() == ["2", "3"]
    assert (root / "tasks").read_text().split() == ["1"]  # moved out of the default group
    assert all(len(v.split()) == 1 for p, v in fs.log if p.name == "tasks")  # one PID per write
    assert act.apply(MbaTarget("qosmos-cpu-jobs", 50, (2, 3))) == []
    act.apply(MbaTarget("qosmos-cpu-jobs", 50, (3,)))
    assert (group / "tasks").read_text().split() == ["3"]
    act.apply(None)
    assert (group / "schemata").read_text().strip() == "MB:0=100;1=100"
    assert sorted((root / "tasks").read_text().split()) == ["1", "2", "3"]
    assert [d.name for d in root.iterdir() if d.is_dir() and d.name not in ("info", "mon_data")] == ["qosmos-cpu-jobs"]


def test_resctrl_without_mba_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="resctrl not mounted"):
        ResctrlMba(tmp_path, FakeKernelFS()).apply(MbaTarget("g", 50, (1,)))
    root = make_resctrl_tree(tmp_path / "rdt")
    shutil.rmtree(root / "info" / "MB")
    with pytest.raises(InvalidInput, match="no info/MB"):
        ResctrlMba(root, FakeKernelFS()).apply(MbaTarget("g", 50, (1,)))


# --------------------------------------------------------------------------- tc


def test_htb_commands_split_and_borrowing() -> None:
    cmds = htb_commands(HtbTarget("veth0", 1000, ("10.244.0.5",), ("10.244.0.6", "10.244.0.7")))
    text = [" ".join(c) for c in cmds]
    assert any("classid 50:10 htb rate 750mbit ceil 1000mbit" in t for t in text)
    assert any("classid 50:20 htb rate 250mbit ceil 1000mbit" in t for t in text)
    assert sum("match ip src 10.244.0.5/32 flowid 50:10" in t for t in text) == 1
    assert sum("flowid 50:20" in t for t in text) == 2
    # no default class: traffic no filter classifies (the host, unmanaged pods) is HTB's direct
    # traffic, never shaped (an earlier version capped it, and so all of the host's egress, at the link)
    assert text[0].endswith("root handle 50: htb default 0")
    assert {c[c.index("classid") + 1] for c in cmds if "classid" in c} == {"50:1", "50:10", "50:20"}
    with pytest.raises(InvalidInput):
        htb_commands(HtbTarget("veth0", 1000, (), (), gpu_share=1.0))


def test_tc_actuator_applies_once_and_removes_only_its_own() -> None:
    calls: list[list[str]] = []
    shown = {"out": "qdisc noqueue 0: root refcnt 2\n"}

    class R:
        def __init__(self, stdout: str = "") -> None:
            self.stdout, self.returncode, self.stderr = stdout, 0, ""

    def runner(args: Sequence[str]) -> R:
        calls.append(list(args))
        return R(shown["out"] if args[:2] == ["qdisc", "show"] else "")

    act = TcHtb("veth0", runner)
    assert act.apply(None) == [] and not any(c[:2] == ["qdisc", "del"] for c in calls)  # not ours: untouched
    t = HtbTarget("veth0", 100, ("10.244.0.5",), ())
    assert act.apply(t) and act.apply(t) == []
    assert sum(c[:2] == ["qdisc", "replace"] for c in calls) == 1
    shown["out"] = "qdisc htb 50: root refcnt 2 r2q 10 default 0 direct_packets_stat 0\n"
    t2 = HtbTarget("veth0", 100, ("10.244.0.5",), ("10.244.0.6",))
    assert act.apply(t2) and sum(c[:2] == ["qdisc", "replace"] for c in calls) == 1  # htb root not "changed"
    assert calls[-1][-1] == "50:20"
    n = len(calls)
    assert act.apply(None) == ["tc veth0: removed HTB"]
    assert calls[-1] == ["qdisc", "del", "dev", "veth0", "root", "handle", "50:"] and len(calls) == n + 2
    # a root left by an older agent (default class 0x10, capping the host's traffic): renewed, not kept
    shown["out"] = "qdisc htb 50: root refcnt 2 r2q 10 default 0x10 direct_packets_stat 0\n"
    calls.clear()
    assert TcHtb("veth0", runner).apply(t2)
    assert calls[1] == ["qdisc", "del", "dev", "veth0", "root", "handle", "50:"]
    assert calls[2][:2] == ["qdisc", "replace"] and calls[2][-2:] == ["default", "0"]


def test_container_quota_never_above_the_pods(v1_tree: Callable[..., Path]) -> None:
    cg = _cgroups(v1_tree({UID: ("guaranteed", 1)}))
    (cg.cpu / "cpu.cfs_quota_us").write_text("150000\n")  # the kubelet's limit: 1.5 CPUs
    act = CgroupV1Cpu(FakeKernelFS())
    act.apply(CpuTarget(UID, "p", (0, 1), 1.0), cg)
    assert [act.read_quota(d) for d in container_children(cg.cpu)] == [100_000]
    act.apply(CpuTarget(UID, "p", (0, 1, 2), 3.0), cg)  # above the pod's: inherit the pod's
    assert [act.read_quota(d) for d in container_children(cg.cpu)] == [-1]
