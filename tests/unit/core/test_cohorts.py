"""Cohorts that share nodes: borrowing, lending, reclaim and priorities (extender/core/cohorts.py
through the admission pass), hand-computed. Nodes are named <vc><k>; every node has 4 GPUs unless a
case says otherwise.

cap_P = q_P + max(0, min(b_P, Σ_{m≠P} spare_m − Σ_{m≠P} borrowed_m)),
spare_m = min(l_m, max(q_m − held_m − demand_m, 0)) (the module docstring).
"""

from __future__ import annotations

import pytest
from qosmos.extender.core.admission import (
    BEHIND,
    HEAD,
    INADMISSIBLE,
    QUOTA,
    AdmissionResult,
    Partition,
    PartitionRuntime,
    RunningJob,
    admit,
)
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.cohorts import (
    CohortMember,
    PreemptionPolicy,
    cohort_cap,
    lost_work,
    quota_state,
    victim_order,
)
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.ordering import OrderContext, get_policy, static_key
from qosmos.extender.core.quota import QuotaState, effective_quota
from qosmos.extender.core.types import Allocation, Job, Node, NodeGrant


def nodes(*spec: str, gpus: int = 4, model: str = "") -> list[Node]:
    """nodes("a0", "b0") -> a0 in vc a, b0 in vc b."""
    return [Node(n, gpus, gpu_model=model, vc=n[0]) for n in spec]


def hold(c: ClusterState, job: Job, node: str, start: float, gpu_ids: tuple[int, ...] | None = None) -> RunningJob:
    """Book ``job`` on ``node`` (its first free GPUs, or ``gpu_ids``) and describe it as running."""
    i = c.index[node]
    ids = gpu_ids or tuple(k for k in range(int(c.gpu_cap[i])) if c.gpu_free_milli[i, k] == 1000)[: job.gpus]
    alloc = Allocation((NodeGrant(i, ids),))
    c.allocate(alloc)
    return RunningJob(job, start, start + 1000, alloc)


def part(name: str, **kw: object) -> Partition:
    return Partition(name, cohort="c", **kw)  # type: ignore[arg-type]


def started(res: AdmissionResult) -> dict[str, list[str]]:
    """job id -> names of the nodes it starts on (``c`` is the pass's cluster)."""
    return {s.job.id: [g.node for g in s.allocation.grants] for s in res.starts if s.allocation}  # type: ignore[misc]


def node_names(c: ClusterState, res: AdmissionResult) -> dict[str, list[str]]:
    return {s.job.id: [c.nodes[g.node].name for g in s.allocation.grants] for s in res.starts if s.allocation}


def preempted(res: AdmissionResult) -> list[str]:
    return [p.job.id for p in res.preemptions]


def reasons(res: AdmissionResult) -> dict[str, str]:
    return {w.job.id: w.code for w in res.waiting}


# ---- the cap (borrowing and lending limits) --------------------------------------------------------


def test_cap_formula_counts_what_the_others_borrow_and_lend() -> None:
    a = quota_state(part("a"), 4, 4, ())
    b = quota_state(part("b"), 4, 0, ())  # spare 4
    c6 = quota_state(part("c"), 4, 6, ())  # borrows 2 of it
    assert cohort_cap(a, [b, c6]) == 4 + (4 - 2)
    # a lending limit caps what b lends; b's own waiting demand that fits its share is kept back
    assert cohort_cap(a, [quota_state(part("b", lending_limit=1), 4, 0, ())]) == 5
    assert cohort_cap(a, [quota_state(part("b"), 4, 0, [Job("w", 0, 3)])]) == 4 + 1
    # a waiting job larger than b's unused share (8 > 4) could not start on it: it holds nothing back
    assert cohort_cap(a, [quota_state(part("b"), 4, 0, [Job("w", 0, 8)])]) == 8
    assert cohort_cap(quota_state(part("a", borrowing_limit=3), 4, 4, ()), [b]) == 7


