"""One implementation of every decision: generated traces through the simulator and through the operator's
own passes (``qosmos.testing.lockstep``: its plan and applier on an in-memory apiserver, at every event and
again after its writes) give the same run segments, and no pass takes back an earlier pass's decision.

The property found each regression case below; each fails on the code before its fix."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qosmos.extender.core.admission import FitMemo, Partition, PartitionRuntime, RunningJob, admit
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.failures import DEFAULT_BACKOFF_LIMIT, DEFAULT_NODE_LOST_S
from qosmos.extender.core.types import Allocation, Job, Node, NodeGrant
from qosmos.operator.translate import parse_time, rfc3339
from qosmos.simulator.engine import SimConfig, simulate
from qosmos.simulator.failures import ScriptedFailures, ScriptedOutages
from qosmos.simulator.partitions import PartitionSpec
from qosmos.simulator.traces import Trace
from qosmos.testing.lockstep import GPU_MODEL, NODE_CPU_MILLI, NODE_MEMORY_MIB, T0, Passes, TraceJob, same_segments

PREEMPTIVE = ("srtf", "las", "rr", "mlfq")
# node -> (down, up[, drain]) in trace seconds (up None: never back; drain: kubectl drain, not a failure)
Outages = dict[str, list[tuple[int, int | None] | tuple[int, int | None, bool]]]
POLICIES = ("fifo", "sjf", "priority", "wfair", "qssf", "soda", *PREEMPTIVE)
# policies that read no run time: beside QSSF, whose run times are the learned predictor's on both sides
BLIND = ("fifo", "priority", "wfair")
PLACERS = ("consolidate", "first-fit", "best-fit", "free-gpu", "cer")
BACKFILL = ("none", "easy", "relaxed", "adaptive")


def simulated(
    vcs: dict[str, dict[str, Any]],
    nodes: list[int],
    node_vc: list[str],
    jobs: list[TraceJob],
    placement: str,
    backfill: str,
    learned: bool = False,
    outages: Outages | None = None,
) -> list[tuple[str, float, float]]:
    """The simulator's run segments of ``jobs`` with the VirtualClusters ``vcs`` as its partitions; run
    times known (the oracle), or ``learned``: predicted online by QSSF's predictor from the jobs that
    finished (backfilling's estimates too). ``outages``: node name -> (down, up) in trace seconds (up
    None: never back); the replay counts them from its first submission."""
    trace = Trace(
        "t",
        [j.job() for j in jobs],
        [
            Node(f"n{i}", g, vc=v, gpu_model=GPU_MODEL, cpu_milli=NODE_CPU_MILLI, memory_mib=NODE_MEMORY_MIB)
            for i, (g, v) in enumerate(zip(nodes, node_vc, strict=True))
        ],
        withdraw_at=[None if j.withdraw is None else float(j.withdraw) for j in jobs],
    )
    parts = []
    for name, spec in vcs.items():
        quota, pre = spec.get("quota") or {}, spec.get("preemption") or {}
        parts.append(
            PartitionSpec(
                name,
                cohort=spec.get("cohort"),
                nominal_gpus=quota.get("gpus"),
                borrowing_limit=quota.get("borrowingLimit"),
                lending_limit=quota.get("lendingLimit"),
                policy=spec["policy"],
                within_partition=pre.get("withinVirtualCluster", "Never"),
                reclaim_within_cohort=pre.get("reclaimWithinCohort", "Any"),
                array_split=spec.get("arraySplit"),
            )
        )
    failures = ScriptedFailures({f"ns/{j.name}": j.fail_at for j in jobs if j.fail_at})
    (limit,) = {j.backoff_limit for j in jobs} or {None}
    first = min((j.submit for j in jobs), default=0)
    spans = {
        n: [
            (float(o[0] - first), math.inf if o[1] is None else float(o[1] - first), len(o) > 2 and bool(o[2]))
            for o in v
        ]
        for n, v in (outages or {}).items()
    }
    (grace,) = {spec.get("nodeLostSeconds", DEFAULT_NODE_LOST_S) for spec in vcs.values()}
    cfg = SimConfig(
        placement=placement,
        backfill=backfill,
        preemption_overhead=0.0,
        backfill_estimates="predicted" if learned else "oracle",
        predictor="qssf",
        partitions=tuple(parts),
        failures=failures if failures.times else None,
        backoff_limit=DEFAULT_BACKOFF_LIMIT if limit is None else limit,
        outages=ScriptedOutages(spans) if spans else None,
        node_lost_seconds=grace,
    )
    sim = simulate(trace, cfg)
    return sorted({(trace.jobs[i].id, s, e) for i, _, s, e, _ in sim.segments})  # one per job, not per node


def lockstep(
    vcs: dict[str, dict[str, Any]],
    nodes: list[int],
    node_vc: list[str],
    jobs: list[TraceJob],
    placement: str,
    backfill: str,
    restarts: bool = False,
    outages: Outages | None = None,
) -> Passes:
    specs = {n: {**spec, "placement": placement, "backfill": backfill} for n, spec in vcs.items()}
    # QSSF orders by the predictor's run times: the operator's and the simulator's, each trained online on
    # the jobs that finished (the cases mix it only with policies that read no run time)
    learned = any(spec["policy"] == "qssf" for spec in vcs.values())
    run = Passes({}, nodes, jobs, predict=not learned, vcs=specs, node_vc=node_vc, restarts=restarts, outages=outages)
    run.run()  # asserts that no later pass preempts
    want = simulated(vcs, nodes, node_vc, jobs, placement, backfill, learned, outages)
    assert same_segments(want, run.segments), f"\nsimulator {want}\noperator  {sorted(run.segments)}"
    return run


def one_vc(
    policy: str,
    placement: str,
    backfill: str,
    nodes: list[int],
    jobs: list[TraceJob],
    lower_priority: bool = False,
    array_split: float = 0.5,
    restarts: bool = False,
    outages: Outages | None = None,
    grace: int | None = None,
) -> Passes:
    spec: dict[str, Any] = {"policy": policy}
    if grace is not None:
        spec["nodeLostSeconds"] = grace
    if policy == "soda":  # (the simulator's default derives it from the trace)
        spec["arraySplit"] = array_split
    if lower_priority:
        spec["preemption"] = {"withinVirtualCluster": "LowerPriority"}
    return lockstep({"default": spec}, nodes, ["default"] * len(nodes), jobs, placement, backfill, restarts, outages)


ROUND_TIMES = (0, 100, 200, 500, 1000)


@st.composite
def trace_jobs(draw: st.DrawFn, sizes: list[int]) -> list[TraceJob]:
    """One to seven jobs of ``sizes`` GPUs (0: a CPU job of 16 to 96 cores), submitted in the first 3,000 s,
    running up to 4,000 s; many at a few round times, so that arrivals meet each other and the ends of
    runs at one instant (what the two sides must order alike)."""
    raw = draw(
        st.lists(
            st.tuples(
                st.one_of(st.integers(0, 3000), st.sampled_from(ROUND_TIMES)),
                st.sampled_from(sizes),
                st.one_of(st.integers(1, 4000), st.sampled_from(ROUND_TIMES[1:])),
                st.sampled_from([16, 48, 96]),
            ),
            min_size=1,
            max_size=7,
        )
    )
    # the simulator's ties go by trace order: the trace in arrival order
    return sorted(
        (TraceJob(f"j{k}", s, g, d, cpus=0 if g else c) for k, (s, g, d, c) in enumerate(raw)),
        key=lambda j: (j.submit, j.name),
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, str, str, list[int], list[TraceJob], bool, float]:
    policy = draw(st.sampled_from(POLICIES))
    # (SODA's CPU resource array is its GPU-less nodes)
    nodes = draw(
        st.lists(st.sampled_from([0, 1, 2, 4, 8] if policy == "soda" else [1, 2, 4, 8]), min_size=1, max_size=3)
    )
    # a preemptive policy's turns are quantum / GPUs: binary fractions, exact in a status timestamp
    sizes = (1, 2, 4, 8, 16) if policy in PREEMPTIVE else (0, 1, 2, 3, 4, 6, 8, 16)
    jobs = draw(trace_jobs([g for g in sizes if g <= sum(nodes)]))
    placement, backfill = draw(st.sampled_from(PLACERS)), draw(st.sampled_from(BACKFILL))
    split = draw(st.sampled_from([0.25, 0.5, 0.75]))
    return policy, placement, backfill, nodes, draw(shaped(jobs, nodes)), draw(st.booleans()), split


@st.composite
def shaped(draw: st.DrawFn, jobs: list[TraceJob], nodes: list[int]) -> list[TraceJob]:
    """Some jobs with a priority (ties of the policy, LowerPriority preemption), a fixed gpusPerNode,
    deleted after their creation (waiting, running or finished by then), or failing at some times (running,
    backing off or not running then), checkpointing or not, failing for good past a backoff limit."""
    out = []
    limit = draw(st.sampled_from([None, 0, 1]))  # (one for all: the simulator's is the replay's)
    for j in jobs:
        gpn = [g for g in (1, 2, 4, 8) if j.gpus and j.gpus % g == 0 and g <= max(nodes)]  # (not a CPU job's)
        fails = ()
        if draw(st.integers(0, 3)) == 0:
            at = st.one_of(st.integers(1, 5000), st.sampled_from(ROUND_TIMES[1:]), st.just(j.submit + 10))
            fails = tuple(draw(st.lists(at, min_size=1, max_size=4, unique=True)))
        out.append(
            dataclasses.replace(
                j,
                priority=draw(st.sampled_from([0, 0, 1, 2, -1])),
                gpus_per_node=draw(st.sampled_from([0, *gpn])) if draw(st.booleans()) else 0,
                withdraw=j.submit + draw(st.integers(1, 4000)) if draw(st.integers(0, 4)) == 0 else None,
                fail_at=fails,
                checkpoint=draw(st.sampled_from([None, 0, 100, 300])) if fails else None,
                backoff_limit=limit,
            )
        )
    return out


@st.composite
def outage_cases(draw: st.DrawFn) -> tuple[str, str, str, list[int], list[TraceJob], Outages, int]:
    """A case with nodes going down: each outage at a round time or any, for less or more than the grace,
    or for ever; one in three a drain (kubectl drain: cordoned, its pods evicted) instead."""
    policy, placement, backfill, nodes, jobs, _, _ = draw(cases())
    grace = draw(st.sampled_from([0, 60, 300]))
    outages: Outages = {}
    for _ in range(draw(st.integers(1, 3))):
        node = f"n{draw(st.integers(0, len(nodes) - 1))}"
        down = draw(st.one_of(st.integers(0, 4000), st.sampled_from(ROUND_TIMES)))
        length = draw(st.one_of(st.none(), st.integers(1, 600), st.sampled_from([30, 300, 1000])))
        up = None if length is None else down + length
        drain = draw(st.integers(0, 2)) == 0
        mine = outages.setdefault(node, [])
        if all((up is not None and up < o[0]) or (o[1] is not None and down > o[1]) for o in mine):
            mine.append((down, up, drain))
    return policy, placement, backfill, nodes, jobs, outages, grace


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(outage_cases())
def test_nodes_going_down_and_back_get_the_simulators_decisions(
    case: tuple[str, str, str, list[int], list[TraceJob], Outages, int],
) -> None:
    """Gangs on a node that goes down stall, are requeued (NodeLost) after the grace or restart when it is
    back sooner; gangs on a drained node are requeued at once (Disrupted); nothing new goes to either
    until it is back: the operator's passes and the replay agree."""
    policy, placement, backfill, nodes, jobs, outages, grace = case
    one_vc(policy, placement, backfill, nodes, jobs, outages=outages, grace=grace)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_operators_passes_make_the_simulators_decisions(
    case: tuple[str, str, str, list[int], list[TraceJob], bool, float],
) -> None:
    one_vc(*case)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_an_operator_restarted_before_every_pass_makes_the_simulators_decisions(
    case: tuple[str, str, str, list[int], list[TraceJob], bool, float],
) -> None:
    """Nothing a decision needs lives only in the operator's memory: the objects' status is the truth."""
    one_vc(*case, restarts=True)


