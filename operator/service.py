"""What the preemptive policies (SRTF, LAS, RR, MLFQ) read about running jobs, derived from the objects
as the simulator's event loop keeps it (``simulator/engine.py``: ``_sync_progress``, ``EV_REQUEUE``).

A DLJob's status holds the service of its finished run segments (``attainedServiceGpuSeconds``,
``executedSeconds``, folded in at each requeue and gang restart) and when it last went back to its
queue (``queuedSince``); the current segment runs from ``startTime`` (all pods Running), that of a gang
stalled before it ran from when it was to run (``translate.turn_start``). The turn ends of a running
job (an MLFQ demotion, a round-robin or LAS quantum: ``policy.requeue_after``) follow from those, so a
restarted operator finds them again.

The simulator runs a partition's pass only at its events (an arrival, a finish, a turn end) and
syncs the running jobs' service there; the operator runs passes at any time (watch events, its
timer). A pass therefore shows the core the service **as of the partition's latest event**: between
two events every pass sees the same keys and makes the simulator's decision of that event again (a
no-op once applied), instead of re-ranking jobs whose service grows by the second (LAS would swap
two jobs of near-equal service at every pass). A turn end is such an event wherever the pass runs;
:meth:`TurnClock.ends` also gives the next one so the runner can wake up for it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from qosmos.extender.core.admission import RunningJob
from qosmos.extender.core.ordering import OrderingPolicy
from qosmos.extender.core.types import Job
from qosmos.operator.translate import parse_time, turn_start, with_service

MAX_TURNS = 100_000  # a guard: turns are >= quantum / GPUs (tens of seconds), far fewer in practice
_Key = tuple[str, str, float, float, float, int]  # policy, job id, segment start, its service before it, GPUs


class TurnClock:
    """Turn ends of running jobs. A cache only (a pass resumes where the last one stopped counting);
    losing it changes no result."""

    def __init__(self) -> None:
        self._memo: dict[_Key, tuple[float, float | None]] = {}  # -> (elapsed since start, last turn end)
        self._seen: set[_Key] = set()

    def ends(self, policy: OrderingPolicy, job: Job, start: float, now: float) -> tuple[float | None, float | None]:
        """(the last turn end in (start, now], the next one after now) of ``job`` running since
        ``start``, ``job`` holding the service of its finished segments: the engine's EV_REQUEUE events,
        one ``policy.requeue_after`` after the other with the service attained by then."""
        key = (policy.name, job.id, start, job.attained, job.executed, job.gpus)
        self._seen.add(key)
        # elapsed run seconds since ``start`` (small numbers: Unix times would lose the sub-ulp care the
        # policies take at quantum boundaries)
        el, last = self._memo.get(key, (0.0, None))
        cur = dataclasses.replace(job)
        nxt: float | None = None
        for _ in range(MAX_TURNS):
            cur.attained = job.attained + el * job.gpus
            cur.executed = job.executed + el
            d = policy.requeue_after(cur)
            if d is None or not d > 0 or not math.isfinite(d):  # no further turn end (the engine pushes none)
                break
            if start + el + d > now:
                nxt = start + el + d
                break
            el += d
            last = start + el
        self._memo[key] = (el, last)
        return last, nxt

    def prune(self) -> None:
        """Forget the jobs no pass asked about since the last prune (finished, requeued)."""
        self._memo = {k: v for k, v in self._memo.items() if k in self._seen}
        self._seen = set()


def last_event(
    arrivals: Iterable[float | None],
    finishes: Iterable[float | None],
    turn_ends: Iterable[float | None],
    now: float,
) -> float:
    """The partition's latest event up to ``now`` as the simulator has them: an arrival (a DLJob's
    creation), a finish (its completion, or a failure of its gang), a running job's turn end. (A requeue
    happens in the pass of an event and is none itself; ``now`` bounds times from other clocks.)"""
    times = [t for group in (arrivals, finishes, turn_ends) for t in group if t is not None]
    return min(max(times, default=now), now)


@dataclass(slots=True)
class View:
    """A partition's jobs as a preemptive policy reads them (see :func:`as_of_last_event`)."""

    jobs: dict[str, Job]  # job id -> the Job to hand the core, waiting and running
    at: float  # the partition's latest event: the instant the core's decision is the simulator's for
    wake_at: float | None  # the next turn end of a running job (a pass is due then)