def test_effective_quota_never_lends_a_gpu_twice() -> None:
    # a borrows 6 of b's 16 spare; without a borrowing limit it may hold at most 8 + 16 = 24 in all
    # (the old form added what it borrowed on top of the pool again: 8 + 6 + 16 = 30)
    a = QuotaState("a", nominal=8, borrowing_limit=None, held=14)
    b = QuotaState("b", nominal=16, held=0)
    assert effective_quota([a, b], "a") == 24


def test_a_job_of_a_starts_on_bs_idle_node() -> None:
    c = ClusterState(nodes("a0", "b0"))
    ra = [hold(c, Job("A0", 0, 4, vc="a"), "a0", 0)]
    pa, pb = part("a"), part("b")
    res = admit(PartitionRuntime(pa), [Job("J", 1, 2, vc="a")], ra, c, 10, cohort=[CohortMember(pb, [], [])])
    assert node_names(c, res) == {"J": ["b0"]}
    assert not res.preemptions


def test_without_a_cohort_nothing_is_shared() -> None:
    # the same cluster and jobs, no cohort: J waits for a's node, b0 stays out of reach
    c = ClusterState(nodes("a0", "b0"))
    ra = [hold(c, Job("A0", 0, 4, vc="a"), "a0", 0)]
    res = admit(PartitionRuntime(Partition("a")), [Job("J", 1, 2, vc="a")], ra, c, 10)
    assert res.starts == [] and reasons(res) == {"J": HEAD}
    assert c.eligible("a").tolist() == [True, False]
    with pytest.raises(InvalidInput, match="cohort"):
        admit(PartitionRuntime(Partition("a")), [], ra, c, 10, cohort=[CohortMember(part("b"), [], [])])


def test_borrowing_stops_at_the_borrowing_limit() -> None:
    # a holds its 4; cap = 4 + min(2, 8 idle in b) = 6: J1 (2) borrows, J2 (2) waits on the quota
    c = ClusterState(nodes("a0", "b0", "b1"))
    ra = [hold(c, Job("A0", 0, 4, vc="a"), "a0", 0)]
    rt = PartitionRuntime(part("a", borrowing_limit=2))
    waiting = [Job("J1", 1, 2, vc="a"), Job("J2", 2, 2, vc="a")]
    res = admit(rt, waiting, ra, c, 10, cohort=[CohortMember(part("b"), [], [])])
    assert list(node_names(c, res)) == ["J1"]
    assert reasons(res) == {"J2": QUOTA}
    assert "borrow" in res.waiting[0].message


@pytest.mark.parametrize(
    ("limits", "ceiling", "made_of"),
    [
        ({"borrowing_limit": 2}, 6, "its nominal share of 4 plus its borrowing limit of 2"),
        ({"lending_limit": 3}, 7, "its nominal share of 4 plus all that cohort c could lend it"),
    ],
)
def test_a_job_asking_more_than_the_cohort_could_ever_give_blocks_nobody(
    limits: dict[str, int], ceiling: int, made_of: str
) -> None:
    # a: nominal 4 (a0), b: 8 (b0, b1). Ceiling: 4 + min(borrowing limit 2, 8) = 6, or 4 + b's lending
    # limit 3 = 7. Big asks 8: never admitted, so it neither reclaims nor blocks a's FIFO queue; J starts.
    c = ClusterState(nodes("a0", "b0", "b1"))
    pa = part("a", borrowing_limit=limits.get("borrowing_limit"))
    pb = part("b", lending_limit=limits.get("lending_limit"))
    rb = [hold(c, Job("B0", 0, 4, vc="b"), "b0", 0)]
    waiting = [Job("Big", 1, 8, vc="a"), Job("J", 2, 2, vc="a")]
    res = admit(PartitionRuntime(pa), waiting, [], c, 10, cohort=[CohortMember(pb, rb, [])])
    assert list(node_names(c, res)) == ["J"] and not res.preemptions
    assert reasons(res) == {"Big": INADMISSIBLE}
    assert f"asks 8 GPUs, more than the {ceiling} a may ever hold ({made_of})" in res.waiting[0].message
    # asking the ceiling itself, while a holds its 4, is only over the cap now: it waits and blocks J
    waiting = [Job("Fits", 1, ceiling, vc="a"), Job("J", 2, 2, vc="a")]
    busy = [hold(c, Job("A0", 0, 4, vc="a"), "a0", 0)]
    res = admit(PartitionRuntime(pa), waiting, busy, c, 10, cohort=[CohortMember(pb, rb, [])])
    assert res.starts == [] and reasons(res) == {"Fits": QUOTA, "J": BEHIND}


