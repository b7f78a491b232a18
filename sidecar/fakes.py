"""Directory trees laid out like a kubelet's cgroups and a resctrl mount, for tests.

Used with :class:`~qosmos.sidecar.fs.FakeKernelFS` (which refuses what the kernel refuses) by the
unit tests, and by the node tests for resctrl (the test VM has no RDT).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CID = "{:064x}"  # container IDs: 64 hex digits


def container_id(i: int) -> str:
    return CID.format(i)


def make_v1_tree(root: Path, pods: dict[str, tuple[str, int]], cpus: str = "0-3") -> Path:
    """``root/{cpuset,cpu,cpuacct}/kubepods[/<qos>]/pod<uid>/<cid>`` with cpus, quotas and tasks.

    ``pods``: uid -> (qos class, number of containers); task IDs are 1000 * pod index + container.
    """
    for ctrl in ("cpuset", "cpu", "cpuacct"):
        (root / ctrl).mkdir(parents=True, exist_ok=True)
    (root / "cpuset" / "cpuset.cpus").write_text(cpus + "\n")
    (root / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")

    def node(ctrl: str, d: Path, tasks: list[int] | None = None) -> None:
        d.mkdir(parents=True, exist_ok=True)
        if ctrl == "cpuset":
            (d / "cpuset.cpus").write_text(cpus + "\n")
            (d / "tasks").write_text("".join(f"{t}\n" for t in tasks or []))
        elif ctrl == "cpu":
            (d / "cpu.cfs_quota_us").write_text("-1\n")
            (d / "cpu.cfs_period_us").write_text("100000\n")
            (d / "cpu.stat").write_text("nr_periods 10\nnr_throttled 3\nthrottled_time 5000000\n")
        else:
            (d / "cpuacct.usage").write_text("2000000000\n")

    for ctrl in ("cpuset", "cpu", "cpuacct"):
        kp = root / ctrl / "kubepods"
        node(ctrl, kp)
        for q in ("burstable", "besteffort"):
            node(ctrl, kp / q)
        for i, (uid, (qos, n)) in enumerate(sorted(pods.items())):
            pd = kp / f"pod{uid}" if qos == "guaranteed" else kp / qos / f"pod{uid}"
            node(ctrl, pd)
            for c in range(n):
                node(ctrl, pd / container_id(1000 * (i + 1) + c), [1000 * (i + 1) + c])
    return root


def make_resctrl_tree(root: Path, domains: tuple[str, ...] = ("0", "1"), mbm: bool = True, kind: str = "intel") -> Path:
    """A resctrl mount with MBA (and MBM when ``mbm``) as the kernel lays it out.

    ``kind``: ``intel`` (percent: min_bandwidth 10, bandwidth_gran 10, default MB 100), ``amd``
    (1/8 GB/s units: min_bandwidth 0, bandwidth_gran 1, default MB 2048) or ``mbps`` (mounted with
    mba_MBps: default MB 2^32 - 1, the info files as on Intel)."""
    lo, gran, top = {"intel": (10, 10, 100), "amd": (0, 1, 2048), "mbps": (10, 10, (1 << 32) - 1)}[kind]
    (root / "info" / "MB").mkdir(parents=True)
    (root / "info" / "L3").mkdir(parents=True)
    (root / "info" / "MB" / "min_bandwidth").write_text(f"{lo}\n")
    (root / "info" / "MB" / "bandwidth_gran").write_text(f"{gran}\n")
    (root / "info" / "MB" / "delay_linear").write_text("1\n" if kind != "amd" else "0\n")
    (root / "schemata").write_text(
        "L3:" + ";".join(f"{d}=fff" for d in domains) + "\nMB:" + ";".join(f"{d}={top}" for d in domains) + "\n"
    )
    (root / "tasks").write_text("1\n2\n3\n")
    if mbm:
        (root / "info" / "L3_MON").mkdir(parents=True)
        (root / "info" / "L3_MON" / "mon_features").write_text("llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n")
        for d in domains:
            m = root / "mon_data" / f"mon_L3_{int(d):02d}"
            m.mkdir(parents=True)
            (m / "mbm_total_bytes").write_text("0\n")
    return root


def _uid_(uid: str) -> str:
    return uid.replace("-", "_")


def kubelet_pod_path(uid: str, qos: str, driver: str) -> str:
    """Where the kubelet puts a pod (below the hierarchy), spelled out independently of ``cgroups.py``."""
    if driver == "cgroupfs":
        return f"kubepods/pod{uid}" if qos == "guaranteed" else f"kubepods/{qos}/pod{uid}"
    if qos == "guaranteed":
        return f"kubepods.slice/kubepods-pod{_uid_(uid)}.slice"
    return f"kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{_uid_(uid)}.slice"


def make_kubelet_tree(
    root: Path,
    pods: dict[str, tuple[str, int]],
    cpus: str = "0-3",
    version: int = 2,
    driver: str = "systemd",
    subtree_control: str = "cpuset cpu io memory pids",
) -> Path:
    """A kubelet cgroup tree for any of the four layouts (v1/v2 x cgroupfs/systemd).

    ``pods``: uid -> (qos class, number of containers); container IDs and their single task are
    ``1000 * (pod index + 1) + container``; container cgroups are ``cri-containerd-<id>.scope``
    under systemd. v2 files: cgroup.controllers, cpuset.cpus (empty: the parent's) and
    cpuset.cpus.effective, cpu.max, cpu.stat (usage_usec...), cgroup.threads, and in every
    non-leaf directory ``cgroup.subtree_control`` (``subtree_control``: the controllers it enables
    for its children; without ``cpuset`` the children have no ``cpuset.cpus``, as with a systemd that
    does not delegate it).
    """
    kp = "kubepods.slice" if driver == "systemd" else "kubepods"
    qos_dirs = (
        ["kubepods-burstable.slice", "kubepods-besteffort.slice"]
        if driver == "systemd"
        else ["burstable", "besteffort"]
    )
    dirs: list[tuple[str, list[int]]] = [("", []), (kp, []), *[(f"{kp}/{q}", []) for q in qos_dirs]]
    for i, (uid, (qos, n)) in enumerate(sorted(pods.items())):
        pod = kubelet_pod_path(uid, qos, driver)
        dirs.append((pod, []))
        for c in range(n):
            cid = container_id(1000 * (i + 1) + c)
            dirs.append(
                (f"{pod}/{cid if driver == 'cgroupfs' else f'cri-containerd-{cid}.scope'}", [1000 * (i + 1) + c])
            )
    if version == 1:
        for rel, tasks in dirs:
            for ctrl in ("cpuset", "cpu", "cpuacct"):
                d = root / ctrl / rel
                d.mkdir(parents=True, exist_ok=True)
                if ctrl == "cpuset":
                    (d / "cpuset.cpus").write_text(cpus + "\n")
                    (d / "tasks").write_text("".join(f"{t}\n" for t in tasks))
                elif ctrl == "cpu":
                    (d / "cpu.cfs_quota_us").write_text("-1\n")
                    (d / "cpu.cfs_period_us").write_text("100000\n")
                    (d / "cpu.stat").write_text("nr_periods 10\nnr_throttled 3\nthrottled_time 5000000\n")
                else:
                    (d / "cpuacct.usage").write_text("2000000000\n")
        return root
    leaves = {rel for rel, tasks in dirs if tasks}
    for rel, tasks in dirs:
        d = root / rel
        d.mkdir(parents=True, exist_ok=True)
        parent_enables = (root / rel).parent / "cgroup.subtree_control"
        (d / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
        if rel not in leaves:
            (d / "cgroup.subtree_control").write_text(subtree_control + "\n")
        if not rel or "cpuset" in parent_enables.read_text().split():
            (d / "cpuset.cpus").write_text("\n" if rel else cpus + "\n")
        (d / "cpuset.cpus.effective").write_text(cpus + "\n")
        (d / "cpu.max").write_text("max 100000\n")
        (d / "cpu.stat").write_text("usage_usec 2000000\nnr_periods 10\nnr_throttled 3\nthrottled_usec 5000\n")
        (d / "cgroup.threads").write_text("".join(f"{t}\n" for t in tasks))
    return root


def v1_pod(
    uid: str,
    ann: dict[str, str],
    qos: str,
    limit: str | None = None,
    request: str | None = None,
    labels: dict[str, str] | None = None,
) -> Any:
    """A Running pod as the kubernetes client returns it (one container ``main`` with these CPU limit and
    request), managed by the agent unless ``labels`` say otherwise."""
    from kubernetes import client
    from qosmos.sidecar.state import MANAGED_LABEL, MANAGED_VALUE

    res = client.V1ResourceRequirements(
        limits={"cpu": limit} if limit else None, requests={"cpu": request} if request else None
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            uid=uid,
            name=uid,
            namespace="ns",
            annotations=ann,
            labels={MANAGED_LABEL: MANAGED_VALUE} if labels is None else labels,
        ),
        spec=client.V1PodSpec(containers=[client.V1Container(name="main", resources=res)]),
        status=client.V1PodStatus(phase="Running", qos_class=qos, pod_ip="10.244.0.9"),
    )