GENIE_POLICIES = ("swaf", "tetris-perf", "tetris-cer", "capacity", "minmin", "wfair", "fifo")
MODELS = ("ResNet50", "BERT", "VGG", "LSTM", "MobileNetV2")


@st.composite
def genie_tasks(draw: st.DrawFn, jobs: list[TraceJob]) -> list[TraceJob]:
    """``jobs``, four in five of them made GENIE tasks: a model type, global batch, iterations and QoS class."""
    out = []
    for j in jobs:
        if draw(st.integers(0, 4)):
            model, batch = draw(st.sampled_from(MODELS)), draw(st.sampled_from([32, 64, 128, 256]))
            qos = draw(st.sampled_from(["Urgent", "Prior", "Normal"]))
            j = dataclasses.replace(j, model=model, batch=batch, iters=draw(st.integers(100, 5000)), qos=qos)
        out.append(j)
    return out


@st.composite
def genie_cases(draw: st.DrawFn) -> tuple[str, str, str, list[int], list[TraceJob], bool]:
    """Mostly GENIE tasks (model, global batch, iterations, QoS class: their run time is GENIE's latency at the
    shape they get, Eq. 4) under GENIE's policies and placers, backfilled on that latency (the operator's
    estimate and the simulator's oracle alike), some preempted for a higher priority (a task resumed on
    another shape runs the rest of its work: ``status.workLeft`` and the simulator's ``frac_left``)."""
    policy = draw(st.sampled_from(GENIE_POLICIES))
    nodes = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3))
    jobs = draw(trace_jobs([g for g in (1, 2, 3, 4, 8) if g <= sum(nodes)]))
    out = draw(genie_tasks(draw(shaped(jobs, nodes))))
    return policy, draw(st.sampled_from(PLACERS)), draw(st.sampled_from(BACKFILL)), nodes, out, draw(st.booleans())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(genie_cases())
def test_genie_tasks_get_the_simulators_shapes_and_starts(
    case: tuple[str, str, str, list[int], list[TraceJob], bool],
) -> None:
    one_vc(*case)


Cohort = tuple[dict[str, dict[str, Any]], list[int], list[str], list[TraceJob], str, str]


@st.composite
def cohorts(draw: st.DrawFn) -> Cohort:
    """Two or three VirtualClusters of one or two nodes each, in one cohort (nominal shares, borrowing
    and lending limits, reclaim or not) or each with a quota or none; all preemptive or none; some
    preempting lower-priority jobs of their own."""
    names = ["va", "vb", "vc"][: draw(st.integers(2, 3))]
    cohort = draw(st.booleans())
    preemptive = draw(st.booleans())
    static = (*BLIND, "qssf") if draw(st.booleans()) else (*BLIND, "sjf")
    nodes: list[int] = []
    node_vc: list[str] = []
    for n in names:
        for _ in range(draw(st.integers(1, 2))):
            nodes.append(draw(st.sampled_from([1, 2, 4])))
            node_vc.append(n)
    vcs: dict[str, dict[str, Any]] = {}
    for n in names:
        own = sum(g for g, v in zip(nodes, node_vc, strict=True) if v == n)
        spec: dict[str, Any] = {"policy": draw(st.sampled_from(PREEMPTIVE if preemptive else static))}
        if cohort:
            quota: dict[str, int] = {"gpus": draw(st.integers(0, own))}
            if draw(st.booleans()):
                quota["borrowingLimit"] = draw(st.integers(0, 4))
            if draw(st.booleans()):
                quota["lendingLimit"] = draw(st.integers(0, own))
            spec |= {"cohort": "c", "quota": quota}
            spec["preemption"] = {"reclaimWithinCohort": draw(st.sampled_from(["Any", "Never"]))}
        elif draw(st.booleans()):
            spec["quota"] = {"gpus": draw(st.integers(1, own))}
        vcs[n] = spec
    sizes = (1, 2, 4) if preemptive else (1, 2, 3, 4)
    raw = draw(
        st.lists(
            st.tuples(
                st.one_of(st.integers(0, 2000), st.sampled_from(ROUND_TIMES)),
                st.sampled_from(sizes),
                st.one_of(st.integers(1, 3000), st.sampled_from(ROUND_TIMES[1:])),
                st.sampled_from(names),
            ),
            min_size=1,
            max_size=7,
        )
    )
    jobs = sorted(
        (TraceJob(f"j{k}", s, g, d, v) for k, (s, g, d, v) in enumerate(raw)), key=lambda j: (j.submit, j.name)
    )
    jobs = draw(shaped(jobs, nodes))
    for spec in vcs.values():
        if draw(st.booleans()):
            spec.setdefault("preemption", {})["withinVirtualCluster"] = "LowerPriority"
    placement = draw(st.sampled_from(["consolidate", "best-fit", "first-fit"]))
    return vcs, nodes, node_vc, jobs, placement, "none" if preemptive else draw(st.sampled_from(["none", "easy"]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cohorts())
def test_cohort_members_passes_make_the_simulators_decisions(case: Cohort) -> None:
    lockstep(*case)


@st.composite
def genie_cohorts(draw: st.DrawFn) -> Cohort:
    """The cohorts of :func:`cohorts` under GENIE's policies and placers, backfilled or not, most jobs GENIE
    tasks (their shapes and run times GENIE's, within each member's quota and what the others lend)."""
    vcs, nodes, node_vc, jobs, _, _ = draw(cohorts())
    for spec in vcs.values():
        spec["policy"] = draw(st.sampled_from(GENIE_POLICIES))
    out = draw(genie_tasks(jobs))
    return vcs, nodes, node_vc, out, draw(st.sampled_from(PLACERS)), draw(st.sampled_from(BACKFILL))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(genie_cohorts())
def test_cohort_members_of_genies_policies_make_the_simulators_decisions(case: Cohort) -> None:
    lockstep(*case)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cohorts())
def test_cohort_members_of_an_operator_restarted_before_every_pass_make_the_simulators_decisions(
    case: Cohort,
) -> None:
    lockstep(*case, restarts=True)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(genie_cases())