def test_a_lenders_waiting_job_that_can_never_start_keeps_nothing_from_being_lent() -> None:
    # b's BX asks its 4 idle GPUs as 4 nodes x 1: the cohort has 2 nodes, so it never starts. Counted as
    # b's demand, it kept b from lending for ever (cap_a = 4 + 0: J waited on the quota); the simulator,
    # which rejects BX up front, lent. A job of b that could start (2 GPUs) still keeps its 2.
    c = ClusterState(nodes("a0", "b0"))
    ra = [hold(c, Job("A0", 0, 4, vc="a"), "a0", 0)]
    waiting = [Job("J", 1, 4, vc="a")]
    never = Job("BX", 0, 4, vc="b", nodes=4)
    res = admit(PartitionRuntime(part("a")), waiting, ra, c, 10, cohort=[CohortMember(part("b"), [], [never])])
    assert node_names(c, res) == {"J": ["b0"]}
    res = admit(
        PartitionRuntime(part("a")),
        waiting,
        ra,
        c,
        10,
        cohort=[CohortMember(part("b"), [], [never, Job("B", 0, 2, vc="b")])],
    )
    assert res.starts == [] and reasons(res) == {"J": QUOTA}
    assert "has 2 left" in res.waiting[0].message


def test_a_lending_limit_caps_what_b_lends() -> None:
    # b lends at most 1 of its 4 idle GPUs: cap_a = 4 + 1; J1 (1) starts on b0, J2 (1) waits
    c = ClusterState(nodes("a0", "b0"))
    ra = [hold(c, Job("A0", 0, 4, vc="a"), "a0", 0)]
    waiting = [Job("J1", 1, 1, vc="a"), Job("J2", 2, 1, vc="a")]
    res = admit(PartitionRuntime(part("a")), waiting, ra, c, 10, cohort=[CohortMember(part("b", lending_limit=1), [])])
    assert node_names(c, res) == {"J1": ["b0"]}
    assert reasons(res) == {"J2": QUOTA}


# ---- reclaim ------------------------------------------------------------------------------------


def borrowed_setup(x_start: float, y_start: float, y_submit: float = 5.0) -> tuple[ClusterState, list[RunningJob]]:
    """a (nominal 4 on a0) holds a0 and borrows b0 (X) and b1 (Y): held 12, borrowed 8."""
    c = ClusterState(nodes("a0", "b0", "b1"))
    ra = [
        hold(c, Job("A0", 0, 4, vc="a"), "a0", 0),
        hold(c, Job("X", 1, 4, vc="a"), "b0", x_start),
        hold(c, Job("Y", y_submit, 4, vc="a"), "b1", y_start),
    ]
    return c, ra


def test_a_lenders_blocked_head_reclaims_the_borrower_with_least_lost_work() -> None:
    # now 100: lost work X = 100 × 4 = 400 GPU-s, Y = 50 × 4 = 200 GPU-s (A0 as much as X, and more
    # than Y); b's head H (4 GPUs, within b's nominal 8) needs one node: Y goes, H starts on b1 in
    # this very pass
    c, ra = borrowed_setup(x_start=0, y_start=50)
    pa, pb = part("a"), part("b")
    res = admit(PartitionRuntime(pb), [Job("H", 90, 4, vc="b")], [], c, 100, cohort=[CohortMember(pa, ra, [])])
    assert preempted(res) == ["Y"]
    assert "reclaimed by VC b for job H" in res.preemptions[0].reason
    assert node_names(c, res) == {"H": ["b1"]}
    assert lost_work(ra[2], 100) == 200 and lost_work(ra[1], 100) == 400


