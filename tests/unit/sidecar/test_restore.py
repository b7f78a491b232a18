"""Issue 22 §1: every change recorded before it is made, and restored on SIGTERM / ``qosmos sidecar cleanup``.

On trees the tests build: cgroup v1 and v2 (systemd and cgroupfs), resctrl. Byte-identical means every
file of the tree reads as before (v2's ``cpuset.cpus.effective`` included: the fake kernel recomputes it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from qosmos.predictors.soda_cpu import plateau_curve
from qosmos.sidecar.actuators import ResctrlMba, make_actuator
from qosmos.sidecar.agent import AgentOptions, NodeAgent
from qosmos.sidecar.cgroups import detect_layout, parse_cpuset
from qosmos.sidecar.fakes import kubelet_pod_path, make_kubelet_tree, make_resctrl_tree, v1_pod
from qosmos.sidecar.fs import FakeKernelFS, JournalFS
from qosmos.sidecar.journal import Journal, state_path
from qosmos.sidecar.restore import restore
from qosmos.sidecar.sources import DeclaredBandwidthSource, DeclaredGpuSource
from typer.testing import CliRunner

T_UID, C_UID, D_UID = "aaaa-1111-train", "bbbb-2222-cpujob", "dddd-4444-cpujob"
PODS = {T_UID: ("besteffort", 1), C_UID: ("burstable", 2), D_UID: ("burstable", 1)}


PODSPECS = [
    v1_pod(T_UID, {"qosmos.io/job-kind": "training", "qosmos.io/model-category": "CV"}, "BestEffort"),
    v1_pod(C_UID, {"qosmos.io/job-kind": "cpu"}, "Burstable", "4", "1"),
    v1_pod(D_UID, {"qosmos.io/job-kind": "cpu"}, "Burstable", "2", "1"),
]


def snapshot(*roots: Path) -> dict[str, str]:
    return {str(p): p.read_text() for r in roots for p in sorted(r.rglob("*")) if p.is_file()}


def _agent(
    root: Path, version: int, tmp: Path, journal: Journal, now: list[float], rdt: Path | None = None
) -> NodeAgent:
    layout = detect_layout(root)
    raw = FakeKernelFS()
    cpu = make_actuator("cpu", f"cgroup-v{version}", fs=JournalFS(raw, journal))
    mba = ResctrlMba(rdt, FakeKernelFS(), journal) if rdt else None
    return NodeAgent("n1", None, layout, cpu, DeclaredGpuSource(str(tmp / "gpu.json")),
                     DeclaredBandwidthSource(str(tmp / "bw.json")), mba=mba,
                     options=AgentOptions(step_seconds=3, warmup_seconds=0), clock=lambda: now[0],
                     journal=journal, fs=raw)  # fmt: skip


def _bw(tmp: Path, ratio: float) -> None:
    (tmp / "bw.json").write_text(json.dumps({"bytes_per_second": ratio * 1e10, "peak_bytes_per_second": 1e10}))


def _drive(agent: NodeAgent, tmp: Path, now: list[float], passes: int) -> list[str]:
    """Passes with a §V-B curve whose best fit is 2 cores and the throttle engaged."""
    curve, out = plateau_curve(2), []
    for _ in range(passes):
        (tmp / "gpu.json").write_text(json.dumps({"*": curve(3)}))
        out += agent.reconcile(PODSPECS)
        now[0] += 1
    return out


@pytest.mark.parametrize(("version", "driver"), [(1, "cgroupfs"), (1, "systemd"), (2, "cgroupfs"), (2, "systemd")])
def test_cleanup_puts_every_file_back_byte_for_byte(tmp_path: Path, version: int, driver: str) -> None:
    root = make_kubelet_tree(tmp_path / "cgroup", PODS, "0-3", version, driver)
    before = snapshot(root)
    journal, now = Journal.load(state_path(tmp_path / "state")), [0.0]
    agent = _agent(root, version, tmp_path, journal, now)
    _bw(tmp_path, 0.9)
    actions = _drive(agent, tmp_path, now, 8)
    assert any("cpuset" in a for a in actions) and snapshot(root) != before
    assert (tmp_path / "state" / "state.json").is_file()  # on disk before the changes
    report = agent.cleanup()
    assert report.ok and report.restored
    assert snapshot(root) == before
    assert journal.empty() and not (tmp_path / "state" / "state.json").exists()
    again = agent.cleanup()  # idempotent
    assert again.ok and again.restored == [] and snapshot(root) == before


def test_a_restarted_agent_never_records_its_own_changes_as_the_originals(tmp_path: Path) -> None:
    root = make_kubelet_tree(tmp_path / "cgroup", PODS, "0-3", 1, "cgroupfs")
    before = snapshot(root)
    state = state_path(tmp_path / "state")
    now = [0.0]
    _bw(tmp_path, 0.9)
    _drive(_agent(root, 1, tmp_path, Journal.load(state), now), tmp_path, now, 3)  # then "killed"
    changed = snapshot(root)
    assert changed != before
    second = _agent(root, 1, tmp_path, Journal.load(state), now)  # loads the first one's journal
    _bw(tmp_path, 0.5)  # released: the second agent writes the same files again
    _drive(second, tmp_path, now, 8)
    from qosmos.cli import app

    r = CliRunner().invoke(app, ["sidecar", "cleanup", "--state-dir", str(tmp_path / "state")])
    assert r.exit_code == 0, r.output
    assert snapshot(root) == before  # the kubelet's values, not the first agent's
    r = CliRunner().invoke(app, ["sidecar", "cleanup", "--state-dir", str(tmp_path / "state")])
    assert r.exit_code == 0 and "nothing to restore" in r.output


def test_a_corrupt_state_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text('{"version": 1, "files": [1]}')
    from qosmos.cli import app

    r = CliRunner().invoke(app, ["sidecar", "cleanup", "--state-dir", str(tmp_path)])
    assert r.exit_code == 2 and "files" in r.output and "Traceback" not in r.output


def test_mba_tasks_go_back_to_the_group_they_came_from(tmp_path: Path) -> None:
    root = make_kubelet_tree(tmp_path / "cgroup", PODS, "0-3", 1, "cgroupfs")
    rdt = make_resctrl_tree(tmp_path / "resctrl")
    other = rdt / "someone-elses"
    other.mkdir()
    (other / "schemata").write_text("L3:0=fff;1=fff\nMB:0=70;1=70\n")
    (other / "tasks").write_text("2001\n")  # one CPU-job thread was in another group before
    (rdt / "tasks").write_text("1\n2\n2000\n3000\n")
    before = snapshot(root, rdt)
    journal, now = Journal(), [0.0]
    agent = _agent(root, 1, tmp_path, journal, now, rdt)
    _bw(tmp_path, 0.9)
    _drive(agent, tmp_path, now, 2)
    ours = rdt / "qosmos-cpu-jobs"
    assert sorted((ours / "tasks").read_text().split()) == ["2000", "2001", "3000"]
    assert journal.tasks == {"2000": str(rdt), "2001": str(other), "3000": str(rdt)}
    _bw(tmp_path, 0.5)  # released in normal operation: each task back where it came from
    _drive(agent, tmp_path, now, 1)
    assert (other / "tasks").read_text().split() == ["2001"] and journal.tasks == {}
    _bw(tmp_path, 0.9)
    _drive(agent, tmp_path, now, 1)
    report = restore(journal, FakeKernelFS())  # SIGTERM while throttled: group removed too
    assert report.ok and not ours.exists()
    assert snapshot(root, rdt) == before


def test_a_task_whose_group_is_gone_goes_to_the_default_group(tmp_path: Path) -> None:
    rdt = make_resctrl_tree(tmp_path / "resctrl")
    gone = rdt / "gone"
    ours = rdt / "qosmos-cpu-jobs"
    ours.mkdir()
    (ours / "schemata").write_text("MB:0=50;1=50\n")
    (ours / "tasks").write_text("77\n")
    j = Journal(tasks={"77": str(gone)}, groups=[str(ours)])
    assert restore(j, FakeKernelFS()).ok
    assert "77" in (rdt / "tasks").read_text().split() and not ours.exists() and j.empty()


def test_v2_without_cpuset_delegated_sets_only_the_quota(tmp_path: Path) -> None:
    """systemd not enabling cpuset in kubepods.slice's cgroup.subtree_control: no cpuset.cpus below it."""
    root = make_kubelet_tree(tmp_path / "cgroup", PODS, "0-3", 2, "systemd", subtree_control="cpu io memory pids")
    pod = root / kubelet_pod_path(C_UID, "burstable", "systemd")
    assert not (pod / "cpuset.cpus").exists()
    before = snapshot(root)
    journal, now = Journal(), [0.0]
    agent = _agent(root, 2, tmp_path, journal, now)
    _bw(tmp_path, 0.9)
    _drive(agent, tmp_path, now, 2)
    kids = [d for d in pod.iterdir() if d.is_dir()]
    assert {(d / "cpu.max").read_text().strip() for d in kids} == {"200000 100000"}  # halved: 2 of 4
    assert agent.metrics.errors.labels("cpu")._value.get() == 0
    assert agent.cleanup().ok and snapshot(root) == before


SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from kubernetes import client
    from qosmos.sidecar.actuators import make_actuator
    from qosmos.sidecar.agent import AgentOptions, NodeAgent
    from qosmos.sidecar.cgroups import detect_layout
    from qosmos.sidecar.cli import stop_on_signals
    from qosmos.sidecar.fs import FakeKernelFS, JournalFS
    from qosmos.sidecar.journal import Journal, state_path
    from qosmos.sidecar.sources import DeclaredBandwidthSource

    root, tmp = Path(sys.argv[1]), Path(sys.argv[2])
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(uid=sys.argv[3], name="job", namespace="ns",
                                     labels={"qosmos.io/node-agent": "managed"},
                                     annotations={"qosmos.io/job-kind": "cpu"}),
        spec=client.V1PodSpec(containers=[client.V1Container(name="main")]),
        status=client.V1PodStatus(phase="Running", qos_class="Burstable"),
    )
    journal = Journal.load(state_path(tmp / "state"))
    raw = FakeKernelFS()
    agent = NodeAgent("n1", None, detect_layout(root), make_actuator("cpu", "cgroup-v2", fs=JournalFS(raw, journal)),
                      None, DeclaredBandwidthSource(str(tmp / "bw.json")), options=AgentOptions(interval=0.05),
                      journal=journal, fs=raw, pod_source=lambda: [pod])
    stop = stop_on_signals()
    report = agent.run(stop.is_set, wait=stop.wait)
    print(json.dumps({"restored": len(report.restored), "failed": report.failed}))
    """
)


def test_sigterm_restores_the_node(tmp_path: Path) -> None:
    """The real signal, in a real process: the agent throttles, gets SIGTERM, and exits with the tree as before."""
    root = make_kubelet_tree(tmp_path / "cgroup", {C_UID: ("burstable", 1)}, "0-3", 2, "systemd")
    before = snapshot(root)
    _bw(tmp_path, 0.9)
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(root), str(tmp_path), C_UID],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    child = next(d for d in (root / kubelet_pod_path(C_UID, "burstable", "systemd")).iterdir() if d.is_dir())
    deadline = time.monotonic() + 60
    while (child / "cpuset.cpus").read_text().strip() != "2-3" and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    assert (child / "cpuset.cpus").read_text().strip() == "2-3"  # halved by the running agent
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    doc: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    assert doc["failed"] == [] and doc["restored"] >= 2
    assert snapshot(root) == before


def test_restore_narrows_children_before_their_parent(tmp_path: Path) -> None:
    """The kubelet had the training pod on CPU 1 only; the agent widened it to 3 CPUs: putting it back
    narrows the containers first (the other order is refused, EBUSY, by the v1 kernel)."""
    root = make_kubelet_tree(tmp_path / "cgroup", PODS, "0-3", 1, "cgroupfs")
    pod = root / "cpuset" / kubelet_pod_path(T_UID, "besteffort", "cgroupfs")
    for f in [pod / "cpuset.cpus", *(d / "cpuset.cpus" for d in pod.iterdir() if d.is_dir())]:
        f.write_text("1\n")
    before = snapshot(root)
    journal, now = Journal(), [0.0]
    agent = _agent(root, 1, tmp_path, journal, now)
    _bw(tmp_path, 0.1)
    _drive(agent, tmp_path, now, 1)
    assert (pod / "cpuset.cpus").read_text().strip() == "0-2"  # CV: 3 cores
    assert agent.cleanup().ok
    assert snapshot(root) == before


def test_fake_v2_kernel_rules(tmp_path: Path) -> None:
    root = make_kubelet_tree(tmp_path / "on", {C_UID: ("burstable", 1)}, "0-3", 2, "systemd")
    pod = root / kubelet_pod_path(C_UID, "burstable", "systemd")
    child = next(d for d in pod.iterdir() if d.is_dir())
    fs = FakeKernelFS()
    fs.write(pod / "cpuset.cpus", "1-3")
    fs.write(child / "cpuset.cpus", "0-1")  # v2 takes a list outside the parent's: effective is the overlap
    assert (child / "cpuset.cpus.effective").read_text().strip() == "1"
    fs.write(child / "cpuset.cpus", "\n")  # empty: the parent's
    assert (child / "cpuset.cpus.effective").read_text().strip() == "1-3"
    with pytest.raises(OSError, match="cfs"):
        fs.write(child / "cpu.cfs_quota_us", "100000")  # no v1 files on v2
    off = make_kubelet_tree(tmp_path / "off", {C_UID: ("burstable", 1)}, "0-3", 2, "systemd", "cpu memory")
    pod = off / kubelet_pod_path(C_UID, "burstable", "systemd")
    with pytest.raises(OSError, match="subtree_control"):
        fs.write(pod / "cpuset.cpus", "1")


def test_a_journal_read_where_the_cgroups_are_not_is_not_forgotten(tmp_path: Path) -> None:
    """Run with the host elsewhere than the agent saw it: the entries stay (and fail), they are not dropped
    as if their pods were gone; a deleted pod's entries are dropped."""
    root = make_kubelet_tree(tmp_path / "cgroup", PODS, "0-3", 1, "cgroupfs")
    deleted = root / "cpuset" / "kubepods" / "burstable" / "podgone" / "cpuset.cpus"
    j = Journal(files={"/nowhere/cpuset/kubepods/podx/cpuset.cpus": "0-3\n", str(deleted): "0-3\n"})
    report = restore(j, FakeKernelFS())
    assert not report.ok and "not found" in report.failed[0]
    assert list(j.files) == ["/nowhere/cpuset/kubepods/podx/cpuset.cpus"]