def test_genie_tasks_of_an_operator_restarted_before_every_pass_get_the_simulators_shapes_and_starts(
    case: tuple[str, str, str, list[int], list[TraceJob], bool],
) -> None:
    one_vc(*case, restarts=True)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(genie_cohorts())
def test_genie_cohorts_of_an_operator_restarted_before_every_pass_make_the_simulators_decisions(
    case: Cohort,
) -> None:
    lockstep(*case, restarts=True)


# ---- what they found --------------------------------------------------------------------------


def test_ties_of_a_sorted_policy_go_by_arrival_not_by_name() -> None:
    """SJF ties (equal predictions) went by the apiserver's list order (by name): "a", created later,
    started before "z"; the simulator's queue (and the policy's docstring) keeps arrival order."""
    jobs = [TraceJob("b", 0, 1, 10), TraceJob("z", 1, 1, 5), TraceJob("a", 2, 1, 5)]
    run = one_vc("sjf", "consolidate", "none", [1], jobs)
    assert sorted(run.segments, key=lambda s: s[1]) == [("ns/b", 0, 10), ("ns/z", 10, 15), ("ns/a", 15, 20)]


@pytest.mark.parametrize("policy", ["minmin", "swaf"])
def test_a_job_preempted_at_an_arrivals_instant_queues_behind_that_arrival(policy: str) -> None:
    """At 10 s j2 and j5 (priorities 2 and 1) arrive with j4 and take the GPUs, preempting j1. The two
    policies tie j1 and j4 (no GENIE task): the simulator's queue holds j4 first, enqueued on arrival before
    the pass sent j1 back. The operator put j1 first (queuedSince 10 as j4's creation, created earlier) and
    started it when j5's deletion freed 3 single GPUs, where the simulator keeps j4 as the blocked head."""
    jobs = [TraceJob("j1", 0, 1, 400), TraceJob("j2", 10, 3, 1000, priority=2), TraceJob("j4", 10, 3, 1000),
            TraceJob("j5", 10, 3, 1000, priority=1, gpus_per_node=1, withdraw=50)]  # fmt: skip
    run = one_vc(policy, "consolidate", "none", [1, 1, 4], jobs, lower_priority=True)
    assert ("ns/j1", 1010, 1400) in run.segments


@pytest.mark.parametrize("policy", ["minmin", "swaf"])
def test_the_jobs_one_pass_preempts_queue_by_submission(policy: str) -> None:
    """h (priority 1, all 5 GPUs) preempts a (3 GPUs) and b (2): the simulator's queue held them in the
    order its pass stopped them (b first: least lost work), the operator's by creation (a first). When h
    ends, k (priority 2) takes a GPU, and of the tied a and b only the first fits. Both queues now hold
    jobs sent back at one instant by submission."""
    jobs = [TraceJob("a", 0, 3, 1000), TraceJob("b", 5, 2, 1000), TraceJob("h", 10, 5, 100, priority=1),
            TraceJob("k", 110, 1, 1000, priority=2)]  # fmt: skip
    run = one_vc(policy, "consolidate", "none", [5], jobs, lower_priority=True)
    assert ("ns/a", 110, 1100) in run.segments


def test_a_reclaimed_borrower_that_reclaims_in_turn_lets_the_rest_start_at_that_instant() -> None:
    """SODA, at 500 s: j4 (8 GPUs) reclaims the 4-GPU array's node from j2 (1 GPU, a borrower); j2 takes
    its own array back from j5 and j6, started there by the first pass; j6 (a CPU job) fits again at once.
    The simulator's passes again at one instant stopped after one per queue, so j6 waited for j4's end;
    the operator's next pass started it at 500 s."""
    jobs = [TraceJob("j0", 0, 0, 1, cpus=16), TraceJob("j1", 60, 4, 100, gpus_per_node=2), TraceJob("j2", 159, 1, 500),
            TraceJob("j3", 200, 0, 1, cpus=16), TraceJob("j4", 500, 8, 1), TraceJob("j5", 500, 4, 1),
            TraceJob("j6", 500, 0, 1, cpus=16)]  # fmt: skip
    run = one_vc("soda", "consolidate", "none", [2, 2, 8], jobs, array_split=0.25)
    assert ("ns/j6", 500, 501) in run.segments


def test_backfilling_takes_times_a_microsecond_apart_for_one_instant() -> None:
    """j4 (a GENIE task) is reserved at j3's end, 1902.827... s, latest start the same (EASY). The operator's
    times are epoch seconds: its latest start came back 2.4e-7 s before the start (a double's step there),
    the head looked late already, and j5 (1 GPU on the free 1-GPU node) was kept from backfilling at 1902 s,
    which the simulator let it do."""
    genie = {"model": "ResNet50", "qos": "Urgent"}
    jobs = [
        TraceJob("j0", 573, 8, 1282),
        TraceJob("j1", 573, 1, 1, withdraw=574),
        TraceJob("j2", 573, 1, 1, batch=128, iters=265, **genie),
        TraceJob("j3", 1607, 2, 18, withdraw=1903),
        TraceJob("j4", 1607, 1, 1, batch=64, iters=100, **genie),
        TraceJob("j6", 1607, 1, 1, withdraw=1608),
        TraceJob("j5", 1902, 1, 13),
    ]
    run = one_vc("tetris-perf", "consolidate", "easy", [1, 8], jobs)
    assert ("ns/j5", 1902, 1915) in run.segments


def test_a_deletion_while_the_operator_was_down_is_an_event_after_its_restart() -> None:
    """LAS, one 2-GPU node: j3 waits and is deleted at 483 s, an event (the simulator's withdrawal) at which
    j4 (less service than the running j2 and j5) takes the GPUs. An operator restarted since had no
    memory of j3 and saw no event: j4 waited for the next one. The VirtualCluster's status counts its
    unfinished DLJobs (activeJobs at activeJobsTime): one of them gone is a deletion."""
    jobs = [
        TraceJob("j0", 0, 1, 1, withdraw=1),
        TraceJob("j1", 0, 1, 1),
        TraceJob("j4", 116, 2, 302),
        TraceJob("j2", 189, 1, 301),
        TraceJob("j5", 189, 2, 176),
        TraceJob("j3", 365, 1, 5, withdraw=483),
    ]
    run = one_vc("las", "cer", "adaptive", [2], jobs, restarts=True)
    assert ("ns/j4", 483, 712) in run.segments
    vc = run.kube.virtual_clusters()[0]["status"]
    assert vc["activeJobs"] == 0 and parse_time(vc["activeJobsTime"]) == T0 + 895  # the last finish


def test_a_retired_jobs_finish_stays_the_partitions_latest_event() -> None:
    """SRTF: j0 finishes at 1 s; j2 (1 s left) and j1 (1 s, 2 GPUs) tie and the running one is kept. Once
    j0 was retired its finish was no longer among the objects the operator reads: the next pass took the
    latest event to be the arrivals at 0 s, j2 had 2 s left, and j1 preempted it."""
    jobs = [TraceJob("j0", 0, 1, 1), TraceJob("j1", 0, 2, 1), TraceJob("j2", 0, 1, 2)]
    run = one_vc("srtf", "consolidate", "none", [2], jobs)
    assert run.kube.virtual_clusters()[0]["status"]["lastEventTime"] == rfc3339(T0 + 3)  # j1's finish
    assert ("ns/j2", 0, 2) in run.segments


def test_status_times_keep_their_fraction() -> None:
    """A start written at a turn end 813.5 s read back as 813 s: half a second of service before the job
    ran, and the pass after it preempted it again (LAS, two 4-GPU jobs of equal service)."""
    assert parse_time(rfc3339(T0 + 813.5)) == T0 + 813.5
    assert rfc3339(T0) == "2026-01-01T00:00:00Z"  # whole seconds as before
    jobs = [TraceJob("j0", 0, 1, 2), TraceJob("j1", 1, 4, 813), TraceJob("j2", 1, 4, 813)]
    run = one_vc("las", "consolidate", "none", [8], jobs)
    assert ("ns/j0", 813.5, 814.5) in run.segments


def test_a_preemptive_policy_stops_nobody_for_a_job_that_cannot_start() -> None:
    """LAS at 1 s: j0 (2 GPUs) and j3 (3 GPUs) arrive, both ahead of the running j2 (1 GPU on the 4-GPU
    node). Their 5 GPUs are the partition's, so j2 was preempted; but j3 fits on no node once j0 starts,
    j2's GPU idled until the next event, and the operator's next pass started j2 again as a waiting job
    (then stopped it again). Now j2 runs on: stopping it would start nothing."""
    jobs = [TraceJob("j1", 0, 1, 1), TraceJob("j2", 0, 1, 2), TraceJob("j0", 1, 2, 1), TraceJob("j3", 1, 3, 1)]
    run = one_vc("las", "consolidate", "none", [1, 4], jobs)
    assert ("ns/j2", 0, 2) in run.segments and ("ns/j3", 2, 3) in run.segments
    # the core's pass itself
    cluster = ClusterState([Node("n0", 1), Node("n1", 4)])
    rt = PartitionRuntime(Partition("default", policy="las"))
    alloc = Allocation((NodeGrant(1, (0,)),))  # j2 on n1's first GPU
    cluster.allocate(alloc)
    running = [RunningJob(Job("j2", 0.0, 1, attained=1.0, executed=1.0), 0.0, math.inf, alloc)]
    res = admit(rt, [Job("j0", 1.0, 2), Job("j3", 1.0, 3)], running, cluster, 1.0)
    assert res.preemptions == [] and [s.job.id for s in res.starts] == ["j0"]


