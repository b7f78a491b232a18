"""The agent on every kubelet cgroup layout: v1 and v2 (this VM has only v1), cgroupfs and systemd drivers.

Fake trees laid out as the kubelet does (paths spelled out in ``fakes.kubelet_pod_path``, not taken
from ``cgroups.py``), written through :class:`FakeKernelFS`; the files are read back directly.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from kubernetes import client
from qosmos.extender.core.errors import InvalidInput
from qosmos.predictors.soda_cpu import plateau_curve
from qosmos.sidecar.actuators import ResctrlMba, make_actuator
from qosmos.sidecar.agent import AgentOptions, NodeAgent
from qosmos.sidecar.cgroups import detect_layout, parse_cpuset
from qosmos.sidecar.fakes import container_id, kubelet_pod_path, make_kubelet_tree, make_resctrl_tree
from qosmos.sidecar.fs import FakeKernelFS
from qosmos.sidecar.sources import DeclaredBandwidthSource, DeclaredGpuSource
from qosmos.sidecar.state import BEST_CORES_ANNOTATION

T_UID, C_UID, U_UID = "aaaa-1111-train", "bbbb-2222-cpujob", "cccc-3333-unmanaged"
PODS = {T_UID: ("besteffort", 1), C_UID: ("burstable", 2), U_UID: ("guaranteed", 1)}
MANAGED = {"qosmos.io/node-agent": "managed"}


def _pod(uid: str, labels: dict[str, str], ann: dict[str, str], qos: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(uid=uid, name=uid, namespace="ns", labels=labels, annotations=ann),
        spec=client.V1PodSpec(containers=[client.V1Container(name="main")]),
        status=client.V1PodStatus(phase="Running", qos_class=qos, pod_ip="10.244.0.9"),
    )


def _containers(root: Path, version: int, driver: str, uid: str, ctrl: str) -> list[Path]:
    index = sorted(PODS).index(uid)
    base = (root / ctrl if version == 1 else root) / kubelet_pod_path(uid, PODS[uid][0], driver)
    names = [container_id(1000 * (index + 1) + c) for c in range(PODS[uid][1])]
    return [base / (n if driver == "cgroupfs" else f"cri-containerd-{n}.scope") for n in names]


def _cpus_text(root: Path, version: int, driver: str, uid: str) -> set[str]:
    return {(d / "cpuset.cpus").read_text().strip() for d in _containers(root, version, driver, uid, "cpuset")}


def _quota_text(root: Path, version: int, driver: str, uid: str) -> set[str]:
    name = "cpu.cfs_quota_us" if version == 1 else "cpu.max"
    return {(d / name).read_text().strip() for d in _containers(root, version, driver, uid, "cpu")}


@pytest.mark.parametrize(("version", "driver"), [(1, "cgroupfs"), (1, "systemd"), (2, "cgroupfs"), (2, "systemd")])
def test_agent_on_every_kubelet_layout(tmp_path: Path, version: int, driver: str) -> None:
    root = make_kubelet_tree(tmp_path / "cgroup", PODS, "0-3", version, driver)
    layout = detect_layout(root)  # driver "auto"
    assert (layout.version, layout.driver) == (version, driver)
    mark = (U_UID, U_UID.replace("-", "_"))
    unmanaged = sorted((p, p.read_text()) for p in root.rglob("*") if p.is_file() and any(m in str(p) for m in mark))
    assert len(unmanaged) >= 8
    pods = [
        _pod(T_UID, MANAGED, {"qosmos.io/job-kind": "training", "qosmos.io/model-category": "CV"}, "BestEffort"),
        _pod(C_UID, MANAGED, {"qosmos.io/job-kind": "cpu"}, "Burstable"),
        _pod(U_UID, {}, {}, "Guaranteed"),
    ]
    gpu, bw = tmp_path / "gpu.json", tmp_path / "bw.json"
    bw.write_text(json.dumps({"bytes_per_second": 1e9, "peak_bytes_per_second": 1e10}))
    rdt = make_resctrl_tree(tmp_path / "resctrl")
    now = [0.0]
    agent = NodeAgent(
        "n1", None, layout, make_actuator("cpu", f"cgroup-v{version}", fs=FakeKernelFS()),
        DeclaredGpuSource(str(gpu)), DeclaredBandwidthSource(str(bw)), mba=ResctrlMba(rdt, FakeKernelFS()),
        options=AgentOptions(step_seconds=5, warmup_seconds=1), clock=lambda: now[0],
    )  # fmt: skip
    assert agent.node_cpus == (0, 1, 2, 3)
    curve = plateau_curve(2)
    for _ in range(100):
        (n,) = {len(parse_cpuset(t)) for t in _cpus_text(root, version, driver, T_UID)}  # what it really has
        gpu.write_text(json.dumps({f"ns/{T_UID}": curve(n)}))
        agent.reconcile(pods)
        now[0] += 1
        if pods[0].metadata.annotations.get(BEST_CORES_ANNOTATION):
            break
    assert pods[0].metadata.annotations[BEST_CORES_ANNOTATION] == "2"
    assert _cpus_text(root, version, driver, T_UID) == {"0-1"}
    assert _quota_text(root, version, driver, T_UID) == ({"200000"} if version == 1 else {"200000 100000"})
    pod_dir = (root / "cpu" if version == 1 else root) / kubelet_pod_path(T_UID, "besteffort", driver)
    pod_quota = (pod_dir / ("cpu.cfs_quota_us" if version == 1 else "cpu.max")).read_text().strip()
    assert pod_quota == ("-1" if version == 1 else "max 100000")  # the pod level stays the kubelet's

    # contention with MBA: both container cgroups' threads (v1 tasks, v2 cgroup.threads) in the one group
    bw.write_text(json.dumps({"bytes_per_second": 9e9, "peak_bytes_per_second": 1e10}))
    agent.reconcile(pods)
    assert sorted((rdt / "qosmos-cpu-jobs" / "tasks").read_text().split()) == ["2000", "2001"]
    usage = agent.metrics.usage.labels("ns", T_UID)._value.get()
    assert usage == 2.0  # v1 cpuacct.usage (ns), v2 cpu.stat usage_usec (µs)
    assert sorted((p, p.read_text()) for p, _ in unmanaged) == unmanaged  # never touched


def _narrow_view(host: Path, view: Path, version: int, driver: str) -> list[str]:
    """What the chart mounts (helm/qosmos/templates/nodeagent.yaml): only the kubepods subtree of each
    controller the agent uses, at the same path; the rest of the hierarchy is not there."""
    kp = "kubepods.slice" if driver == "systemd" else "kubepods"
    subtrees = [f"{c}/{kp}" for c in ("cpuset", "cpu", "cpuacct")] if version == 1 else [kp]
    for rel in subtrees:
        shutil.copytree(host / rel, view / rel)
    return subtrees


@pytest.mark.parametrize(("version", "driver"), [(1, "cgroupfs"), (1, "systemd"), (2, "cgroupfs"), (2, "systemd")])
def test_agent_with_only_the_kubepods_subtrees_mounted(tmp_path: Path, version: int, driver: str) -> None:
    """The layout, the node's CPUs, a pod's cgroups, its start cores and its usage, all from the kubepods
    subtrees alone (no hierarchy root, no cgroup.controllers at the top)."""
    host = make_kubelet_tree(tmp_path / "host", PODS, "0-3", version, driver)
    view = tmp_path / "view"
    _narrow_view(host, view, version, driver)
    layout = detect_layout(view)
    assert (layout.version, layout.driver) == (version, driver)
    train = _pod(T_UID, MANAGED, {"qosmos.io/job-kind": "training", "qosmos.io/model-category": "CV"}, "BestEffort")
    agent = NodeAgent("n1", None, layout, make_actuator("cpu", f"cgroup-v{version}", fs=FakeKernelFS()),
                      cpu_online=tmp_path / "absent")  # fmt: skip
    assert agent.node_cpus == (0, 1, 2, 3)  # the kubepods cpuset, not the root's
    agent.reconcile([train])
    assert _cpus_text(view, version, driver, T_UID) == {"0-2"}  # N_start of CV: 3 cores (§V-B-1)
    assert agent.metrics.usage.labels("ns", T_UID)._value.get() == 2.0  # v1: cpuacct's own subtree


def test_node_cpus_fall_back_to_the_online_cpus(tmp_path: Path) -> None:
    """v2 where the kubepods slice has no cpuset files (cpuset not enabled there) and the root is not
    mounted: the node's CPUs from /sys/devices/system/cpu/online."""
    host = make_kubelet_tree(tmp_path / "host", PODS, "0-3", 2, "systemd", subtree_control="cpu io memory pids")
    view = tmp_path / "view"
    _narrow_view(host, view, 2, "systemd")
    for f in (view / "kubepods.slice").glob("cpuset.cpus*"):
        f.unlink()
    online = tmp_path / "online"
    online.write_text("0-5\n")
    layout = detect_layout(view)
    cpu = make_actuator("cpu", "cgroup-v2", fs=FakeKernelFS())
    assert NodeAgent("n1", None, layout, cpu, cpu_online=online).node_cpus == (0, 1, 2, 3, 4, 5)
    with pytest.raises(InvalidInput, match="absent"):
        NodeAgent("n1", None, layout, cpu, cpu_online=tmp_path / "absent")
