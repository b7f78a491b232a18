"""Pure strategies (§V-B search start and steps, §V-E thresholds) and the agent's passes on a fake node."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.predictors.soda_cpu import plateau_curve
from qosmos.sidecar.actuators import CgroupV1Cpu, ResctrlMba
from qosmos.sidecar.agent import AgentOptions, NodeAgent, parse_cpu_quantity, pod_info
from qosmos.sidecar.cgroups import CgroupLayout, container_children, parse_cpuset
from qosmos.sidecar.cli import load_history
from qosmos.sidecar.fakes import make_resctrl_tree, v1_pod
from qosmos.sidecar.fs import FakeKernelFS
from qosmos.sidecar.sources import DeclaredBandwidthSource, DeclaredGpuSource, ResctrlMbmSource
from qosmos.sidecar.state import BEST_CORES_ANNOTATION, PodInfo
from qosmos.sidecar.strategies import (
    AdaptiveCores,
    ContentionEliminator,
    assign_cpus,
    cpu_job_targets,
    htb_target,
)

T_UID, C_UID, U_UID = "aaaa-train", "bbbb-cpujob", "cccc-unmanaged"


def _info(uid: str, role: str, **kw: object) -> PodInfo:
    return PodInfo(uid=uid, namespace="ns", name=uid, role=role, **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- strategies


@pytest.mark.parametrize(("category", "best_fit"), [("CV", 2), ("CV", 4), ("NLP", 6), ("SPEECH", 3), ("", 5)])
def test_adaptive_cores_converge_within_four_steps(category: str, best_fit: int) -> None:
    ac = AdaptiveCores(node_cpus=8)
    pod = _info(T_UID, "training", category=category)
    util = plateau_curve(best_fit)
    n, steps = ac.cores(pod), 0
    while True:
        steps += 1
        nxt = ac.observe(pod, util(n))
        if nxt is None:
            break
        assert nxt == ac.cores(pod)
        n = nxt
    assert ac.cores(pod) == best_fit and ac.done(pod)
    assert steps <= 4  # §V-B: "less than four attempts" from the category start point


def test_search_budget_is_four_steps_whatever_the_curve() -> None:
    """An owner's history starts at 3 cores, but utilisation keeps rising up to 8: without the budget
    the search would walk 3, 2, 4, 5, 6, 7, 8 (seven 60 s steps); it stops after four, at the best seen."""
    ac = AdaptiveCores(node_cpus=8, owner_history={"alice": [("NLP", 3)]})
    pod = _info(T_UID, "training", category="NLP", owner="alice")
    util = plateau_curve(8)
    tried = [ac.cores(pod)]
    while (nxt := ac.observe(pod, util(tried[-1]))) is not None:
        tried.append(nxt)
    assert tried == [3, 2, 4, 5] and ac.searches[T_UID].steps == 4
    assert ac.done(pod) and ac.cores(pod) == 5  # the best count measured within the budget
    unbounded = AdaptiveCores(node_cpus=8, owner_history={"alice": [("NLP", 3)]}, max_steps=64)
    while unbounded.observe(pod, util(unbounded.cores(pod))) is not None:
        pass
    assert unbounded.searches[T_UID].steps == 7 and unbounded.cores(pod) == 8


def test_start_point_from_owner_history_and_finished_searches() -> None:
    ac = AdaptiveCores(node_cpus=8, owner_history={"alice": [("CV", 6), ("NLP", 2)]})
    assert ac.cores(_info("x", "training", category="CV", owner="alice")) == 6
    assert ac.cores(_info("y", "training", category="CV", owner="bob")) == 3
    assert ac.cores(_info("z", "training", category="NLP", hints=frozenset({"pipeline"}))) == 4
    done = _info("w", "training", category="CV", best_cores=2)
    assert ac.cores(done) == 2 and ac.observe(done, 50.0) is None and ac.done(done)
    ac.forget({"x"})
    assert set(ac.searches) == {"x"}


def test_assign_cpus_packs_and_never_empties() -> None:
    assert assign_cpus({"a": 2, "b": 1}, [0, 1, 2, 3]) == {"a": (0, 1), "b": (2,)}
    wrapped = assign_cpus({"a": 3, "b": 3}, [0, 1, 2, 3])
    assert wrapped["b"] == (0, 1, 3) and all(wrapped.values())
    assert assign_cpus({"a": 0}, [5]) == {"a": (5,)}
    with pytest.raises(InvalidInput):
        assign_cpus({"a": 1}, [])


def test_contention_eliminator_threshold_and_hysteresis() -> None:
    e = ContentionEliminator(has_mba=False)
    assert not e.update(0.74, 1.0)
    assert e.update(0.75, 1.0)  # §V-E: 75 % of peak
    assert e.update(0.61, 1.0)  # still above the release point (60 %)
    assert e.update(None, 1.0)  # no sample keeps the decision
    assert not e.update(0.59, 1.0)
    e.update(0.9, 1.0)
    assert e.cpu_job_cores(4) == 2 and e.cpu_job_cores(3) == 2 and e.cpu_job_cores(1) == 1
    assert e.mba_target([5, 3]) is None
    m = ContentionEliminator(has_mba=True)
    m.update(0.8, 1.0)
    assert m.cpu_job_cores(4) == 4  # with MBA cores stay, bandwidth is capped instead
    assert m.mba_target([5, 3, 3]) == m.mba_target([3, 5])
    tgt = m.mba_target([5, 3])
    assert tgt is not None and tgt.pids == (3, 5) and tgt.group == "qosmos-cpu-jobs"


def test_cpu_job_targets_halve_from_the_spec_not_from_the_cgroup() -> None:
    e = ContentionEliminator(has_mba=False)
    pods = [_info(C_UID, "cpu", limit_cores=2.0), _info("d", "cpu")]
    full = cpu_job_targets(pods, [0, 1, 2, 3], e)
    assert [(t.cpus, t.quota_cores) for t in full] == [((2, 3), 2.0), ((0, 1, 2, 3), None)]
    e.update(1.0, 1.0)
    halved = cpu_job_targets(pods, [0, 1, 2, 3], e)
    assert [(t.cpus, t.quota_cores) for t in halved] == [((3,), 1.0), ((1, 2), 2.0)]  # disjoint while they fit
    assert cpu_job_targets(pods, [0, 1, 2, 3], e) == halved  # re-running never halves twice


def test_htb_target_only_with_multi_node_gpu_jobs() -> None:
    gpu = _info("g", "training", ip="10.244.0.5")
    cpu = _info("c", "cpu", ip="10.244.0.6")
    assert htb_target([gpu, cpu], "veth0", 1000) is None
    multi = _info("g", "training", ip="10.244.0.5", multi_node=True)
    t = htb_target([multi, cpu], "veth0", 1000)
    assert t is not None and t.gpu_ips == ("10.244.0.5",) and t.cpu_ips == ("10.244.0.6",) and t.gpu_share == 0.75
    assert htb_target([multi, cpu], "", 1000) is None


# --------------------------------------------------------------------------- sources


def test_declared_sources(tmp_path: Path) -> None:
    f = tmp_path / "gpu.json"
    src = DeclaredGpuSource(str(f))
    assert src.utilisation("ns/p") is None  # not there yet: no measurement
    f.write_text(json.dumps({"ns/p": 71.5, "*": 10}))
    assert src.utilisation("ns/p") == 71.5 and src.utilisation("ns/q") == 10.0
    f.write_text("{not json")
    with pytest.raises(InvalidInput, match="not JSON"):
        src.utilisation("ns/p")
    b = tmp_path / "bw.json"
    b.write_text(json.dumps({"bytes_per_second": 8e9, "peak_bytes_per_second": 1e10}))
    assert DeclaredBandwidthSource(str(b)).sample() == (8e9, 1e10)


def test_resctrl_mbm_rate(tmp_path: Path) -> None:
    root = make_resctrl_tree(tmp_path / "rdt")
    now = [0.0]
    src = ResctrlMbmSource(root, peak=1e9, clock=lambda: now[0])
    assert src.sample() == (None, 1e9)
    now[0] = 2.0
    for d, v in (("mon_L3_00", 3_000_000_000), ("mon_L3_01", 1_000_000_000)):
        (root / "mon_data" / d / "mbm_total_bytes").write_text(f"{v}\n")
    assert src.sample() == (2e9, 1e9)


# --------------------------------------------------------------------------- the agent on a fake node


@pytest.fixture
def node(v1_tree: Callable[..., Path], tmp_path: Path) -> dict[str, object]:
    root = v1_tree({T_UID: ("besteffort", 1), C_UID: ("burstable", 2), U_UID: ("besteffort", 1)})
    layout = CgroupLayout(root, 1, "cgroupfs")
    pods = [
        v1_pod(T_UID, {"qosmos.io/job-kind": "training", "qosmos.io/model-category": "CV"}, "BestEffort"),
        v1_pod(C_UID, {"qosmos.io/job-kind": "cpu"}, "Burstable", "4", "1"),
        v1_pod(U_UID, {}, "BestEffort", labels={}),
    ]
    return {"root": root, "layout": layout, "pods": pods, "gpu": tmp_path / "gpu.json", "bw": tmp_path / "bw.json"}


def _cpus(layout: CgroupLayout, uid: str) -> set[int]:
    d = layout.pod_dir("cpuset", uid)
    assert d is not None
    sets = {frozenset(parse_cpuset((c / "cpuset.cpus").read_text())) for c in container_children(d)}
    assert len(sets) == 1
    return set(next(iter(sets)))


def test_pod_info_reads_only_managed_pods(node: dict[str, object]) -> None:
    pods = node["pods"]
    assert isinstance(pods, list)
    assert pod_info(pods[2]) is None
    t, c = pod_info(pods[0]), pod_info(pods[1])
    assert t is not None and t.role == "training" and t.category == "CV" and t.limit_cores is None
    assert c is not None and c.role == "cpu" and c.limit_cores == 4.0
    assert parse_cpu_quantity("1500m") == 1.5


def test_agent_search_on_a_fake_node(node: dict[str, object]) -> None:
    layout, pods, gpu, bw = node["layout"], node["pods"], node["gpu"], node["bw"]
    assert isinstance(layout, CgroupLayout) and isinstance(pods, list) and isinstance(gpu, Path)
    assert isinstance(bw, Path)
    bw.write_text(json.dumps({"bytes_per_second": 1e9, "peak_bytes_per_second": 1e10}))
    now = [0.0]
    fs = FakeKernelFS()
    agent = NodeAgent(
        "n1",
        None,
        layout,
        CgroupV1Cpu(fs),
        DeclaredGpuSource(str(gpu)),
        DeclaredBandwidthSource(str(bw)),
        options=AgentOptions(step_seconds=10, warmup_seconds=2, interval=1),
        clock=lambda: now[0],
    )
    curve = plateau_curve(2)  # utilisation stops improving beyond 2 cores
    unmanaged_before = _cpus(layout, U_UID)
    tried = []
    for _ in range(200):
        n = len(_cpus(layout, T_UID))  # the utilisation source responds to the cores really applied
        gpu.write_text(json.dumps({f"ns/{T_UID}": curve(n)}))
        agent.reconcile(pods)
        if not tried or tried[-1] != len(_cpus(layout, T_UID)):
            tried.append(len(_cpus(layout, T_UID)))
        now[0] += 1
        if pods[0].metadata.annotations.get(BEST_CORES_ANNOTATION):
            break
    assert pods[0].metadata.annotations[BEST_CORES_ANNOTATION] == "2"
    assert len(_cpus(layout, T_UID)) == 2 and tried[0] == 3  # CV starts at 3 (§V-B-1)
    s = agent.adaptive.searches[T_UID]
    assert s.steps <= 4 and s.best == 2
    assert _cpus(layout, U_UID) == unmanaged_before  # never touched
    assert all(f"pod{U_UID}" not in str(p) for p, _ in fs.log)
    assert _cpus(layout, C_UID) == {0, 1, 2, 3}  # CPU job at its limit: no contention

    # memory-bandwidth contention without RDT: the CPU job's cores are halved, then restored
    bw.write_text(json.dumps({"bytes_per_second": 8e9, "peak_bytes_per_second": 1e10}))
    agent.reconcile(pods)
    assert _cpus(layout, C_UID) == {2, 3}
    assert agent.metrics.engaged._value.get() == 1
    bw.write_text(json.dumps({"bytes_per_second": 5e9, "peak_bytes_per_second": 1e10}))
    agent.reconcile(pods)
    assert _cpus(layout, C_UID) == {0, 1, 2, 3}

    # a restarted agent derives the same state from the cgroups and the pods: no writes needed
    fs2 = FakeKernelFS()
    again = NodeAgent("n1", None, layout, CgroupV1Cpu(fs2), None, None, options=AgentOptions(), clock=lambda: now[0])
    again.reconcile(pods)
    assert fs2.log == []


def test_agent_uses_one_mba_group_when_rdt_is_there(node: dict[str, object], tmp_path: Path) -> None:
    layout, pods, bw = node["layout"], node["pods"], node["bw"]
    assert isinstance(layout, CgroupLayout) and isinstance(pods, list) and isinstance(bw, Path)
    rdt = make_resctrl_tree(tmp_path / "rdt")
    bw.write_text(json.dumps({"bytes_per_second": 9e9, "peak_bytes_per_second": 1e10}))
    agent = NodeAgent(
        "n1", None, layout, CgroupV1Cpu(FakeKernelFS()), None, DeclaredBandwidthSource(str(bw)),
        mba=ResctrlMba(rdt, FakeKernelFS()),
    )  # fmt: skip
    agent.reconcile(pods)
    tasks = sorted(int(t) for t in (rdt / "qosmos-cpu-jobs" / "tasks").read_text().split())
    assert tasks == [2000, 2001]  # both containers of the CPU job, nothing else
    assert (rdt / "qosmos-cpu-jobs" / "schemata").read_text().strip() == "MB:0=50;1=50"
    assert _cpus(layout, C_UID) == {0, 1, 2, 3}  # MBA instead of halving


@pytest.mark.parametrize("with_mba", [False, True])
def test_restart_in_the_hysteresis_band_keeps_the_throttle(
    node: dict[str, object], tmp_path: Path, with_mba: bool
) -> None:
    """Engaged at 80 % of peak, then the agent restarts while bandwidth is 70 % (between the 60 %
    release point and the 75 % threshold): the new agent reads the throttle from the node and keeps it."""
    layout, pods, bw = node["layout"], node["pods"], node["bw"]
    assert isinstance(layout, CgroupLayout) and isinstance(pods, list) and isinstance(bw, Path)
    rdt = make_resctrl_tree(tmp_path / "rdt")

    def agent() -> NodeAgent:
        mba = ResctrlMba(rdt, FakeKernelFS()) if with_mba else None
        return NodeAgent("n1", None, layout, CgroupV1Cpu(FakeKernelFS()), None, DeclaredBandwidthSource(str(bw)),
                         mba=mba)  # fmt: skip

    def throttled() -> bool:
        if with_mba:
            return (rdt / "qosmos-cpu-jobs" / "tasks").read_text().split() == ["2000", "2001"]
        return _cpus(layout, C_UID) == {2, 3}

    bw.write_text(json.dumps({"bytes_per_second": 8e9, "peak_bytes_per_second": 1e10}))
    agent().reconcile(pods)
    assert throttled()
    bw.write_text(json.dumps({"bytes_per_second": 7e9, "peak_bytes_per_second": 1e10}))
    again = agent()
    again.reconcile(pods)
    assert throttled() and again.eliminator.engaged
    bw.write_text(json.dumps({"bytes_per_second": 5e9, "peak_bytes_per_second": 1e10}))
    again.reconcile(pods)
    assert not throttled() and not again.eliminator.engaged
    fresh = agent()  # nothing throttled on the node: a restart at 70 % engages nothing
    bw.write_text(json.dumps({"bytes_per_second": 7e9, "peak_bytes_per_second": 1e10}))
    fresh.reconcile(pods)
    assert not throttled() and not fresh.eliminator.engaged


def test_history_file_errors_are_one_line(tmp_path: Path) -> None:
    f = tmp_path / "h.json"
    f.write_text('{"alice": [["CV", 3]]}')
    assert load_history(f) == {"alice": [("CV", 3)]}
    f.write_text('{"alice": [["CV"]]}')
    with pytest.raises(InvalidInput, match="alice"):
        load_history(f)
    f.write_text("{\n oops")
    with pytest.raises(InvalidInput, match="line 2"):
        load_history(f)


def test_cli_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from qosmos.cli import app

    runner = CliRunner()
    h = tmp_path / "h.json"
    h.write_text("[1, 2]")
    r = runner.invoke(app, ["sidecar", "run", "--node", "n", "--history", str(h)])
    assert r.exit_code == 2 and "expected an object" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["sidecar", "run", "--node", "n", "--cgroup-driver", "weird"])
    assert r.exit_code == 2 and "--cgroup-driver" in r.output
    r = runner.invoke(app, ["sidecar", "run", "--node", "n", "--tc-dev", "eth0"])
    assert r.exit_code == 2 and "--link-mbit" in r.output
    r = runner.invoke(app, ["sidecar", "run", "--node", "n", "--kubeconfig", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "missing" in r.output