def test_a_refusal_on_a_copy_that_released_does_not_hold_on_the_original() -> None:
    """FitMemo remembers a refusal until the books release something, keyed by (lineage, releases). A
    pass's copy that released a job (then took the preemption back: it started nothing) had the
    original's key after the original's next release, with other GPUs free: a 3-GPU job refused on the
    copy was refused on the original, where it fits (the simulator left it in its queue for ever)."""
    cluster = ClusterState([Node("n0", 4)])
    memo, vc = FitMemo(), cluster.vc_index("default")
    a = admit(PartitionRuntime(Partition("default")), [Job("a", 0, 2), Job("b", 0, 1)], [], cluster, 0.0).starts
    big, small = (s.allocation for s in a)
    assert big is not None and small is not None
    cluster.allocate(big)
    cluster.allocate(small)
    copy = cluster.copy()
    copy.release(small)
    job = Job("c", 0.0, 3)
    memo.note(job, copy, vc, 4)  # 3 GPUs do not fit with the 2-GPU job there
    copy.allocate(small)
    cluster.release(big)  # the original's next release: 3 GPUs free
    assert not memo.refused(job, cluster, vc, 4)


def test_a_job_stopped_for_its_gpus_starts_on_others_at_once() -> None:
    """LAS at 1 s, first-fit on nodes of 1, 2 and 1 GPUs: j2 (2 GPUs) needs the 2-GPU node where j1 runs,
    so j1 is stopped; GPUs are free on the 1-GPU nodes. The operator's next pass starts j1 there; the
    simulator, whose pass took j1 as running, left it waiting until the next event."""
    jobs = [TraceJob("j0", 0, 1, 1), TraceJob("j1", 0, 1, 2), TraceJob("j2", 0, 2, 1), TraceJob("j3", 0, 2, 1)]
    run = one_vc("las", "first-fit", "none", [1, 2, 1], jobs)
    assert ("ns/j1", 1, 2) in run.segments


def test_a_members_start_that_frees_its_share_lends_it_at_once() -> None:
    """A cohort: vc (share 2) starts j1 (1 GPU); its waiting j2 (2 GPUs) no longer fits its unused share,
    which is lent now. va's pass had run first: the operator's next pass started va's j0 on it at 0 s, the
    simulator only at vc's next event."""
    vcs = {
        "va": {"policy": "srtf", "cohort": "c", "quota": {"gpus": 0}},
        "vb": {"policy": "srtf", "cohort": "c", "quota": {"gpus": 0}},
        "vc": {"policy": "srtf", "cohort": "c", "quota": {"gpus": 2}},
    }
    jobs = [TraceJob("j0", 0, 1, 1, "va"), TraceJob("j1", 0, 1, 1, "vc"), TraceJob("j2", 0, 2, 1, "vc")]
    run = lockstep(vcs, [1, 1, 1, 1], ["va", "vb", "vc", "vc"], jobs, "consolidate", "none")
    assert ("ns/j0", 0, 1) in run.segments


def test_a_cohort_members_event_is_each_members() -> None:
    """va's j0 finishes at 1 s: the simulator passes every member of the cohort then, and vc's SRTF sees
    j1 with 2 s left, as many as j2: j1 runs on. The operator took vc's latest event to be its own (the
    arrivals at 0 s), j1 had 3 s left, and j2 preempted it."""
    vcs = {
        "va": {"policy": "srtf", "cohort": "c", "quota": {"gpus": 3}},
        "vb": {"policy": "srtf", "cohort": "c", "quota": {"gpus": 0}},
        "vc": {"policy": "srtf", "cohort": "c", "quota": {"gpus": 1}},
    }
    jobs = [TraceJob("j0", 0, 1, 1, "va"), TraceJob("j1", 0, 1, 3, "vc"), TraceJob("j2", 0, 4, 2, "vc")]
    run = lockstep(vcs, [1, 2, 1, 1], ["va", "va", "vb", "vc"], jobs, "consolidate", "none")
    assert ("ns/j1", 0, 3) in run.segments


def test_the_arrival_of_a_job_that_can_never_start_is_an_event() -> None:
    """va (LAS) borrows vb's one GPU at most; j2 (2 GPUs) can never start. Its creation at 4 s is an event
    of the operator's (the DLJob appears and waits Inadmissible) and LAS re-ranks then: j0 (1 s served)
    takes the GPU from j1 (2 s). The simulator rejected j2 up front and had no event at 4 s."""
    vcs = {
        "va": {"policy": "las", "cohort": "c", "quota": {"gpus": 0}},
        "vb": {"policy": "srtf", "cohort": "c", "quota": {"gpus": 1}},
    }
    jobs = [TraceJob("j0", 1, 1, 2, "va"), TraceJob("j1", 2, 1, 3, "va"), TraceJob("j2", 4, 2, 1, "va")]
    run = lockstep(vcs, [1, 1], ["va", "vb"], jobs, "consolidate", "none")
    assert ("ns/j0", 4, 5) in run.segments


def test_running_jobs_of_equal_keys_are_stopped_in_the_order_they_started() -> None:
    """RR at 1626 s: j2 and j3 (8 GPUs each) end a turn together and tie; j4 (4 GPUs) waits. The pass
    stopped the last running job of the caller's list: the simulator's is in start order (j2, started
    last), the operator's by name (j3). Now the core orders them by start itself."""
    jobs = [
        TraceJob("j0", 0, 1, 1),
        TraceJob("j1", 0, 1, 1),
        TraceJob("j2", 1, 8, 1219),
        TraceJob("j3", 1, 8, 1219),
        TraceJob("j4", 1, 4, 813),
    ]
    run = one_vc("rr", "consolidate", "none", [8, 8], jobs)
    assert ("ns/j3", 813.5, 1219.75) in run.segments


def test_a_higher_priority_head_takes_what_this_pass_started_for_a_lower_one() -> None:
    """FIFO with LowerPriority at 2 s: j4 and j5 (priority -1, older) start, j6 (priority 0) is left as the
    blocked head with nothing running below it; the next pass preempted j5, just started, for j6. Now the
    pass leaves j5 waiting and starts j6."""
    jobs = [TraceJob(f"j{i}", 0, 1, 1) for i in range(5)]
    jobs += [TraceJob("j5", 0, 1, 1, priority=-1), TraceJob("j6", 1, 1, 1)]
    run = one_vc("fifo", "consolidate", "none", [2], jobs, lower_priority=True)
    assert ("ns/j6", 2, 3) in run.segments and ("ns/j5", 3, 4) in run.segments


def test_a_higher_priority_head_preempts_the_lowest_priority_first() -> None:
    """FIFO with LowerPriority at 2 s: j6 (priority 1, 3 GPUs) finds 2 + 2 GPUs free on two nodes. It
    stopped j5 (priority 0, least lost work), and j5, waiting again, stopped j2 (priority -1) at once.
    Now it stops j2, the lowest priority, and j5 runs on."""
    jobs = [TraceJob(f"j{i}", 0, 1, 1) for i in (0, 1, 3, 4)]
    jobs += [TraceJob("j2", 0, 6, 3, priority=-1), TraceJob("j5", 1, 6, 2), TraceJob("j6", 2, 3, 1, priority=1)]
    run = one_vc("fifo", "consolidate", "none", [8, 8], sorted(jobs, key=lambda j: (j.submit, j.name)), True)
    assert ("ns/j5", 1, 3) in run.segments and ("ns/j2", 0, 2) in run.segments


def test_a_requeued_job_is_expected_to_run_the_rest_of_its_time() -> None:
    """SJF, EASY, LowerPriority: at 2566 s j4 (priority 1) preempts j2 with 2 s left; j2 may backfill behind
    the head j5 only if it ends by j5's reserved start. The operator estimated it at its whole predicted
    1910 s (the simulator: the rest, 2 s) and kept it waiting."""
    jobs = [
        TraceJob("j0", 0, 1, 1),
        TraceJob("j1", 35, 1, 2533),
        TraceJob("j2", 658, 1, 1910),
        TraceJob("j3", 718, 2, 1848),
        TraceJob("j4", 1758, 4, 2, priority=1, gpus_per_node=2),
        TraceJob("j5", 1758, 4, 1),
        TraceJob("j6", 1758, 1, 1),
    ]
    run = one_vc("sjf", "consolidate", "easy", [1, 2, 4], jobs, lower_priority=True)
    assert ("ns/j2", 2566, 2568) in run.segments


def test_deleting_a_blocked_head_lets_the_jobs_behind_it_start_at_once() -> None:
    """FIFO without backfilling: h (8 GPUs) waits behind r and blocks b. kubectl delete h at 100 s: the
    operator's next pass starts b; the simulator's withdrawal of a waiting job gave its partition no pass,
    and b waited for r's end at 1000 s."""
    jobs = [TraceJob("r", 0, 4, 1000), TraceJob("h", 1, 8, 10, withdraw=100), TraceJob("b", 2, 1, 10)]
    run = one_vc("fifo", "consolidate", "none", [8], jobs)
    assert ("ns/b", 100, 110) in run.segments


