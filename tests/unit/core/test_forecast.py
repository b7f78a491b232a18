"""The forward forecast of a partition's queue (extender/core/forecast.py), hand-computed."""

from __future__ import annotations

import math

from qosmos.extender.core.admission import Partition, PartitionRuntime, RunningJob
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.forecast import forecast
from qosmos.extender.core.types import Allocation, Job, Node, NodeGrant


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
    assert forecast(rt, [a, b], running, cluster, 0.0, runs) == {"A": 10.0, "B": 15.0}
    assert cluster.free_gpus.tolist() == [2]  # the live state is untouched


def test_easy_backfilling_starts_the_short_job_now() -> None:
    rt, cluster, running = setup("easy")
    a = Job("A", 1.0, 4, vc="p", duration=5)
    b = Job("B", 2.0, 2, vc="p", duration=3)  # ends at 3 <= A's reservation at 10
    assert forecast(rt, [a, b], running, cluster, 0.0, runs) == {"B": 0.0, "A": 10.0}


def test_a_running_job_without_expected_end_holds_its_gpus_for_ever() -> None:
    rt, cluster, running = setup()
    running[0].expected_end = math.inf
    assert forecast(rt, [Job("A", 1.0, 4, vc="p", duration=5)], running, cluster, 0.0, runs) == {}
    # a job that fits now still gets its ETA (now)
    assert forecast(rt, [Job("S", 1.0, 2, vc="p", duration=5)], running, cluster, 0.0, runs) == {"S": 0.0}


def test_preemptive_policies_are_not_forecast() -> None:
    rt, cluster, running = setup(policy="srtf")
    assert forecast(rt, [Job("A", 1.0, 4, vc="p", duration=5)], running, cluster, 0.0, runs) == {}
