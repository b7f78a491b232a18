"""The SODA node agent on a real kubelet node: cores of real pods, halving, resctrl, kill/restart, tc HTB."""

from __future__ import annotations

import json
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from qosmos.predictors.soda_cpu import plateau_curve
from qosmos.sidecar.actuators import CgroupV1Cpu, ResctrlMba
from qosmos.sidecar.agent import AgentOptions, NodeAgent
from qosmos.sidecar.cgroups import container_children, detect_layout, parse_cpuset
from qosmos.sidecar.fakes import make_resctrl_tree
from qosmos.sidecar.fs import FakeKernelFS
from qosmos.sidecar.podresources import PodGpus, list_pod_resources
from qosmos.sidecar.sources import DeclaredBandwidthSource
from qosmos.testing.controlplane import free_port
from qosmos.testing.node import CGROUP_ROOT, Node, wait_for

pytestmark = pytest.mark.node

MANAGED = {"qosmos.io/node-agent": "managed"}
# Two busy threads, and a line with the CPUs the pod may use every 0.3 s (read inside the pod).
BUSY = "for i in 1 2; do (while :; do :; done) & done; while :; do grep Cpus_allowed_list /proc/self/status; sleep 0.3; done"


@pytest.fixture
def agent(agent: Callable[..., Any], tmp_path: Path) -> Callable[..., Any]:
    """conftest's agent with its journal (--state-dir) in the test's folder, never on the host's /var/lib."""

    def start(*args: str) -> Any:
        return agent("--state-dir", str(tmp_path / "agent-state"), *args)

    return start


def _cpus(d: Path) -> set[int]:
    return set(parse_cpuset((d / "cpuset.cpus").read_text()))


def container_cpus(node: Node, pod: dict[str, Any]) -> set[int]:
    """The CPUs of the pod's main container cgroup (they all agree once the agent is done)."""
    sets = [frozenset(_cpus(c)) for c in container_children(node.pod_cgroup(pod, "cpuset"))]
    return set(max(sets, key=len)) if len(set(sets)) == 1 else set()


def cpu_stat(node: Node, pod: dict[str, Any]) -> dict[str, int]:
    """cpu.stat summed over the pod's container cgroups (where the agent puts the CFS quota)."""
    out: dict[str, int] = {}
    for c in container_children(node.pod_cgroup(pod, "cpu")):
        for k, v in (ln.split() for ln in (c / "cpu.stat").read_text().splitlines()):
            out[k] = out.get(k, 0) + int(v)
    return out


def container_quota(node: Node, pod: dict[str, Any]) -> set[int]:
    return {CgroupV1Cpu().read_quota(c) for c in container_children(node.pod_cgroup(pod, "cpu"))}


def cpu_rate(node: Node, pod: dict[str, Any], seconds: float = 2.0) -> float:
    """CPUs the pod used over ``seconds`` (cpuacct.usage of its pod cgroup)."""
    f = node.pod_cgroup(pod, "cpuacct") / "cpuacct.usage"
    a, t = int(f.read_text()), time.monotonic()
    time.sleep(seconds)
    return (int(f.read_text()) - a) / 1e9 / (time.monotonic() - t)


def allowed_inside(node: Node, pod: dict[str, Any]) -> str:
    """The last Cpus_allowed_list the pod printed about itself."""
    lines = re.findall(r"Cpus_allowed_list:\s*(\S+)", node.pod_log(pod))
    return lines[-1] if lines else ""


def all_valid(node: Node, pods: list[dict[str, Any]]) -> list[str]:
    """Every cgroup of every pod: a non-empty cpuset within its parent's (problems listed)."""
    bad = []
    for pod in pods:
        pd = node.pod_cgroup(pod, "cpuset")
        parent = _cpus(pd.parent)
        own = _cpus(pd)
        if not own or not own <= parent:
            bad.append(f"{pod['metadata']['name']}: pod cpuset {own} (parent {parent})")
        for c in container_children(pd):
            s = _cpus(c)
            if not s or not s <= own:
                bad.append(f"{pod['metadata']['name']}/{c.name[:12]}: {s} (pod {own})")
    return bad


