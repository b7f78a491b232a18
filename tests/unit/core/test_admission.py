"""The admission cycle (extender/core/admission.py), with hand-computed expectations.

Each case is small enough to check on paper; the comments give the arithmetic.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qosmos.extender.core import genie
from qosmos.extender.core.admission import (
    BEHIND,
    BLOCKED,
    HEAD,
    INADMISSIBLE,
    NO_FIT,
    QUOTA,
    RESERVED,
    AdmissionResult,
    Carry,
    Partition,
    PartitionRuntime,
    RunningJob,
    admit,
)
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.cohorts import PreemptionPolicy
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.modeldb import ModelDB
from qosmos.extender.core.ordering import OrderContext, get_policy
from qosmos.extender.core.placement import get_placer
from qosmos.extender.core.types import Allocation, Job, Node, NodeGrant, PlacementRequest, Platform, Shape


def oracle(job: Job, alloc: Allocation | None) -> float:
    assert job.duration is not None
    return job.duration


def run(cluster: ClusterState, job: Job, start: float, node: int | None = None) -> RunningJob:
    """Book ``job`` on the cluster (first fit, or on ``node`` with its CPU) and describe it as running."""
    alloc = on_node(cluster, node, job.gpus, job.cpu_milli) if node is not None else None
    if alloc is None:
        alloc = get_placer("first-fit").place(PlacementRequest.for_job(job, None), cluster)
    assert alloc is not None
    cluster.allocate(alloc)
    assert job.duration is not None
    return RunningJob(job, start, start + job.duration, alloc)


def on_node(cluster: ClusterState, node: int, gpus: int, cpu_milli: int = 0) -> Allocation | None:
    free = [i for i in range(int(cluster.gpu_cap[node])) if cluster.gpu_free_milli[node, i] == 1000]
    return Allocation((NodeGrant(node, tuple(free[:gpus]), 1000, cpu_milli),)) if len(free) >= gpus else None


def started(res: AdmissionResult) -> list[str]:
    return [s.job.id for s in res.starts]


def reasons(res: AdmissionResult) -> dict[str, str]:
    return {w.job.id: w.code for w in res.waiting}


def nodes_of(alloc: Allocation | None) -> list[int]:
    assert alloc is not None
    return [g.node for g in alloc.grants]


# ---- relaxed backfilling: the latest start is fixed when the head first blocks (004 §VI-B) --------


def test_relaxed_bound_is_fixed_when_the_head_first_blocks() -> None:
    # One node of 4 GPUs. J0 (submit 0, 2 GPUs, 100 s) runs; H (1, 4, 10) blocks at t=1:
    # reservation 100, latest start 100 + 0.1 × (100 − 1) = 109.9.
    c = ClusterState([Node("n0", 4)])
    j0 = run(c, Job("J0", 0, 2, duration=100), 0)
    h, b1 = Job("H", 1, 4, duration=10), Job("B1", 2, 2, duration=107)
    b2, b3 = Job("B2", 50, 2, duration=19), Job("B3", 60, 2, duration=21)
    rt = PartitionRuntime(Partition("default", backfill="relaxed", relax_factor=0.1))

    first = admit(rt, [h], [j0], c, 1.0, estimate=oracle)
    res = first.carry.reservation
    assert first.starts == [] and res is not None
    assert (res.job_id, res.start, res.latest) == ("H", 100, pytest.approx(109.9))

    # t=2: B1 ends at 109 <= 109.9, so it may run although it delays H from 100 to 109.
    second = admit(rt, [h, b1], [j0], c, 2.0, carry=first.carry, estimate=oracle)
    assert started(second) == ["B1"] and second.starts[0].backfilled
    res = second.carry.reservation
    assert res is not None and res.start == 109 and res.latest == pytest.approx(109.9)
    assert res.backfilled == ("B1",)
    assert "at the latest 109.9 s" in next(w.message for w in second.waiting if w.job.id == "H")
    c.allocate(second.starts[0].allocation)  # type: ignore[arg-type]
    b1_run = RunningJob(b1, 2, 109, second.starts[0].allocation)

    # t=100: J0 ended, 2 GPUs free. B2 (ends 119) and B3 (ends 121) would push H past 109.9.
    c.release(j0.allocation)  # type: ignore[arg-type]
    third = admit(rt, [h, b2, b3], [b1_run], c, 100.0, carry=second.carry, estimate=oracle)
    assert third.starts == []
    assert reasons(third) == {"H": HEAD, "B2": RESERVED, "B3": RESERVED}
    assert third.carry.reservation is not None and third.carry.reservation.latest == pytest.approx(109.9)
    # Re-deriving the bound at t=100 (109 + 0.1 × 108 = 119.8) would have let B2 overrun it: the carry matters.
    fresh = admit(rt, [h, b2, b3], [b1_run], c, 100.0, estimate=oracle)
    assert started(fresh) == ["B2"]


def test_easy_is_a_relax_factor_of_zero() -> None:
    # Same start as above under EASY: B1 (ends 109) would delay H past its reservation at 100.
    c = ClusterState([Node("n0", 4)])
    j0 = run(c, Job("J0", 0, 2, duration=100), 0)
    rt = PartitionRuntime(Partition("default", backfill="easy"))
    res = admit(rt, [Job("H", 1, 4, duration=10), Job("B1", 2, 2, duration=107)], [j0], c, 2.0, estimate=oracle)
    assert res.starts == [] and reasons(res) == {"H": HEAD, "B1": RESERVED}
    # ... while a job that ends by 100 runs (98 s from t=2).
    res = admit(rt, [Job("H", 1, 4, duration=10), Job("B0", 2, 2, duration=98)], [j0], c, 2.0, estimate=oracle)
    assert started(res) == ["B0"]


def test_adaptive_factor_scales_with_the_queue() -> None:
    # 004 §VI-B (1): factor = base × queue length / longest queue seen. Longest seen 4, queue now 2:
    # factor 0.5 × 2/4 = 0.25 and latest = 100 + 0.25 × (100 − 0) = 125.
    c = ClusterState([Node("n0", 4)])
    j0 = run(c, Job("J0", 0, 2, duration=100), 0)
    rt = PartitionRuntime(Partition("default", backfill="adaptive", relax_factor=0.5))
    res = admit(
        rt,
        [Job("H", 0, 4, duration=10), Job("B", 1, 2, duration=200)],
        [j0],
        c,
        1.0,
        carry=Carry(max_queue_len=4),
        estimate=oracle,
    )
    assert res.carry.reservation is not None and res.carry.reservation.latest == pytest.approx(125)
    assert res.starts == []  # B ends at 201 > 125


# ---- node-aware reservations ---------------------------------------------------------------


def test_reservation_is_for_the_nodes_the_head_will_get() -> None:
    # n0: R0 holds 3 of 4 GPUs until 100; n1: R1 holds 2 of 4 until 200. H needs 4 GPUs on one node.
    # By GPU count, 6 are free at 100 and a long 1-GPU job B looks harmless; first fit would put B on
    # n0 and H could start only at 200. Node-aware: H is reserved n0 at 100 and B goes to n1.
    c = ClusterState([Node("n0", 4), Node("n1", 4)])
    r0 = run(c, Job("R0", 0, 3, duration=100), 0, node=0)
    r1 = run(c, Job("R1", 0, 2, duration=200), 0, node=1)
    rt = PartitionRuntime(Partition("default", placement="first-fit", backfill="easy"))
    h, b = Job("H", 1, 4, duration=10), Job("B", 2, 1, duration=1000)
    res = admit(rt, [h, b], [r0, r1], c, 2.0, estimate=oracle)
    assert started(res) == ["B"] and res.starts[0].backfilled
    assert nodes_of(res.starts[0].allocation) == [1]
    reservation = res.carry.reservation
    assert reservation is not None and reservation.start == 100 and nodes_of(reservation.allocation) == [0]


def test_a_head_that_can_never_start_with_what_runs_protects_nothing() -> None:
    # H needs n0's 4 GPUs; J0 holds 2 of them with no expected end: H has no projected start (though
    # it fits the empty partition), so B (1 GPU) runs now.
    c = ClusterState([Node("n0", 4)])
    j0 = run(c, Job("J0", 0, 2, duration=100), 0)
    j0 = RunningJob(j0.job, 0, math.inf, j0.allocation)
    rt = PartitionRuntime(Partition("default", backfill="easy"))
    queue = [Job("H", 1, 4, duration=10), Job("B", 2, 1, duration=500)]
    res = admit(rt, queue, [j0], c, 2.0, estimate=oracle)
    assert started(res) == ["B"]
    assert res.carry.reservation is not None and math.isinf(res.carry.reservation.start)


def test_a_job_that_can_never_fit_does_not_take_the_reservation_from_the_next_head() -> None:
    # H asks 8 GPUs of a 4-GPU partition: it could never start. X (4 GPUs) is the head that matters:
    # reserved n0 at 100 (J0's end); B (1 GPU, ends at 502) would delay it and waits. Were H the head,
    # its reservation would never start, B would backfill and X start at 502 instead of 100.
    c = ClusterState([Node("n0", 4)])
    j0 = run(c, Job("J0", 0, 2, duration=100), 0)
    rt = PartitionRuntime(Partition("default", backfill="easy"))
    queue = [Job("H", 1, 8, duration=10), Job("X", 2, 4, duration=10), Job("B", 3, 1, duration=500)]
    queue.append(Job("H2", 4, 8, duration=10))  # behind the head, said so too
    res = admit(rt, queue, [j0], c, 2.0, estimate=oracle)
    assert res.starts == [] and reasons(res) == {"H": INADMISSIBLE, "X": HEAD, "B": RESERVED, "H2": INADMISSIBLE}
    assert res.carry.reservation is not None and res.carry.reservation.job_id == "X"
    assert res.carry.reservation.start == 100
    said = {w.job.id: w.message for w in res.waiting}
    assert "it can never fit in default: needs 8 GPUs; the eligible nodes have 4" in said["H"]


@pytest.mark.parametrize("gang", [False, True])
def test_without_backfilling_a_job_that_can_never_fit_blocks_nobody(gang: bool) -> None:
    # H asks 8 GPUs (or a fixed 2x2 gang) of one 4-GPU node; B behind it starts, as in the simulator
    # (which rejects H up front)
    c = ClusterState([Node("n0", 4)])
    h = Job("H", 1, 4, nodes=2) if gang else Job("H", 1, 8)
    res = admit(PartitionRuntime(Partition("default")), [h, Job("B", 2, 1)], [], c, 2.0)
    assert started(res) == ["B"] and reasons(res) == {"H": INADMISSIBLE}
    assert ("its fixed shape can never fit" if gang else "it can never fit") in res.waiting[0].message
    # without explain (the simulator's and the operator's fast path) the same decision
    quiet = admit(PartitionRuntime(Partition("default")), [h, Job("B", 2, 1)], [], c, 2.0, explain=False)
    assert started(quiet) == ["B"]


@pytest.mark.parametrize("policy", ["srtf", "las", "rr", "mlfq"])
def test_under_a_preemptive_policy_a_job_that_can_never_fit_preempts_nobody(policy: str) -> None:
    # R holds the 4-GPU node. H (2 GPUs with 64 cores on an 8-core node) outranks it under SRTF (5 s
    # left against 990): it was kept in the policy's prefix, R was preempted, and H could not start
    c = ClusterState([Node("n0", 4, cpu_milli=8000)])
    r = run(c, Job("R", 0, 4, duration=1000), 0)
    for h in (Job("H", 1, 2, cpu_milli=64000, duration=5), Job("G", 1, 4, nodes=2, duration=5)):
        res = admit(PartitionRuntime(Partition("default", policy=policy)), [h], [r], c, 10.0, estimate=oracle)
        assert res.preemptions == [] and res.starts == [] and reasons(res) == {h.id: INADMISSIBLE}


@pytest.mark.parametrize(("placement", "never"), [("first-fit", True), ("best-fit", True), ("consolidate", False)])
def test_a_job_its_placer_never_places_even_on_empty_nodes_blocks_nobody(placement: str, never: bool) -> None:
    # 3 GPUs with 12 cores on three (2 GPUs, 4 cores) nodes: each node holds the share of one GPU. Enough
    # in all (could_ever_fit), but first-fit's gang is 2 x 2 (3 + ... as 2 + 1) and no node holds 2
    # GPUs' share: it never places W, which blocked the FIFO queue for ever (the simulator rejects it up
    # front, asking its placer on the empty cluster). Consolidate gives each node one GPU.
    c = ClusterState([Node(f"n{i}", 2, cpu_milli=4000) for i in range(3)])
    w = Job("W", 1, 3, cpu_milli=12000)
    res = admit(PartitionRuntime(Partition("default", placement=placement)), [w, Job("B", 2, 1)], [], c, 2.0)
    if never:
        assert started(res) == ["B"] and reasons(res) == {"W": INADMISSIBLE}
        assert f"the {placement} placement finds it no room even on the empty nodes" in res.waiting[0].message
    else:
        assert started(res) == ["W", "B"]


@pytest.mark.parametrize("policy", ["srtf", "las", "rr", "mlfq"])
def test_a_preemptive_policy_fills_within_the_quota(policy: str) -> None:
    # quota 2 on a 4-GPU node: the policy's prefix kept 2 GPUs, but its work-conserving fill then
    # started every job that fitted the node (3 of 4 GPUs held, over the quota)
    c = ClusterState([Node("n0", 4)])
    rt = PartitionRuntime(Partition("default", policy=policy, gpu_quota=2))
    res = admit(rt, [Job(f"J{k}", 0, 1, duration=10) for k in range(3)], [], c, 1.0, estimate=oracle)
    assert started(res) == ["J0", "J1"] and reasons(res) == {"J2": QUOTA}
    assert "the partition's GPU quota of 2 has 0 left" in res.waiting[0].message
    # a running job it outranks is preempted and what it held counts as free of the quota again
    r = run(c, Job("R", 0, 2, duration=1000), 0)
    res = admit(rt, [Job("S", 5, 1, duration=1), Job("T", 6, 1, duration=2)], [r], c, 10.0, estimate=oracle)
    if policy == "srtf":  # 990 s left: S and T go first, R stops
        assert [p.job.id for p in res.preemptions] == ["R"] and started(res) == ["S", "T"]


def test_a_job_asking_more_than_the_quota_waits_for_the_quota_and_blocks_nobody() -> None:
    # quota 4 GPUs on two 4-GPU nodes; J0 holds 2. Q asks 6: more than the partition may ever hold,
    # so it does not block the FIFO queue; C asks 3, within the quota but not now: it blocks; B waits.
    c = ClusterState([Node("n0", 4), Node("n1", 4)])
    j0 = run(c, Job("J0", 0, 2, duration=100), 0)
    rt = PartitionRuntime(Partition("default", gpu_quota=4))
    res = admit(rt, [Job("Q", 1, 6), Job("A", 2, 1), Job("C", 3, 3), Job("B", 4, 1)], [j0], c, 2.0)
    assert started(res) == ["A"] and reasons(res) == {"Q": INADMISSIBLE, "C": QUOTA, "B": BEHIND}
    said = {w.job.id: w.message for w in res.waiting}
    assert "asks 6 GPUs, more than the 4 default may ever hold (its GPU quota)" in said["Q"]
    assert "the partition's GPU quota of 4 has 1 left" in said["C"]


def test_a_job_over_the_quota_left_that_its_nodes_could_never_hold_blocks_nobody() -> None:
    # quota 10 on one 8-GPU node, J0 holds 4: N asks 9, within the quota but more than the node has.
    # Over what is left of the quota now, it would have blocked the FIFO queue until J0 ended.
    c = ClusterState([Node("n0", 8)])
    j0 = run(c, Job("J0", 0, 4, duration=100), 0)
    res = admit(PartitionRuntime(Partition("default", gpu_quota=10)), [Job("N", 1, 9), Job("B", 2, 1)], [j0], c, 2.0)
    assert started(res) == ["B"] and reasons(res) == {"N": INADMISSIBLE}
    assert "it can never fit in default: needs 9 GPUs; the eligible nodes have 8" in res.waiting[0].message


def test_without_backfilling_the_head_blocks_the_queue() -> None:
    c = ClusterState([Node("n0", 4)])
    j0 = run(c, Job("J0", 0, 2, duration=100), 0)
    rt = PartitionRuntime(Partition("default"))
    res = admit(rt, [Job("H", 1, 4), Job("B", 2, 1)], [j0], c, 2.0)
    assert res.starts == [] and reasons(res) == {"H": HEAD, "B": BEHIND}
    assert "behind H" in res.waiting[1].message
    assert res.carry.reservation is None


def test_a_waiting_message_says_what_is_free_after_the_starts_before_it() -> None:
    """Jobs with the same request share the pass's "what is free" line until the books move: C, like
    X, needs 4 GPUs, but B2 was backfilled between them, so C's line counts 1 free, not X's 2."""
    c = ClusterState([Node("n0", 4), Node("n1", 4)])
    j0 = run(c, Job("J0", 0, 4, duration=100), 0, node=0)
    rt = PartitionRuntime(Partition("default", placement="consolidate", backfill="easy"))
    queue = [Job("A", 1, 8, duration=50), Job("B1", 2, 2, duration=10), Job("X", 3, 4, duration=500),
             Job("B2", 4, 1, duration=10), Job("C", 5, 4, duration=500)]  # fmt: skip
    res = admit(rt, queue, [j0], c, 5.0, estimate=oracle)
    assert started(res) == ["B1", "B2"]
    said = {w.job.id: w.message for w in res.waiting}
    assert "; 2 GPUs free in default; 0 node(s) have 4 free;" in said["X"]
    assert "; 1 GPUs free in default; 0 node(s) have 4 free;" in said["C"]
    assert c.books == 1  # J0's booking: the pass books on its own copy


def test_backfilling_needs_estimates_and_the_pass_never_mutates_the_cluster() -> None:
    c = ClusterState([Node("n0", 4)])
    rt = PartitionRuntime(Partition("default", backfill="easy"))
    with pytest.raises(InvalidInput, match="estimate"):
        admit(rt, [Job("A", 0, 1)], [], c, 0.0)
    before = c.gpu_free_milli.copy()
    res = admit(PartitionRuntime(Partition("default")), [Job("A", 0, 1), Job("B", 0, 2)], [], c, 0.0)
    assert started(res) == ["A", "B"]
    assert (c.gpu_free_milli == before).all()


@settings(max_examples=300, deadline=None)
@given(
    running=st.lists(st.tuples(st.integers(0, 1), st.integers(1, 4), st.floats(1, 500)), min_size=1, max_size=4),
    head=st.tuples(st.integers(3, 8), st.floats(0, 50)),
    queue=st.lists(st.tuples(st.integers(1, 4), st.floats(1, 1000)), max_size=6),
    mode=st.sampled_from(["easy", "relaxed", "adaptive"]),
    placement=st.sampled_from(["first-fit", "best-fit", "consolidate"]),
)
def test_backfilled_jobs_never_push_the_head_past_its_latest_start(running, head, queue, mode, placement) -> None:
    """Whatever the pass backfills, the head's start re-projected with those jobs running stays by
    its latest start (estimates exact here, as 004's guarantee assumes)."""
    c = ClusterState([Node("n0", 4), Node("n1", 4)])
    runs = []
    for k, (node, gpus, dur) in enumerate(running):
        alloc = on_node(c, node, gpus)
        if alloc is None:
            continue
        c.allocate(alloc)
        runs.append(RunningJob(Job(f"R{k}", 0, gpus, duration=dur), 0, dur, alloc))
    now = 60.0
    waiting = [Job("H", head[1], head[0], duration=10)]
    waiting += [Job(f"Q{k}", 51 + k, g, duration=d) for k, (g, d) in enumerate(queue)]
    rt = PartitionRuntime(Partition("default", placement=placement, backfill=mode, relax_factor=0.2))
    res = admit(rt, waiting, runs, c, now, estimate=oracle)
    reservation = res.carry.reservation
    if reservation is None or math.isinf(reservation.start):
        return
    # Project again from scratch: the running jobs plus what the pass started, none of them touched.
    after = c.copy()
    extra = []
    for s in res.starts:
        assert s.allocation is not None
        after.allocate(s.allocation)
        extra.append(RunningJob(s.job, now, now + oracle(s.job, None), s.allocation))
    head_job = next(j for j in waiting if j.id == reservation.job_id)
    check = admit(PartitionRuntime(rt.partition), [head_job], runs + extra, after, now, estimate=oracle)
    assert check.carry.reservation is not None
    assert check.carry.reservation.start <= reservation.latest + 1e-6


# ---- quotas and policy blocks --------------------------------------------------------------


def test_capacity_share_blocks_a_model_type_at_its_share() -> None:
    # 8 GPUs, two model types with half each. resnet already holds 4: its next job waits, bert's runs.
    c = ClusterState([Node("n0", 8)])
    ctx = OrderContext(total_gpus=8, usage_by_model={"resnet": 4}, capacity_shares={"resnet": 0.5, "bert": 0.5})
    rt = PartitionRuntime(Partition("default", policy="capacity"), ctx)
    res = admit(rt, [Job("r", 0, 1, model="resnet"), Job("b", 1, 2, model="bert")], [], c, 5.0)
    assert started(res) == ["b"] and reasons(res) == {"r": BLOCKED}
    assert "holds 4 of its 4-GPU share" in res.waiting[0].message


def test_partition_quota() -> None:
    c = ClusterState([Node("n0", 8)])
    r = run(c, Job("R", 0, 3, duration=100), 0)
    rt = PartitionRuntime(Partition("default", gpu_quota=4))
    res = admit(rt, [Job("A", 1, 1), Job("B", 2, 1)], [r], c, 5.0)
    assert started(res) == ["A"] and reasons(res) == {"B": QUOTA}  # 3 held + 1 = the quota of 4


# ---- GENIE shapes -----------------------------------------------------------------------------


def test_swaf_starts_jobs_with_the_shape_it_chose() -> None:
    # SWAF (seed 001 Alg. 1) picks a ⟨d_node, d_gpn⟩ by CER; the start realises exactly that shape.
    platform = Platform(nodes=4, gpus_per_node=4)
    db = ModelDB.builtin()
    c = ClusterState([Node(f"n{k}", 4) for k in range(4)])
    job = Job("t", 0, 1, model="ResNet50", batch=256, iters=2000, qos="Urgent")
    ctx = OrderContext(platform=platform, modeldb=db)
    rt = PartitionRuntime(Partition("default", policy="swaf", placement="cer"), ctx)
    task, profile = genie.Task.from_job(job), db.get("ResNet50")
    ranked = genie.by_cer(genie.placement_table(task, profile, platform, ctx.theta))
    want = genie.choose(ranked, 0.0, genie.deadline(task, profile)).shape
    assert want != Shape(1, 1)  # the case only tests something when SWAF's shape differs from the request
    res = admit(rt, [job], [], c, 0.0)
    (s,) = res.starts
    assert s.shape == want
    assert s.allocation is not None and len(s.allocation.grants) == want.d_node
    assert all(len(g.gpu_ids) == want.d_gpn for g in s.allocation.grants)


# ---- preemptive policies ----------------------------------------------------------------------


def test_preemptive_pass_preempts_the_most_served_and_fills_what_still_fits() -> None:
    # LAS on 2 nodes × 4 GPUs. R1 (attained 100) and R2 (200) hold 2 GPUs on each node; X (4 GPUs,
    # attained 0) ranks first but no node has 4 free; Y (1 GPU, 500 attained... waiting) is outside
    # the GPU budget (4 + 2 + 2 = 8), yet fits now: the fill starts it rather than idle 4 GPUs.
    c = ClusterState([Node("n0", 4), Node("n1", 4)])
    r1 = run(c, Job("R1", 0, 2, duration=1000, attained=100), 0, node=0)
    r2 = run(c, Job("R2", 0, 2, duration=1000, attained=200), 0, node=1)
    rt = PartitionRuntime(Partition("default", policy="las", placement="consolidate"))
    x, y = Job("X", 5, 4, attained=0), Job("Y", 6, 1, attained=500)
    res = admit(rt, [x, y], [r1, r2], c, 10.0)
    assert res.preemptions == [] and started(res) == ["Y"] and reasons(res) == {"X": NO_FIT}


def test_preemptive_pass_preempts_outranked_running_jobs() -> None:
    # One node of 4: R (attained 8000 GPU-s) holds all 4; N (attained 0, 2 GPUs) outranks it.
    c = ClusterState([Node("n0", 4)])
    r = run(c, Job("R", 0, 4, duration=5000, attained=8000), 0)
    rt = PartitionRuntime(Partition("default", policy="las"))
    res = admit(rt, [Job("N", 100, 2)], [r], c, 100.0)
    assert [p.job.id for p in res.preemptions] == ["R"] and started(res) == ["N"]
    assert get_policy("las").preemptive and not get_policy("fifo").preemptive


def test_partition_validates_its_fields() -> None:
    with pytest.raises(InvalidInput, match="policy"):
        Partition("p", policy="bogus")
    with pytest.raises(InvalidInput, match="backfill"):
        Partition("p", backfill="aggressive")
    with pytest.raises(InvalidInput, match="relax_factor"):
        Partition("p", relax_factor=-1)


# ---- SODA multi-array (seed 002 §V-C) ---------------------------------------------------------


def soda_runtime(cluster: ClusterState, split: float = 0.5) -> PartitionRuntime:
    ctx = OrderContext(total_gpus=cluster.total_gpus, total_cpu_milli=int(cluster.cpu_cap.sum()))
    return PartitionRuntime(Partition("default", policy="soda", placement="best-fit", array_split=split), ctx)


def test_soda_splits_gpu_nodes_into_arrays() -> None:
    # 3 GPU nodes (8, 4, 4 GPUs) and a CPU node; split 0.5 of 16 GPUs: the 8-GPU node is the 4-GPU array.
    c = ClusterState([Node("g8", 8), Node("g4a", 4), Node("g4b", 4), Node("cpu", 0, cpu_milli=8000)])
    pools = soda_runtime(c).array_pools(c)
    assert [list(map(bool, c.pools[pools[a]])) for a in ("gpu-4", "gpu-1", "cpu")] == [
        [True, False, False, False],
        [False, True, True, False],
        [False, False, False, True],
    ]


def test_soda_arrays_block_independently_and_overflow() -> None:
    # g8 (4-GPU array) is full until 500; a 4-GPU job overflows to the free 4-GPU node of the 1-GPU
    # array; a second one waits, blocking only its own array: the 1-GPU job behind it still starts.
    # The CPU array's first job (20 cores, more than any node has) can never fit: it blocks nobody.
    c = ClusterState([Node("g8", 8, cpu_milli=16000), Node("g4a", 4, cpu_milli=16000), Node("g4b", 4, cpu_milli=16000)])
    rt = soda_runtime(c)
    big = run(c, Job("big", 0, 8, duration=500), 0, node=0)
    small = run(c, Job("small", 0, 3, duration=500), 0, node=2)
    jobs = [Job("A4", 1, 4), Job("B4", 2, 4), Job("C1", 3, 1)]
    jobs += [Job("cpu-big", 0, 0, cpu_milli=20000), Job("cpu-small", 1, 0, cpu_milli=1000)]
    res = admit(rt, jobs, [big, small], c, 5.0)
    # arrays in name order: cpu, gpu-1, gpu-4
    assert started(res) == ["cpu-small", "C1", "A4"]
    assert reasons(res) == {"cpu-big": INADMISSIBLE, "B4": HEAD}
    assert nodes_of(res.starts[1].allocation) == [2] and nodes_of(res.starts[2].allocation) == [1]
    assert res.preemptions == []


def test_soda_job_larger_than_any_array_spans_them_instead_of_blocking_for_ever() -> None:
    # Two 8-GPU nodes, one per array. A 16-GPU job fits neither array even empty, but the partition:
    # it takes both nodes (before the fix it waited for ever, and every >=4-GPU job behind it too).
    c = ClusterState([Node("a", 8), Node("b", 8)])
    rt = soda_runtime(c)
    res = admit(rt, [Job("wide", 0, 16), Job("next", 1, 4)], [], c, 5.0)
    assert started(res) == ["wide"] and nodes_of(res.starts[0].allocation) == [0, 1]
    # with one node busy it waits as the head of its array, and an 8-GPU job still uses its own array
    busy = run(c, Job("busy", 0, 8, duration=100), 0, node=1)
    res = admit(rt, [Job("wide", 0, 16), Job("eight", 1, 8)], [busy], c, 5.0)
    assert started(res) == [] and reasons(res) == {"wide": HEAD, "eight": BEHIND}


def test_soda_gpu_job_reclaims_cores_lent_to_cpu_jobs() -> None:
    # A CPU node of 4 cores and a GPU node with 4 GPUs and 8 cores. C1 fills the CPU node; C2 borrows
    # 4 cores on the GPU node. G needs 4 GPUs and 6 cores: only 4 are free, so C2 is aborted for it.
    c = ClusterState([Node("cpu", 0, cpu_milli=4000), Node("gpu", 4, cpu_milli=8000)])
    rt = soda_runtime(c)
    first = admit(rt, [Job("C1", 0, 0, cpu_milli=4000), Job("C2", 1, 0, cpu_milli=4000)], [], c, 1.0)
    assert started(first) == ["C1", "C2"]
    assert [nodes_of(s.allocation) for s in first.starts] == [[0], [1]]
    runs = []
    for s in first.starts:
        c.allocate(s.allocation)  # type: ignore[arg-type]
        runs.append(RunningJob(s.job, 1.0, 1000.0, s.allocation))
    res = admit(rt, [Job("G", 10, 4, cpu_milli=6000)], runs, c, 10.0)
    assert [p.job.id for p in res.preemptions] == ["C2"] and started(res) == ["G"]
    assert "reclaims" in res.preemptions[0].reason
    # a CPU job never reclaims: with the GPU node's cores taken, C3 waits instead of preempting G
    c.release(runs[1].allocation)  # type: ignore[arg-type]
    c.allocate(res.starts[0].allocation)  # type: ignore[arg-type]
    g = RunningJob(res.starts[0].job, 10.0, 500.0, res.starts[0].allocation)
    again = admit(rt, [Job("C3", 11, 0, cpu_milli=4000)], [runs[0], g], c, 11.0)
    assert again.starts == [] and again.preemptions == []


def _cpu_head_case() -> tuple[ClusterState, PartitionRuntime, list[RunningJob]]:
    """c0 (8 cores, the CPU array), g8 (the 4-GPU array) and g4 (the 1-GPU array), 16 cores each. X fills
    c0 until 1000, R all of g4 until 10000; L (1-GPU array) borrows one of g8's GPUs and all its cores until
    1000. A CPU job of 12 cores fits nowhere until then (reserved on g8 at 1000)."""
    c = ClusterState([Node("c0", 0, cpu_milli=8000), Node("g8", 8, cpu_milli=16000), Node("g4", 4, cpu_milli=16000)])
    rt = PartitionRuntime(
        Partition("default", policy="soda", placement="best-fit", backfill="easy", array_split=0.5),
        OrderContext(total_gpus=12, total_cpu_milli=40000),
    )
    assert c.pools[rt.array_pools(c)["gpu-4"]].tolist() == [False, True, False]
    runs = [run(c, Job("X", 0, 0, cpu_milli=8000, duration=1000), 0, node=0)]
    runs.append(run(c, Job("R", 0, 4, cpu_milli=16000, duration=10000), 0, node=2))
    runs.append(run(c, Job("L", 0, 1, cpu_milli=16000, duration=1000), 0, node=1))
    return c, rt, runs


def test_soda_reclaims_nothing_for_a_job_that_may_not_backfill() -> None:
    # G (8 GPUs and 16 cores) would reclaim g8 from L (its array goes after H's: L would wait behind H), but
    # holding g8's cores until 5002 it would delay H: it may not backfill, and L runs on (before, L was
    # preempted all the same and nothing started: in the simulator nothing ran again)
    c, rt, runs = _cpu_head_case()
    h = Job("H", 1, 0, cpu_milli=12000, duration=100)
    res = admit(rt, [h, Job("G", 2, 8, cpu_milli=16000, duration=5000)], runs, c, 2.0, estimate=oracle)
    assert res.preemptions == [] and res.starts == []
    assert reasons(res) == {"H": HEAD, "G": RESERVED}
    # short enough to end before H's reserved start, G reclaims g8 and starts
    res = admit(rt, [h, Job("G", 2, 8, cpu_milli=16000, duration=500)], runs, c, 2.0, estimate=oracle)
    assert started(res) == ["G"] and [p.job.id for p in res.preemptions] == ["L"]


def test_soda_job_no_array_can_place_spans_them_even_when_an_array_could_ever_fit_it() -> None:
    # gpu-4 = {n0, n1}, gpu-1 = {n2}. J (3 GPUs, 20 cores) is a 1-GPU-array job; n2 has 2 GPUs. In the
    # 4-GPU array it could fit in all (n0 2 + n1 1), but first-fit's 2 x 2 gang needs n1 to hold 2 GPUs'
    # share (13.3 cores of its 8): no array ever places it, so it spans them (n0 + n2). It waited for ever.
    c = ClusterState([Node("n0", 2), Node("n1", 2, cpu_milli=8000), Node("n2", 2)])
    ctx = OrderContext(total_gpus=c.total_gpus, total_cpu_milli=8000)
    rt = PartitionRuntime(Partition("default", policy="soda", placement="first-fit", array_split=0.57), ctx)
    pools = rt.array_pools(c)
    assert c.pools[pools["gpu-4"]].tolist() == [True, True, False]
    res = admit(rt, [Job("J", 0, 3, cpu_milli=20000)], [], c, 1.0)
    assert started(res) == ["J"] and nodes_of(res.starts[0].allocation) == [0, 2]


def test_soda_projects_a_blocked_head_in_its_arrays() -> None:
    # gA is the 4-GPU array, gB the 1-GPU array; R1 (6 GPUs) holds gA until 1000, R2 (6 GPUs) gB until
    # 2000. H (4 GPUs, the 4-GPU array) fits in neither array now: 2 + 2 GPUs are free, one gang over
    # both arrays, which SODA never places. It is reserved at 1000 on gA, and B (1 GPU, ends at 60)
    # backfills. The projection placed it over the partition: "start now", then B's end.
    c = ClusterState([Node("gA", 8), Node("gB", 8)])
    rt = PartitionRuntime(
        Partition("default", policy="soda", placement="free-gpu", backfill="easy", array_split=0.5),
        OrderContext(total_gpus=16),
    )
    assert c.pools[rt.array_pools(c)["gpu-4"]].tolist() == [True, False]
    runs = [run(c, Job("R1", 0, 6, duration=1000), 0, node=0), run(c, Job("R2", 0, 6, duration=2000), 0, node=1)]
    res = admit(rt, [Job("H", 5, 4, duration=100)], runs, c, 10.0, estimate=oracle)
    reservation = res.carry.reservation
    assert reservation is not None and reservation.start == 1000
    assert nodes_of(reservation.allocation) == [0]
    res = admit(rt, [Job("H", 5, 4, duration=100), Job("B", 6, 1, duration=50)], runs, c, 10.0, estimate=oracle)
    assert started(res) == ["B"] and res.carry.reservation is not None and res.carry.reservation.start == 1000


def test_soda_backfills_a_job_in_an_array_that_lends_to_it_away_from_the_head() -> None:
    # gA is the 4-GPU array (20 cores), gB the 1-GPU array (16 cores). H (3 GPUs, 12 cores, the 1-GPU
    # array) fits nowhere now and is reserved on gA at 1000, when R1 ends. J (4 GPUs, 9 cores, the 4-GPU
    # array) fits its own array, but there it would leave gA 11 cores at 1000: H would wait for R2 (5000).
    # In the 1-GPU array, which lends to it, J delays nobody: it backfills there. Placed away from H
    # over the partition instead, it went to gA again (best fit) and waited.
    c = ClusterState([Node("gA", 8, cpu_milli=20000), Node("gB", 8, cpu_milli=16000)])
    rt = PartitionRuntime(
        Partition("default", policy="soda", placement="best-fit", backfill="easy", array_split=0.5),
        OrderContext(total_gpus=16, total_cpu_milli=36000),
    )
    assert c.pools[rt.array_pools(c)["gpu-4"]].tolist() == [True, False]
    r1 = run(c, Job("R1", 0, 4, cpu_milli=10000, duration=1000), 0, node=0)
    r2 = run(c, Job("R2", 0, 2, cpu_milli=6000, duration=5000), 0, node=1)
    waiting = [Job("H", 5, 3, cpu_milli=12000, duration=100), Job("J", 6, 4, cpu_milli=9000, duration=5000)]
    res = admit(rt, waiting, [r1, r2], c, 10.0, estimate=oracle)
    assert reasons(res) == {"H": HEAD} and started(res) == ["J"] and nodes_of(res.starts[0].allocation) == [1]
    reservation = res.carry.reservation
    assert reservation is not None and (reservation.start, reservation.backfilled) == (1000, ("J",))


def test_soda_defines_its_arrays_on_every_fresh_cluster_of_a_kept_runtime() -> None:
    # The operator keeps a VirtualCluster's runtime and builds a ClusterState every pass. The runtime knew
    # its arrays' cluster by id(cluster.pools): once the last pass's state was freed, the next one's pools
    # could come at the same address, and the pass failed ("no such node pool 'default/gpu-4'", found by
    # the SODA lockstep). The second state's pools here are the first's object, emptied: that address.
    rt = PartitionRuntime(Partition("default", policy="soda", array_split=0.5), OrderContext(total_gpus=12))
    first = ClusterState([Node("g8", 8), Node("g4", 4)])
    assert started(admit(rt, [Job("J0", 0, 4, duration=10)], [], first, 1.0)) == ["J0"]
    fresh = ClusterState([Node("g8", 8), Node("g4", 4)])
    fresh.pools = first.pools
    fresh.pools.clear()
    res = admit(rt, [Job("J1", 0, 4, duration=10)], [], fresh, 2.0)
    assert started(res) == ["J1"] and nodes_of(res.starts[0].allocation) == [0]


def test_soda_takes_back_what_its_pass_lent_when_the_owners_job_needs_it() -> None:
    # One 4-GPU node: the 4-GPU array. J (1 GPU, the 1-GPU array, whose array has no nodes) comes first
    # in the order and borrows; G (4 GPUs) finds its array short of one GPU. The pass takes J's start
    # back for G. It had started J, and the operator's next pass at the same instant reclaimed it.
    c = ClusterState([Node("n0", 4)])
    rt = PartitionRuntime(Partition("default", policy="soda", array_split=0.5), OrderContext(total_gpus=4))
    res = admit(rt, [Job("J", 0, 1, duration=10), Job("G", 0, 4, duration=10)], [], c, 1.0)
    assert started(res) == ["G"] and res.unstarted == ["J"] and res.preemptions == []
    assert reasons(res) == {"J": NO_FIT} and "takes back what it would lend to gpu-1" in res.waiting[0].message
    # as the next pass sees it: nothing changes
    g = RunningJob(res.starts[0].job, 1.0, 11.0, res.starts[0].allocation)
    c.allocate(res.starts[0].allocation)  # type: ignore[arg-type]
    again = admit(rt, [Job("J", 0, 1, duration=10)], [g], c, 1.0)
    assert again.starts == [] and again.preemptions == [] and again.unstarted == []


def test_soda_under_lower_priority_preemption_leaves_a_higher_priority_borrower_its_gpus() -> None:
    # As above, J of priority 1: G (priority 0) does not take back its start, nor reclaim it running
    # (else J would take them back at the next pass by its priority, and so on).
    c = ClusterState([Node("n0", 4)])
    part = Partition("default", policy="soda", array_split=0.5, preemption=PreemptionPolicy("LowerPriority", "Any"))
    rt = PartitionRuntime(part, OrderContext(total_gpus=4))
    waiting = [Job("J", 0, 1, duration=10, priority=1), Job("G", 0, 4, duration=10)]
    res = admit(rt, waiting, [], c, 1.0)
    assert started(res) == ["J"] and res.unstarted == [] and reasons(res) == {"G": HEAD}
    j = run(c, waiting[0], 1.0, node=0)
    again = admit(rt, [waiting[1]], [j], c, 1.0)
    assert again.starts == [] and again.preemptions == []


def test_soda_keeps_a_start_it_would_take_back_for_a_job_that_may_not_backfill() -> None:
    # B (1 GPU, no cores, 100 s) backfills on g8 behind H. G (8 GPUs, 16 cores, 5000 s) would reclaim g8
    # from L and take B's start back, but it would delay H: nothing of it stands.
    c, rt, runs = _cpu_head_case()
    waiting = [Job("H", 1, 0, cpu_milli=12000, duration=100), Job("B", 2, 1, duration=100)]
    res = admit(rt, [*waiting, Job("G", 3, 8, cpu_milli=16000, duration=5000)], runs, c, 10.0, estimate=oracle)
    assert started(res) == ["B"] and res.starts[0].backfilled and nodes_of(res.starts[0].allocation) == [1]
    assert res.preemptions == [] and res.unstarted == [] and reasons(res) == {"H": HEAD, "G": RESERVED}


def test_soda_requeued_job_goes_to_its_array_head_and_drf_orders_the_rest() -> None:
    # u1 already holds 4 of 8 GPUs: u2's job goes before u1's; an aborted job (requeued) goes first.
    ctx = OrderContext(total_gpus=8, total_cpu_milli=8000, usage_by_user={"u1": (4, 0)})
    jobs = [
        Job("u1-a", 0, 1, user="u1"),
        Job("u2-a", 1, 1, user="u2"),
        Job("u1-back", 0.5, 1, user="u1", enqueued=9.0),
    ]
    order = [d.job.id for d in get_policy("soda").order(jobs, ctx)]
    assert order == ["u1-back", "u2-a", "u1-a"]


def test_soda_with_backfilling_projects_without_the_reclaimed_jobs() -> None:
    # g8 is the 4-GPU array, g4 the 1-GPU array. S2 (2 GPUs) overflowed onto g8 and is expected to end
    # at 20; G (8 GPUs) reclaims g8 from it. G2 (8 GPUs) then blocks and is reserved at G's end (50):
    # the projection must not release S2 a second time at 20 (it was released when reclaimed).
    c = ClusterState([Node("g8", 8), Node("g4", 4)])
    rt = PartitionRuntime(
        Partition("default", policy="soda", placement="best-fit", backfill="easy", array_split=0.6),
        OrderContext(total_gpus=12),
    )
    s1 = run(c, Job("S1", 0, 3, duration=1000), 0, node=1)
    s2 = run(c, Job("S2", 1, 2, duration=19), 1, node=0)
    waiting = [Job("G", 10, 8, duration=40), Job("G2", 11, 8, duration=30)]
    res = admit(rt, waiting, [s1, s2], c, 10.0, estimate=oracle)
    assert [p.job.id for p in res.preemptions] == ["S2"] and started(res) == ["G"]
    reservation = res.carry.reservation
    assert reservation is not None and (reservation.job_id, reservation.start) == ("G2", 50)


def test_soda_reclaims_only_what_its_job_needs_least_lost_work_first() -> None:
    # One 8-GPU node, all of it the 4-GPU array (split 0.9): the 1-GPU array borrows it. A (run 90 s) and
    # B (run 10 s) hold a GPU there; this pass lends C a third, then G (own array) finds 5 free. Reclaimed
    # one at a time like a cohort's: taking C's start back frees 6 GPUs, enough for a 6-GPU G, and A and
    # B run on (every borrower on the node was preempted before); a 7-GPU G also stops B, whose run so
    # far (10 s) loses less than A's
    def one(gpus: int) -> AdmissionResult:
        c = ClusterState([Node("g", 8)])
        rt = soda_runtime(c, split=0.9)
        a, b = run(c, Job("A", 0, 1, duration=1000), 10.0, node=0), run(c, Job("B", 1, 1, duration=1000), 90.0, node=0)
        return admit(rt, [Job("C", 2, 1), Job("G", 3, gpus)], [a, b], c, 100.0)

    six = one(6)
    assert started(six) == ["G"] and six.unstarted == ["C"] and six.preemptions == []
    seven = one(7)
    assert started(seven) == ["G"] and seven.unstarted == ["C"]
    assert [p.job.id for p in seven.preemptions] == ["B"]


def test_soda_behind_a_reserved_head_reclaims_nothing_that_would_go_ahead_of_it() -> None:
    # One 4-GPU node, the 4-GPU array's (split 0.9); B1 and B2 (1-GPU array) borrow a GPU each until 100.
    # H (3 GPUs, 1-GPU array) blocks, reserved at 100. G (4 GPUs, 10 s) would end before then, but only by
    # reclaiming B1 and B2, which re-enter the 1-GPU array's head, ahead of H, and would start before it
    c = ClusterState([Node("g", 4)])
    rt = PartitionRuntime(
        Partition("default", policy="soda", placement="best-fit", backfill="easy", array_split=0.9),
        OrderContext(total_gpus=4),
    )
    borrowers = [run(c, Job(f"B{k}", 0, 1, duration=100), 0.0, node=0) for k in (1, 2)]
    waiting = [Job("H", 1, 3, duration=50), Job("G", 2, 4, duration=10)]
    res = admit(rt, waiting, borrowers, c, 5.0, estimate=oracle)
    assert started(res) == [] and res.preemptions == []
    assert res.carry.reservation is not None and res.carry.reservation.job_id == "H"


def test_soda_remembers_an_arrays_refusal_until_something_is_released() -> None:
    # Both arrays full (a and b, 4 GPUs each): thirty 2-GPU jobs of the 1-GPU array wait, the first as its
    # reserved head, the rest as backfill candidates. Each array refused 2 GPUs once: the other 29 jobs
    # are not placed again (the GENIE replay asked some 900 placements a pass). Once b's job ends its
    # refusal is forgotten: the head and the next start there.
    c = ClusterState([Node("a", 4), Node("b", 4)])
    rt = PartitionRuntime(
        Partition("default", policy="soda", placement="best-fit", backfill="easy", array_split=0.5),
        OrderContext(total_gpus=8),
    )
    calls: list[str | None] = []
    placer = rt.placer

    class Counting:
        name = placer.name

        def place(self, req: PlacementRequest, cluster: ClusterState) -> Allocation | None:
            calls.append(req.pool)
            return placer.place(req, cluster)

    rt.placer = Counting()
    # 2-GPU jobs of the 1-GPU array everywhere: nothing for its jobs to reclaim
    xs = [run(c, Job(f"x{k}", 0, 2, duration=100), 0, node=0) for k in range(2)]
    ys = [run(c, Job(f"y{k}", 0, 2, duration=50), 0, node=1) for k in range(2)]
    waiting = [Job(f"q{i}", 1 + i, 2, duration=10) for i in range(30)]
    res = admit(rt, waiting, [*xs, *ys], c, 40.0, estimate=oracle)
    assert started(res) == [] and reasons(res)["q0"] == HEAD and reasons(res)["q29"] == NO_FIT
    # q0's two refusals and the head's projection (on copies: not remembered); 65 without the memo
    assert calls[:2] == ["default/gpu-1", "default/gpu-4"] and len(calls) < 10
    for y in ys:
        assert y.allocation is not None
        c.release(y.allocation)
    res = admit(rt, waiting, xs, c, 50.0, estimate=oracle, carry=res.carry)
    assert started(res) == ["q0", "q1"]


def test_a_head_overtaken_by_its_policy_is_reserved_anew() -> None:
    # n0 4 GPUs, n1 1 GPU, SJF. R (2 GPUs on n0) ends at 100: H (4 GPUs, 50 s) is reserved at 100, latest
    # 100. At 60 S (1 GPU, 45 s: shorter, ahead of H) starts on n0 and H moves to 105. B (1 GPU, 500 s)
    # on n1 delays nobody: it backfills. H kept its latest of 100, which no start at 105 meets: every
    # backfill that outlived 105 was refused, B "would delay H past its latest start 100 s".
    c = ClusterState([Node("n0", 4), Node("n1", 1)])
    rt = PartitionRuntime(Partition("default", policy="sjf", placement="first-fit", backfill="easy"))
    r = run(c, Job("R", 0, 2, duration=100), 0, node=0)
    h = Job("H", 1, 4, duration=50)
    first = admit(rt, [h], [r], c, 1.0, estimate=oracle)
    assert first.carry.reservation is not None and first.carry.reservation.latest == 100
    s, b = Job("S", 60, 1, duration=45), Job("B", 60, 1, duration=500)
    res = admit(rt, [h, s, b], [r], c, 60.0, estimate=oracle, carry=first.carry)
    assert [(x.job.id, nodes_of(x.allocation), x.backfilled) for x in res.starts] == [
        ("S", [0], False),
        ("B", [1], True),
    ]
    reservation = res.carry.reservation
    assert reservation is not None and (reservation.start, reservation.latest, reservation.backfilled) == (
        105,
        105,
        ("B",),
    )


# ---- the fit memo keeps a refusal only on the books it was made on ---------------------------------


def test_a_refusal_is_not_remembered_across_freshly_built_cluster_states() -> None:
    """The operator builds its ClusterState afresh every pass (release counters at 0) and keeps the
    PartitionRuntime: an 8-GPU job refused while the node was busy must start once a new state shows
    the node free, though no release was ever counted."""
    rt = PartitionRuntime(Partition("default"))  # consolidate: 8 GPUs on one node
    busy = ClusterState([Node("n0", 8), Node("n1", 8)])
    # 4 + 4 GPUs free: enough in the VC, on no single node, so the placer refuses and the memo notes it
    held = [run(busy, Job("J0", 0, 4, duration=100), 0, node=0), run(busy, Job("J1", 0, 4, duration=100), 0, node=1)]
    h = Job("H", 1, 8, duration=10)
    assert started(admit(rt, [h], held, busy, 1.0, estimate=oracle)) == []
    assert rt.memo.smallest == 8
    free = ClusterState([Node("n0", 8), Node("n1", 8)])  # the next pass: J0 and J1 have finished
    assert started(admit(rt, [h], [], free, 101.0, estimate=oracle)) == ["H"]


@settings(max_examples=400, deadline=None)
@given(
    caps=st.lists(st.tuples(st.integers(0, 8), st.sampled_from([0, 4000, 32000])), min_size=1, max_size=3),
    running=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4), st.floats(1, 500)), max_size=3),
    queue=st.lists(
        st.tuples(
            st.integers(1, 12),
            st.sampled_from([0, 2000, 64000, 3 * 2**62 * 1000]),
            st.sampled_from([0, 1, 2]),
            st.floats(1, 1000),
        ),
        min_size=1,
        max_size=6,
    ),
    backfill=st.sampled_from(["none", "easy", "relaxed", "adaptive"]),
    quota=st.sampled_from([None, 4, 8]),
    placement=st.sampled_from(["first-fit", "best-fit", "consolidate"]),
    longest=st.integers(0, 12),
    policy=st.sampled_from(["fifo", "sjf", "srtf", "las"]),
)
def test_an_inadmissible_job_decides_nothing(caps, running, queue, backfill, quota, placement, longest, policy) -> None:
    """A job that can never start (over its partition's ceiling, or no node could ever hold it) waits as
    Inadmissible and changes nothing else: the same starts, reservation and waits as without it (as in the
    simulator, which rejects it up front); ``longest``: the longest queue an earlier pass saw (adaptive)."""
    c = ClusterState([Node(f"n{i}", g, cpu_milli=m) for i, (g, m) in enumerate(caps)])
    runs = []
    for k, (node, gpus, dur) in enumerate(running):
        alloc = on_node(c, node % len(caps), gpus)
        if alloc is not None:
            c.allocate(alloc)
            runs.append(RunningJob(Job(f"R{k}", 0, gpus, duration=dur), 0, dur, alloc))
    jobs = [
        Job(f"Q{k}", 1 + k, g, cpu_milli=cpu, nodes=n if g % max(n, 1) == 0 else 0, duration=d)
        for k, (g, cpu, n, d) in enumerate(queue)
    ]
    preemptive = policy in ("srtf", "las")  # orders waiting and running jobs together; never backfills
    part = Partition("default", policy, placement, "none" if preemptive else backfill, gpu_quota=quota)

    def decide(waiting: list[Job]) -> AdmissionResult:
        return admit(PartitionRuntime(part), waiting, runs, c.copy(), 60.0, carry=Carry(None, longest), estimate=oracle)

    res = decide(jobs)
    never = {w.job.id for w in res.waiting if w.code == INADMISSIBLE}
    rest = decide([j for j in jobs if j.id not in never])
    assert [(s.job.id, s.allocation, s.backfilled) for s in res.starts] == [
        (s.job.id, s.allocation, s.backfilled) for s in rest.starts
    ]
    assert [x.job.id for x in res.preemptions] == [x.job.id for x in rest.preemptions]
    assert {k: v for k, v in reasons(res).items() if k not in never} == reasons(rest)
    keep = res.carry.reservation, rest.carry.reservation
    assert [(r.job_id, r.start, r.latest, r.allocation) if r else None for r in keep] == [
        (r.job_id, r.start, r.latest, r.allocation) if r else None for r in keep[::-1]
    ]
    for j in jobs:  # and never started: its partition may never hold its GPUs, or no placement ever holds it
        if j.id in never:
            req = PlacementRequest.for_job(j, j.fixed_shape)
            assert (quota is not None and j.gpus > quota) or (
                c.could_ever_fit(req) is not None or get_placer(placement).place(req, c.emptied()) is None
            )


def test_a_genie_policy_chooses_a_shape_the_partitions_unlike_nodes_can_hold() -> None:
    # nodes of 1, 1 and 2 GPUs. tetris-perf placed a BERT task of batch 64 at ⟨3 × 2⟩, the best
    # throughput of a 3 x 2 platform that does not exist: it waited for ever as the head
    c = ClusterState([Node("n0", 1, gpu_model="V100M32"), Node("n1", 1, gpu_model="V100M32"), Node("n2", 2, gpu_model="V100M32")])  # fmt: skip
    ctx = OrderContext(platform=c.platform(c.vc_id == 0), modeldb=ModelDB.builtin(), total_gpus=4)
    rt = PartitionRuntime(Partition("default", policy="tetris-perf", placement="cer"), ctx)
    res = admit(rt, [Job("J", 0, 1, model="BERT", batch=64, iters=1)], [], c, 1.0)
    assert started(res) == ["J"] and res.starts[0].shape == Shape(1, 2)
