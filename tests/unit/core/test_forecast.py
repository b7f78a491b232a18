"""The forward forecast of a partition's queue (extender/core/forecast.py), hand-computed."""

from __future__ import annotations

import math

from qosmos.extender.core.admission import Partition, PartitionRuntime, RunningJob
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.cohorts import PreemptionPolicy
from qosmos.extender.core.forecast import forecast, running_end
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.ordering import OrderContext
from qosmos.extender.core.types import Allocation, Job, Node, NodeGrant, Platform


def setup(backfill: str = "none", policy: str = "fifo") -> tuple[PartitionRuntime, ClusterState, list[RunningJob]]:
    cluster = ClusterState([Node("n0", 4, vc="p")])
    alloc = Allocation((NodeGrant(0, (0, 1)),))
    cluster.allocate(alloc)
    running = [RunningJob(Job("J0", 0.0, 2, vc="p", duration=10), 0.0, 10.0, alloc)]
    rt = PartitionRuntime(Partition("p", policy=policy, placement="first-fit", backfill=backfill))
    return rt, cluster, running


def runs(job: Job, alloc: Allocation | None) -> float:
    return job.duration if job.duration is not None else math.inf


def test_fifo_starts_each_job_when_the_one_ahead_releases() -> None:
    rt, cluster, running = setup()
    a = Job("A", 1.0, 4, vc="p", duration=5)
    b = Job("B", 2.0, 2, vc="p", duration=3)
    # 0: A needs 4, 2 free -> the FIFO queue blocks; 10: J0 ends, A starts (ends 15); 15: B starts
    assert forecast(rt, [a, b], running, cluster, 0.0, runs) == ({"A": 10.0, "B": 15.0}, 2 + 2 + 1)
    assert cluster.free_gpus.tolist() == [2]  # the live state is untouched
    # the work (queue length summed over the passes) bounds it: two decisions stop it after the first pass
    assert forecast(rt, [a, b], running, cluster, 0.0, runs, max_work=2) == ({}, 2)
    assert forecast(rt, [a, b], running, cluster, 0.0, runs, max_work=3) == ({"A": 10.0}, 4)


def test_easy_backfilling_starts_the_short_job_now() -> None:
    rt, cluster, running = setup("easy")
    a = Job("A", 1.0, 4, vc="p", duration=5)
    b = Job("B", 2.0, 2, vc="p", duration=3)  # ends at 3 <= A's reservation at 10
    assert forecast(rt, [a, b], running, cluster, 0.0, runs).starts == {"B": 0.0, "A": 10.0}


def test_a_running_job_without_expected_end_holds_its_gpus_for_ever() -> None:
    rt, cluster, running = setup()
    running[0].expected_end = math.inf
    assert forecast(rt, [Job("A", 1.0, 4, vc="p", duration=5)], running, cluster, 0.0, runs).starts == {}
    # a job that fits now still gets its ETA (now)
    assert forecast(rt, [Job("S", 1.0, 2, vc="p", duration=5)], running, cluster, 0.0, runs).starts == {"S": 0.0}


def test_preemptive_policies_are_not_forecast() -> None:
    rt, cluster, running = setup(policy="srtf")
    assert forecast(rt, [Job("A", 1.0, 4, vc="p", duration=5)], running, cluster, 0.0, runs).starts == {}


def test_a_running_job_is_expected_to_end_at_its_run_time_given_the_time_it_has_run() -> None:
    """Seed 004 §VI-A: J0 started at -30 and was predicted to run 10 s; now (0) it has run 30 s. Without
    the elapsed-time predictor it is assumed to end now; with it, it ends at start + run_time(job, 30)."""
    rt, cluster, running = setup()
    running[0].start, running[0].expected_end = -30.0, -20.0
    a = Job("A", 1.0, 4, vc="p", duration=5)
    seen: list[tuple[str, float]] = []

    def run_time(job: Job, elapsed: float) -> float | None:
        seen.append((job.id, elapsed))
        return elapsed + 25.0 if job.id == "J0" else None

    assert forecast(rt, [a], running, cluster, 0.0, runs).starts == {"A": 0.0}  # the overdue job "ends now"
    assert forecast(rt, [a], running, cluster, 0.0, runs, run_time=run_time).starts == {"A": 25.0}
    assert seen == [("J0", 30.0)]
    assert running[0].expected_end == -20.0  # the caller's running jobs are not changed


def test_running_end_rules() -> None:
    job = Job("J0", 0.0, 2, vc="p")
    r = RunningJob(job, -30.0, -20.0, None)
    assert running_end(r, 0.0) == 0.0  # no predictor: its expected end, never before now
    assert running_end(r, 0.0, lambda j, e: 55.0) == 25.0  # start + the run time given 30 s run
    assert running_end(r, 0.0, lambda j, e: None) == 0.0  # no prediction: as without a predictor
    assert running_end(r, 0.0, lambda j, e: math.inf) == math.inf  # never ends: never releases
    early = RunningJob(job, 10.0, 50.0, None)  # starts after now (a pass's own start): elapsed 0
    assert running_end(early, 0.0, lambda j, e: 5.0 + e) == 15.0