# --------------------------------------------------------------------------- the real kernel (cgroup v1)

V1 = Path("/sys/fs/cgroup")


def _real_v1_unsupported() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if (V1 / "cgroup.controllers").is_file() or not (V1 / "cpuset" / "cpuset.cpus").is_file():
        return "needs a cgroup v1 cpuset hierarchy at /sys/fs/cgroup/cpuset"
    if not (V1 / "cpu" / "cpu.cfs_quota_us").is_file():
        return "needs the v1 cpu controller at /sys/fs/cgroup/cpu"
    return None


@pytest.fixture
def real_v1_tree() -> Any:
    """A kubelet-like tree (cgroupfs driver) in the host's real v1 cpuset and cpu hierarchies, under a
    parent of its own (the kubelet's --cgroup-root), with one sleeping task per container; all removed after."""
    why = _real_v1_unsupported()
    if why:
        pytest.skip(why)
    parent = f"qosmos-test-{os.getpid()}"
    cpus = (V1 / "cpuset" / "cpuset.cpus").read_text().strip()
    mems = (V1 / "cpuset" / "cpuset.mems").read_text().strip()
    pods = {T_UID: "besteffort", C_UID: "besteffort"}
    made: list[Path] = []
    procs: list[subprocess.Popen[bytes]] = []

    def mkdir(d: Path) -> None:
        d.mkdir()
        made.append(d)
        if d.is_relative_to(V1 / "cpuset"):
            (d / "cpuset.cpus").write_text(cpus)
            (d / "cpuset.mems").write_text(mems)

    try:
        for ctrl in ("cpuset", "cpu"):
            base = V1 / ctrl / parent
            for d in (base, base / "kubepods", base / "kubepods" / "besteffort"):
                mkdir(d)
            for i, (uid, qos) in enumerate(sorted(pods.items())):
                mkdir(base / "kubepods" / qos / f"pod{uid}")
                mkdir(base / "kubepods" / qos / f"pod{uid}" / f"{i + 1:064x}")
        for i, (uid, qos) in enumerate(sorted(pods.items())):
            p = subprocess.Popen(["sleep", "300"])
            procs.append(p)
            for ctrl in ("cpuset", "cpu"):
                (V1 / ctrl / parent / "kubepods" / qos / f"pod{uid}" / f"{i + 1:064x}" / "tasks").write_text(str(p.pid))
        yield parent, len(parse_cpuset(cpus))
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for d in reversed(made):
            for _ in range(50):  # a killed task leaves its cgroup a moment later
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)


