"""Per-pod shaping on each pod's host-side veth (issue 22 §1: "shape per pod on the pod's host-side
veth where the CNI gives one instead of the NIC's root"): discovery, the caps, tc on real veths."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.sidecar.actuators import TcRefused, TcVeth, ifb_name, veth_commands
from qosmos.sidecar.fs import FakeKernelFS
from qosmos.sidecar.journal import Journal
from qosmos.sidecar.netdev import host_veth, parse_links, peer_index
from qosmos.sidecar.restore import restore
from qosmos.sidecar.state import PodInfo, VethTarget
from qosmos.sidecar.strategies import veth_caps


def _r(out: str = "", rc: int = 0) -> Any:
    return type("R", (), {"stdout": out, "returncode": rc, "stderr": "boom" if rc else ""})()


POD_LINKS = (
    "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT\\    link/loopback 00:00\n"
    "3: eth0@if12: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT\\    link/ether\n"
)
HOST_LINKS = (
    "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536\\    link/loopback\n"
    "2: ens4: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1460\\    link/ether\n"
    "12: veth4a1b2c3d@if3: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 master cni0\\    link/ether\n"
)


def test_discovery_reads_the_peer_index_inside_and_the_name_outside() -> None:
    assert parse_links(HOST_LINKS)[2] == (12, "veth4a1b2c3d", "if3")
    calls: list[list[str]] = []

    def runner(argv: Sequence[str]) -> Any:
        calls.append(list(argv))
        return _r(POD_LINKS if argv[0] == "nsenter" else HOST_LINKS)

    assert peer_index(4242, runner) == 12 and calls[0][:3] == ["nsenter", "-t", "4242"]
    assert host_veth(4242, runner) == "veth4a1b2c3d"
    assert host_veth(1, lambda a: _r(HOST_LINKS if a[0] == "ip" else "1: lo: <LOOPBACK>\n")) is None  # no veth
    assert host_veth(1, lambda a: _r("", 1)) is None  # the process is gone


def _pod(uid: str, role: str, multi: bool = False) -> PodInfo:
    return PodInfo(uid=uid, name=uid, namespace="default", role=role, multi_node=multi)


def test_cpu_job_pods_share_the_cpu_part_only_while_a_multi_node_gpu_job_runs() -> None:
    gpu = _pod("g", "training", multi=True)
    pods = [gpu, _pod("c1", "cpu"), _pod("c2", "cpu"), _pod("i", "inference")]
    assert veth_caps(pods, 1000) == {"c1": 125, "c2": 125}  # 25 % of 1000, two ways
    assert veth_caps([_pod("g", "training"), _pod("c1", "cpu")], 1000) == {}  # nobody asked
    assert veth_caps(pods, 1000, enabled=False) == {} and veth_caps(pods, 0) == {}
    assert veth_caps([gpu], 1000) == {}


class FakeTc:
    """tc on fake veths: qdisc show per device from ``shows``; records calls."""

    def __init__(self, shows: dict[str, str]) -> None:
        self.shows, self.calls = dict(shows), []
        self.filters: dict[str, str] = {}
        self.ifbs: dict[str, str] = {}  # ifb -> its tbf rate
        self.links: list[list[str]] = []

    def ip(self, argv: Sequence[str]) -> Any:
        self.links.append(list(argv))
        if argv[:3] == ["ip", "link", "del"]:
            return _r() if self.ifbs.pop(argv[3], None) is not None else _r("", 1)
        return _r()

    def __call__(self, args: Sequence[str]) -> Any:
        a = list(args)
        self.calls.append(a)
        dev = a[3] if len(a) > 3 else ""
        if a[:2] == ["qdisc", "show"]:
            return _r(self.shows[dev]) if dev in self.shows else _r("", 1)
        if a[:2] == ["filter", "show"]:
            return _r(self.filters.get(dev, ""))
        if a[:2] == ["qdisc", "replace"] and "tbf" in a and dev.startswith("qsm"):
            self.ifbs[dev] = a[a.index("rate") + 1]
        elif a[:2] == ["qdisc", "replace"] and "tbf" in a:
            self.shows[dev] = f"qdisc tbf 50: root refcnt 2 rate {a[a.index('rate') + 1]}\n"
        elif a[:2] == ["qdisc", "replace"] and "ingress" in a:
            self.shows[dev] += "qdisc ingress ffff: parent ffff:fff1 ----------------\n"
        elif a[:2] == ["filter", "replace"]:
            self.filters[dev] = "filter parent ffff: protocol all pref 50 u32 chain 0\n"
        elif a[:2] == ["qdisc", "del"] and "ingress" in a:
            self.shows[dev] = "".join(ln + "\n" for ln in self.shows[dev].splitlines() if "ingress" not in ln)
            self.filters.pop(dev, None)
        elif a[:2] == ["qdisc", "del"]:
            self.shows[dev] = "qdisc noqueue 0: root refcnt 2\n" + "".join(
                ln + "\n" for ln in self.shows[dev].splitlines() if "ingress" in ln
            )
        return _r()


def test_caps_are_applied_changed_removed_and_restored() -> None:
    tc = FakeTc({"vethA": "qdisc noqueue 0: root refcnt 2\n", "vethB": "qdisc noqueue 0: root refcnt 2\n"})
    journal = Journal()
    act = TcVeth(tc, journal, tc.ip)
    done = act.apply(VethTarget((("vethA", 100), ("vethB", 100))))
    assert len(done) == 2 and set(journal.qdiscs) == {"vethA", "vethB"}
    assert "tbf 50:" in tc.shows["vethA"] and "ingress ffff:" in tc.shows["vethA"]
    assert tc.ifbs == {ifb_name("vethA"): "100mbit", ifb_name("vethB"): "100mbit"}  # what the pods send
    assert ["ip", "link", "add", ifb_name("vethA"), "type", "ifb"] in tc.links and len(ifb_name("vethA")) <= 15
    assert act.apply(VethTarget((("vethA", 100), ("vethB", 100)))) == []  # unchanged: no tc call
    done = act.apply(VethTarget((("vethA", 50),)))
    assert done[-1] == "tc vethA: pod capped at 50 Mbit/s both ways" and f"ip {ifb_name('vethB')}: removed" in done
    assert tc.shows["vethB"] == "qdisc noqueue 0: root refcnt 2\n" and set(tc.ifbs) == {ifb_name("vethA")}
    report = restore(journal, FakeKernelFS(), tc, ip=tc.ip)
    assert report.ok, report.failed
    assert tc.shows["vethA"] == "qdisc noqueue 0: root refcnt 2\n" and journal.qdiscs == {} and tc.ifbs == {}


def test_someone_elses_qdisc_on_a_veth_is_left_alone() -> None:
    cni_ingress = "qdisc noqueue 0: root refcnt 2\nqdisc ingress ffff: parent ffff:fff1 ----------------\n"
    tc = FakeTc(
        {"vethA": "qdisc tbf 1: root refcnt 2 rate 10Mbit\n", "vethB": cni_ingress, "vethC": "qdisc noqueue 0: root\n"}
    )
    act = TcVeth(tc, Journal(), tc.ip)
    with pytest.raises(TcRefused, match=r"vethA.*vethB"):
        act.apply(VethTarget((("vethA", 10), ("vethB", 10), ("vethC", 10))))
    assert "tbf 1:" in tc.shows["vethA"] and tc.shows["vethB"] == cni_ingress
    assert "tbf 50:" in tc.shows["vethC"]  # the others are still capped
    with pytest.raises(InvalidInput):
        veth_commands("vethC", 0)


# ---- on real veths in network namespaces (root): nothing on the host changes ----------------------


@pytest.fixture
def pod_netns() -> Iterator[tuple[str, int]]:
    """A "host" namespace H with veth vh0 whose peer is eth0 in a "pod" namespace P with a process."""
    if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("tc") and shutil.which("nsenter")):
        pytest.skip("needs root, ip, tc and nsenter")
    tag = uuid.uuid4().hex[:6]
    host, pod = f"qsm-h-{tag}", f"qsm-p-{tag}"
    for ns in (host, pod):
        subprocess.run(["ip", "netns", "add", ns], check=True)
    proc = None
    try:
        subprocess.run(["ip", "netns", "exec", host, "ip", "link", "add", "vh0", "type", "veth", "peer", "name",
                        "eth0", "netns", pod], check=True)  # fmt: skip
        subprocess.run(["ip", "netns", "exec", host, "ip", "link", "set", "vh0", "up"], check=True)
        subprocess.run(["ip", "netns", "exec", pod, "ip", "link", "set", "eth0", "up"], check=True)
        proc = subprocess.Popen(["ip", "netns", "exec", pod, "sleep", "120"])
        yield host, proc.pid
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        for ns in (pod, host):
            subprocess.run(["ip", "netns", "del", ns], check=False)


def _in(ns: str, prefix: Sequence[str] = ()) -> Any:
    def run(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", ns, *prefix, *args], capture_output=True, text=True, check=False)

    return run


def test_real_veth_found_capped_both_ways_and_restored_byte_identical(pod_netns: tuple[str, int]) -> None:
    host, pid = pod_netns
    assert host_veth(pid, _in(host)) == "vh0"
    tc = _in(host, ["tc"])
    before = tc(["qdisc", "show", "dev", "vh0"]).stdout
    journal = Journal()
    links_before = _in(host)(["ip", "-o", "link", "show"]).stdout
    assert TcVeth(tc, journal, _in(host)).apply(VethTarget((("vh0", 40),)))
    shown = tc(["qdisc", "show", "dev", "vh0"]).stdout
    assert "qdisc tbf 50: root" in shown and "rate 40Mbit" in shown and "qdisc ingress ffff:" in shown
    redirect = tc(["filter", "show", "dev", "vh0", "ingress"]).stdout
    assert "pref 50" in redirect and f"Egress Redirect to device {ifb_name('vh0')}" in redirect
    assert "rate 40Mbit" in tc(["qdisc", "show", "dev", ifb_name("vh0")]).stdout
    report = restore(journal, FakeKernelFS(), tc, ip=_in(host))
    assert report.ok, report.failed
    assert tc(["qdisc", "show", "dev", "vh0"]).stdout == before
    assert _in(host)(["ip", "-o", "link", "show"]).stdout == links_before  # our ifb is gone too