def test_a_resumed_jobs_end_counts_the_segments_it_ran_before() -> None:
    """A job that ran 40 s before it was stopped and resumed 30 s ago has run 70 s in all: the run time is
    predicted given 70 s, and what is left of it runs from its current segment's start."""
    job = Job("J0", 0.0, 2, vc="p", executed=40.0)
    r = RunningJob(job, -30.0, 30.0, None)  # expected: 100 s in all, 60 s left when it resumed
    seen: list[float] = []

    def given(j: Job, elapsed: float) -> float:
        seen.append(elapsed)
        return max(100.0, elapsed + 10.0)

    assert running_end(r, 0.0, given) == 30.0  # -30 + (100 - 40)
    assert seen == [70.0]
    assert running_end(r, 80.0, given) == 90.0  # overdue at 150 s run: 160 in all, 120 of them since -30
    assert seen[-1] == 150.0


def test_a_head_that_preempts_a_lower_priority_job_in_the_forecast() -> None:
    """LowerPriority: A (priority 0, 2 GPUs) cannot start now (stopping L frees one GPU; R, of its
    priority, holds the other). When R ends at 100 s, A preempts L: the forecast booked A on L's
    GPU still held ("GPU is not free") and the VirtualCluster lost every ETA; now L waits again."""
    rt = PartitionRuntime(Partition("default", preemption=PreemptionPolicy(within_partition="LowerPriority")))
    cluster = ClusterState([Node("n0", 2)])
    low, r = Allocation((NodeGrant(0, (0,)),)), Allocation((NodeGrant(0, (1,)),))
    cluster.allocate(low)
    cluster.allocate(r)
    running = [
        RunningJob(Job("L", 0.0, 1, priority=-1), 0.0, 1000.0, low),
        RunningJob(Job("R", 0.0, 1), 0.0, 100.0, r),
    ]
    fc = forecast(rt, [Job("A", 1.0, 2)], running, cluster, 10.0, runs)
    assert fc.starts["A"] == 100.0


def test_a_forecast_pass_that_reclaims_from_a_cohort_member_starts_on_the_reclaimed_gpus() -> None:
    """Cohort c: b (b0, b1: nominal 8) runs B0 on b0 until 50 s; a borrows b1 with Y. b's head H (8 GPUs)
    waits: at 50 s it is within b's share and reclaims Y. The forecast left Y on its books ("its jobs stay
    as they are"), booked H on Y's GPUs ("GPU is not free") and the VirtualCluster lost every ETA."""
    from qosmos.extender.core.cohorts import CohortMember

    c = ClusterState([Node(n, 4, vc=n[0]) for n in ("a0", "b0", "b1")])

    def hold(job: Job, node: int, end: float) -> RunningJob:
        alloc = Allocation((NodeGrant(node, (0, 1, 2, 3)),))
        c.allocate(alloc)
        return RunningJob(job, 0.0, end, alloc)

    ra = [hold(Job("A0", 0.0, 4, vc="a"), 0, 1000.0), hold(Job("Y", 1.0, 4, vc="a"), 2, 1000.0)]
    rb = [hold(Job("B0", 0.0, 4, vc="b", duration=50), 1, 50.0)]
    rt = PartitionRuntime(Partition("b", cohort="c"))
    member = CohortMember(Partition("a", cohort="c"), ra, [])
    fc = forecast(rt, [Job("H", 5.0, 8, vc="b")], rb, c, 10.0, runs, cohort=[member])
    assert fc.starts == {"H": 50.0}
    assert c.gpu_free_milli.sum() == 0  # the caller's books untouched


def test_swaf_forecasts_a_task_when_its_waiting_allowance_runs_out() -> None:
    """SWAF on one 4-GPU node at 1447 s: J3 holds 3 GPUs until 1460 s, J5 the fourth until 1464.4 s. T4 waits
    for its best-CER 4-GPU shape, which meets its deadline only if it starts by about 1460.07 s; then SWAF
    takes a smaller one, which fits: T4 (and S behind it) are forecast to start then, not at J5's end."""
    cluster = ClusterState([Node("n0", 4, vc="p", gpu_model="V100M32")])
    a3, a5 = Allocation((NodeGrant(0, (0, 1, 2)),)), Allocation((NodeGrant(0, (3,)),))
    cluster.allocate(a3)
    cluster.allocate(a5)
    running = [
        RunningJob(Job("J3", 0.0, 3, vc="p", duration=1459), 1.0, 1460.0, a3),
        RunningJob(Job("J5", 1447.0, 1, vc="p", duration=17.4), 1447.0, 1464.4, a5),
    ]
    rt = PartitionRuntime(Partition("p", policy="swaf", placement="consolidate"))
    rt.ctx = OrderContext(platform=Platform(1, 4), modeldb=ModelDB.builtin())
    t4 = Job("T4", 1212.0, 1, vc="p", model="MobileNetV2", batch=256, iters=2048, duration=90)
    s = Job("S", 1447.0, 1, vc="p", duration=1)
    starts = forecast(rt, [t4, s], running, cluster, 1447.0, runs).starts
    assert 1460.0 < starts["T4"] < 1461.0 and starts["S"] == starts["T4"]