def test_deleting_a_job_that_can_never_start_is_an_event() -> None:
    """LAS on one GPU: j3 (2 GPUs) can never start and is deleted at 2 s. The operator's pass then re-ranks
    (j2, never served, takes the GPU from j1); the simulator, which rejected j3 up front, had no event."""
    jobs = [
        TraceJob("j0", 0, 1, 1, "va"),
        TraceJob("j1", 0, 1, 2, "va"),
        TraceJob("j2", 0, 1, 1, "va"),
        TraceJob("j3", 0, 2, 1, "va", withdraw=2),
    ]
    run = lockstep(
        {"va": {"policy": "las"}, "vb": {"policy": "srtf"}}, [1, 1], ["va", "vb"], jobs, "consolidate", "none"
    )
    assert ("ns/j2", 2, 3) in run.segments


def test_a_start_taken_back_makes_the_blocked_head_and_its_reservation_at_once() -> None:
    """FIFO, adaptive backfilling, LowerPriority, one 4-GPU node. At 1192 s j1 starts, then gives its GPUs to
    j5 (priority 1); the operator's next pass reserved for j1 then (one job waiting), the simulator only at
    the next arrival (two waiting: twice the slack), and let j3 backfill past the operator's bound."""
    jobs = [
        TraceJob("j0", 279, 2, 913),
        TraceJob("j1", 279, 3, 1),
        TraceJob("j5", 280, 2, 1663, priority=1),
        TraceJob("j4", 281, 1, 1),
        TraceJob("j2", 282, 2, 3402),
        TraceJob("j3", 1193, 2, 1904),
    ]
    run = one_vc("fifo", "consolidate", "adaptive", [4], jobs, lower_priority=True)
    assert ("ns/j1", 4594, 4595) in run.segments


def test_a_job_submitted_before_any_history_is_predicted_at_the_next_finish() -> None:
    """QSSF with the learned predictor on two 1-GPU nodes: j0, j1 (2 GPUs) and j2 arrive together, before
    anything finished: no prediction. At j0's finish the operator's pass predicted j2 from it and started
    it first; the simulator predicted only at arrival and kept arrival order (j1, then j2)."""
    jobs = [TraceJob("j0", 0, 1, 1), TraceJob("j1", 0, 2, 1), TraceJob("j2", 0, 1, 1)]
    run = one_vc("qssf", "consolidate", "none", [1, 1], jobs)
    assert ("ns/j2", 1, 2) in run.segments


def test_a_preempted_jobs_history_is_its_whole_run_time() -> None:
    """QSSF, LowerPriority, three 1-GPU nodes: j2 (priority 1) preempts j0 at 111 s; j0 resumes at 201 s
    and ends at 202 s. The operator learnt j0's run as its last segment (1 s, from its last start), the
    simulator as all it ran (112 s): their predictions of the jobs like it parted (j6 ran before j3)."""
    jobs = [
        TraceJob("j0", 0, 1, 112),
        TraceJob("j1", 111, 1, 189),
        TraceJob("j2", 111, 3, 90, priority=1),
        TraceJob("j3", 111, 3, 11),
        TraceJob("j5", 111, 2, 2, withdraw=112),
        TraceJob("j6", 213, 3, 188),
        TraceJob("j4", 399, 2, 1),
    ]
    run = one_vc("qssf", "consolidate", "none", [1, 1, 1], jobs, lower_priority=True)
    assert ("ns/j3", 390, 401) in run.segments


def test_a_turn_end_in_a_cohort_members_queue_is_an_event_of_every_member() -> None:
    """LAS in a cohort: va (4 GPUs) runs j4 (2 GPUs) with nothing waiting; vb (1 GPU) runs j3 while j2 waits.
    j4's turn ends at 1626 s (3,250 GPU-s on 2 GPUs): the simulator passes the cohort then and vb's LAS
    gives the GPU to j2 (1 s served against j3's 1,625). The operator woke only for turn ends of a
    VirtualCluster with a job waiting, ran no pass then, and kept j3 to its end."""
    vcs = {
        "va": {"policy": "las", "cohort": "c", "quota": {"gpus": 3}, "preemption": {"reclaimWithinCohort": "Any"}},
        "vb": {"policy": "las", "cohort": "c", "quota": {"gpus": 0}, "preemption": {"reclaimWithinCohort": "Any"}},
    }
    jobs = [
        TraceJob("j0", 0, 1, 1, "va"),
        TraceJob("j1", 0, 1, 1, "va"),
        TraceJob("j2", 0, 1, 2, "vb"),
        TraceJob("j3", 0, 1, 1626, "vb"),
        TraceJob("j4", 0, 2, 1626, "va"),
    ]
    run = lockstep(vcs, [4, 1], ["va", "vb"], jobs, "consolidate", "none")
    assert ("ns/j2", 1626, 1627) in run.segments


def test_a_job_that_can_never_start_holds_no_share_of_its_model_type() -> None:
    """Capacity on three nodes (1, 1, 2 GPUs): j0 asks 4 nodes of 1 GPU, which can never fit, and j1 one GPU.
    The policy's order counted j0's 4 GPUs against model type ''s share (all 4), and j1 waited for ever
    (Policy); the simulator, whose queue never holds j0, ran j1 at once."""
    jobs = [TraceJob("j0", 0, 4, 1, gpus_per_node=1), TraceJob("j1", 0, 1, 1)]
    run = one_vc("capacity", "consolidate", "none", [1, 1, 2], jobs)
    assert run.segments == [("ns/j1", 0, 1)]


def test_a_genie_task_whose_request_fits_no_node_runs_on_the_shape_its_policy_gives_it() -> None:
    """SWAF, first-fit, nodes of 1 and 2 GPUs: j2, an urgent ResNet-50 task asking 3 GPUs, which first-fit
    places nowhere. SWAF gives it GENIE's shape 1x1 and the operator ran it; the simulator rejected it up
    front by its request, which SWAF does not hold it to."""
    jobs = [
        TraceJob("j0", 0, 1, 1),
        TraceJob("j1", 0, 1, 1),
        TraceJob("j2", 0, 3, 1, model="ResNet50", batch=32, iters=100, qos="Urgent"),
    ]
    run = one_vc("swaf", "first-fit", "none", [1, 2], jobs)
    assert [s[0] for s in sorted(run.segments)] == ["ns/j0", "ns/j1", "ns/j2"]


def test_jobs_without_a_model_type_hold_their_share_of_capacity_between_passes() -> None:
    """Capacity on three 1-GPU nodes: j0 and j1 (no model type: the type '') and j2 (ResNet-50) share the GPUs
    half and half (1 GPU each). The order counted '' against its share, but the running jobs' usage counted
    only named types: the operator's next pass saw '' holding nothing and started j1 beside j0; the
    simulator, passing once, kept j1 for j0's end."""
    jobs = [
        TraceJob("j0", 0, 1, 1),
        TraceJob("j1", 0, 1, 1),
        TraceJob("j2", 0, 1, 1, model="ResNet50", batch=32, iters=100),
    ]
    run = one_vc("capacity", "consolidate", "none", [1, 1, 1], jobs)
    assert ("ns/j1", 1, 2) in run.segments


def test_a_genie_task_its_policy_shapes_within_the_quota_starts() -> None:
    """SWAF on a 4-GPU node, VirtualCluster quota 2: j0 asks 3 GPUs; SWAF gives it GENIE's shape 1x2. The
    quota was checked against its request (3 > 2): it waited for ever, in the operator and the simulator
    alike; it is checked against the shape it runs with."""
    jobs = [TraceJob("j0", 0, 3, 1, model="ResNet50", batch=64, iters=500)]
    run = lockstep({"default": {"policy": "swaf", "quota": {"gpus": 2}}}, [4], ["default"], jobs, "consolidate", "none")
    assert [s[0] for s in run.segments] == ["ns/j0"]
    assert run.kube.jobs["j0"]["status"]["placement"]["shape"] == "1x2"


def test_a_genie_task_is_backfilled_on_its_latency() -> None:
    """FIFO, EASY, one 4-GPU node: R holds 2 GPUs until 1000 s and the head H needs all 4. G is a GENIE task
    whose Eq. 4 latency on one GPU is about 17 s: both backfill it at once. The operator estimated it by its
    predicted run time (here the trace's 5000 s) and kept it behind H."""
    g = TraceJob("g", 2, 1, 5000, model="ResNet50", batch=32, iters=100)
    run = one_vc("fifo", "consolidate", "easy", [4], [TraceJob("r", 0, 2, 1000), TraceJob("h", 1, 4, 10), g])
    assert [s for s in run.segments if s[0] == "ns/g" and s[1] == 2]


