"""Inference services beside a training replay (seed 002 §V-D2, issue 12): the engine calls the core's
``place_services`` before the queues' passes; a preempted job goes back to the head of its queue.
Scenarios small enough to follow by hand, the timeline CSV both ways, and the command end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from qosmos.extender.core.errors import InvalidInput
from qosmos.predictors.readers import TraceFormatError
from qosmos.simulator.engine import DONE, REJECTED, SimConfig, Simulator, _Sampler, simulate
from qosmos.simulator.metrics import summarize
from qosmos.simulator.services import ServiceTimeline, read_services
from qosmos.simulator.traces import load_native, load_trace
from typer.testing import CliRunner

from qosmos.cli import app

from .conftest import write
from .test_inference import GENAI_LIKE

runner = CliRunner()
HEADER = "time_s,service,gpu_replicas,cpu_replicas"

# (a) n0 has one GPU of model a, n1 one of model b. A (submitted 0) needs b and runs 0-100 on n1;
# W (1) needs b too and waits, reserved n1 at 100; V (2, any GPU, 40 s) backfills on n0 (EASY, true
# run times). At 10 the service asks for a GPU replica on the full cluster.
PREEMPT_NODES = "name,gpus,gpu_model\nn0,1,a\nn1,1,b"
PREEMPT_JOBS = "id,submit,gpus,duration,gpu_models\nA,0,1,100,b\nW,1,1,50,b\nV,2,1,40,"
EASY = {"backfill": "easy", "backfill_estimates": "oracle"}


def services(tmp_path: Path, text: str, name: str = "svc.csv") -> tuple[ServiceTimeline, ...]:
    return tuple(read_services([write(tmp_path / name, text)]))


def by_id(res) -> dict[str, int]:  # type: ignore[no-untyped-def]
    return {j.id: i for i, j in enumerate(res.trace.jobs)}


def test_a_replica_preempts_the_last_submitted_job_which_resumes_at_the_head_of_its_queue(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """At 10 the replica preempts V (the last submitted of A and V; A keeps running) and takes n0.
    V has run 8 of its 40 s and waits at the head of the queue, ahead of W (submitted before it).
    At 100 A ends: V (not W, which FIFO would start) resumes on n1 for 8 s of overhead + its 32 s
    left, till 140; W runs 140-190. The replica holds n0's GPU from 10 to the end (190)."""
    svc = services(tmp_path, f"{HEADER}\n10,s,1,0")
    res = simulate(load_native(tiny(PREEMPT_JOBS, PREEMPT_NODES)), SimConfig(services=svc, **EASY))
    a, w, v = (by_id(res)[x] for x in "AWV")
    assert (res.start[v], res.end[v]) == (2.0, 140.0)  # its first start kept; progress kept: 32 s left
    assert res.preemptions[v] == 1 and res.overhead_s[v] == 8.0 and res.run_time[v] == pytest.approx(8 + 40)
    assert (res.start[w], res.end[w]) == (140.0, 190.0)
    assert res.preemptions[a] == 0 and res.end[a] == 100.0
    s = summarize(res)
    assert s["service_preemptions"] == 1 and s["preemptions"] == 1
    assert s["service_gpu_seconds"] == pytest.approx(180.0) and s["service_pending_replica_seconds"] == 0.0
    assert s["by_service"]["s"]["replicas_placed"] == 1
    # the cluster's 2 GPUs over 190 s: jobs 100 + 50 + 48 GPU-s, the replica 180
    assert s["cluster_gpu_utilization"] == pytest.approx((198 + 180) / (2 * 190))
    assert s["gpu_utilization"] == pytest.approx(198 / (2 * 190))


def test_without_the_service_the_same_trace_keeps_its_order(tiny) -> None:  # type: ignore[no-untyped-def]
    res = simulate(load_native(tiny(PREEMPT_JOBS, PREEMPT_NODES)), SimConfig(**EASY))
    ids = by_id(res)
    assert res.end[ids["V"]] == 42.0 and res.start[ids["W"]] == 100.0 and sum(res.preemptions) == 0
    s = summarize(res)
    assert s["services"] == 0 and s["service_gpu_seconds"] == 0.0 and s["by_service"] == {}
    assert s["cluster_gpu_utilization"] == s["gpu_utilization"]