def test_reclaim_ties_go_to_the_job_submitted_last() -> None:
    c, ra = borrowed_setup(x_start=0, y_start=0, y_submit=5)  # equal lost work; Y submitted after X
    res = admit(
        PartitionRuntime(part("b")), [Job("H", 90, 4, vc="b")], [], c, 100, cohort=[CohortMember(part("a"), ra)]
    )
    assert preempted(res) == ["Y"]
    assert [r.job.id for r in victim_order(ra, 100)][:2] == ["Y", "X"]


def test_reclaim_preempts_as_few_as_needed() -> None:
    # H needs 2 GPUs: one borrowed 4-GPU job is enough, never both
    c, ra = borrowed_setup(x_start=0, y_start=50)
    res = admit(
        PartitionRuntime(part("b")), [Job("H", 90, 2, vc="b")], [], c, 100, cohort=[CohortMember(part("a"), ra)]
    )
    assert preempted(res) == ["Y"] and node_names(c, res) == {"H": ["b1"]}


def test_reclaim_spares_a_cheaper_borrower_whose_gpus_do_not_help() -> None:
    # S (1 GPU on b0 beside b's own 3-GPU job, 10 GPU-s lost) is released first on the scratch copy,
    # but 1 free GPU does not hold H (4); Y (b1, 200 GPU-s) does, and H gets b1: only Y is preempted
    c = ClusterState(nodes("a0", "b0", "b1"))
    ra = [
        hold(c, Job("A0", 0, 4, vc="a"), "a0", 0),
        hold(c, Job("S", 3, 1, vc="a"), "b0", 90),
        hold(c, Job("Y", 5, 4, vc="a"), "b1", 50),
    ]
    rb = [hold(c, Job("B0", 0, 3, vc="b"), "b0", 0)]
    res = admit(
        PartitionRuntime(part("b")), [Job("H", 95, 4, vc="b")], rb, c, 100, cohort=[CohortMember(part("a"), ra)]
    )
    assert preempted(res) == ["Y"] and node_names(c, res) == {"H": ["b1"]}


def test_no_reclaim_when_the_borrowed_gpus_are_the_wrong_model() -> None:
    # H wants an A100; the borrowers sit on V100 nodes and b's own A100 node is busy with b's job
    c = ClusterState([*nodes("a0", "b0", model="V100"), Node("b1", 4, gpu_model="A100", vc="b")])
    ra = [hold(c, Job("A0", 0, 4, vc="a"), "a0", 0), hold(c, Job("X", 1, 4, vc="a"), "b0", 50)]
    rb = [hold(c, Job("B0", 0, 4, vc="b"), "b1", 0)]
    h = Job("H", 90, 4, vc="b", gpu_models=("A100",))
    res = admit(PartitionRuntime(part("b", gpu_quota=12)), [h], rb, c, 100, cohort=[CohortMember(part("a"), ra)])
    assert res.preemptions == [] and res.starts == [] and reasons(res) == {"H": HEAD}


def test_no_reclaim_when_the_freed_gpus_are_not_on_one_node() -> None:
    # H needs 4 GPUs on one node (nodes=1). The borrowers hold 2 GPUs on b0 and 2 on b1, b's own jobs
    # the other halves: releasing both frees 2 + 2 on two nodes, never 4 on one
    c = ClusterState(nodes("a0", "b0", "b1"))
    ra = [
        hold(c, Job("A0", 0, 4, vc="a"), "a0", 0),
        hold(c, Job("X", 1, 2, vc="a"), "b0", 50),
        hold(c, Job("Y", 2, 2, vc="a"), "b1", 50),
    ]
    rb = [hold(c, Job("B0", 0, 2, vc="b"), "b0", 0), hold(c, Job("B1", 0, 2, vc="b"), "b1", 0)]
    h = Job("H", 90, 4, vc="b", nodes=1)
    res = admit(PartitionRuntime(part("b")), [h], rb, c, 100, cohort=[CohortMember(part("a"), ra)])
    assert res.preemptions == [] and res.starts == []