def test_a_preempted_genie_task_says_the_work_it_has_left() -> None:
    """LowerPriority on one GPU: p (priority 1) stops the GENIE task g at 5 s. g's status says the fraction
    of its work left (``workLeft``: 5 s of its latency done), and it runs the rest after p."""
    g = TraceJob("g", 0, 1, 5000, priority=-1, model="ResNet50", batch=32, iters=100)
    run = one_vc("fifo", "consolidate", "none", [1], [g, TraceJob("p", 5, 1, 1, priority=1)], lower_priority=True)
    lat = run.latency["ns/g"]
    left = [p["workLeft"] for n, p in run.kube.status_patches if n == "g" and p.get("workLeft") is not None]
    assert left == [pytest.approx(1 - 5 / lat)]
    assert ("ns/g", 6, pytest.approx(1 + lat)) in run.segments


def test_a_swaf_task_whose_waiting_allowance_runs_out_is_placed_then() -> None:
    """SWAF on one 4-GPU node: j3 holds 3 GPUs until 1460 s, the Urgent j5 takes the fourth at 1447 s. j4
    waits for the 4-GPU shape of best CER, which meets its deadline only if it starts by about 1460.07 s;
    then SWAF chooses a smaller one, which fits: both start it then. The simulator passed only at j5's
    end (1464.4 s) and the operator at whichever pass came next (its timer's)."""
    jobs = [TraceJob(f"j{k}", 0, 1, 1) for k in range(3)] + [
        TraceJob("j3", 0, 3, 1459),
        TraceJob("j4", 1212, 1, 1, model="MobileNetV2", batch=256, iters=2048),
        TraceJob("j5", 1447, 1, 1, model="ResNet50", batch=32, iters=100, qos="Urgent"),
        TraceJob("j6", 1447, 1, 1),
    ]
    run = one_vc("swaf", "consolidate", "none", [4], jobs)
    start = next(s for j, s, _ in run.segments if j == "ns/j4")
    assert 1460 < start < 1461


def test_a_backfill_moves_the_heads_reservation_for_the_next_candidate() -> None:
    """FIFO, EASY, first-fit on two 4-GPU nodes: the head j1 (6 GPUs, 3 + 3) is reserved GPUs 0-2 of each node
    at 337 s. At 336 s j2 backfills onto n0's GPU 2, which moves the head to n0's GPU 3: j3 then fits on
    n1's GPU 3, away from it. The pass kept the reservation's old GPUs, placed j3 on n0's GPU 3 and refused
    it; the operator's next pass, reading the new projection, started it (the simulator only at 337 s)."""
    jobs = [TraceJob("j0", 0, 2, 337), TraceJob("j1", 0, 6, 1), TraceJob("j2", 336, 1, 2), TraceJob("j3", 336, 1, 2)]
    run = one_vc("fifo", "first-fit", "easy", [4, 4], jobs)
    assert ("ns/j3", 336, 338) in run.segments


def test_a_waiting_job_stops_the_lowest_ranked_job_that_lets_it_start() -> None:
    """LAS on a 1-GPU and a 4-GPU node: at 243 s j4 (no service) needs one GPU, all taken. Stopping j1
    (484 GPU-s, ranked last) or j2 (244) would free it. The pass released both and stopped whichever the
    placement took GPUs from: in the simulator's books j2 (which then took j1's GPUs back at once, a run
    split at one instant), in the operator's, which number a running gang's GPUs apart, j1."""
    jobs = [
        TraceJob("j0", 0, 2, 122, gpus_per_node=1),
        TraceJob("j1", 1, 2, 243),
        TraceJob("j2", 121, 2, 123),
        TraceJob("j3", 121, 1, 123),
        TraceJob("j4", 243, 1, 1),
    ]
    run = one_vc("las", "consolidate", "none", [1, 4], jobs)
    assert ("ns/j2", 121, 244) in run.segments and ("ns/j1", 1, 243) in run.segments


def test_a_failed_gang_is_an_event_of_its_queue() -> None:
    """LAS, 2 GPUs: j0 and j1 run from 0; at 1 s a pod of j0 fails (it backs off until 11 s). The simulator
    passes at the failure and ranks everyone by the service at that instant: j2 and j3 (none yet) stop j0
    and j1 (1 s each). The operator ranked its running jobs as of the queue's last event (0 s: a failure
    was none) and kept j1."""
    jobs = [TraceJob("j0", 0, 1, 2, fail_at=(1,)), TraceJob("j1", 0, 1, 2), TraceJob("j2", 0, 1, 1),
            TraceJob("j3", 0, 1, 1)]  # fmt: skip
    run = one_vc("las", "consolidate", "none", [2], jobs)
    assert ("ns/j1", 0, 1) in run.segments and ("ns/j3", 1, 2) in run.segments


def test_a_failed_run_restarts_from_its_checkpoint_on_its_gpus_as_the_simulator_restarts_it() -> None:
    """SRTF: j0 fails at 250 s, keeping 200 s of its 500 (checkpoints every 100 s) and its GPU through the
    10 s back-off; it fails again at 300 s (40 s after its restart: nothing kept) and at 400 s, and past its
    backoff limit (3) at the fourth, at 600 s. j1, which waits for the GPU, starts then."""
    jobs = [TraceJob("j0", 0, 1, 500, fail_at=(250, 300, 400, 600), checkpoint=100), TraceJob("j1", 5, 1, 1000)]
    run = one_vc("srtf", "consolidate", "none", [1], jobs)
    assert sorted(run.segments) == [("ns/j0", 0, 250), ("ns/j0", 260, 300), ("ns/j0", 320, 400),
                                    ("ns/j0", 440, 600), ("ns/j1", 600, 1600)]  # fmt: skip
    status = run.kube.jobs["j0"]["status"]
    assert status["phase"] == "Failed" and status["restarts"] == 3
    assert status["lostRunSeconds"] == pytest.approx(50 + 40 + 80)  # (what the restarts ran again)
    sim = simulate(
        Trace("t", [j.job() for j in jobs], [Node("n0", 1, gpu_model=GPU_MODEL)]),
        SimConfig(policy="srtf", preemption_overhead=0.0, failures=ScriptedFailures({"ns/j0": jobs[0].fail_at})),
    )
    assert sim.lost_s[0] == pytest.approx(50 + 40 + 80) and sim.restarts[0] == 3


def test_swaf_ties_of_equal_waiting_allowances_go_by_the_queue_on_both_clocks() -> None:
    """SWAF on one GPU: j2 and j3 (Prior ResNet50 tasks of batch 32 and 64) both have e = l on it, so equal
    waiting allowances at every instant. Computed as e - (l + t) on the trace's clock (the simulator's) and
    on Unix time (the operator's), the sums rounded differently: the simulator put j3 first, the operator
    j2. Counted from the submission, (e - l) - waited, they tie exactly on both, and go by the queue."""
    jobs = [TraceJob("j0", 0, 1, 1), TraceJob("j1", 0, 1, 1, model="ResNet50", batch=32, iters=100, qos="Urgent"),
            TraceJob("j2", 0, 1, 1, model="ResNet50", batch=32, iters=100, qos="Prior"),
            TraceJob("j3", 0, 1, 1, model="ResNet50", batch=64, iters=100, qos="Prior"), TraceJob("j4", 0, 1, 1)]  # fmt: skip
    run = one_vc("swaf", "consolidate", "none", [1], jobs)
    (j2,) = [s for s in run.segments if s[0] == "ns/j2"]
    assert j2[1] == pytest.approx(17.397767, abs=1e-3)  # right after j1 (Urgent)


def test_passes_at_one_instant_go_on_while_one_deletes_a_pod_and_creates_another() -> None:
    """At 200 s j1's second failure stops its gang; j6's pod waits for j1's pod on n1 to be gone, and the
    next pass creates it: as many pods as before, and the harness took that pass for a quiet one. So no
    pass wrote j6 Running at 200 s (its status went Admitted, then Succeeded with startTime 200 s)."""
    jobs = [TraceJob("j0", 0, 0, 1, cpus=16), TraceJob("j1", 0, 16, 571, withdraw=201, fail_at=(10, 200)),
            TraceJob("j5", 0, 1, 2673, withdraw=1), TraceJob("j4", 1, 0, 1, cpus=16, fail_at=(1,)),
            TraceJob("j2", 121, 0, 1, cpus=16), TraceJob("j3", 128, 0, 142, cpus=16), TraceJob("j6", 200, 0, 1, cpus=96)]  # fmt: skip
    run = one_vc("fifo", "consolidate", "none", [8, 4, 4], jobs)
    assert ("ns/j6", 200, 201) in run.segments


def test_a_gang_that_fails_for_good_leaves_its_gpus_to_the_same_pass() -> None:
    """SWAF on nodes of 1, 1 and 2 GPUs: j0 (all 4) fails past its backoff limit at 1 s, when j1 arrives.
    The pass that failed j0 stopped its running pods and still booked them as leftovers, so j1 went to the
    2-GPU node, the only one free of them, and j2 (which wants 1x2) waited for j1. The simulator frees a
    failed job's GPUs at once: j1 on a 1-GPU node, j2 on the 2-GPU node at 2 s."""
    jobs = [TraceJob("j0", 0, 4, 2, fail_at=(1,), backoff_limit=0),
            TraceJob("j1", 1, 1, 1, model="ResNet50", batch=32, iters=100, qos="Urgent", backoff_limit=0),
            TraceJob("j2", 2, 1, 1, model="ResNet50", batch=64, iters=100, qos="Urgent", backoff_limit=0)]  # fmt: skip
    run = one_vc("swaf", "consolidate", "none", [1, 1, 2], jobs)
    (j2,) = [s for s in run.segments if s[0] == "ns/j2"]
    assert j2[1] == 2


