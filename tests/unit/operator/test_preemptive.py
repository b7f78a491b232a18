"""Preemptive policies in the operator (operator/service.py with the translation and the core's
admit()): turn ends, the partition's latest event, and the decisions of the operator's own passes
(plan and applier), compared with the simulator's on the same jobs."""

from __future__ import annotations

import math

import pytest
from qosmos.extender.core.admission import Partition, PartitionRuntime, RunningJob, admit
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.ordering import MLFQ_QUANTA, RR_QUANTUM, get_policy
from qosmos.extender.core.types import Job, Node
from qosmos.operator.service import TurnClock, last_event
from qosmos.simulator.engine import SimConfig, simulate
from qosmos.simulator.traces import Trace
from qosmos.testing.lockstep import Passes, TraceJob

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z: DLJob times are whole seconds


# ---- turn ends --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["las", "rr"])
def test_turn_ends_are_quanta_of_attained_service(name: str) -> None:
    policy = get_policy(name)
    job = Job("j", 0.0, gpus=4, attained=1000.0)  # 1,000 GPU-s from earlier segments
    first = (RR_QUANTUM - 1000.0) / 4  # the rest of the current quantum, in run seconds
    turn = RR_QUANTUM / 4
    start = T0 + 50
    assert TurnClock().ends(policy, job, start, start + first - 1) == (None, start + first)
    assert TurnClock().ends(policy, job, start, start + first) == (start + first, start + first + turn)
    assert TurnClock().ends(policy, job, start, start + first + 2.5 * turn) == (
        start + first + 2 * turn,
        start + first + 3 * turn,
    )


def test_mlfq_turn_ends_are_its_demotions_then_its_last_queues_quantum() -> None:
    policy = get_policy("mlfq")
    job = Job("j", 0.0, gpus=1)
    q0, q1, q2 = MLFQ_QUANTA
    ends = [q0, q0 + q1, q0 + q1 + q2, q0 + q1 + 2 * q2]
    clock = TurnClock()
    for i, t in enumerate(ends[:-1]):  # asked again and again as passes do (the cache resumes)
        assert clock.ends(policy, job, T0, T0 + t + 1) == (T0 + t, T0 + ends[i + 1])
    assert TurnClock().ends(policy, job, T0, T0 + ends[2] + 1) == (T0 + ends[2], T0 + ends[3])


def test_srtf_has_no_turn_ends() -> None:
    assert TurnClock().ends(get_policy("srtf"), Job("j", 0.0, duration=100.0), T0, T0 + 1e6) == (None, None)


def test_the_latest_event_is_an_arrival_a_finish_or_a_turn_end_never_after_now() -> None:
    assert last_event([T0, T0 + 30, None], [T0 + 20], [T0 + 25], T0 + 100) == T0 + 30
    assert last_event([T0], [None], [T0 + 40], T0 + 100) == T0 + 40
    assert last_event([T0 + 120], [], [], T0 + 100) == T0 + 100  # another clock ran ahead
    assert last_event([], [], [], T0 + 100) == T0 + 100


# ---- the operator's passes against the simulator ----------------------------------------------


def passes(policy: str, jobs: list[tuple[str, int, int]], predict: bool = True) -> Passes:
    """1-GPU jobs (name, submission, run time) on one 2-GPU node, placed by consolidate."""
    return Passes(
        {"policy": policy, "placement": "consolidate"},
        [2],
        [TraceJob(n, s, 1, d) for n, s, d in jobs],
        predict=predict,
    )


JOBS = [("a", 0, 9000), ("b", 100, 8000), ("c", 200, 7000), ("d", 300, 2000), ("e", 5000, 3000), ("f", 9000, 500)]


@pytest.mark.parametrize("policy", ["las", "rr", "mlfq", "srtf"])
def test_the_operators_passes_make_the_simulators_decisions(policy: str) -> None:
    """The same jobs through the simulator (overhead 0) and through passes as the operator runs them
    (at every event, again right after, and once between events): the same run segments, and no pass
    between two events changes anything (it would under LAS with service counted up to the pass)."""
    trace = Trace("t", [Job(f"ns/{n}", float(s), 1, duration=float(d)) for n, s, d in JOBS], [Node("n0", 2)])
    sim = simulate(trace, SimConfig(policy=policy, preemption_overhead=0.0))
    want = sorted((trace.jobs[i].id, round(s), round(e)) for i, _, s, e, _ in sim.segments)
    run = passes(policy, JOBS)
    run.run()
    got = sorted((k, round(s), round(e)) for k, s, e in run.segments)
    assert got == want
    assert len(want) > len(JOBS)  # something was preempted: the comparison is about preemptions
    assert all(o["status"]["phase"] == "Succeeded" for o in run.kube.jobs.values())


@pytest.mark.parametrize("policy", ["las", "rr", "mlfq", "srtf", "srtf-unpredicted"])
def test_jobs_created_in_the_same_second_never_swap(policy: str) -> None:
    """DLJob times are whole seconds: jobs applied together tie on every key of RR, LAS (before any
    service) and SRTF without predictions. A tie keeps the running job, or every pass would swap them."""
    jobs = [("a", 0, 1000), ("b", 0, 1000), ("c", 0, 1000)]
    run = passes(policy.split("-")[0], jobs, predict=policy != "srtf-unpredicted")
    run.run()  # asserts that the passes after each event's change nothing
    assert sorted((k, round(s), round(e)) for k, s, e in run.segments) == [
        ("ns/a", 0, 1000),
        ("ns/b", 0, 1000),
        ("ns/c", 1000, 2000),
    ]


def test_a_pass_counting_service_up_to_now_would_thrash_under_las() -> None:
    """Why the service is taken at the latest event: two jobs of near-equal service on one GPU swap
    whenever the running one's service passes the waiting one's."""
    rt = PartitionRuntime(Partition("default", policy="las"))
    cluster = ClusterState([Node("n0", 1)])
    waiting = Job("w", 0.0, 1, attained=500.0, enqueued=100.0)
    running = Job("r", 0.0, 1, attained=400.0)
    (start,) = admit(rt, [running], [], cluster, 0.0).starts
    assert start.allocation is not None
    cluster.allocate(start.allocation)
    ran = RunningJob(running, 200.0, math.inf, start.allocation)
    # served up to the pass, 150 s later: 550 > 500, the waiting job would take the GPU at once
    exact = Job("r", 0.0, 1, attained=550.0)
    res = admit(rt, [waiting], [RunningJob(exact, 200.0, math.inf, start.allocation)], cluster, 350.0)
    assert [p.job.id for p in res.preemptions] == ["r"]
    # as of the latest event (its start at 200), nothing changes until the next one
    res = admit(rt, [waiting], [ran], cluster, 350.0)
    assert res.preemptions == [] and res.starts == []