@dataclass(slots=True)
class _Turns:
    starts: dict[str, float | None]  # job id -> its current segment's start (None: not running yet)
    last_ends: dict[str, float]  # job id -> its latest turn end up to now
    wake: float | None  # the next turn end after now


def _turns(
    policy: OrderingPolicy,
    turns: TurnClock,
    status: Mapping[str, Mapping[str, Any]],
    running: Sequence[RunningJob],
    now: float,
) -> _Turns:
    out = _Turns({}, {}, None)
    for r in running:
        start = out.starts[r.job.id] = turn_start(status.get(r.job.id))
        if start is None:
            continue
        last, nxt = turns.ends(policy, r.job, start, now)
        if last is not None:
            out.last_ends[r.job.id] = last
        if nxt is not None:
            out.wake = nxt if out.wake is None else min(out.wake, nxt)
    return out


def _at(group: Sequence[tuple[Mapping[str, Any], Job]], t: _Turns, now: float, since: float | None) -> float:
    return last_event(
        (job.submit_time for _, job in group),
        [
            *(parse_time(st.get("completionTime")) for st, _ in group if st.get("phase") in ("Succeeded", "Failed")),
            *(parse_time(st.get("lastFailureTime")) for st, _ in group),  # a failed gang: the simulator's EV_FAIL
            since,
        ],
        t.last_ends.values(),
        now,
    )


def latest_event(
    policy: OrderingPolicy,
    turns: TurnClock,
    group: Sequence[tuple[Mapping[str, Any], Job]],
    running: Sequence[RunningJob],
    now: float,
    since: float | None = None,
) -> tuple[float, float | None] | None:
    """A partition's latest event up to ``now`` (see :func:`as_of_last_event`) and its next turn end after
    ``now`` (None: none), or None when it has no event: in a cohort, an event of any member is one of each
    (the simulator passes every member then), its turn ends included."""
    if not group and since is None:
        return None
    t = _turns(policy, turns, {job.id: st for st, job in group}, running, now)
    return _at(group, t, now, since), t.wake


def as_of_last_event(
    policy: OrderingPolicy,
    turns: TurnClock,
    group: Sequence[tuple[Mapping[str, Any], Job]],
    running: Sequence[RunningJob],
    now: float,
    since: float | None = None,
) -> View:
    """The jobs of one partition as the simulator's event loop shows them to ``policy`` at the partition's
    latest event. ``group``: (status, Job from :func:`~qosmos.operator.translate.job_from_dljob`) of
    every DLJob of the partition, finished ones included (their creation and completion are events);
    ``running``: its admitted ones, ``expected_end - start`` the rest of their predicted duration. Running jobs get
    the service of their current segment up to the event and, after a turn end, ``enqueued`` = that
    turn end (the engine's EV_REQUEUE). ``duration`` is the predicted one: the operator's stand-in for
    the simulator's oracle (SRTF's remaining time = predicted duration - executed seconds). ``since``: a
    latest event known otherwise: an earlier pass's (the VirtualCluster's ``status.lastEventTime``: a
    finished DLJob, once retired, is no longer in ``group``, and its completion would otherwise be lost
    as an event), or a cohort member's."""
    t = _turns(policy, turns, {job.id: st for st, job in group}, running, now)
    at = _at(group, t, now, since)
    jobs = {
        job.id: dataclasses.replace(job, duration=job.predicted_duration)
        for st, job in group
        if st.get("phase") in (None, "Queued")
    }
    for r in running:
        job = with_service(r.job, t.starts.get(r.job.id), at)
        job.enqueued = t.last_ends.get(job.id, job.enqueued)
        # the prediction: the rest it was expected to run at its start, plus its finished segments
        job.duration = r.expected_end - r.start + r.job.executed if math.isfinite(r.expected_end) else None
        jobs[job.id] = job
    return View(jobs, at, t.wake)


__all__ = ["MAX_TURNS", "TurnClock", "View", "as_of_last_event", "last_event", "latest_event"]