def node_cpus() -> set[int]:
    return _cpus(CGROUP_ROOT / "cpuset" / "kubepods")


@pytest.fixture
def driver(tmp_path: Path) -> Iterator[Callable[..., threading.Event]]:
    """Background writers of the declared sources the agent reads; stopped after the test."""
    stops: list[threading.Event] = []

    def start(fn: Callable[[], None], every: float = 0.2) -> threading.Event:
        stop = threading.Event()

        def loop() -> None:
            while not stop.is_set():
                fn()
                stop.wait(every)

        threading.Thread(target=loop, daemon=True).start()
        stops.append(stop)
        return stop

    yield start
    for s in stops:
        s.set()


def write_json(path: Path, doc: object) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)  # atomic: the agent never reads half a file


def test_adaptive_cores_on_a_real_pod(node: Node, agent: Any, driver: Any, tmp_path: Path) -> None:
    """§V-B on the node: the search changes a CPU-hungry pod's cores, measured inside the pod and in cpu.stat."""
    cpus = node_cpus()
    if len(cpus) < 2:
        pytest.skip(f"the node has {len(cpus)} CPU: nothing to search over")
    pod = node.run_pod(
        node.pod_manifest(
            "train",
            BUSY,
            labels=MANAGED,
            annotations={"qosmos.io/job-kind": "training", "qosmos.io/model-category": "CV"},
            # Burstable (a fair CPU share on this busy machine, no CFS limit from the kubelet); the request
            # is the search's floor, so one core lets it go down to where the curve plateaus
            cpu_request="1",
        )
    )
    key = "default/train"
    wait_for(lambda: allowed_inside(node, pod), 20, "the pod's first Cpus_allowed_list")
    before_inside, before_stat, before_rate = allowed_inside(node, pod), cpu_stat(node, pod), cpu_rate(node, pod)
    assert set(parse_cpuset(before_inside)) == cpus  # no limit: every CPU of the node
    assert before_stat["nr_periods"] == 0  # no CFS quota yet

    gpu = tmp_path / "gpu.json"
    curve = plateau_curve(1)  # the training job's GPU utilisation stops improving beyond 1 core
    seen: list[int] = []

    def feed() -> None:  # responds to the cores the pod really has now
        n = len(container_cpus(node, pod))
        if n:
            if not seen or seen[-1] != n:
                seen.append(n)
            write_json(gpu, {key: curve(n)})

    driver(feed, 0.1)
    port = free_port()
    a = agent("--gpu-util", str(gpu), "--membw", "none", "--step-seconds", "3", "--warmup-seconds", "0.5",
              "--interval", "0.3", "--metrics-port", str(port))  # fmt: skip

    def annotated() -> str | None:
        p = node.cp.kubectl("get", "pod", "train", "-o", "jsonpath={.metadata.annotations.qosmos\\.io/soda-cores}")
        return p.stdout.strip() or None

    best = wait_for(annotated, 60, f"the search to finish; agent log:\n{a.log()[-3000:]}")
    assert best == "1"
    assert seen[0] == min(3, len(cpus)) and seen[-1] == 1  # CV start point (§V-B-1), clamped to the node
    wait_for(lambda: allowed_inside(node, pod) == "0", 10, "Cpus_allowed_list 0 inside the pod")
    after_rate = cpu_rate(node, pod)
    after = cpu_stat(node, pod)
    # one core's CFS quota is enforced (periods counted) and two busy threads now get one CPU at most
    assert after["nr_periods"] > 0 and after_rate <= 1.05
    assert container_quota(node, pod) == {100_000}
    events = node.cp.kubectl("get", "events", "--field-selector", "reason=CoreSearchDone", "-o", "json").stdout
    msgs = [e["message"] for e in json.loads(events)["items"] if e["involvedObject"]["name"] == "train"]
    assert msgs and re.search(r"done after [1-4] steps: 1 cores", msgs[0])
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'qosmos_sidecar_pod_cpuset_cpus{namespace="default",pod="train"} 1.0' in metrics
    assert re.search(r'qosmos_sidecar_pod_throttled_periods\{namespace="default",pod="train"\} \d', metrics)
    print(f"\n§V-B on the node: tried {seen}, best {best} ({msgs[0]!r}); inside the pod {before_inside} -> "
          f"{allowed_inside(node, pod)}; CPUs used {before_rate:.2f} -> {after_rate:.2f}; cpu.stat "
          f"{before_stat} -> {after}")  # fmt: skip