def test_real_v1_cgroups_throttled_then_restored_byte_for_byte(real_v1_tree: Any, tmp_path: Path) -> None:
    """The host's kernel, not the fake: halving and a finished search written in the order the kernel
    takes, then SIGTERM's restore, and every cpuset/CFS file reads as before."""
    parent, n = real_v1_tree
    if n < 2:
        pytest.skip("one CPU cannot be halved")
    from qosmos.sidecar.cgroups import CgroupLayout
    from qosmos.sidecar.fs import HostFS

    layout = CgroupLayout(V1, 1, "cgroupfs", parent)
    names = ("cpuset.cpus", "cpu.cfs_quota_us", "cpu.cfs_period_us")

    def files() -> dict[str, str]:
        return {str(f): f.read_text() for c in ("cpuset", "cpu") for nm in names
                for f in sorted((V1 / c / parent).rglob(nm))}  # fmt: skip

    before = files()
    journal = Journal.load(state_path(tmp_path / "state"))
    pods = [
        v1_pod(T_UID, {"qosmos.io/job-kind": "training", "qosmos.io/soda-cores": "1"}, "BestEffort"),
        v1_pod(C_UID, {"qosmos.io/job-kind": "cpu"}, "BestEffort"),
    ]
    _bw(tmp_path, 0.9)
    agent = NodeAgent("n1", None, layout, make_actuator("cpu", "cgroup-v1", fs=JournalFS(HostFS(), journal)),
                      None, DeclaredBandwidthSource(str(tmp_path / "bw.json")), journal=journal, fs=HostFS())  # fmt: skip
    actions = agent.reconcile(pods)
    assert any("cpuset" in a for a in actions) and agent.metrics.errors.labels("cpu")._value.get() == 0
    assert files() != before
    report = agent.run(lambda: True)  # SIGTERM before another pass: straight to the restore
    assert report is not None and report.ok, report.failed
    assert files() == before
