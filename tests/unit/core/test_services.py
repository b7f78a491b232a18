"""SODA's inference-first rule (extender/core/services.py) and the head-of-queue requeue
(``admit(first=...)``), on clusters small enough to check by hand."""

from __future__ import annotations

import pytest
from qosmos.extender.core.admission import Partition, PartitionRuntime, RunningJob, admit
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.services import GPU_NODES, ServiceReplica, place_services
from qosmos.extender.core.types import Allocation, Job, JobKind, Node, NodeGrant


def nodes(*gpus: int, cpu: int = 32_000) -> ClusterState:
    return ClusterState([Node(f"n{i}", g, cpu_milli=cpu, memory_mib=65_536) for i, g in enumerate(gpus)])


def hold(cluster: ClusterState, job: Job, node: int, gpus: int, cpu: int = 0) -> RunningJob:
    free = [i for i in range(int(cluster.gpu_cap[node])) if cluster.gpu_free_milli[node, i] == 1000]
    alloc = Allocation((NodeGrant(node, tuple(free[:gpus]), cpu_milli=cpu),))
    cluster.allocate(alloc)
    return RunningJob(job, 0.0, 100.0, alloc)


def gpu_replica(i: int, since: float = 0.0) -> ServiceReplica:
    return ServiceReplica(f"ns/svc-gpu-{i}", "ns/svc", since, gpus=1, cpu_milli=1000)


def test_free_room_is_used_and_booked_without_preempting() -> None:
    c = nodes(2)
    r = hold(c, Job("a", 0.0, 1), 0, 1)
    out = place_services([gpu_replica(0)], [r], c)
    assert [p.id for p, _ in out.placed] == ["ns/svc-gpu-0"] and not out.preemptions
    assert int(c.free_gpus[0]) == 0  # booked: an admission pass after it sees no free GPU


def test_the_last_submitted_training_job_is_preempted_and_released() -> None:
    # one 4-GPU node, full: a (submitted at 10), b (at 30), c (at 20); the replica needs one GPU.
    c = nodes(4)
    a = hold(c, Job("a", 10.0, 2), 0, 2)
    b = hold(c, Job("b", 30.0, 1), 0, 1)
    cc = hold(c, Job("c", 20.0, 1), 0, 1)
    out = place_services([gpu_replica(0)], [a, b, cc], c)
    assert [p.job.id for p in out.preemptions] == ["b"]  # the last submitted, not the smallest or the first
    assert "head of its queue" in out.preemptions[0].reason
    assert len(out.placed) == 1 and int(c.free_gpus[0]) == 0  # b's GPU is the replica's now


def test_inference_replicas_are_never_victims_and_cpu_jobs_are() -> None:
    c = nodes(1, cpu=8000)
    inf = hold(c, Job("other-service", 50.0, 1, kind=JobKind.INFERENCE), 0, 1)
    cpu = hold(c, Job("cpu-job", 5.0, 0, kind=JobKind.CPU, cpu_milli=6000), 0, 0, cpu=6000)
    # a GPU replica cannot fit: only an inference replica holds the GPU -> nothing preempted
    out = place_services([gpu_replica(0)], [inf, cpu], c)
    assert not out.preemptions and not out.placed
    assert out.unplaced[0][1] == "it does not fit even with every training or CPU job on its nodes preempted"
    # a CPU replica (4 cores on GPU nodes) takes the CPU job's cores
    rep = ServiceReplica("ns/svc-cpu-0", "ns/svc", 1.0, cpu_milli=4000, gpu_nodes_only=True)
    out = place_services([rep], [inf, cpu], c)
    assert [p.job.id for p in out.preemptions] == ["cpu-job"]
    assert int(c.free_cpu[0]) == 8000 - 4000


def test_a_job_on_a_node_the_replica_cannot_use_is_spared() -> None:
    # n0: 2 GPUs held by "old" (submitted 1); n1 has no GPU and runs "new" (submitted 9, cores only).
    # The GPU replica can only go to n0: "new", though last submitted, frees nothing there.
    c = nodes(2, 0, cpu=4000)
    old = hold(c, Job("old", 1.0, 2), 0, 2)
    new = hold(c, Job("new", 9.0, 0, kind=JobKind.CPU, cpu_milli=4000), 1, 0, cpu=4000)
    out = place_services([gpu_replica(0)], [old, new], c)
    assert [p.job.id for p in out.preemptions] == ["old"]


