"""Engine semantics: fidelity, determinism, preemption, backfill, migration, topology, gym."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from qosmos.extender.core import genie
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.types import Job, Node, Shape
from qosmos.simulator.engine import DONE, SimConfig, simulate
from qosmos.simulator.gym_env import SchedulingEnv
from qosmos.simulator.metrics import recorded_stats, summarize
from qosmos.simulator.traces import Trace, load_helios, load_native, load_trace

from .conftest import write
from .test_loaders import HELIOS

KEYS = (
    "jobs",
    "avg_jct_s",
    "median_jct_s",
    "p95_jct_s",
    "p99_jct_s",
    "avg_queue_s",
    "median_queue_s",
    "p95_queue_s",
    "queued_jobs",
)


def _same(a: dict, b: dict) -> None:
    for k in KEYS:
        assert a[k] == pytest.approx(b[k], abs=1e-6), k


def test_fidelity_openb_sample() -> None:
    tr = load_trace("builtin:openb-sample")
    s = summarize(simulate(tr, SimConfig(policy="recorded")))
    _same(s, recorded_stats(tr))
    assert s["jobs"] == 909 and s["withdrawn_jobs"] == 91


def test_fidelity_helios(tmp_path: Path) -> None:
    write(tmp_path / "cluster_log.csv", HELIOS)
    tr = load_helios(tmp_path)
    s = summarize(simulate(tr, SimConfig(policy="recorded")))
    _same(s, recorded_stats(tr))
    assert s["avg_queue_s"] == pytest.approx((10 + 0 + 180) / 3)


def test_determinism() -> None:
    a = summarize(simulate(load_trace("builtin:genie", density=20, seed=5), SimConfig(policy="qssf", seed=5)))
    b = summarize(simulate(load_trace("builtin:genie", density=20, seed=5), SimConfig(policy="qssf", seed=5)))
    for k in ("avg_jct_s", "avg_queue_s", "makespan_s", "qos_guarantee", "fragmentation"):
        assert a[k] == b[k]


def test_preemption_overhead_srtf(tiny) -> None:  # type: ignore[no-untyped-def]
    # A runs 0-50, B (10 s) arrives at 50 and preempts A; A resumes at 60 with 50 s left + 8 s overhead
    res = simulate(load_native(tiny("id,submit,gpus,duration\nA,0,1,100\nB,50,1,10")), SimConfig(policy="srtf"))
    assert res.start[1] == 50 and res.end[1] == 60
    assert res.end[0] == pytest.approx(118) and res.preemptions[0] == 1 and res.overhead_s[0] == 8
    s = summarize(res)
    assert s["preemptions"] == 1 and s["preemption_overhead_s"] == 8


def test_mlfq_demotes_and_preempts(tiny) -> None:  # type: ignore[no-untyped-def]
    # A attains 3250 GPU-s at t=3250 and drops to queue 1; B (queue 0) waiting since 100 takes the GPU
    res = simulate(
        load_native(tiny("id,submit,gpus,duration\nA,0,1,5000\nB,100,1,10")),
        SimConfig(policy="mlfq", preemption_overhead=0),
    )
    assert res.start[1] == pytest.approx(3250) and res.end[0] == pytest.approx(5010)


def test_backfill_easy_respects_reservation(tiny) -> None:  # type: ignore[no-untyped-def]
    jobs = "id,submit,gpus,duration\nA,0,1,100\nH,1,2,10\nC,2,1,50\nD,3,1,200"
    nodes = "name,gpus\nn0,2"
    res = simulate(load_native(tiny(jobs, nodes)), SimConfig(backfill="easy", backfill_estimates="oracle"))
    assert res.backfilled[2] and res.start[2] == 2  # C ends at 52 <= reservation 100
    assert res.start[1] == pytest.approx(100) and res.reservation[1] == pytest.approx(100)  # head on time
    assert not res.backfilled[3] and res.start[3] >= 100  # D would overrun the reservation
    assert summarize(res)["backfill_violations"] == 0
    plain = simulate(load_native(tiny(jobs, nodes)), SimConfig(backfill="none"))
    assert plain.start[2] == pytest.approx(110)  # FIFO: C waits behind the head


ISSUE_CASE = "id,submit,gpus,duration\nJ0,0,2,100\nH,1,4,10\nB1,2,2,107\nB2,50,2,19\nB3,60,2,21"


@pytest.mark.parametrize(
    ("mode", "h_start", "b_starts"),
    [
        # latest start 100 + 0.1 × 99 = 109.9: B1 (2 → 109) backfills, B2/B3 (→ 119/121 from t=100) may not
        ("relaxed", 109, {"B1": 2, "B2": 119, "B3": 119}),
        # the queue holds only H when it blocks, so adaptive's factor is the full 0.1: same as relaxed
        ("adaptive", 109, {"B1": 2, "B2": 119, "B3": 119}),
        # EASY: nothing may end after 100. B1 waits; B2 (50 → 69) and then B3 (69 → 90) fit before it
        ("easy", 100, {"B1": 110, "B2": 50, "B3": 69}),
    ],
)
def test_backfill_latest_start_is_fixed_when_the_head_blocks(tiny, mode, h_start, b_starts) -> None:  # type: ignore[no-untyped-def]
    res = simulate(
        load_native(tiny(ISSUE_CASE, "name,gpus\nn0,4")),
        SimConfig(backfill=mode, relax_factor=0.1, backfill_estimates="oracle"),
    )
    starts = dict(zip([j.id for j in res.trace.jobs], res.start, strict=True))
    assert starts["H"] == pytest.approx(h_start)
    assert {k: starts[k] for k in b_starts} == pytest.approx(b_starts)
    assert summarize(res)["backfill_violations"] == 0


def test_backfill_reserves_the_nodes_the_head_will_get(tiny) -> None:  # type: ignore[no-untyped-def]
    # n0: R0 holds 3 of 4 GPUs until 100; n1: R1 holds 2 of 4 until 200. H (4 GPUs on one node)
    # blocks; B (1 GPU, 1000 s) must go to n1, not to n0's free GPU, or H waits until 200.
    jobs = "id,submit,gpus,duration\nR0,0,3,100\nR1,0,2,200\nH,1,4,10\nB,2,1,1000"
    res = simulate(
        load_native(tiny(jobs, "name,gpus\nn0,4\nn1,4")),
        SimConfig(placement="first-fit", backfill="easy", backfill_estimates="oracle"),
    )
    assert res.start[2] == pytest.approx(100) and res.backfilled[3] and res.start[3] == pytest.approx(2)
    assert summarize(res)["backfill_violations"] == 0


def test_a_head_a_shorter_job_overtook_is_no_violation(tiny) -> None:  # type: ignore[no-untyped-def]
    # SJF. H (4 GPUs) is reserved at 100 on n0; B (1 GPU, 500 s) backfills on n1. At 60 S (45 s, shorter
    # than H) starts on n0 by the policy's order: H starts at 105, past its first latest start, while B
    # still runs. S delayed it, not B: no violation (it was counted one).
    jobs = "id,submit,gpus,duration\nR,0,2,100\nH,1,4,50\nB,2,1,500\nS,60,1,45"
    cfg = SimConfig(policy="sjf", placement="first-fit", backfill="easy", backfill_estimates="oracle")
    res = simulate(load_native(tiny(jobs, "name,gpus\nn0,4\nn1,1")), cfg)
    assert res.backfilled[2] and res.start[3] == pytest.approx(60) and res.start[1] == pytest.approx(105)
    assert summarize(res)["backfill_violations"] == 0


def test_a_head_a_shorter_blocked_job_displaced_is_no_violation(tiny) -> None:  # type: ignore[no-untyped-def]
    # SJF on 4 GPUs. H (2 GPUs) is reserved at 68, when R ends; B (1 GPU, 234 s) backfills beside it. X (4
    # GPUs, 51 s: shorter) arrives at 15 and is the blocked head from then, Y (168 s: shorter) after X; H
    # never heads the queue again and starts with Y at 287, B still running at 68. It was a violation.
    jobs = "id,submit,gpus,duration\nR,0,3,68\nH,0,2,169\nB,2,1,234\nX,15,4,51\nY,110,1,168"
    cfg = SimConfig(policy="sjf", backfill="easy", backfill_estimates="oracle")
    res = simulate(load_native(tiny(jobs, "name,gpus\nn0,4")), cfg)
    assert res.backfilled[2] and res.reservation[1] == pytest.approx(68)
    assert (res.start[3], res.start[4], res.start[1]) == (pytest.approx(236), pytest.approx(287), pytest.approx(287))
    assert summarize(res)["backfill_violations"] == 0


def test_a_late_head_is_a_violation_only_when_backfilling_caused_it(tiny) -> None:  # type: ignore[no-untyped-def]
    # J0 says it needs 50 s but runs 100: H (reserved at 50) starts at 100 with nothing backfilled.
    jobs = "id,submit,gpus,duration,requested_duration\nJ0,0,2,100,50\nH,1,4,10,10"
    cfg = SimConfig(backfill="easy", backfill_estimates="requested")
    res = simulate(load_native(tiny(jobs, "name,gpus\nn0,4")), cfg)
    assert res.start[1] == pytest.approx(100) and res.reservation[1] == pytest.approx(50)
    assert summarize(res)["backfill_violations"] == 0
    # B claims 30 s but runs 300: backfilled behind H (reserved at 100), it delays H to 301.
    jobs = "id,submit,gpus,duration,requested_duration\nJ0,0,2,100,100\nH,1,4,10,10\nB,2,2,300,30"
    res = simulate(load_native(tiny(jobs, "name,gpus\nn0,4")), cfg)
    assert res.backfilled[2] and res.start[1] == pytest.approx(302)
    assert summarize(res)["backfill_violations"] == 1


class _Broken:
    name = "broken"

    def predict(self, job, now):  # type: ignore[no-untyped-def]
        raise RuntimeError("model file is corrupt")

    def observe(self, job, duration, end):  # type: ignore[no-untyped-def]
        pass


class _Recorder:
    """A predictor that predicts the mean of what it observed and records when it observed it."""

    name = "recorder"

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}

    def predict(self, job, now):  # type: ignore[no-untyped-def]
        return sum(self.seen.values()) / len(self.seen) if self.seen else None

    def observe(self, job, duration, end):  # type: ignore[no-untyped-def]
        self.seen[job.id] = end


def test_predictor_errors_stop_the_run_unless_a_fallback_is_asked_for(tiny) -> None:  # type: ignore[no-untyped-def]
    trace = tiny("id,submit,gpus,duration\nA,0,1,100\nB,1,1,10")
    with pytest.raises(RuntimeError, match="corrupt"):
        simulate(load_native(trace), SimConfig(policy="qssf", predictor=_Broken()))
    res = simulate(load_native(trace), SimConfig(policy="qssf", predictor=_Broken(), predictor_fallback=True))
    assert all(s == DONE for s in res.state)
    assert any("predictor fallback" in n and "corrupt" in n for n in res.notes)


def test_finished_jobs_enter_history_at_their_simulated_end(tiny) -> None:  # type: ignore[no-untyped-def]
    # One GPU, FIFO: A 0-100, B queued behind it 100-110 (recorded submit + duration would say 11).
    rec = _Recorder()
    res = simulate(
        load_native(tiny("id,submit,gpus,duration\nA,0,1,100\nB,1,1,10")),
        SimConfig(policy="qssf", predictor=rec),
    )
    assert rec.seen == pytest.approx({"A": 100, "B": 110})
    assert res.end[1] == pytest.approx(110)


class _Table:
    """Predicts each job its value in ``table`` once anything finished (None before: no history)."""

    name = "table"

    def __init__(self, table: dict[str, float]) -> None:
        self.table, self.finished = table, 0

    def predict(self, job, now):  # type: ignore[no-untyped-def]
        return self.table[job.id] if self.finished else None

    def observe(self, job, duration, end):  # type: ignore[no-untyped-def]
        self.finished += 1


def test_a_job_submitted_before_any_history_is_predicted_at_the_next_finish(tiny) -> None:  # type: ignore[no-untyped-def]
    # One GPU: A runs 0-100; B (1) and C (2) arrive with no history, so no prediction. A's finish gives
    # them one (as the operator's next pass asks again): C, predicted shorter, goes first.
    trace = load_native(tiny("id,submit,gpus,duration\nA,0,1,100\nB,1,1,10\nC,2,1,50"))
    res = simulate(trace, SimConfig(policy="qssf", predictor=_Table({"A": 1, "B": 500, "C": 5})))
    assert res.start == pytest.approx([0, 150, 100])


def test_a_head_blocked_while_its_start_was_unknown_is_protected_once_it_is_known(tiny) -> None:  # type: ignore[no-untyped-def]
    # EASY on two 1-GPU nodes: A and L start with no history, so no expected end; D (2 GPUs) blocks at 1
    # with an unknown start. A's finish predicts L's end (100): D's reservation, and its latest start,
    # are known from then on, and B, predicted to run past it, waits. The latest start fixed at D's
    # first block was infinite and kept: B backfilled at 11 and delayed D to 161.
    nodes = "name,gpus\nn0,1\nn1,1"
    jobs = "id,submit,gpus,duration\nA,0,1,10\nL,0,1,100\nD,1,2,10\nB,11,1,150"
    res = simulate(
        load_native(tiny(jobs, nodes)),
        SimConfig(policy="fifo", backfill="easy", predictor=_Table({"A": 10, "L": 100, "D": 10, "B": 150})),
    )
    assert res.start == pytest.approx([0, 0, 100, 110])


def test_a_job_withdrawn_while_it_runs_is_not_history(tiny) -> None:  # type: ignore[no-untyped-def]
    # W is withdrawn at 30 while it runs: it did not finish (a deleted DLJob is no observation either)
    rec = _Recorder()
    trace = load_native(tiny("id,submit,gpus,duration\nW,0,1,100\nB,1,1,10"))
    trace = dataclasses.replace(trace, withdraw_at=[30.0, None])
    simulate(trace, SimConfig(policy="qssf", predictor=rec))
    assert rec.seen == pytest.approx({"B": 40})


def test_soda_gpu_job_reclaims_cores_a_cpu_job_borrowed(tiny) -> None:  # type: ignore[no-untyped-def]
    # cpu0: 4 cores; g0: 4 GPUs, 8 cores. C1 takes cpu0, C2 borrows 4 cores of g0 at 1. G (4 GPUs,
    # 6 cores) at 10 reclaims them: C2 is aborted after 9 s, back at its array's head, and resumes
    # on g0 when G ends at 60: 91 s left + 8 s overhead -> 159.
    nodes = "name,gpus,cpu_milli\ncpu0,0,4000\ng0,4,8000"
    jobs = "id,submit,gpus,cpu_milli,duration\nC1,0,0,4000,100\nC2,1,0,4000,100\nG,10,4,6000,50"
    res = simulate(load_native(tiny(jobs, nodes)), SimConfig(policy="soda"))
    assert res.start[2] == pytest.approx(10) and res.end[2] == pytest.approx(60)
    assert res.preemptions == [0, 1, 0] and res.end[1] == pytest.approx(159)
    assert any("SODA arrays" in n for n in res.notes)


def test_cross_switch_penalty(tiny) -> None:  # type: ignore[no-untyped-def]
    nodes = "name,gpus,switch\nn0,1,s0\nn1,1,s1"
    res = simulate(load_native(tiny("id,submit,gpus,duration\nA,0,2,100", nodes)), SimConfig(cross_switch_penalty=1.5))
    assert res.end[0] == pytest.approx(150) and res.cross_switch[0]
    nodes = "name,gpus,switch\nn0,1,s0\nn1,1,s0"
    res = simulate(load_native(tiny("id,submit,gpus,duration\nA,0,2,100", nodes)), SimConfig(cross_switch_penalty=1.5))
    assert res.end[0] == pytest.approx(100)


def test_partitions_have_own_queues(tiny) -> None:  # type: ignore[no-untyped-def]
    nodes = "name,gpus,vc\nn0,1,a\nn1,1,b"
    jobs = "id,submit,gpus,duration,vc\nA,0,1,100,a\nB,1,1,10,a\nC,1,1,10,b\nD,2,1,1,a"
    res = simulate(load_native(tiny(jobs, nodes)), SimConfig(partition_policy={"a": "sjf"}))
    assert res.start[2] == 1  # C runs in b at once
    assert res.start[3] == 100 and res.start[1] == 101  # SJF inside a: D (1 s) before B (10 s)


def test_migration_frees_node(tiny) -> None:  # type: ignore[no-untyped-def]
    # best fit puts A and B on n0, C on n1; when B ends at 10, A moves to n1 (8 s overhead)
    # and the 2-GPU job D starts on the emptied n0 at once instead of waiting until 1000
    nodes = "name,gpus\nn0,2\nn1,2"
    jobs = "id,submit,gpus,duration\nA,0,1,1000\nB,0,1,10\nC,1,1,1000\nD,2,2,5"
    res = simulate(load_native(tiny(jobs, nodes)), SimConfig(placement="best-fit", migration=True))
    assert res.start[3] == pytest.approx(10) and res.end[0] == pytest.approx(1008)
    assert res.migrations == 1 and res.preemptions[0] == 1
    plain = simulate(load_native(tiny(jobs, nodes)), SimConfig(placement="best-fit"))
    assert plain.start[3] == pytest.approx(1000)


def test_migration_moves_no_job_onto_an_idle_node(tiny) -> None:  # type: ignore[no-untyped-def]
    # best fit: Z on n2, X on n0, Y on n1; when Z ends, X would fit best on the idle n2: moving it there
    # empties n0 and fills n2 (as many nodes used), paying 8 s for nothing
    nodes = "name,gpus\nn0,4\nn1,4\nn2,3"
    jobs = "id,submit,gpus,duration\nZ,0,3,10\nX,1,3,1000\nY,1,3,1000"
    res = simulate(load_native(tiny(jobs, nodes)), SimConfig(placement="best-fit", migration=True))
    assert res.migrations == 0 and res.end[1] == pytest.approx(1001)


_RESERVED = SimConfig(placement="best-fit", backfill="easy", backfill_estimates="oracle", migration=True)


def test_migration_keeps_off_the_nodes_a_blocked_head_is_reserved_on(tiny) -> None:  # type: ignore[no-untyped-def]
    # A holds 7 of n1's 8 GPUs until 116; B and C share n0; H (8 GPUs) blocks, reserved on n1 at 116. When B
    # ends at 106, moving C onto n1 would empty n0 (too small for H) and restart C there: H would wait
    # until 309 for it
    nodes = "name,gpus\nn0,6\nn1,8"
    jobs = "id,submit,gpus,duration\nA,0,7,116\nB,0,5,106\nC,1,1,300\nH,8,8,79"
    res = simulate(load_native(tiny(jobs, nodes)), _RESERVED)
    assert res.migrations == 0 and res.start[3] == pytest.approx(116) and res.end[2] == pytest.approx(301)


def test_migration_onto_reserved_nodes_that_lets_the_head_start_now(tiny) -> None:  # type: ignore[no-untyped-def]
    # H is reserved on n0 at 116 (A's end); when B ends at 106, moving C onto n0 empties n1: H starts there
    nodes = "name,gpus\nn0,8\nn1,8"
    jobs = "id,submit,gpus,duration\nA,0,3,116\nB,0,6,106\nC,1,1,300\nH,8,8,79"
    res = simulate(load_native(tiny(jobs, nodes)), _RESERVED)
    assert res.migrations == 1 and res.start[3] == pytest.approx(106) and res.end[2] == pytest.approx(309)


def test_genie_runtime_from_model(tiny) -> None:  # type: ignore[no-untyped-def]
    from qosmos.extender.core import genie
    from qosmos.extender.core.modeldb import ModelDB
    from qosmos.extender.core.types import Shape

    res = simulate(
        load_native(tiny("id,submit,gpus,model,batch,iters\nA,0,2,LSTM,128,1000", "name,gpus\nn0,4")), SimConfig()
    )
    lat = genie.latency(genie.Task("LSTM", 128, 1000), Shape(1, 2), ModelDB.builtin().get("LSTM"))
    assert res.end[0] == pytest.approx(lat) and res.shape[0] == (1, 2)


@pytest.mark.parametrize(
    "policy", ["swaf", "tetris-perf", "tetris-cer", "capacity", "minmin", "wfair", "las", "mlfq", "srtf", "sjf", "qssf"]
)
def test_every_policy_finishes_genie(policy: str) -> None:
    tr = load_trace("builtin:genie", density=10, seed=2)
    res = simulate(tr, SimConfig(policy=policy, placement="cer"))
    assert all(s == DONE for s in res.state)


def test_rejects_jobs_that_never_fit(tiny) -> None:  # type: ignore[no-untyped-def]
    res = simulate(load_native(tiny("id,submit,gpus,duration\nA,0,4,10\nB,0,1,10")), SimConfig())
    s = summarize(res)
    assert s["rejected_jobs"] == 1 and s["jobs"] == 1


def test_gym_env_runs_to_completion() -> None:
    env = SchedulingEnv(lambda: load_trace("builtin:genie", density=10, seed=1))
    obs = env.reset()
    done, total, info = False, 0.0, {}
    while not done:
        fits = obs["queue"][:, 3]
        action = int(fits.argmax()) if fits.any() else -1
        obs, reward, done, info = env.step(action)
        total += reward
    assert total < 0 and all(s == DONE for s in info["result"].state)


def test_free_gpu_respects_cpu_shares(tiny) -> None:  # type: ignore[no-untyped-def]
    # both nodes have 4 free GPUs; only n1 has the CPU for the job: free-gpu must pick n1, not give up
    nodes = "name,gpus,cpu_milli,memory_mib\nn0,4,2000,1000\nn1,4,8000,1000"
    res = simulate(
        load_native(tiny("id,submit,gpus,duration,cpu_milli\nA,0,2,10,4000", nodes)), SimConfig(placement="free-gpu")
    )
    assert res.state[0] == DONE and res.start[0] == 0


def test_fidelity_native_start_equals_submit(tiny) -> None:  # type: ignore[no-untyped-def]
    # the first job starts the instant it is submitted; the second one waited 5 s
    tr = load_native(tiny("id,submit,gpus,duration,start,end\nA,0,1,10,0,10\nB,2,1,3,7,10", "name,gpus\nn0,1"))
    res = simulate(tr, SimConfig(policy="recorded"))
    s = summarize(res)
    _same(s, recorded_stats(tr))
    assert s["avg_queue_s"] == pytest.approx(2.5) and s["recorded_overcommitted"] == 1  # B overlaps A on 1 GPU


@pytest.mark.timeout(60)
def test_mlfq_finishes_when_attained_service_rounds_below_a_quantum() -> None:
    # helios-synth's job h172 reaches 3249.9999999999964 GPU-s of a 3250 quantum: the engine once
    # pushed its demotion 4.5e-13 s ahead forever (t + d == t)
    res = simulate(load_trace("builtin:helios-synth", jobs=2000), SimConfig(policy="mlfq"))
    assert all(s == DONE for s in res.state)


def test_capacity_shares_follow_the_model_types_still_there(tiny) -> None:  # type: ignore[no-untyped-def]
    # Two types share 2 GPUs (1 each) while DCGAN runs; then BERT alone has both: its fixed 2-GPU task
    # starts. The engine's tally kept DCGAN at 0 GPUs as a type for ever, and the task never started.
    jobs = "id,submit,gpus,model,batch,iters,nodes\nB1,0,1,BERT,1,1,0\nD1,0,1,DCGAN,1,1,0\nB2,0,2,BERT,64,1,1"
    nodes = "name,gpus,gpu_model\nn0,2,V100M32"
    res = simulate(load_native(tiny(jobs, nodes)), SimConfig(policy="capacity", placement="cer"))
    assert res.state == [DONE, DONE, DONE]
    assert res.start[2] == pytest.approx(max(res.end[0], res.end[1]))


def _genie_trace(jobs: list[Job], gpus: int = 4) -> Trace:
    return Trace("t", jobs, [Node("n0", gpus, gpu_model="V100M32")])


def test_a_genie_task_is_backfilled_on_its_latency_not_on_a_prediction() -> None:
    """FIFO, EASY on predicted estimates, one 4-GPU node: R holds 2 GPUs until 1000 s, the head H needs all 4.
    G, a small GENIE task, is predicted to run 5000 s (what the trace supplies: a history of long jobs),
    but GENIE's Eq. 4 says it ends long before 1000 s at the shape it gets: it is backfilled at once (on
    the prediction it waited for H)."""
    g = Job("G", 2.0, 1, model="ResNet50", batch=32, iters=100, duration=5000.0, predicted_duration=5000.0)
    r = Job("R", 0.0, 2, duration=1000.0, predicted_duration=1000.0)
    tr = _genie_trace([r, Job("H", 1.0, 4, duration=10.0, predicted_duration=10.0), g])
    lat = genie.latency(genie.Task.from_job(g), Shape(1, 1), ModelDB.builtin().get("ResNet50", "V100M32"))
    assert lat < 500
    res = simulate(tr, SimConfig(backfill="easy", backfill_estimates="predicted"))
    assert res.backfilled[2] and res.start[2] == 2.0 and res.end[2] == pytest.approx(2.0 + lat)
    assert res.start[1] == pytest.approx(1000.0)


def test_a_preempted_genie_task_keeps_the_work_it_has_left() -> None:
    """SRTF: B (1 s) preempts the GENIE task A at 5 s; A's work left is what 5 s of its latency did not do
    (``Job.work_left``, backfilling's estimate of it on any shape), and it ends after the rest of it."""
    a = Job("A", 0.0, 1, model="ResNet50", batch=32, iters=100, duration=1000.0)
    tr = _genie_trace([a, Job("B", 5.0, 1, duration=1.0)], gpus=1)
    lat = genie.latency(genie.Task.from_job(a), Shape(1, 1), ModelDB.builtin().get("ResNet50", "V100M32"))
    res = simulate(tr, SimConfig(policy="srtf", preemption_overhead=0.0))
    assert res.preemptions[0] == 1 and a.work_left == pytest.approx(1 - 5.0 / lat)
    assert res.end[0] == pytest.approx(lat + 1.0)