@pytest.mark.parametrize("within", ["Never", "LowerPriority"])
def test_reclaim_within_cohort_never_keeps_the_borrowers(within: str) -> None:
    c, ra = borrowed_setup(x_start=0, y_start=50)
    pb = part("b", preemption=PreemptionPolicy(within_partition=within, reclaim_within_cohort="Never"))
    res = admit(PartitionRuntime(pb), [Job("H", 90, 4, vc="b")], [], c, 100, cohort=[CohortMember(part("a"), ra)])
    assert res.preemptions == [] and reasons(res) == {"H": HEAD}


def test_no_reclaim_beyond_the_lenders_nominal_share() -> None:
    # b's nominal share is 4 and it holds 2 on b0 already: a 4-GPU head would take it to 6 > 4. It may
    # borrow (c, without nodes, has a share of 8: pool_b = 8 − a's 4 borrowed, cap_b = 8), but a
    # borrowing head takes nothing back from a borrower
    c = ClusterState(nodes("a0", "b0", "b1"))
    ra = [hold(c, Job("A0", 0, 4, vc="a"), "a0", 0), hold(c, Job("Y", 5, 4, vc="a"), "b1", 50)]
    rb = [hold(c, Job("B0", 0, 2, vc="b"), "b0", 0)]
    members = [CohortMember(part("a"), ra), CohortMember(part("c", gpu_quota=8), [])]
    res = admit(PartitionRuntime(part("b", gpu_quota=4)), [Job("H", 90, 4, vc="b")], rb, c, 100, cohort=members)
    assert res.preemptions == [] and res.starts == [] and reasons(res) == {"H": HEAD}


def test_only_the_head_reclaims() -> None:
    # b's queue under FIFO: the head H1 (4) reclaims Y; H2 (4) behind it does not take X too
    c, ra = borrowed_setup(x_start=0, y_start=50)
    waiting = [Job("H1", 80, 4, vc="b"), Job("H2", 90, 4, vc="b")]
    res = admit(PartitionRuntime(part("b")), waiting, [], c, 100, cohort=[CohortMember(part("a"), ra)])
    assert preempted(res) == ["Y"] and list(node_names(c, res)) == ["H1"]


def test_booked_reclaim_releases_the_victims_on_the_callers_books() -> None:
    c, ra = borrowed_setup(x_start=0, y_start=50)
    res = admit(
        PartitionRuntime(part("b")),
        [Job("H", 90, 4, vc="b")],
        [],
        c,
        100,
        cohort=[CohortMember(part("a"), ra)],
        book=True,
    )
    assert res.booked and preempted(res) == ["Y"]
    assert int(c.free_gpus[c.index["b1"]]) == 0  # Y released, H booked on the same GPUs


# ---- priorities ---------------------------------------------------------------------------------


def test_priority_breaks_ties_of_the_policy_only() -> None:
    ctx = OrderContext()
    fifo = get_policy("fifo")
    same = [Job("p0", 5, 1), Job("p9", 5, 1, priority=9), Job("early", 1, 1), Job("late", 7, 1, priority=99)]
    assert [d.job.id for d in fifo.order(same, ctx)] == ["early", "p9", "p0", "late"]
    equal = [Job("x", 5, 1), Job("y", 5, 1), Job("z", 5, 1)]  # equal priorities: arrival order, as before
    assert [d.job.id for d in fifo.order(equal, ctx)] == ["x", "y", "z"]
    sjf = get_policy("sjf")
    jobs = [Job("s0", 0, 1, duration=10), Job("s5", 1, 1, duration=10, priority=5), Job("short", 2, 1, duration=1)]
    assert [d.job.id for d in sjf.order(jobs, ctx)] == ["short", "s5", "s0"]


def test_the_priority_policy_is_kueues_order_priority_then_arrival() -> None:
    ctx = OrderContext()
    policy = get_policy("priority")
    jobs = [Job("p0", 5, 1), Job("p9", 5, 1, priority=9), Job("early", 1, 1), Job("late", 7, 1, priority=99)]
    assert [d.job.id for d in policy.order(jobs, ctx)] == ["late", "p9", "early", "p0"]
    assert policy.static and sorted(jobs, key=lambda j: static_key(policy, j, ctx))[:2] == [jobs[3], jobs[1]]
    # in the admission cycle: the high-priority later job starts first on the one free GPU
    c = ClusterState([Node("n0", 1)])
    res = admit(PartitionRuntime(Partition("default", policy="priority")), jobs[:3], [], c, 10)
    assert [s.job.id for s in res.starts] == ["p9"]