def test_halve_cores_without_rdt(node: Node, agent: Any, tmp_path: Path) -> None:
    """§V-E fallback on the node (no RDT here): CPU jobs' cores halved above 75 % of peak, restored below."""
    cpus = node_cpus()
    if len(cpus) < 2:
        pytest.skip("one CPU cannot be halved")
    job = node.run_pod(node.pod_manifest("cpujob", BUSY, labels=MANAGED, annotations={"qosmos.io/job-kind": "cpu"}))
    other = node.run_pod(node.pod_manifest("bystander", BUSY))  # not managed: never touched
    bw = tmp_path / "bw.json"
    write_json(bw, {"bytes_per_second": 3e9, "peak_bytes_per_second": 1e10})
    a = agent("--gpu-util", "none", "--membw", str(bw), "--interval", "0.3", "--resctrl-root", str(tmp_path / "no"))
    wait_for(lambda: "cgroup v1" in a.log(), 30, "the agent to start")
    time.sleep(1.5)  # a few passes at 30 % of peak: nothing throttled
    assert container_cpus(node, job) == cpus and "cpujob" not in a.log()
    write_json(bw, {"bytes_per_second": 8e9, "peak_bytes_per_second": 1e10})
    half = set(sorted(cpus)[-((len(cpus) + 1) // 2) :])  # ceil(n/2) from the high end (CPU jobs' side)
    assert 0 < len(half) < len(cpus)
    wait_for(lambda: container_cpus(node, job) == half, 20, f"halved cores; agent log:\n{a.log()[-2000:]}")
    want = ",".join(map(str, sorted(half))) if len(half) == 1 else None
    if want:
        wait_for(lambda: allowed_inside(node, job) == want, 10, "the halved set inside the pod")
    rate = cpu_rate(node, job)
    stat = cpu_stat(node, job)
    assert stat["nr_periods"] > 0 and rate <= len(half) + 0.05, (
        f"{stat} {rate} {container_quota(node, job)}\n{a.log()[-3000:]}"
    )  # quota enforced
    assert container_cpus(node, other) == cpus
    print(f"\nhalving on the node (80 % of peak, no RDT): cpujob {sorted(cpus)} -> {sorted(half)}, inside the pod "
          f"{allowed_inside(node, job)!r}, CPUs used {rate:.2f}, container cpu.stat {stat}")  # fmt: skip
    write_json(bw, {"bytes_per_second": 5e9, "peak_bytes_per_second": 1e10})
    wait_for(lambda: container_cpus(node, job) == cpus, 20, "restored cores")
    assert container_quota(node, job) == {-1}
    assert container_cpus(node, other) == cpus

    def reasons(pod: str) -> list[str]:
        out = node.cp.kubectl("get", "events", "--field-selector", f"involvedObject.name={pod}", "-o", "json").stdout
        return [e["reason"] for e in json.loads(out)["items"] if e["source"].get("component") == "qosmos-sidecar"]

    got = wait_for(lambda: {"ContentionThrottle", "ContentionReleased"} <= set(reasons("cpujob")) and reasons("cpujob"),
                   10, "the contention Events on cpujob")  # fmt: skip
    assert "CpuAdjusted" in got and reasons("bystander") == []  # Events only on managed pods


def test_resctrl_group_gets_the_cpu_jobs_real_threads(node: Node, tmp_path: Path) -> None:
    """MBA against a resctrl tree the test builds (this VM has no RDT), with the node's real pods."""
    steady = "for i in 1 2; do (while :; do :; done) & done; wait"  # no short-lived children: a stable thread set
    job = node.run_pod(node.pod_manifest("mbajob", steady, labels=MANAGED, annotations={"qosmos.io/job-kind": "cpu"}))
    train = node.run_pod(
        node.pod_manifest("mbatrain", steady, labels=MANAGED, annotations={"qosmos.io/job-kind": "training"})
    )
    rdt = make_resctrl_tree(tmp_path / "resctrl")
    bw = tmp_path / "bw.json"
    write_json(bw, {"bytes_per_second": 9e9, "peak_bytes_per_second": 1e10})
    from kubernetes import client

    api = client.CoreV1Api(node.cp.api_client())
    layout = detect_layout(CGROUP_ROOT, "cgroupfs")
    ag = NodeAgent(node.name, api, layout, CgroupV1Cpu(), None, DeclaredBandwidthSource(str(bw)),
                   mba=ResctrlMba(rdt, FakeKernelFS()), options=AgentOptions(interval=0.2))  # fmt: skip
    ag.reconcile()
    threads = sorted(
        int(t) for c in container_children(node.pod_cgroup(job, "cpuset")) for t in (c / "tasks").read_text().split()
    )
    assert len(threads) >= 3  # sh + two busy subshells (+ the pause process)
    group = sorted(int(t) for t in (rdt / "qosmos-cpu-jobs" / "tasks").read_text().split())
    assert group == threads
    assert (rdt / "qosmos-cpu-jobs" / "schemata").read_text().strip() == "MB:0=50;1=50"
    train_threads = {
        t for c in container_children(node.pod_cgroup(train, "cpuset")) for t in (c / "tasks").read_text().split()
    }
    assert not train_threads & {str(t) for t in group}  # only CPU jobs are throttled
    write_json(bw, {"bytes_per_second": 1e9, "peak_bytes_per_second": 1e10})
    ag.reconcile()
    assert (rdt / "qosmos-cpu-jobs" / "tasks").read_text().split() == []
    assert (rdt / "qosmos-cpu-jobs" / "schemata").read_text().strip() == "MB:0=100;1=100"


def test_proc_fallback_finds_the_real_pod_cgroups(node: Node) -> None:
    """A layout that misses the pods (here: the systemd driver on this cgroupfs node) still finds
    them from the container IDs in the pod status, through /proc/<pid>/cgroup."""
    from kubernetes import client

    pod = node.run_pod(node.pod_manifest("lost", "sleep 3600", labels=MANAGED, cpu_request="100m"))
    api = client.CoreV1Api(node.cp.api_client())
    v1pod = api.read_namespaced_pod("lost", "default")
    wrong = detect_layout(CGROUP_ROOT, "systemd")
    assert wrong.pod_dir("cpuset", v1pod.metadata.uid) is None  # the layout alone cannot find it
    ag = NodeAgent(node.name, api, wrong, CgroupV1Cpu())
    cg = ag.pod_cgroups(v1pod)
    assert cg is not None
    assert (cg.cpuset, cg.cpu) == (node.pod_cgroup(pod, "cpuset"), node.pod_cgroup(pod, "cpu"))


def test_agent_killed_mid_adjustment_leaves_valid_cpusets(node: Node, agent: Any, driver: Any, tmp_path: Path) -> None:
    """SIGKILL the agent at random moments while it keeps changing cpusets; every pod stays valid."""
    cpus = node_cpus()
    pods = [
        node.run_pod(node.pod_manifest(f"flip-{i}", BUSY, labels=MANAGED, annotations={"qosmos.io/job-kind": role}))
        for i, role in enumerate(("cpu", "cpu", "training"))
    ]
    bystander = node.run_pod(node.pod_manifest("bystander", BUSY))
    bw, gpu = tmp_path / "bw.json", tmp_path / "gpu.json"
    flip = {"n": 0}

    def feed() -> None:  # contention on/off every 0.2 s: CPU jobs flip between all and half the cores
        flip["n"] += 1
        write_json(bw, {"bytes_per_second": 9e9 if flip["n"] % 2 else 1e9, "peak_bytes_per_second": 1e10})
        write_json(gpu, {"*": random.uniform(10, 90)})

    driver(feed, 0.2)
    args = ("--gpu-util", str(gpu), "--membw", str(bw), "--interval", "0.05", "--step-seconds", "0.2",
            "--warmup-seconds", "0", "--resctrl-root", str(tmp_path / "no"))  # fmt: skip
    rng = random.Random(13)
    kills, changes = 0, set()
    a: Any = None
    for _ in range(12):
        started = a.log().count("cgroup v1") if kills else 0
        a = agent(*args)
        wait_for(lambda: a.log().count("cgroup v1") > started, 30, "the agent to start")  # noqa: B023
        deadline = time.monotonic() + rng.uniform(0.3, 2.0)
        while time.monotonic() < deadline:
            changes.add(frozenset(container_cpus(node, pods[0])))
            time.sleep(0.05)
        a.kill(signal.SIGKILL)
        kills += 1
        assert all_valid(node, [*pods, bystander]) == [], f"after kill {kills}"
    assert len(changes - {frozenset()}) >= 2, (
        f"the agent never changed the cpusets (the kills proved nothing):\n{a.log()[-3000:]}"
    )
    assert container_cpus(node, bystander) == cpus
    for p in pods:
        assert node.wait_pod(p["metadata"]["name"], timeout=5)["status"]["phase"] == "Running"
    a = agent(*args)
    time.sleep(2)
    a.kill(signal.SIGTERM)
    assert all_valid(node, [*pods, bystander]) == []
    print(f"\nkilled the agent {kills} times mid-adjustment; cpusets seen on flip-0: {sorted(map(sorted, changes))}")


# --------------------------------------------------------------------------- network (§V-E)


def iperf(node: Node, pod: str, server: str, port: int, seconds: int) -> subprocess.Popen[str]:
    """iperf3 (Debian's, in the pod's image) from inside ``pod`` to ``server``: JSON on stdout."""
    argv = node.exec_argv(pod, "iperf3", "-c", server, "-p", str(port), "-t", str(seconds), "-J")
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def received_mbit(p: subprocess.Popen[str]) -> float:
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    doc = json.loads(out)
    assert "error" not in doc, doc.get("error")
    return float(doc["end"]["sum_received"]["bits_per_second"]) / 1e6


# Low enough that the HTB, not the node's CPU, is the bottleneck: under gVisor on 2 shared cores the veth
# pair carried only ~175 Mbit/s in CI (a 200 Mbit/s ceiling was then never reached, by either flow).
LINK_MBIT = 100


def test_htb_split_between_gpu_and_cpu_jobs(node: Node, agent: Any) -> None:
    """Two saturating iperf3 flows on the node's bridge: 75/25 under HTB, and a flow alone gets the link."""
    server = node.run_pod(
        node.pod_manifest("iperf-server", "iperf3 -s -p 5201 & iperf3 -s -p 5202 & iperf3 -s -p 5203 & wait")
    )
    sip = server["status"]["podIP"]
    dev = node.host_veth(server)  # egress towards the server: where the two flows meet
    gpu_ann = {"qosmos.io/job-kind": "training", "qosmos.io/multi-node": "true", "qosmos.io/soda-cores": "2"}
    node.run_pod(node.pod_manifest("gpu-job", "sleep 3600", labels=MANAGED, annotations=gpu_ann))
    node.run_pod(node.pod_manifest("cpu-job", "sleep 3600", labels=MANAGED, annotations={"qosmos.io/job-kind": "cpu"}))
    node.run_pod(node.pod_manifest("unmanaged", "sleep 3600"))  # not the agent's: must not be starved by its HTB
    a = agent("--gpu-util", "none", "--membw", "none", "--interval", "0.3", "--tc-dev", dev,
              "--link-mbit", str(LINK_MBIT), "--net-shaping")  # fmt: skip

    def filters() -> bool:
        out = subprocess.run(["tc", "filter", "show", "dev", dev], capture_output=True, text=True).stdout
        return "flowid 50:10" in out and "flowid 50:20" in out

    try:
        wait_for(filters, 30, f"the HTB filters on {dev}")
    except AssertionError as e:
        raise AssertionError(f"{e}; agent log:\n{a.log()[-3000:]}") from None
    gpu_alone = received_mbit(iperf(node, "gpu-job", sip, 5201, 5))
    cpu_alone = received_mbit(iperf(node, "cpu-job", sip, 5202, 5))
    gp, cp = iperf(node, "gpu-job", sip, 5201, 10), iperf(node, "cpu-job", sip, 5202, 10)
    gpu_both, cpu_both = received_mbit(gp), received_mbit(cp)
    share = gpu_both / (gpu_both + cpu_both)
    print(f"\nHTB on {dev} at {LINK_MBIT} Mbit/s: GPU alone {gpu_alone:.1f}, CPU alone {cpu_alone:.1f}; "
          f"together GPU {gpu_both:.1f} + CPU {cpu_both:.1f} Mbit/s -> GPU share {share:.3f}")  # fmt: skip
    assert gpu_alone >= 0.9 * LINK_MBIT and cpu_alone >= 0.9 * LINK_MBIT  # borrowing: ceil = link
    assert abs(share - 0.75) <= 0.075  # within ±10 % of 75/25
    assert gpu_both + cpu_both >= 0.9 * LINK_MBIT
    # an unmanaged pod against a CPU job: it keeps the non-CPU-job share (it is never put below a CPU job)
    up, cp2 = iperf(node, "unmanaged", sip, 5203, 10), iperf(node, "cpu-job", sip, 5202, 10)
    other_both, cpu_vs_other = received_mbit(up), received_mbit(cp2)
    other_share = other_both / (other_both + cpu_vs_other)
    print(f"unmanaged pod vs CPU job under the HTB: {other_both:.1f} + {cpu_vs_other:.1f} Mbit/s "
          f"-> unmanaged share {other_share:.3f}")  # fmt: skip
    assert other_share >= 0.675

    # no multi-node GPU job left: the agent removes its HTB (and only its own)
    node.delete_pods("gpu-job")
    wait_for(lambda: "htb 50:" not in subprocess.run(["tc", "qdisc", "show", "dev", dev], capture_output=True,
             text=True).stdout, 30, "the HTB to be removed")  # fmt: skip


def test_per_pod_caps_on_the_pods_own_host_veths(node: Node, agent: Any) -> None:
    """``--tc-dev veth``: the agent finds each CPU-job pod's host veth itself and caps it both ways at its
    part of the CPU share (25 % of 200 Mbit/s, one CPU job: 50), the GPU job and the NIC untouched; on
    SIGTERM the veth's qdiscs are as before and its ifb is gone."""
    server = node.run_pod(node.pod_manifest("iperf-srv-veth", "iperf3 -s -p 5301 & iperf3 -s -p 5302 & wait"))
    sip = server["status"]["podIP"]
    gpu_ann = {"qosmos.io/job-kind": "training", "qosmos.io/multi-node": "true", "qosmos.io/soda-cores": "2"}
    gpu = node.run_pod(node.pod_manifest("gpu-veth", "sleep 3600", labels=MANAGED, annotations=gpu_ann))
    cpu = node.run_pod(
        node.pod_manifest("cpu-veth", "sleep 3600", labels=MANAGED, annotations={"qosmos.io/job-kind": "cpu"})
    )
    cpu_dev, gpu_dev = node.host_veth(cpu), node.host_veth(gpu)

    def tc(*args: str) -> str:
        return subprocess.run(["tc", *args], capture_output=True, text=True).stdout

    before = {d: tc("qdisc", "show", "dev", d) for d in (cpu_dev, gpu_dev)}
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    a = agent("--gpu-util", "none", "--membw", "none", "--interval", "0.3", "--tc-dev", "veth",
              "--link-mbit", "200", "--net-shaping")  # fmt: skip
    try:
        wait_for(lambda: "Egress Redirect" in tc("filter", "show", "dev", cpu_dev, "ingress"), 30,
                 f"the cap on {cpu_dev}")  # fmt: skip
    except AssertionError as e:
        raise AssertionError(f"{e}; agent log:\n{a.log()[-3000:]}") from None
    assert "tbf 50:" in tc("qdisc", "show", "dev", cpu_dev)
    assert tc("qdisc", "show", "dev", gpu_dev) == before[gpu_dev]  # the GPU job's veth is not shaped
    cpu_sent = received_mbit(iperf(node, "cpu-veth", sip, 5301, 5))
    gpu_sent = received_mbit(iperf(node, "gpu-veth", sip, 5302, 5))
    print(f"\nper-pod caps: CPU job on {cpu_dev} sent {cpu_sent:.1f} Mbit/s (cap 50), GPU job {gpu_sent:.1f}")
    assert 30 <= cpu_sent <= 55 and gpu_sent >= 150
    a.kill(signal.SIGTERM)
    assert "changes restored" in a.log()
    assert {d: tc("qdisc", "show", "dev", d) for d in (cpu_dev, gpu_dev)} == before
    assert subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout.count(
        "qsm"
    ) == links.count("qsm")


# --------------------------------------------------------------------------- PodResources (issue 22)


def test_the_real_kubelet_answers_pod_resources(node: Node, agent: Any) -> None:
    """The kubelet's own PodResources socket (below its --root-dir) answers the agent's List proto: a pod
    that holds no device is listed with its container and no devices, so it has no GPU; the agent says
    it is served."""
    sock = node.workdir / "kubelet" / "pod-resources" / "kubelet.sock"
    node.run_pod(node.pod_manifest("nodevices", "sleep 3600"))
    listed = wait_for(lambda: list_pod_resources(sock).get("default/nodevices"), 30, "the pod in the kubelet's List")
    assert listed == {"main": {}}
    gpus = PodGpus(sock)
    gpus.refresh()
    assert gpus.served is True and gpus.devices("default/nodevices") == ()
    a = agent("--gpu-util", "none", "--membw", "none", "--pod-resources-socket", str(sock))
    wait_for(lambda: "PodResources served at" in a.log(), 30, f"the agent's start line; log:\n{a.log()[-2000:]}")
    print(f"\nkubelet PodResources List at {sock}: default/nodevices -> {listed}")


# --------------------------------------------------------------------------- restore (issue 22 §1)


def node_state(dev: str, uids: Sequence[str] = ()) -> dict[str, str]:
    """Every cpuset/CFS file under kubepods (of the pods ``uids`` when given: pods of earlier tests may
    still be torn down by the kubelet, their cgroups coming and going), and the device's qdiscs and
    classes, as text."""
    out: dict[str, str] = {}
    for ctrl, names in (("cpuset", ("cpuset.cpus",)), ("cpu", ("cpu.cfs_quota_us", "cpu.cfs_period_us"))):
        for name in names:
            for f in sorted((CGROUP_ROOT / ctrl / "kubepods").rglob(name)):
                pod = next((p.name for p in f.parents if p.name.startswith("pod")), None)
                if not uids or pod is None or pod.removeprefix("pod") in uids:
                    out[str(f)] = f.read_text()
    for what in ("qdisc", "class"):
        out[f"tc {what}"] = subprocess.run(["tc", what, "show", "dev", dev], capture_output=True, text=True).stdout
    return out


def test_sigterm_and_cleanup_put_the_node_back_byte_for_byte(node: Node, agent: Any, tmp_path: Path) -> None:
    """Throttle (halving), a finished search's cores and an HTB on a pod's veth, then SIGTERM: every cgroup
    file and `tc qdisc/class show` as before. Again with SIGKILL and `qosmos sidecar cleanup`."""
    cpus = node_cpus()
    if len(cpus) < 2:
        pytest.skip("one CPU cannot be halved")
    job = node.run_pod(node.pod_manifest("cpujob", BUSY, labels=MANAGED, annotations={"qosmos.io/job-kind": "cpu"}))
    gpu_ann = {"qosmos.io/job-kind": "training", "qosmos.io/multi-node": "true", "qosmos.io/soda-cores": "1"}
    train = node.run_pod(node.pod_manifest("gpu-job", "sleep 3600", labels=MANAGED, annotations=gpu_ann))
    dev = node.host_veth(train)
    uids = [job["metadata"]["uid"], train["metadata"]["uid"]]
    bw = tmp_path / "bw.json"
    write_json(bw, {"bytes_per_second": 8e9, "peak_bytes_per_second": 1e10})
    before = node_state(dev, uids)
    assert "htb" not in before["tc qdisc"]
    args = ("--gpu-util", "none", "--membw", str(bw), "--interval", "0.3", "--resctrl-root", str(tmp_path / "no"),
            "--tc-dev", dev, "--link-mbit", "100", "--net-shaping")  # fmt: skip
    half = set(sorted(cpus)[-((len(cpus) + 1) // 2) :])

    def changed() -> bool:
        q = subprocess.run(["tc", "qdisc", "show", "dev", dev], capture_output=True, text=True).stdout
        return container_cpus(node, job) == half and container_cpus(node, train) == {min(cpus)} and "htb 50:" in q

    for how in ("SIGTERM", "cleanup"):
        a = agent(*args)
        wait_for(changed, 30, f"the agent's changes ({how}); log:\n{a.log()[-2000:]}")
        assert node_state(dev, uids) != before
        if how == "SIGTERM":
            a.kill(signal.SIGTERM)
            assert "changes restored" in a.log()
        else:
            a.kill(signal.SIGKILL)
            assert node_state(dev, uids) != before  # a killed agent restores nothing itself
            r = subprocess.run([sys.executable, "-m", "qosmos", "sidecar", "cleanup", "--state-dir",
                                str(tmp_path / "agent-state")], capture_output=True, text=True, timeout=60)  # fmt: skip
            assert r.returncode == 0, r.stdout + r.stderr
        after = node_state(dev, uids)
        assert after == before, {k: (before.get(k), after.get(k)) for k in set(before) | set(after)
                                 if before.get(k) != after.get(k)}  # fmt: skip
        print(f"\n{how}: {len(before)} cgroup files and the tc state of {dev} as before the agent")


# --------------------------------------------------------------------------- the node's network rule


def test_nothing_leaves_the_machine(node: Node) -> None:
    """Service VIPs hit the blackhole route; pods have no default route and no gateway on the bridge."""
    from qosmos.testing.controlplane import SERVICE_CIDR, SERVICE_IP
    from qosmos.testing.node import BRIDGE

    routes = subprocess.run(["ip", "route", "show", "type", "blackhole"], capture_output=True, text=True).stdout
    assert f"blackhole {SERVICE_CIDR}" in routes
    got = subprocess.run(["ip", "route", "get", SERVICE_IP], capture_output=True, text=True)
    assert got.returncode != 0 and "Invalid argument" in got.stderr  # a blackhole: never routed off the machine
    bridge = subprocess.run(["ip", "-o", "-4", "addr", "show", "dev", BRIDGE], capture_output=True, text=True).stdout
    assert bridge.strip() == ""  # no gateway address: pods reach each other only
    node.run_pod(node.pod_manifest("netcheck", "sleep 3600"))
    table = subprocess.run(node.exec_argv("netcheck", "cat", "/proc/net/route"), capture_output=True, text=True)
    assert table.returncode == 0, table.stderr
    dests = [ln.split()[1] for ln in table.stdout.splitlines()[1:] if ln.strip()]
    assert dests and "00000000" not in dests  # no default route inside the pod
    out = subprocess.run(node.exec_argv("netcheck", "bash", "-c", f"echo > /dev/tcp/{SERVICE_IP}/443"),
                         capture_output=True, text=True, timeout=30)  # fmt: skip
    assert out.returncode != 0 and "unreachable" in out.stderr.lower(), out.stderr
    print(f"\nnetwork rule: ip route get {SERVICE_IP} -> {got.stderr.strip()!r}; pod routes {dests}; "
          f"pod -> {SERVICE_IP}:443: {next(ln for ln in out.stderr.splitlines() if 'unreachable' in ln.lower())!r}")  # fmt: skip
