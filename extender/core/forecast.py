"""Predicted starts (ETA) of a partition's waiting jobs: the admission cycle run forward from live state.

From the cluster as it is, running jobs end at their expected ends (:func:`running_end`: with a
``run_time`` predictor, once they have run the run time predicted given the time already run, seed
004 §VI-A),
each end is an event (so is the instant a waiting job's decision changes, ``AdmissionResult.revisit_at``),
and at each event the partition's queue gets one pass of :func:`admit` — the
same function the simulator's event loop and the operator call — whose starts are booked to end after
their estimated run time. A job's ETA is the time of the pass that starts it. Nothing arrives in the
forecast (only the current queue), and jobs without an expected end never release what they hold:
the jobs that would need those resources get no ETA. Preemptive policies reorder running jobs at
every pass, so they are not forecast (empty result).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from qosmos.extender.core.admission import Carry, Estimate, PartitionRuntime, RunningJob, admit
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.cohorts import CohortMember
from qosmos.extender.core.types import Job


class Forecast(NamedTuple):
    starts: dict[str, float]  # job id -> predicted start
    work: int  # job decisions made (the queue length summed over the passes run forward)


RunTime = Callable[[Job, float], float | None]
"""(job, elapsed seconds) -> its whole run time given that it has run that long, or None: unknown."""


def running_end(r: RunningJob, now: float, run_time: RunTime | None = None) -> float:
    """When running job ``r`` is expected to end, seen at ``now``. With ``run_time``: a job that has run
    e = executed + (now − start) seconds (its finished segments and the current one, which began at
    ``start``) ends when the rest of run_time(job, e) has run since ``start`` (seed 004 §VI-A: the run
    time predicted given the elapsed time, which a predictor keeps above e, so an overdue job is not
    expected to end now); without it or without a prediction, at its expected end. Never before ``now``."""
    if run_time is not None:
        total = run_time(r.job, r.job.executed + max(now - r.start, 0.0))
        if total is not None and not math.isnan(total):
            return max(r.start + total - r.job.executed, now)
    return max(r.expected_end, now)


def forecast(
    runtime: PartitionRuntime,
    waiting: Sequence[Job],
    running: Sequence[RunningJob],
    cluster: ClusterState,
    now: float,
    estimate: Estimate,
    *,
    carry: Carry | None = None,
    max_passes: int = 500,
    max_work: int = 50_000,
    run_time: RunTime | None = None,
    cohort: Sequence[CohortMember] = (),
) -> Forecast:
    """Job id -> predicted start (``starts``) and the job decisions it made (``work``), for the waiting jobs that start within
    ``max_passes`` passes and ``max_work`` job decisions in all (the queue length summed over the
    passes): a forecast is advice, never worth stalling admission; the work lets a caller share one
    budget among several forecasts. ``running`` end at :func:`running_end` (``run_time``:
    the elapsed-time predictor); jobs the forecast starts end after ``estimate``. ``cohort``: the
    partition's cohort members as its admission pass got them (their nodes shared as there; their own
    jobs stay as they are)."""
    rt = runtime
    if rt.policy.preemptive or not waiting:
        return Forecast({}, 0)
    # a private runtime: the live one's fit memo is keyed to the live cluster's release counters
    sim = PartitionRuntime(rt.partition, dataclasses.replace(rt.ctx))
    st = cluster.copy()
    queue = list(waiting)
    live = list(running)
    if run_time is not None:
        live = [dataclasses.replace(r, expected_end=running_end(r, now, run_time)) for r in live]
    ends: list[tuple[float, int, RunningJob]] = []
    seq = 0
    for r in live:
        if math.isfinite(r.expected_end):
            heapq.heappush(ends, (running_end(r, now), seq, r))
            seq += 1
    # the members as this forecast changes them: a job of theirs it reclaims leaves its GPUs and waits
    members = [dataclasses.replace(m, running=list(m.running_jobs()), waiting=list(m.waiting)) for m in cohort]
    eta: dict[str, float] = {}
    stopped: set[int] = set()  # id() of running jobs a forecast pass preempted: their end is no event
    t = now
    carry = carry or Carry()
    work = 0
    for _ in range(max_passes):
        work += len(queue)
        res = admit(sim, queue, live, st, t, carry=carry, estimate=estimate, explain=False, cohort=members)
        carry = res.carry
        for pr in res.preemptions:  # a head preempted a lower-priority job (LowerPriority): it waits again
            gone = next((r for r in live if r.job.id == pr.job.id), None)
            if gone is None:  # another member's, reclaimed: its GPUs are the start's (its queue is its own)
                _reclaimed(members, pr.job, st)
                continue
            live.remove(gone)
            stopped.add(id(gone))
            if gone.allocation is not None:
                st.release(gone.allocation)
            queue.append(pr.job)
        started = {s.job.id for s in res.starts}
        for s in res.starts:
            eta[s.job.id] = t
            if s.allocation is not None:
                st.allocate(s.allocation)
            run = RunningJob(s.job, t, t + estimate(s.job, s.allocation), s.allocation)
            live.append(run)
            if math.isfinite(run.expected_end):
                heapq.heappush(ends, (run.expected_end, seq, run))
                seq += 1
        if started:
            queue = [j for j in queue if j.id not in started]
        # the next event: an end, or the instant a waiting job's decision changes (SWAF's allowance runs out)
        t_next = min(ends[0][0] if ends else math.inf, res.revisit_at)
        if not queue or not math.isfinite(t_next) or work >= max_work:
            break
        t = t_next
        while ends and ends[0][0] == t:  # everything ending at t is released at t
            _, _, r = heapq.heappop(ends)
            if id(r) in stopped:
                continue  # preempted before its end
            live.remove(r)
            if r.allocation is not None:
                st.release(r.allocation)
    return Forecast(eta, work)


def _reclaimed(members: list[CohortMember], job: Job, st: ClusterState) -> None:
    """A forecast pass reclaimed ``job`` from the cohort member running it: released on the forecast's
    books, it waits in that member's queue (its demand then keeps the member's share from being lent)."""
    for k, m in enumerate(members):
        running = list(m.running_jobs())
        gone = next((r for r in running if r.job.id == job.id), None)
        if gone is None:
            continue
        gpus = gone.allocation.gpus if gone.allocation is not None else 0
        waiting_gpus = None
        if m.waiting_gpus is not None:
            waiting_gpus = {**m.waiting_gpus, job.gpus: m.waiting_gpus.get(job.gpus, 0) + 1}
        members[k] = dataclasses.replace(
            m,
            running=[r for r in running if r is not gone],
            waiting=[*m.waiting, job],
            held=None if m.held is None else m.held - gpus,
            waiting_gpus=waiting_gpus,
        )
        if gone.allocation is not None:
            st.release(gone.allocation)
        return


__all__ = ["Forecast", "RunTime", "forecast", "running_end"]