def test_lower_priority_preemption_within_the_partition() -> None:
    # one 4-GPU node: L1 (prio 0, 2 GPUs, from 0) and L2 (prio 0, 2 GPUs, from 50) run; H (prio 5, 2
    # GPUs) arrives. Never: H waits. LowerPriority: L2 (100 GPU-s lost, L1 200) goes and H starts.
    def setup() -> tuple[ClusterState, list[RunningJob]]:
        c = ClusterState([Node("n0", 4)])
        return c, [hold(c, Job("L1", 0, 2), "n0", 0), hold(c, Job("L2", 1, 2), "n0", 50)]

    h = Job("H", 90, 2, priority=5)
    c, run = setup()
    assert admit(PartitionRuntime(Partition("default")), [h], run, c, 100).preemptions == []
    c, run = setup()
    lp = Partition("default", preemption=PreemptionPolicy(within_partition="LowerPriority"))
    res = admit(PartitionRuntime(lp), [h], run, c, 100)
    assert preempted(res) == ["L2"] and "higher priority" in res.preemptions[0].reason
    assert [s.job.id for s in res.starts] == ["H"]
    # an equal priority is not lower: nothing to preempt
    c, run = setup()
    res = admit(PartitionRuntime(lp), [Job("E", 90, 2)], run, c, 100)
    assert res.preemptions == [] and res.starts == []


def test_lower_priority_preemption_frees_the_quota_too() -> None:
    # quota 2 on an 8-GPU node: L (prio 0, 2 GPUs) holds it; H (prio 1, 2 GPUs) fits the node but not
    # the quota: L is preempted for the quota's sake
    c = ClusterState([Node("n0", 8)])
    run = [hold(c, Job("L", 0, 2), "n0", 0)]
    lp = Partition("default", gpu_quota=2, preemption=PreemptionPolicy(within_partition="LowerPriority"))
    res = admit(PartitionRuntime(lp), [Job("H", 5, 2, priority=1)], run, c, 10)
    assert preempted(res) == ["L"] and [s.job.id for s in res.starts] == ["H"]


def test_partition_validation() -> None:
    with pytest.raises(InvalidInput, match="borrowing_limit"):
        Partition("a", borrowing_limit=2)  # no cohort
    with pytest.raises(InvalidInput, match="lending_limit"):
        Partition("a", cohort="c", lending_limit=-1)
    with pytest.raises(InvalidInput, match="within_partition"):
        PreemptionPolicy(within_partition="Always")
    with pytest.raises(InvalidInput, match="cohort"):
        Partition("a", policy="soda", cohort="c")
    assert Partition("a", gpu_quota=3).nominal_gpus == 3


def test_the_eta_forecast_of_a_cohort_member_shares_its_nodes_as_its_pass_did() -> None:
    """The forecast runs admit on a copy of the pass's cluster, whose nodes that pass shared in the
    cohort: without the members it would ask for a sharing of one (an error: no ETA for any cohort
    member); with them, the waiting job's ETA is when a's running job ends on the shared nodes."""
    from qosmos.extender.core.forecast import forecast

    c = ClusterState(nodes("a0", "b0"))
    pa, pb = part("a"), part("b")
    ra = [hold(c, Job("R", 0, 4, vc="a"), "a0", 0), hold(c, Job("S", 0, 4, vc="a"), "b0", 0)]
    members = [CohortMember(pb, [], [])]
    rt = PartitionRuntime(pa)
    waiting = [Job("W", 5, 4, vc="a")]
    res = admit(rt, waiting, ra, c, 10, cohort=members, estimate=lambda j, a: 100.0)
    assert not res.starts  # both nodes busy
    eta = forecast(rt, waiting, ra, c, 10, lambda j, a: 100.0, cohort=members).starts
    assert eta == {"W": 1000}
    with pytest.raises(InvalidInput):
        forecast(rt, waiting, ra, c, 10, lambda j, a: 100.0)