def test_only_victims_on_the_chosen_node_are_preempted() -> None:
    # n0 full with x (submitted 40); n1 full with y (50) and z (30). Last submitted first: y is tried
    # (frees a GPU on n1), the replica fits there; x and z keep running.
    c = nodes(1, 2)
    x = hold(c, Job("x", 40.0, 1), 0, 1)
    y = hold(c, Job("y", 50.0, 1), 1, 1)
    z = hold(c, Job("z", 30.0, 1), 1, 1)
    out = place_services([gpu_replica(0), gpu_replica(1, since=5.0)], [x, y, z], c)
    # the second replica then preempts x (the last submitted of those left), not z
    assert [p.job.id for p in out.preemptions] == ["y", "x"]
    assert [a.grants[0].node for _, a in out.placed] == [1, 0]


def test_a_gang_is_released_on_every_node_and_preempted_once() -> None:
    c = nodes(2, 2)
    gang_alloc = Allocation((NodeGrant(0, (0, 1)), NodeGrant(1, (0, 1))))
    c.allocate(gang_alloc)
    gang = RunningJob(Job("gang", 3.0, 4, nodes=2), 0.0, 100.0, gang_alloc)
    out = place_services([gpu_replica(0), gpu_replica(1)], [gang], c)
    assert [p.job.id for p in out.preemptions] == ["gang"]
    assert len(out.placed) == 2 and int(c.free_gpus.sum()) == 2  # 4 released, 2 taken by replicas


def test_cpu_replicas_stay_on_gpu_nodes() -> None:
    c = nodes(0, 1, cpu=4000)
    rep = ServiceReplica("ns/svc-cpu-0", "ns/svc", 0.0, cpu_milli=4000, gpu_nodes_only=True)
    out = place_services([rep], [], c)
    assert out.placed[0][1].grants[0].node == 1
    assert GPU_NODES in c.pools


def test_a_replica_that_can_never_fit_says_why() -> None:
    c = nodes(1)
    out = place_services([ServiceReplica("ns/big", "ns/svc", 0.0, gpus=2)], [], c)
    assert not out.placed and out.unplaced[0][1]


def test_bad_replicas_are_refused() -> None:
    with pytest.raises(InvalidInput, match="gpus"):
        ServiceReplica("x", "s", 0.0, gpus=-1)
    with pytest.raises(InvalidInput, match="id"):
        ServiceReplica("", "s", 0.0)


@pytest.mark.parametrize(("presorted", "explain"), [(False, True), (True, True), (True, False)])
def test_first_puts_a_preempted_job_at_the_head_of_its_queue(presorted: bool, explain: bool) -> None:
    # FIFO; one free GPU; "early" (submitted 1) and "late" (submitted 9) wait. "late" was preempted
    # for a service: it goes first although FIFO would start "early".
    c = nodes(1)
    rt = PartitionRuntime(Partition("default"))
    waiting = [Job("early", 1.0, 1), Job("late", 9.0, 1)]
    plain = admit(rt, waiting, [], c, 10.0, presorted=presorted, explain=explain)
    assert [s.job.id for s in plain.starts] == ["early"]
    res = admit(rt, waiting, [], c, 10.0, presorted=presorted, explain=explain, first={"late"})
    assert [s.job.id for s in res.starts] == ["late"]
    assert [w.job.id for w in res.waiting] == (["early"] if explain else [])


def test_a_victim_tried_on_another_node_is_spared() -> None:
    # n0: x (submitted 50) holds the GPU, the CPU job w (submitted 1) all 8 cores; n1: y (40) the GPU
    # and all cores. The replica needs a GPU and 4 cores. Releasing x (the last submitted) frees n0's
    # GPU but no cores; releasing y then makes n1 fit: only y is preempted, x keeps running.
    c = nodes(1, 1, cpu=8000)
    x = hold(c, Job("x", 50.0, 1), 0, 1)
    w = hold(c, Job("w", 1.0, 0, kind=JobKind.CPU, cpu_milli=8000), 0, 0, cpu=8000)
    y = hold(c, Job("y", 40.0, 1, cpu_milli=8000), 1, 1, cpu=8000)
    rep = ServiceReplica("ns/svc-gpu-0", "ns/svc", 0.0, gpus=1, cpu_milli=4000)
    out = place_services([rep], [x, w, y], c)
    assert [p.job.id for p in out.preemptions] == ["y"]
    assert out.placed[0][1].grants[0].node == 1
    assert int(c.free_gpus[0]) == 0  # x still holds n0's GPU on the books