def test_a_gang_that_finished_as_its_node_went_down_is_done_not_lost() -> None:
    """RR on two 2-GPU nodes, grace 0: j1 (4 GPUs) finishes at 876 s, the instant n0 goes down. Its pods
    had succeeded, yet the operator requeued it (NodeLost) and ran it again at 878 s, stopping j2."""
    jobs = [TraceJob("j0", 0, 1, 875, withdraw=875), TraceJob("j1", 0, 4, 1), TraceJob("j2", 1, 1, 877)]
    run = one_vc("rr", "consolidate", "none", [2, 2], jobs, outages={"n0": [(876, 877)], "n1": [(877, 878)]}, grace=0)
    assert ("ns/j2", 877, 879) in run.segments


def test_a_stalled_gang_is_requeued_after_the_grace_or_restarts_when_its_node_is_back_sooner() -> None:
    """FIFO on two 1-GPU nodes, grace 100 s, checkpoints every 50 s. n0 goes down at 120 s under j0 for
    longer than the grace: j0 is requeued at 220 s (its run counted to 120 s: 100 s kept, 20 s lost) and
    starts on n1 when j1 ends there (310 s). n1 goes down at 350 s for 30 s: back before the grace, its
    pod failed, so j0 restarts there after a 10 s back-off (40 s lost), one restart counted. j2 waits
    for n0 to come back at 400 s."""
    jobs = [TraceJob("j0", 0, 1, 200, checkpoint=50), TraceJob("j1", 10, 1, 300), TraceJob("j2", 250, 1, 100)]
    outages: Outages = {"n0": [(120, 400)], "n1": [(350, 380)]}
    run = one_vc("fifo", "first-fit", "none", [1, 1], jobs, outages=outages, grace=100)
    assert sorted(run.segments) == [("ns/j0", 0, 120), ("ns/j0", 310, 350), ("ns/j0", 390, 490),
                                    ("ns/j1", 10, 310), ("ns/j2", 400, 500)]  # fmt: skip
    status = run.kube.jobs["j0"]["status"]
    assert (status["restarts"], status["preemptions"], status["executedSeconds"]) == (1, 1, 100)
    assert status["lostRunSeconds"] == pytest.approx(60)


def test_a_gang_stalled_in_its_back_off_ends_its_round_robin_turn() -> None:
    """RR on two 8-GPU nodes, grace 300 s: j0 (16 GPUs) fails at 10 s and backs off until 20 s; n0 goes
    down at 15 s, so its gang is never recreated. The simulator's stalled gang holds its GPUs from 20 s,
    its turn running: the turn ends at 213.125 s ((3250 - 160) / 16 s later) and j1 starts on n1. The
    operator counted no turn for a gang without a startTime and kept its GPUs to the grace's end (315 s)."""
    jobs = [TraceJob("j0", 0, 16, 500, fail_at=(10,)), TraceJob("j1", 12, 1, 100)]
    run = one_vc("rr", "consolidate", "none", [8, 8], jobs, outages={"n0": [(15, 1000)]}, grace=300)
    assert ("ns/j1", 213.125, 313.125) in run.segments


def test_a_gang_preempted_in_its_back_off_starts_at_once_when_admitted_again() -> None:
    """j0's gang fails at 100 s for the second time in a row (back-off until 120 s); j6 (priority 2) preempts
    it in that pass and ends at 105 s, when j0 is admitted again. The simulator runs it then; the operator
    kept the failed gang's restartAfter through the requeue and held the new placement idle until 120 s."""
    jobs = [TraceJob("j0", 0, 4, 100, fail_at=(100, 10)), TraceJob("j4", 0, 2, 200, priority=-1, gpus_per_node=1),
            TraceJob("j3", 100, 2, 424, priority=1), TraceJob("j6", 100, 3, 5, priority=2, fail_at=(1,)),
            TraceJob("j2", 101, 0, 4000, cpus=16), TraceJob("j5", 250, 0, 1, cpus=16), TraceJob("j1", 284, 0, 1, cpus=16)]  # fmt: skip
    run = one_vc("fifo", "consolidate", "none", [1, 4, 4], jobs, lower_priority=True, array_split=0.25)
    assert ("ns/j0", 105, 115) in run.segments


def test_a_restarted_gangs_stopped_pods_hold_its_own_slots_not_more() -> None:
    """FIFO, LowerPriority, two 2-GPU nodes: j0 (2x1) fails at 100 s and backs off on its GPUs until
    110 s; j1 (priority 1, 2x1) arrives then and fits on the GPU left free on each node. The operator
    booked j0's placement and also its stopped pod on n1 (an earlier attempt's, terminating), saw n1
    full, preempted j0 for j1 and admitted it again at once, its back-off forgotten."""
    jobs = [
        TraceJob("j0", 0, 2, 200, gpus_per_node=1, fail_at=(100,)),
        TraceJob("j1", 100, 2, 50, priority=1, gpus_per_node=1),
    ]
    run = one_vc("fifo", "consolidate", "none", [2, 2], jobs, lower_priority=True)
    assert sorted(run.segments) == [("ns/j0", 0, 100), ("ns/j0", 110, 210), ("ns/j1", 100, 150)]
    assert run.kube.jobs["j0"]["status"].get("preemptions") in (None, 0)


def test_a_pod_that_failed_as_its_node_went_down_fails_its_gang_not_the_node() -> None:
    """j0's pod fails at 1 s, the instant n0 goes down for good. The simulator restarts it after its
    back-off there, where it stalls and is requeued after the grace (61 s). The operator took the failed
    pod on a NotReady node for one the node took with it and requeued the gang at once (NodeLost)."""
    jobs = [TraceJob("j0", 0, 0, 2, cpus=16, fail_at=(1,))]
    run = one_vc("fifo", "consolidate", "none", [1, 1], jobs, outages={"n0": [(1, None)]}, grace=60)
    assert sorted(run.segments) == [("ns/j0", 0, 1), ("ns/j0", 61, 62)]
    assert run.kube.jobs["j0"]["status"]["restarts"] == 1


def test_a_gang_lost_without_a_grace_is_back_in_its_queue_before_that_instants_arrivals() -> None:
    """FIFO: n0 goes down for good at 100 s under j0 (both nodes), nodeLostSeconds 0; j1 (a CPU job)
    arrives then. The operator requeues j0 in that pass's lifecycle, before admitting: j0 is the head
    again (it arrived first) and j1 waits behind it. The simulator requeued it in an event after that
    instant's pass, which had started j1 beside the stalled gang."""
    jobs = [TraceJob("j0", 0, 2, 200), TraceJob("j1", 100, 0, 1, cpus=16)]
    run = one_vc("fifo", "consolidate", "none", [1, 1], jobs, outages={"n0": [(100, None)]}, grace=0)
    assert sorted(run.segments) == [("ns/j0", 0, 100)]


def test_a_gang_lost_in_a_pass_leaves_its_gpus_to_that_pass() -> None:
    """FIFO with EASY backfilling on a 1-GPU and an 8-GPU node: j0 (1 GPU on each) is lost with n0 at 1 s
    (grace 0) and can never fit again; j4 (8 GPUs) is next and starts on n1 at once in the simulator. The
    operator's pass still booked j0's stopped pod on n1, so j5 was backfilled there and j4 waited 202 s."""
    jobs = [TraceJob("j0", 0, 2, 100, gpus_per_node=1), TraceJob("j4", 0, 8, 1), TraceJob("j5", 0, 1, 202)]
    run = one_vc("fifo", "consolidate", "easy", [1, 8], jobs, outages={"n0": [(1, None)]}, grace=0)
    assert ("ns/j4", 1, 2) in run.segments


def test_a_gang_requeued_in_a_passs_lifecycle_takes_its_turn_after_the_jobs_that_waited() -> None:
    """Round-robin on a 2-GPU and a 1-GPU node: n0 goes down for good at 4 s (grace 0) under j0 and j5.
    Requeued as of 4 s, j5 goes behind j6, which has waited since 0 s; the operator ordered that pass by
    the queuedSince j5 had before the requeue and gave it the GPU left."""
    jobs = [TraceJob("j0", 0, 2, 100, gpus_per_node=1), TraceJob("j1", 0, 1, 1), TraceJob("j2", 0, 1, 1, withdraw=1),
            TraceJob("j3", 0, 1, 1), TraceJob("j4", 0, 1, 1), TraceJob("j5", 0, 1, 38), TraceJob("j6", 0, 1, 1)]  # fmt: skip
    run = one_vc("rr", "consolidate", "none", [2, 1], jobs, outages={"n0": [(4, None)]}, grace=0)
    assert ("ns/j6", 4, 5) in run.segments and ("ns/j5", 5, 42) in run.segments


