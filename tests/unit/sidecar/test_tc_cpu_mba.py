"""Issue 22 §1: tc only over the kernel's default root (and restored), host traffic never shaped, IPv6;
CPU requests as the floor, disjoint CPU jobs, the static CPU manager's exclusive CPUs; MBA in each unit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from qosmos.extender.core.errors import InvalidInput
from qosmos.sidecar.actuators import (
    MBA_AMD_MODE,
    MBA_MBPS_MODE,
    MBA_PERCENT_MODE,
    CgroupV1Cpu,
    ResctrlMba,
    TcHtb,
    TcRefused,
    detect_resctrl,
    htb_commands,
    is_kernel_default,
    mba_value,
)
from qosmos.sidecar.agent import AgentOptions, NodeAgent, build_agent
from qosmos.sidecar.cgroups import CgroupLayout, container_children, parse_cpuset
from qosmos.sidecar.fakes import make_kubelet_tree, make_resctrl_tree
from qosmos.sidecar.fs import FakeKernelFS
from qosmos.sidecar.journal import Journal
from qosmos.sidecar.restore import restore
from qosmos.sidecar.sources import DeclaredBandwidthSource, read_cpu_manager_state
from qosmos.sidecar.state import HtbTarget, MbaTarget, PodInfo
from qosmos.sidecar.strategies import (
    AdaptiveCores,
    ContentionEliminator,
    CpuManagerState,
    cpu_job_targets,
    htb_target,
)

MANAGED = {"qosmos.io/node-agent": "managed"}


def _info(uid: str, role: str, **kw: Any) -> PodInfo:
    return PodInfo(uid=uid, namespace="ns", name=uid, role=role, **kw)


# --------------------------------------------------------------------------- tc


class FakeTc:
    """``tc`` answering ``qdisc show`` with ``root`` (then ours once replaced); records every call."""

    def __init__(self, show: str) -> None:
        self.show, self.calls = show, []

    def __call__(self, args: Sequence[str]) -> Any:
        self.calls.append(list(args))
        out = ""
        if args[:2] == ["qdisc", "show"]:
            out = self.show
        elif args[:2] == ["qdisc", "replace"]:
            self.show = "qdisc htb 50: root refcnt 2 r2q 10 default 0 direct_packets_stat 0\n"
        elif args[:2] == ["qdisc", "del"]:
            self.show = "qdisc noqueue 0: root refcnt 2\n"
        return type("R", (), {"stdout": out, "returncode": 0, "stderr": ""})()


@pytest.mark.parametrize(
    "show",
    [
        "qdisc fq 8001: root refcnt 2 limit 10000p flow_limit 100p\n",  # an admin's fq
        "qdisc htb 1: root refcnt 2 r2q 10 default 0x30\n",  # a CNI's bandwidth shaping
        "qdisc mq 0: root\nqdisc fq 8002: parent :1 limit 10000p\n",  # mq with a tuned child
    ],
)
def test_tc_refuses_a_root_qdisc_that_is_neither_the_kernels_nor_ours(show: str) -> None:
    tc = FakeTc(show)
    act = TcHtb("eth0", tc, Journal())
    with pytest.raises(TcRefused, match="neither the kernel's default nor ours"):
        act.apply(HtbTarget("eth0", 100, ("10.244.0.5",), ()))
    assert [c[:2] for c in tc.calls] == [["qdisc", "show"]]  # looked, changed nothing
    assert act.journal.qdiscs == {}


def test_tc_refusal_is_a_metric_and_an_event_and_the_pass_goes_on(tmp_path: Path) -> None:
    root = make_kubelet_tree(tmp_path / "cg", {"g": ("besteffort", 1)}, "0-3", 1, "cgroupfs")
    tc = FakeTc("qdisc fq 8001: root refcnt 2\n")
    gpu = client.V1Pod(
        metadata=client.V1ObjectMeta(uid="g", name="g", namespace="ns", labels=MANAGED,
                                     annotations={"qosmos.io/job-kind": "training", "qosmos.io/multi-node": "true",
                                                  "qosmos.io/soda-cores": "2"}),
        spec=client.V1PodSpec(containers=[client.V1Container(name="main")]),
        status=client.V1PodStatus(phase="Running", qos_class="BestEffort", pod_ip="10.244.0.5"),
    )  # fmt: skip
    opts = AgentOptions(link_mbit=100, tc_dev="eth0", net_shaping=True)
    agent = NodeAgent("n1", None, CgroupLayout(root, 1, "cgroupfs"), CgroupV1Cpu(FakeKernelFS()),
                      net=TcHtb("eth0", tc), options=opts)  # fmt: skip
    agent.reconcile([gpu])
    agent.reconcile([gpu])
    assert agent.metrics.tc_refused.labels("eth0")._value.get() == 2
    assert agent.events.count(("g", "NetworkShapingRefused", "Warning")) == 1
    assert agent.passes == 2
    d = root / "cpuset" / "kubepods" / "besteffort" / "podg"
    assert {(c / "cpuset.cpus").read_text().strip() for c in container_children(d)} == {"0-1"}  # CPU went on


def test_kernel_default_roots() -> None:
    assert is_kernel_default("qdisc noqueue 0: root refcnt 2 \n")
    assert is_kernel_default(
        "qdisc mq 0: root\nqdisc fq_codel 0: parent :1 limit 10240p\nqdisc ingress ffff: parent ffff:fff1\n"
    )
    assert is_kernel_default("qdisc pfifo_fast 0: root refcnt 2 bands 3\n")
    assert not is_kernel_default("qdisc pfifo 8003: root refcnt 3 limit 1000p\n")
    assert not is_kernel_default("")


def test_host_traffic_is_never_shaped_and_ipv6_pods_are() -> None:
    cmds = htb_commands(HtbTarget("eth0", 1000, ("10.244.0.5", "fd00::5"), ("fd00::6",)))
    text = [" ".join(c) for c in cmds]
    assert text[0].endswith("htb default 0")  # unclassified: HTB's direct queue, no class, no cap
    assert "match ip6 src fd00::5/128 flowid 50:10" in text[-2] and "protocol ipv6" in text[-2]
    assert "match ip6 src fd00::6/128 flowid 50:20" in text[-1]
    assert sum("match ip src 10.244.0.5/32 flowid 50:10" in t for t in text) == 1
    with pytest.raises(InvalidInput, match="pod IP"):
        htb_commands(HtbTarget("eth0", 1000, ("10.0.0.300",), ()))


def test_shaping_is_the_admins_switch_the_annotation_only_asks() -> None:
    gpu = _info("g", "training", ip="10.0.0.5", ips=("10.0.0.5", "fd00::5"), multi_node=True)
    cpu = _info("c", "cpu", ip="10.0.0.6")
    assert htb_target([gpu, cpu], "eth0", 100, enabled=False) is None
    t = htb_target([gpu, cpu], "eth0", 100, enabled=True)
    assert t is not None and t.gpu_ips == ("10.0.0.5", "fd00::5") and t.cpu_ips == ("10.0.0.6",)


def test_tc_records_the_previous_root_and_restore_puts_it_back() -> None:
    tc = FakeTc("qdisc noqueue 0: root refcnt 2\n")
    journal = Journal()
    act = TcHtb("eth0", tc, journal)
    assert act.apply(HtbTarget("eth0", 100, ("10.244.0.5",), ()))
    assert journal.qdiscs == {"eth0": "qdisc noqueue 0: root refcnt 2"}
    report = restore(journal, FakeKernelFS(), tc)
    assert report.ok and tc.calls[-2][:2] == ["qdisc", "del"] and journal.qdiscs == {}


def _can_netns() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "needs ip and tc"
    return None


@pytest.fixture
def netns() -> Iterator[str]:
    """A network namespace with a veth pair (v0, v1), deleted afterwards: nothing on the host changes."""
    why = _can_netns()
    if why:
        pytest.skip(why)
    ns = f"qsm-tc-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        for cmd in (["ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1"],
                    ["ip", "link", "set", "v0", "up"], ["ip", "link", "set", "v1", "up"]):  # fmt: skip
            subprocess.run(["ip", "netns", "exec", ns, *cmd], check=True)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def _tc_in(ns: str) -> Any:
    def run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", ns, "tc", *args], capture_output=True, text=True, check=False)

    return run


def test_real_tc_htb_ipv6_and_a_byte_identical_restore(netns: str) -> None:
    tc = _tc_in(netns)
    before = tc(["qdisc", "show", "dev", "v0"]).stdout
    journal = Journal()
    act = TcHtb("v0", tc, journal)
    assert act.apply(HtbTarget("v0", 100, ("10.244.0.5", "fd00::5"), ("10.244.0.6",)))
    shown = tc(["qdisc", "show", "dev", "v0"]).stdout
    assert "qdisc htb 50: root" in shown and "default 0" in shown
    filters = tc(["filter", "show", "dev", "v0"]).stdout
    assert "protocol ipv6" in filters and "match 00000005/ffffffff at 20" in filters  # fd00::5's last word
    assert "match 0a f40006/ffffffff".replace(" ", "") in filters.replace(" ", "")  # 10.244.0.6
    classes = tc(["class", "show", "dev", "v0"]).stdout
    assert {"50:1", "50:10", "50:20"} == {w for w in classes.split() if w.startswith("50:")}  # no default class
    report = restore(journal, FakeKernelFS(), tc)
    assert report.ok, report.failed
    assert tc(["qdisc", "show", "dev", "v0"]).stdout == before


def test_real_tc_leaves_someone_elses_root_alone(netns: str) -> None:
    tc = _tc_in(netns)
    assert tc(["qdisc", "replace", "dev", "v1", "root", "pfifo", "limit", "500"]).returncode == 0
    before = tc(["qdisc", "show", "dev", "v1"]).stdout
    with pytest.raises(TcRefused):
        TcHtb("v1", tc, Journal()).apply(HtbTarget("v1", 100, ("10.244.0.5",), ()))
    assert restore(Journal(), FakeKernelFS(), tc, devices=["v1"]).ok  # cleanup: not ours, not touched
    assert tc(["qdisc", "show", "dev", "v1"]).stdout == before


# --------------------------------------------------------------------------- CPU


def test_the_request_is_the_floor_of_the_search_and_of_halving() -> None:
    ac = AdaptiveCores(node_cpus=8)
    pod = _info("t", "training", category="CV", request_cores=3.5)  # CV starts at 3; the request says 4
    assert ac.cores(pod) == 4
    tried = [4]
    while (nxt := ac.observe(pod, 50.0 + tried[-1])) is not None:  # utilisation keeps rising
        tried.append(nxt)
    assert min(tried) >= 4
    done = _info("d", "training", best_cores=1, request_cores=2)
    assert ac.cores(done) == 2
    e = ContentionEliminator(has_mba=False, engaged=True)
    (t,) = cpu_job_targets([_info("c", "cpu", limit_cores=4.0, request_cores=3.0)], range(8), e)
    assert len(t.cpus) == 3  # halving 4 would give 2, below the request of 3


def test_cpu_jobs_get_disjoint_cpusets() -> None:
    pods = [_info(f"c{i}", "cpu", limit_cores=2.0) for i in range(3)]
    for engaged in (False, True):
        ts = cpu_job_targets(pods, range(8), ContentionEliminator(False, engaged=engaged))
        sets = [set(t.cpus) for t in ts]
        assert sum(len(s) for s in sets) == len(set().union(*sets))  # no CPU in two jobs
    ts = cpu_job_targets(pods, range(8), ContentionEliminator(False))
    assert [t.cpus for t in ts] == [(6, 7), (4, 5), (2, 3)]  # from the high end


def test_cpu_manager_state_file(tmp_path: Path) -> None:
    f = tmp_path / "cpu_manager_state"
    assert read_cpu_manager_state(f) == CpuManagerState()
    f.write_text(json.dumps({"policyName": "static", "defaultCpuSet": "0,3-7",
                             "entries": {"uid-g": {"main": "1-2"}}, "checksum": 1}))  # fmt: skip
    st = read_cpu_manager_state(f)
    assert st.policy == "static" and st.exclusive == {"uid-g": frozenset({1, 2})}
    assert st.shareable(range(8)) == (0, 3, 4, 5, 6, 7)
    f.write_text(json.dumps({"policyName": "none", "defaultCpuSet": "", "checksum": 1}))
    assert read_cpu_manager_state(f).exclusive == {}
    f.write_text('{"policyName": "static", "entries": [1]}')
    with pytest.raises(InvalidInput, match="entries"):
        read_cpu_manager_state(f)


def test_static_cpu_manager_exclusive_cpus_are_never_given_away(tmp_path: Path) -> None:
    pods = {"g-excl": ("guaranteed", 1), "t": ("besteffort", 1), "c": ("burstable", 1)}
    root = make_kubelet_tree(tmp_path / "cg", pods, "0-7", 1, "cgroupfs")
    layout = CgroupLayout(root, 1, "cgroupfs")
    excl = root / "cpuset" / "kubepods" / "podg-excl"
    for c in container_children(excl):
        (c / "cpuset.cpus").write_text("6-7\n")  # the kubelet's exclusive CPUs for the Guaranteed pod
    state = tmp_path / "cpu_manager_state"
    state.write_text(json.dumps({"policyName": "static", "defaultCpuSet": "0-5",
                                 "entries": {"g-excl": {"main": "6-7"}}}))  # fmt: skip
    before = {p: p.read_text() for p in excl.rglob("*") if p.is_file()}

    def pod(uid: str, kind: str, qos: str, cpu: str | None = None) -> client.V1Pod:
        res = client.V1ResourceRequirements(
            limits={"cpu": cpu} if cpu else None, requests={"cpu": cpu} if cpu else None
        )
        return client.V1Pod(
            metadata=client.V1ObjectMeta(uid=uid, name=uid, namespace="ns", labels=MANAGED,
                                         annotations={"qosmos.io/job-kind": kind}),
            spec=client.V1PodSpec(containers=[client.V1Container(name="main", resources=res)]),
            status=client.V1PodStatus(phase="Running", qos_class=qos),
        )  # fmt: skip

    bw = tmp_path / "bw.json"
    bw.write_text(json.dumps({"bytes_per_second": 9e9, "peak_bytes_per_second": 1e10}))
    opts = AgentOptions(cpu_manager_state=state)
    agent = NodeAgent("n1", None, layout, CgroupV1Cpu(FakeKernelFS()), None, DeclaredBandwidthSource(str(bw)),
                      options=opts)  # fmt: skip
    all_pods = [pod("g-excl", "cpu", "Guaranteed", "2"), pod("t", "training", "BestEffort"),
                pod("c", "cpu", "Burstable")]  # fmt: skip
    agent.reconcile(all_pods)
    assert {p: p.read_text() for p in excl.rglob("*") if p.is_file()} == before  # left alone
    for uid, qos in (("t", "besteffort"), ("c", "burstable")):
        d = layout.pod_dir("cpuset", uid, qos)
        assert d is not None
        for c in container_children(d):
            assert not set(parse_cpuset((c / "cpuset.cpus").read_text())) & {6, 7}


# --------------------------------------------------------------------------- MBA units


@pytest.mark.parametrize(
    ("kind", "mounts", "mode", "value"),
    [
        ("intel", "", MBA_PERCENT_MODE, 50),  # 50 %
        ("amd", "", MBA_AMD_MODE, 256),  # 32 GB/s per domain / (1/8 GB/s)
        ("mbps", "resctrl /sys/fs/resctrl resctrl rw,relatime,mba_MBps 0 0\n", MBA_MBPS_MODE, 30518),  # MiB/s
        ("mbps", "", MBA_MBPS_MODE, 30518),  # the default 2^32-1 says so even without /proc/mounts
    ],
)
def test_mba_values_in_each_unit(tmp_path: Path, kind: str, mounts: str, mode: str, value: int) -> None:
    rdt = make_resctrl_tree(tmp_path / "resctrl", kind=kind)
    m = tmp_path / "mounts"
    m.write_text(mounts)
    info = detect_resctrl(rdt, m)
    assert info.mba and info.mode == mode
    peak = 2 * 64e9  # two domains, 64 GB/s each
    assert mba_value(info, 0.5, peak) == value
    act = ResctrlMba(rdt, FakeKernelFS(), Journal(), info)
    act.apply(MbaTarget("qosmos-cpu-jobs", 50, (1,), peak))
    assert (rdt / "qosmos-cpu-jobs" / "schemata").read_text().strip() == f"MB:0={value};1={value}"
    assert act.throttled()
    act.apply(None)
    top = {"intel": 100, "amd": 2048, "mbps": (1 << 32) - 1}[kind]
    assert (rdt / "qosmos-cpu-jobs" / "schemata").read_text().strip() == f"MB:0={top};1={top}"


def test_absolute_mba_needs_the_peak_and_unrecognised_mba_halves(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text("resctrl /elsewhere resctrl rw,relatime,mba_MBps 0 0\n")  # in a container: another path
    assert detect_resctrl(make_resctrl_tree(tmp_path / "i", kind="intel"), mounts).mode == MBA_MBPS_MODE
    amd = detect_resctrl(make_resctrl_tree(tmp_path / "amd", kind="amd"), tmp_path / "none")
    with pytest.raises(InvalidInput, match="--membw-peak"):
        mba_value(amd, 0.5, None)
    odd = make_resctrl_tree(tmp_path / "odd")
    (odd / "info" / "MB" / "min_bandwidth").write_text("0\n")
    (odd / "schemata").write_text("MB:0=77;1=77\n")  # neither 100 % nor an AMD/MiBps default
    info = detect_resctrl(odd, tmp_path / "none")
    assert not info.mba and "unrecognised" in info.reason
    cg = make_kubelet_tree(tmp_path / "cg", {"c": ("burstable", 1)}, "0-3", 1, "cgroupfs")
    assert not build_agent("n1", None, cg, resctrl_root=odd).eliminator.has_mba
    no_peak = build_agent("n1", None, cg, resctrl_root=tmp_path / "amd")
    assert not no_peak.eliminator.has_mba and no_peak.mba is None  # AMD without --membw-peak: halve
    with_peak = build_agent("n1", None, cg, resctrl_root=tmp_path / "amd", options=AgentOptions(mb_peak=1e11))
    assert with_peak.eliminator.has_mba and with_peak.mba is not None
