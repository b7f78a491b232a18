"""Preemptive policies in the operator (operator/service.py with the translation and the core's
admit()): turn ends, the partition's latest event, and the decisions, compared with the simulator's
on the same jobs."""

from __future__ import annotations

import math
from typing import Any

import pytest
from qosmos.extender.core.admission import Partition, PartitionRuntime, RunningJob, admit
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.ordering import MLFQ_QUANTA, RR_QUANTUM, get_policy
from qosmos.extender.core.types import Allocation, Job, Node
from qosmos.operator.service import TurnClock, as_of_last_event, last_event
from qosmos.operator.translate import job_from_dljob, parse_time, rfc3339, segment_start, service_status
from qosmos.simulator.engine import SimConfig, simulate
from qosmos.simulator.traces import Trace

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


def dljob(name: str, submit: float) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": rfc3339(T0 + submit)},
        "spec": {"virtualCluster": "default", "gpus": 1},
        "status": {},
    }


class Passes:
    """The operator's bookkeeping around admit() for one partition of one 2-GPU node, its pods Running
    at admission and done after their duration of run time (they resume where they stopped, as the
    simulator's do). What the Reconciler writes on a DLJob, written here on plain objects."""

    def __init__(self, policy: str, jobs: list[tuple[str, float, float]], predict: bool = True) -> None:
        self.predict = predict
        self.rt = PartitionRuntime(Partition("default", policy=policy))
        self.turns = TurnClock()
        self.duration = {f"ns/{n}": d for n, _, d in jobs}
        self.arrivals = sorted((T0 + s, n) for n, s, _ in jobs)
        self.objs: dict[str, dict[str, Any]] = {}
        self.alloc: dict[str, Allocation] = {}
        self.segments: list[tuple[str, float, float]] = []
        self.wake: float | None = None

    def job(self, obj: dict[str, Any]) -> Job:
        job = job_from_dljob(obj)
        if self.predict:
            job.predicted_duration = self.duration[job.id]  # a perfect predictor: SRTF's oracle
        return job

    def end_of(self, obj: dict[str, Any]) -> float:
        start = segment_start(obj["status"])
        assert start is not None
        return start + self.duration[self.job(obj).id] - self.job(obj).executed

    def running(self) -> list[str]:
        return [k for k, o in self.objs.items() if o["status"].get("phase") == "Running"]

    def next_event(self) -> float | None:
        times = [t for t, n in self.arrivals if f"ns/{n}" not in self.objs]
        times += [self.end_of(self.objs[k]) for k in self.running()]
        times += [self.wake] if self.wake is not None else []
        return min(times, default=None)

    def step(self, now: float) -> tuple[list[str], list[str]]:
        """One pass at ``now``: arrivals and finishes up to it, then admit(); (preempted, started)."""
        for t, n in self.arrivals:
            if t <= now and f"ns/{n}" not in self.objs:
                self.objs[f"ns/{n}"] = dljob(n, t - T0)
        for k in self.running():
            end = self.end_of(self.objs[k])
            if end <= now:
                self.segments.append((k, parse_time(self.objs[k]["status"]["startTime"]) or 0.0, end))
                self.objs[k]["status"].update(phase="Succeeded", completionTime=rfc3339(end))
        group = [(o["status"], self.job(o)) for o in self.objs.values()]
        cluster = ClusterState([Node("n0", 2)])
        held = []
        for st, job in group:
            if st.get("phase") == "Running":
                cluster.allocate(self.alloc[job.id])
                start = segment_start(st) or 0.0
                end = start + job.predicted_duration if job.predicted_duration is not None else math.inf
                held.append(RunningJob(job, start, end, self.alloc[job.id]))  # as reconcile.running_job
        view = as_of_last_event(self.rt.policy, self.turns, group, held, now)
        self.wake = view.wake_at
        waiting = sorted(
            (view.jobs[j.id] for st, j in group if st.get("phase") is None or st.get("phase") == "Queued"),
            key=lambda j: (j.queued_since, j.submit_time, j.id),
        )
        if not waiting:
            return [], []
        res = admit(self.rt, waiting, [RunningJob(view.jobs[r.job.id], *_rest(r)) for r in held], cluster, now)
        for p in res.preemptions:  # Reconciler._requeue
            st = self.objs[p.job.id]["status"]
            start = segment_start(st)
            assert start is not None
            self.segments.append((p.job.id, start, now))
            st.update(service_status(self.job(self.objs[p.job.id]), start, now))
            st.update(phase="Queued", startTime=None, queuedSince=rfc3339(view.at))
        for s in res.starts:  # Reconciler._start_gang, and the pods Running at once
            assert s.allocation is not None
            self.alloc[s.job.id] = s.allocation
            self.objs[s.job.id]["status"].update(phase="Running", startTime=rfc3339(now))
        return [p.job.id for p in res.preemptions], [s.job.id for s in res.starts]

    def run(self) -> None:
        t = self.next_event()
        while t is not None:
            self.step(t)
            # the passes a live operator runs after its writes (pods Running, the timer): same decision
            assert self.step(t) == ([], [])
            nxt = self.next_event()
            if nxt is not None and nxt > t + 2:
                assert self.step((t + nxt) / 2) == ([], []), f"a pass between events at {(t + nxt) / 2 - T0}"
            t = nxt


def _rest(r: RunningJob) -> tuple[float, float, Allocation | None]:
    return r.start, r.expected_end, r.allocation


JOBS = [("a", 0, 9000), ("b", 100, 8000), ("c", 200, 7000), ("d", 300, 2000), ("e", 5000, 3000), ("f", 9000, 500)]


@pytest.mark.parametrize("policy", ["las", "rr", "mlfq", "srtf"])
def test_the_operators_passes_make_the_simulators_decisions(policy: str) -> None:
    """The same jobs through the simulator (overhead 0) and through passes as the operator runs them
    (at every event, again right after, and once between events): the same run segments, and no pass
    between two events changes anything (it would under LAS with service counted up to the pass)."""
    trace = Trace("t", [Job(f"ns/{n}", float(s), 1, duration=float(d)) for n, s, d in JOBS], [Node("n0", 2)])
    sim = simulate(trace, SimConfig(policy=policy, preemption_overhead=0.0))
    want = sorted((trace.jobs[i].id, round(s), round(e)) for i, _, s, e, _ in sim.segments)
    passes = Passes(policy, JOBS)
    passes.run()
    got = sorted((k, round(s - T0), round(e - T0)) for k, s, e in passes.segments)
    assert got == want
    assert len(want) > len(JOBS)  # something was preempted: the comparison is about preemptions
    assert all(o["status"]["phase"] == "Succeeded" for o in passes.objs.values())


@pytest.mark.parametrize("policy", ["las", "rr", "mlfq", "srtf", "srtf-unpredicted"])
def test_jobs_created_in_the_same_second_never_swap(policy: str) -> None:
    """DLJob times are whole seconds: jobs applied together tie on every key of RR, LAS (before any
    service) and SRTF without predictions. A tie keeps the running job, or every pass would swap them."""
    jobs = [("a", 0, 1000), ("b", 0, 1000), ("c", 0, 1000)]
    passes = Passes(policy.split("-")[0], jobs, predict=policy != "srtf-unpredicted")
    passes.run()  # asserts that the passes after each event's change nothing
    assert sorted((k, round(s - T0), round(e - T0)) for k, s, e in passes.segments) == [
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
