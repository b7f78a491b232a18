"""Preemptive policies in the operator (operator/service.py with the translation and the core's
admit()): turn ends, the partition's latest event, and the decisions of the operator's own passes
(plan and applier), compared with the simulator's on the same jobs."""

from __future__ import annotations

import math
from typing import Any

import pytest
from qosmos.extender.core.admission import Partition, PartitionRuntime, RunningJob, admit
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.ordering import MLFQ_QUANTA, RR_QUANTUM, get_policy
from qosmos.extender.core.types import Job, Node
from qosmos.operator.durations import Durations
from qosmos.operator.reconcile import Reconciler
from qosmos.operator.service import TurnClock, last_event
from qosmos.operator.translate import parse_time, rfc3339
from qosmos.simulator.engine import SimConfig, simulate
from qosmos.simulator.traces import Trace
from qosmos.testing.fakekube import FakeKube, gpu_node

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
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "creationTimestamp": rfc3339(T0 + submit)},
        "spec": {"virtualCluster": "default", "gpus": 1},
        "status": {},
    }


class Oracle(Durations):
    """SRTF's oracle: every job's run time is known (the simulator's ``duration``)."""

    def __init__(self, duration: dict[str, float]) -> None:
        super().__init__(None)
        self.duration = duration

    def predict(self, job: Job, now: float) -> float | None:
        return self.duration[job.id]

    def predict_run(self, job: Job, now: float, elapsed: float) -> float | None:
        return None  # no ETAs: not what is compared


class Passes:
    """The operator itself (``Reconciler``: its plan and its applier) on one 2-GPU node of an in-memory
    apiserver (``FakeKube``). The kubelet here starts a gang's pods as soon as they exist, runs each for
    the rest of its job's run time (they resume where they stopped, as the simulator's do) and ends a
    deleted pod at once (preemption overhead 0). Run segments are read from the status writes."""

    def __init__(self, policy: str, jobs: list[tuple[str, float, float]], predict: bool = True) -> None:
        vc = {"metadata": {"name": "default"}, "spec": {"policy": policy, "placement": "consolidate"}}
        self.kube = FakeKube([gpu_node("n0", 2)], vcs=[vc])
        self.now = T0
        duration = {f"ns/{n}": float(d) for n, _, d in jobs}
        self.rec = Reconciler(
            self.kube, durations=Oracle(duration) if predict else Durations(None), clock=lambda: self.now
        )  # type: ignore[arg-type]
        self.duration = duration
        self.arrivals = sorted((T0 + s, n) for n, s, _ in jobs)
        self.ends: dict[str, float] = {}  # pod -> when it finishes its run
        self.open: dict[str, float] = {}  # job -> start of its current segment
        self.segments: list[tuple[str, float, float]] = []
        self.wake: float | None = None

    def next_event(self) -> float | None:
        times = [t for t, n in self.arrivals if n not in self.kube.jobs]
        times += list(self.ends.values())
        times += [self.wake] if self.wake is not None else []
        return min(times, default=None)

    def step(self, now: float) -> tuple[list[str], list[str]]:
        """One pass at ``now``, then the kubelet; (preempted, admitted)."""
        self.now = now
        for t, n in self.arrivals:
            if t <= now and n not in self.kube.jobs:
                self.kube.add(dljob(n, t - T0))
        for pod, end in list(self.ends.items()):
            if end <= now:
                st = self.kube.pods[pod]["status"]
                st["phase"] = "Succeeded"
                st["containerStatuses"] = [{"name": "main", "state": {"terminated": {"finishedAt": rfc3339(end)}}}]
                del self.ends[pod]
        seen = len(self.kube.status_patches)
        rep = self.rec.run_pass()
        self.wake = rep.wake_at
        for name, patch in self.kube.status_patches[seen:]:
            key = f"ns/{name}"
            if patch.get("phase") == "Running":
                self.open[key] = parse_time(patch["startTime"]) or now
            elif patch.get("phase") in ("Queued", "Succeeded") and key in self.open:
                end = parse_time(patch.get("completionTime")) or now
                self.segments.append((key, self.open.pop(key), end))
        self.kube.terminate()  # preempted pods leave at once
        for pod in [p for p in self.kube.pods.values() if not p["spec"].get("nodeName")]:
            name = pod["metadata"]["name"]
            job = self.kube.jobs[pod["metadata"]["labels"]["qosmos.io/job"]]
            self.kube.bind(name, "n0")
            executed = float(job["status"].get("executedSeconds") or 0.0)
            self.ends[name] = now + self.duration[f"ns/{job['metadata']['name']}"] - executed
        for pod in [n for n in self.ends if n not in self.kube.pods]:
            del self.ends[pod]  # deleted (preempted): its run stopped
        return rep.preempted, rep.admitted

    def run(self) -> None:
        t = self.next_event()
        while t is not None:
            self.step(t)
            # the passes a live operator runs after its writes (pods Running, the timer): same decision
            assert self.step(t) == ([], [])
            assert self.step(t) == ([], [])
            nxt = self.next_event()
            if nxt is not None and nxt > t + 2:
                assert self.step((t + nxt) / 2) == ([], []), f"a pass between events at {(t + nxt) / 2 - T0}"
            t = nxt


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
    assert all(o["status"]["phase"] == "Succeeded" for o in passes.kube.jobs.values())


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