def test_a_replica_with_nothing_to_preempt_waits_and_goes_before_the_queue(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """One GPU, held 0-100 by a batch-inference job (never a victim). The replica asked for at 10
    waits 90 s; at 100 it is placed before the queue's pass, so T (waiting since 50) does not start
    then and is not preempted either: it starts when the service scales in at 300."""
    svc = services(tmp_path, f"{HEADER}\n10,s,1,0\n300,s,0,0")
    jobs = "id,submit,gpus,duration,kind\nI,0,1,100,inference\nT,50,1,10,training"
    res = simulate(load_native(tiny(jobs)), SimConfig(services=svc))
    ids = by_id(res)
    assert res.end[ids["I"]] == 100.0
    assert (res.start[ids["T"]], res.end[ids["T"]]) == (300.0, 310.0) and res.preemptions[ids["T"]] == 0
    s = summarize(res)
    assert s["service_pending_replica_seconds"] == pytest.approx(90.0)
    assert s["service_gpu_seconds"] == pytest.approx(200.0) and s["service_preemptions"] == 0


def test_scale_in_drops_pending_replicas_first_then_frees_gpus_for_a_waiting_job(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Two GPUs. At 0 the service asks for 3 GPU replicas (2 placed, 1 pending) and J (1 GPU, 50 s)
    arrives behind them. At 20, 2 replicas: the pending one goes (20 s pending), the GPUs stay
    taken. At 100, 1: the newest placed replica leaves and J starts at that instant."""
    svc = services(tmp_path, f"{HEADER}\n0,s,3,0\n20,s,2,0\n100,s,1,0")
    sim = Simulator(load_native(tiny("id,submit,gpus,duration\nJ,0,1,50", "name,gpus\nn0,2")), SimConfig(services=svc))
    res = sim.run()
    assert (res.start[0], res.end[0]) == (100.0, 150.0)
    s = summarize(res)
    assert s["service_pending_replica_seconds"] == pytest.approx(20.0) and s["service_replicas_placed"] == 2
    assert s["service_gpu_seconds"] == pytest.approx(150 + 100)  # one 0-150 (the end), one 0-100
    used = dict(zip(res.samples["t"], res.samples["used_gpus"], strict=True))
    assert used == {0.0: 2, 20.0: 2, 100.0: 2, 150.0: 1}  # replicas are busy GPUs too
    assert sorted(e for _, _, _, e, _ in res.service_segments) == [100.0, 150.0]


def test_a_cpu_replica_takes_a_cpu_jobs_cores_on_a_gpu_node(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A GPU node of 8 cores runs the CPU job C (6 cores, 100 s). A CPU replica of 4 cores (10-50)
    preempts it; C resumes at 50 with 90 s left plus the overhead."""
    svc = services(tmp_path, f"{HEADER},cpu_milli_per_replica\n10,s,0,1,4000\n50,s,0,0,4000")
    jobs = "id,submit,gpus,duration,kind,cpu_milli\nC,0,0,100,cpu,6000"
    res = simulate(load_native(tiny(jobs, "name,gpus,cpu_milli\nn0,1,8000")), SimConfig(services=svc))
    assert (res.start[0], res.end[0]) == (0.0, 50 + 8 + 90) and res.preemptions[0] == 1
    s = summarize(res)
    assert s["service_cpu_core_seconds"] == pytest.approx(40 * 4) and s["service_gpu_seconds"] == 0.0


def test_a_shared_gpu_a_victim_leaves_is_counted_once(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """S holds half of the only GPU; the replica preempts it and takes the whole GPU: one busy GPU."""
    svc = services(tmp_path, f"{HEADER}\n10,s,1,0\n50,s,0,0")
    res = simulate(load_native(tiny("id,submit,gpus,duration,gpu_milli\nS,0,1,100,500")), SimConfig(services=svc))
    assert res.preemptions[0] == 1 and res.end[0] == 50 + 8 + 90
    used = dict(zip(res.samples["t"], res.samples["used_gpus"], strict=True))
    assert used == {0.0: 1, 10.0: 1, 50.0: 1, 100.0: 1, 148.0: 0}  # 100: S's stale end


class _Books(_Sampler):
    """At every instant (the engine samples after its passes): its counters equal the books, and the
    books hold exactly the running jobs' and placed replicas' GPUs."""

    def __init__(self, sim: Simulator) -> None:
        super().__init__()
        self.sim = sim
        self.checked = 0

    def add(self, t: float, used: int, nodes: int, waiting: int, running: int) -> None:
        sim, cl = self.sim, self.sim.cluster
        assert used == cl.used_gpus, t
        assert nodes == sum(1 for nj in sim.node_jobs if nj), t
        held = np.zeros_like(cl.free_gpus)
        allocs = [sim.alloc[i] for q in sim.queues for i in q.running]
        allocs += [r.alloc for lives in sim.svc_live for live in lives.values() for r in live if r.alloc]
        for a in allocs:
            for g in a.grants:  # type: ignore[union-attr]
                held[g.node] += len(g.gpu_ids)
        assert (held == cl.gpu_cap - cl.free_gpus).all(), t
        self.checked += 1
        super().add(t, used, nodes, waiting, running)


@pytest.mark.parametrize(
    ("policy", "backfill", "jobs"),
    [
        ("fifo", "easy", 200),
        ("fifo", "easy", 100),
        ("sjf", "none", 400),
        ("srtf", "none", 400),
        ("soda", "none", 400),
        ("las", "none", 400),
    ],
)
def test_books_stay_exact_through_many_preemptions(tmp_path: Path, policy: str, backfill: str, jobs: int) -> None:
    """A 16-GPU cluster under a synthetic Helios load and a service asking for up to all its GPUs
    (EASY on fewer jobs: its passes project every waiting job while replicas hold GPUs for ever)."""
    rows = [f"{t * 600},svc,{n},{t % 2}" for t, n in enumerate([2, 8, 16, 4, 12, 0, 16, 1, 6, 16, 0])]
    svc = services(tmp_path, HEADER + "\n" + "\n".join(rows))
    tr = load_trace("builtin:helios-synth", jobs=jobs, nodes=2, seed=3)
    sim = Simulator(tr, SimConfig(policy=policy, services=svc, backfill=backfill))
    sim.sampler = _Books(sim)
    res = sim.run()
    assert sim.sampler.checked > 100 and res.service_preemptions >= 5
    if policy != "soda":  # SODA's arrays leave jobs waiting on this 2-node cluster with or without services
        assert set(res.state) <= {DONE, REJECTED} and not any(q.first for q in sim.queues)  # 32 GPUs: rejected
    assert sum(res.preemptions) >= res.service_preemptions


def test_services_are_refused_where_they_cannot_run(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    trace = load_native(tiny("id,submit,gpus,duration\nJ,0,1,50"))
    two = services(tmp_path, f"{HEADER}\n0,s,1,0")
    with pytest.raises(InvalidInput, match="recorded"):
        Simulator(trace, SimConfig(policy="recorded", services=two))
    with pytest.raises(InvalidInput, match="unique"):
        Simulator(trace, SimConfig(services=two + two))
    cpu = services(tmp_path, f"{HEADER},cpu_milli_per_replica\n0,big,0,1,64000", "big.csv")
    with pytest.raises(InvalidInput, match="its CPU replica never fits this cluster"):
        Simulator(
            load_native(tiny("id,submit,gpus,duration\nJ,0,1,50", "name,gpus,cpu_milli\nn0,1,8000")),
            SimConfig(services=cpu),
        )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"{HEADER}\n0,s,1,0\n0,s,2,0", r"svc\.csv:3: field time_s: must be after 0, the service's time on line 2"),
        (f"{HEADER}\n0,s,-1,0", r"svc\.csv:2: field gpu_replicas: must be >= 0 \(got '-1'\)"),
        (f"{HEADER}\n0,s,1,0.5", r"svc\.csv:2: field cpu_replicas: must be an integer \(got '0.5'\)"),
        (f"{HEADER}\nsoon,s,1,0", r"svc\.csv:2: field time_s: not a number \(got 'soon'\)"),
        (f"{HEADER}\n0,,1,0", r"svc\.csv:2: field service: missing value"),
        (f"{HEADER}\n0,s,1", r"svc\.csv:2: field cpu_replicas: truncated row"),
        ("time_s,service,gpu_replicas\n0,s,1", r"svc\.csv:1: field cpu_replicas: missing column"),
        (
            f"{HEADER},memory_mib\n0,s,1,0,512\n9,t,1,0,1\n60,s,2,0,1024",
            r"svc\.csv:4: field memory_mib: differs from line 2 \(512\)",
        ),
        (f"{HEADER},cpu_milli_per_replica\n0,s,0,2,0", r"svc\.csv:2: field cpu_milli_per_replica: a CPU replica needs"),
    ],
)
def test_the_loader_names_the_bad_line_and_field(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(TraceFormatError, match=message):
        services(tmp_path, text)


def test_a_service_lives_in_one_file(tmp_path: Path) -> None:
    one = write(tmp_path / "one.csv", f"{HEADER}\n0,s,1,0\n0,t,0,1")
    two = write(tmp_path / "two.csv", f"{HEADER}\n60,s,2,0")
    with pytest.raises(TraceFormatError, match=r"two\.csv:2: field service: already defined in one\.csv"):
        read_services([one, two])
    s, t = read_services([one])
    assert (s.name, s.points, t.points) == ("s", ((0.0, 1, 0),), ((0.0, 0, 1),))
    assert t.cpu_milli_per_replica == 16_000  # SODA's 16 cores when the file does not say


def inference_command(tmp_path: Path) -> Path:
    """The toy service of test_inference through `qosmos simulate inference` (reactive: --no-forecast): CPU x4, CPU x4, GPU x1,
    GPU x1, CPU x4 over five 60 s slots, 4-core CPU replicas; none once the series ends."""
    qps = write(tmp_path / "qps.csv", GENAI_LIKE)
    out = tmp_path / "inf"
    args = ["simulate", "inference", "--qps", str(qps), "--model", "ResNet50", "--out", str(out), "--no-plots"]
    args += ["--gpu-switch-batch", "10", "--cpu-cores", "4", "--cpu-max-batch", "2", "--max-replicas", "4"]
    args += ["--cpu-min-replicas", "4", "--cpu-max-replicas", "4", "--switch-cooldown-s", "0"]
    args += ["--scale-in-after-s", "0", "--ready-s", "30", "--service-name", "genai", "--quiet", "--no-forecast"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    return out / "timeline.csv"


def test_simulate_inference_writes_a_timeline_the_loader_reads(tmp_path: Path) -> None:
    path = inference_command(tmp_path)
    assert path.read_text().splitlines()[:2] == [f"{HEADER},cpu_milli_per_replica", "0.000,genai,0,4,4000"]
    (tl,) = read_services([path])
    assert tl.name == "genai" and tl.cpu_milli_per_replica == 4000
    assert tl.points == ((0.0, 0, 4), (60.0, 0, 4), (120.0, 1, 0), (180.0, 1, 0), (240.0, 0, 4), (300.0, 0, 0))


def test_the_command_replays_services_beside_a_trace(tiny, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Scenario (a) through `qosmos simulate --services`; a bad services file is one line, exit 2."""
    trace = tiny(PREEMPT_JOBS, PREEMPT_NODES)
    svc = write(tmp_path / "svc.csv", f"{HEADER}\n10,s,1,0")
    out = tmp_path / "o"
    args = ["simulate", "--trace", str(trace), "--backfill", "easy", "--backfill-estimates", "oracle"]
    res = runner.invoke(app, [*args, "--services", str(svc), "--out", str(out), "--no-plots", "--quiet"])
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert s["service_preemptions"] == 1 and s["service_gpu_seconds"] == pytest.approx(180.0)
    assert s["service_pending_replica_seconds"] == 0.0 and s["services"] == 1
    assert s["config"]["services"] == ["s"] and any("inference services s" in n for n in s["notes"])
    # the timeline `simulate inference` wrote, beside the same trace (4-core CPU replicas: untracked here)
    res = runner.invoke(app, [*args, "--services", str(inference_command(tmp_path)), "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    s = json.loads((out / "summary.json").read_text())
    assert s["by_service"]["genai"]["cpu_core_seconds"] > 0 and s["by_service"]["genai"]["gpu_seconds"] > 0
    bad = write(tmp_path / "bad.csv", f"{HEADER}\n10,s,x,0")
    res = runner.invoke(app, [*args, "--services", str(bad), "--out", str(tmp_path / "b"), "--quiet"])
    assert res.exit_code == 2 and "bad.csv:2: field gpu_replicas: not a number" in res.output
    assert not (tmp_path / "b").exists()