def test_a_stalled_gangs_turns_still_end() -> None:
    """Round-robin: j2 (all 16 GPUs) stalls when n0 goes down at 145 s (grace 60). The operator's view of
    a gang that holds its GPUs counts its service, so its turn ends at 204.125 s and j3-j5 take the GPUs
    of the nodes still up; the simulator had dropped the stalled gang's turn ends and started them only
    at its NodeLost requeue (205 s)."""
    jobs = [TraceJob("j0", 0, 1, 1, fail_at=(1,)), TraceJob("j1", 0, 1, 1), TraceJob("j2", 0, 16, 500, fail_at=(1,)),
            TraceJob("j3", 4, 1, 1), TraceJob("j4", 63, 1, 1), TraceJob("j5", 67, 1, 1), TraceJob("j6", 220, 1, 1)]  # fmt: skip
    run = one_vc("rr", "consolidate", "none", [4, 4, 8], jobs, outages={"n0": [(145, None)]}, grace=60)
    assert ("ns/j3", 204.125, 205.125) in run.segments


def test_a_pod_that_failed_as_its_node_went_is_a_failure_first_then_the_nodes_loss() -> None:
    """j0's pod fails at 100 s, the instant n0 goes down for good (grace 0): a failure (back-off 10 s), then
    the node's loss, which requeues the backing-off gang onto n1 at once; its next failure, at 101 s, is
    the second in a row (20 s). The operator requeued the gang for the node alone, the failure not
    counted, and backed off 10 s at 101 s."""
    jobs = [TraceJob("j0", 0, 0, 500, cpus=16, fail_at=(100, 101))]
    run = one_vc("fifo", "consolidate", "none", [1, 1], jobs, outages={"n0": [(100, None)]}, grace=0)
    assert sorted(run.segments) == [("ns/j0", 0, 100), ("ns/j0", 100, 101), ("ns/j0", 121, 520)]
    assert run.kube.jobs["j0"]["status"]["restarts"] == 2


def test_a_node_back_while_its_gang_backs_off_fails_nothing() -> None:
    """j1's pod fails at 67 s (back-off until 77 s) as n0 goes down for a second: no pod of it is there
    when the node is back, so nothing more fails and it restarts at 77 s. The simulator counted a second
    failure for the stalled gang and backed off 20 s more."""
    jobs = [TraceJob("j1", 57, 0, 11, cpus=16, fail_at=(67,))]
    run = one_vc("fifo", "consolidate", "none", [1], jobs, outages={"n0": [(67, 68)]}, grace=60)
    assert sorted(run.segments) == [("ns/j1", 57, 67), ("ns/j1", 77, 78)]


def test_a_drained_nodes_gang_is_requeued_at_once_and_the_node_takes_nothing_until_uncordoned() -> None:
    """FIFO on two 1-GPU nodes: n0 is drained at 100 s (kubectl drain: cordoned, its pods evicted) until
    400 s. j0, 100 s into its 200 s run there, is requeued at once with its run kept (Disrupted, no restart)
    and waits for n1, where j1 runs until 310 s; j2 (250 s) waits behind it, for n0's uncordon at 400 s."""
    jobs = [TraceJob("j0", 0, 1, 200), TraceJob("j1", 10, 1, 300), TraceJob("j2", 250, 1, 100)]
    run = one_vc("fifo", "first-fit", "none", [1, 1], jobs, outages={"n0": [(100, 400, True)]})
    assert sorted(run.segments) == [("ns/j0", 0, 100), ("ns/j0", 310, 410), ("ns/j1", 10, 310), ("ns/j2", 400, 500)]
    status = run.kube.jobs["j0"]["status"]
    assert not status.get("restarts") and (status["preemptions"], status["executedSeconds"]) == (1, 100)
    assert any(reason == "Disrupted" for name, reason, _ in run.kube.events if name == "j0")


def test_a_gang_backing_off_on_a_drained_node_is_placed_anew_at_once() -> None:
    """j0's pod fails at 100 s on n0 (a restart, back-off until 110 s); n0 is drained at 105 s. No pod of it
    is there to evict, yet its gang would be recreated on the cordoned node: it is requeued (Disrupted) and
    starts on n1 at once, its back-off dropped with its placement, as the simulator does."""
    jobs = [TraceJob("j0", 0, 1, 200, fail_at=(100,))]
    run = one_vc("fifo", "first-fit", "none", [1, 1], jobs, outages={"n0": [(105, None, True)]})
    assert sorted(run.segments) == [("ns/j0", 0, 100), ("ns/j0", 105, 205)]
    status = run.kube.jobs["j0"]["status"]
    assert (status["restarts"], status["preemptions"]) == (1, 1)


def test_a_drain_and_its_end_are_events_of_every_partition() -> None:
    """RR on two 1-GPU nodes: j5 runs on n0 from 105 s, j6 (2 GPUs) waits from 106 s; n0 is drained at 107 s
    (j5 requeued, placed on n1 at once) and uncordoned at 108 s, when j6's turn comes (the simulator passes
    every partition then). The operator ranked RR as of 106 s, the last event it knew: the drain and the
    uncordon were none, so j6 was admitted, outranked again in a later pass and waited until 202 s."""
    jobs = [TraceJob("j5", 105, 1, 97), TraceJob("j6", 106, 2, 1)]
    run = one_vc("rr", "consolidate", "none", [1, 1], jobs, outages={"n0": [(107, 108, True)]}, grace=0)
    assert ("ns/j6", 108, 109) in run.segments


def test_a_drain_with_no_gang_on_the_node_is_still_an_event_of_every_partition() -> None:
    """LAS on 1 + 1 + 8 GPUs: j2 (8 GPUs) waits behind j6 (4 GPUs, running from 1 s, more served by 4 s);
    n0 is drained at 4 s with nothing on it. The simulator passes every partition then and LAS runs j2
    (4-5 s); the operator saw no event at 4 s (a cordon says not when) and ranked as of 1 s until j6 ended."""
    jobs = [TraceJob("j0", 0, 1, 1), TraceJob("j1", 0, 1, 1), TraceJob("j2", 0, 8, 2, fail_at=(10,))]
    jobs += [TraceJob(f"j{i}", 0, 1, 1) for i in (3, 4, 5)] + [TraceJob("j6", 0, 4, 4)]
    run = one_vc("las", "consolidate", "none", [1, 1, 8], jobs, outages={"n0": [(4, None, True)]}, grace=0)
    assert ("ns/j2", 4, 5) in run.segments


def test_a_gang_stalled_since_one_outage_stays_stalled_since_then_through_the_next() -> None:
    """j3's gang (n0 + n1) stalls at 20 s when n1 goes down; n0 goes down at 100 s, n1 is back at 101 s (its
    pod there failed: a restart). Its run ends at 20 s in both; the operator moved stalledSince to 100 s,
    the first of the nodes down then, and counted 80 s of stall as run."""
    jobs = [TraceJob("j0", 0, 1, 1), TraceJob("j1", 0, 1, 1, fail_at=(1,)), TraceJob("j2", 0, 1, 1, fail_at=(1,)),
            TraceJob("j3", 0, 2, 981, fail_at=(1,))]  # fmt: skip
    run = one_vc(
        "mlfq", "consolidate", "none", [1, 1], jobs, outages={"n0": [(100, None)], "n1": [(20, 101)]}, grace=300
    )
    assert ("ns/j3", 2, 20) in run.segments


def test_a_disrupted_gangs_gpus_go_to_the_same_pass() -> None:
    """RR on two 2-GPU nodes: n0 is drained at 2 s under j0 (one pod on each node) and j3. The simulator frees
    j0's GPU on n1 at once and runs j2 (2 GPUs, waiting since 0 s) there; the operator kept j0's stopped pod
    on n1 booked for that pass, admitted j3 instead, and preempted it for j2 in the next (a thrash)."""
    jobs = [TraceJob("j0", 0, 2, 3, gpus_per_node=1), TraceJob("j1", 0, 1, 1), TraceJob("j2", 0, 2, 1),
            TraceJob("j3", 1, 1, 2)]  # fmt: skip
    run = one_vc("rr", "consolidate", "none", [2, 2], jobs, outages={"n0": [(2, None, True)]}, grace=0)
    assert ("ns/j2", 2, 3) in run.segments


def test_a_failure_at_a_drains_instant_comes_first() -> None:
    """j2's gang (n0 + n1) fails for the fourth time at 1000 s, the instant n1 is drained for good: past its
    backoff limit it failed (the simulator's failure comes before the drain at one instant), and j5 runs.
    The operator took the drain's eviction of its other pod first, requeued it Disrupted, and the gang,
    which can never fit again, held the FIFO queue: j5 never ran."""
    jobs = [
        TraceJob("j2", 115, 2, 816, gpus_per_node=1, fail_at=(125, 200, 500, 1000)),
        TraceJob("j5", 1000, 0, 1, cpus=16),
    ]
    run = one_vc("fifo", "consolidate", "none", [1, 1], jobs, outages={"n1": [(1000, None, True)]}, grace=0)
    assert ("ns/j5", 1000, 1001) in run.segments and run.kube.jobs["j2"]["status"]["phase"] == "Failed"
