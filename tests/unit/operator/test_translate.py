"""DLJob <-> core Job, nodes <-> ClusterState, carry <-> annotation, gang pods (operator/translate.py)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from qosmos.extender.cache import pod_info
from qosmos.extender.core.admission import Carry, HeadReservation
from qosmos.extender.core.cluster import ClusterState
from qosmos.extender.core.errors import InvalidInput
from qosmos.extender.core.placement import get_placer
from qosmos.extender.core.types import Allocation, JobKind, NodeGrant, PlacementRequest, QoSClass
from qosmos.operator.crds import DLJobSpec
from qosmos.operator.reconcile import reason_of
from qosmos.operator.translate import (
    ANN_NODES,
    ANN_PLACEMENT,
    GATE,
    LABEL_ATTEMPT,
    NO_VC,
    Gang,
    assign_nodes,
    attempt_of,
    book_cordoned,
    book_gang,
    book_pods,
    carry_from_json,
    carry_to_json,
    core_nodes,
    gang_pods,
    job_from_dljob,
    parse_time,
    rfc3339,
    segment_start,
    service_status,
    with_service,
)


def dljob(name: str = "j", ns: str = "team", **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"virtualCluster": "vc-a", "gpus": 4}
    base.update(spec)
    return {
        "apiVersion": "qosmos.io/v1alpha1",
        "kind": "DLJob",
        "metadata": {"name": name, "namespace": ns, "uid": "u-1", "creationTimestamp": "2026-01-02T03:04:05Z"},
        "spec": base,
    }


def node(name: str, gpus: int = 8, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"qosmos.io/gpu-model": "V100M32", **labels}},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "96", "memory": "768Gi"}},
    }


def vc(name: str, **selector: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"nodeSelector": selector}}


def test_dljob_becomes_the_core_job() -> None:
    obj = dljob(
        gpus=8,
        gpusPerNode=4,
        cpus="2",
        memory="8Gi",
        qosClass="Urgent",
        modelType="ResNet50",
        globalBatchSize=128,
        iterations=2000,
        gpuModels=["V100M32"],
    )
    job = job_from_dljob(obj, predicted_duration=30.0)
    assert job.id == "team/j" and job.user == "team" and job.name == "j" and job.vc == "vc-a"
    assert job.submit_time == parse_time("2026-01-02T03:04:05Z") == 1767323045.0
    assert (job.gpus, job.nodes, job.kind, job.qos) == (8, 2, JobKind.TRAINING, QoSClass.URGENT)
    assert (job.model, job.batch, job.iters) == ("ResNet50", 128, 2000)
    assert (job.cpu_milli, job.memory_mib) == (2 * 2000, 2 * 8192)  # per pod x 2 pods
    assert job.gpu_models == ("V100M32",) and job.predicted_duration == 30.0 and job.has_genie_task


def test_cpu_dljob_is_one_pod_without_gpus() -> None:
    job = job_from_dljob(dljob(kind="cpu", gpus=0, cpus=8))
    assert (job.gpus, job.kind, job.cpu_milli, job.nodes) == (0, JobKind.CPU, 8000, 0)


def test_a_dljob_without_creation_time_is_refused() -> None:
    obj = dljob()
    del obj["metadata"]["creationTimestamp"]
    with pytest.raises(InvalidInput, match="creationTimestamp"):
        job_from_dljob(obj)


def test_nodes_go_to_the_first_matching_virtual_cluster_by_name() -> None:
    nodes = [node("n0", pool="a"), node("n1", pool="b"), node("n2", pool="c")]
    vcs = [vc("vc-b", pool="b"), vc("vc-a", pool="a"), vc("vc-all")]
    assert assign_nodes(nodes, vcs) == {"n0": "vc-a", "n1": "vc-all", "n2": "vc-all"}
    assert assign_nodes(nodes, [vc("vc-a", pool="a")]) == {"n0": "vc-a", "n1": NO_VC, "n2": NO_VC}
    cluster = ClusterState(core_nodes(nodes, assign_nodes(nodes, [vc("vc-a", pool="a")])))
    assert cluster.capacity("vc-a") == 8 and cluster.capacity(NO_VC) == 16
    assert cluster.nodes[0].gpu_model == "V100M32" and cluster.cpu_cap[0] == 96_000


def test_admitted_gang_and_foreign_pods_are_booked() -> None:
    nodes = [node("n0", pool="a"), node("n1", pool="a")]
    cluster = ClusterState(core_nodes(nodes, {"n0": "vc-a", "n1": "vc-a"}))
    other = pod_info(
        {
            "metadata": {"name": "x", "namespace": "d", "uid": "x"},
            "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"nvidia.com/gpu": "3"}}}]},
            "status": {"phase": "Running"},
        }
    )
    book_pods(cluster, [other])
    assert cluster.free_gpus.tolist() == [8, 5]
    spec = DLJobSpec.model_validate({"virtualCluster": "vc-a", "gpus": 8, "gpusPerNode": 4, "cpus": 1})
    alloc = book_gang(cluster, Gang(("n0", "n1"), (4, 4)), spec, bound={1: "n0"})  # pod 1 landed on n0
    assert alloc is not None and alloc.gpus == 8 and [g.node for g in alloc.grants] == [0, 0]
    assert cluster.free_gpus.tolist() == [0, 5]
    assert cluster.free_cpu[0] == 96_000 - 2 * 1000
    # what no longer fits is left out, never double-booked
    assert book_gang(cluster, Gang(("n0",), (1,)), spec) is None


def test_a_cordoned_node_takes_nothing_new_but_keeps_what_runs_there() -> None:
    nodes = [node("n0"), node("n1")]
    nodes[1]["spec"] = {"unschedulable": True}  # CES asleep or waking, or kubectl cordon
    cluster = ClusterState(core_nodes(nodes, {"n0": "vc-a", "n1": "vc-a"}))
    spec = DLJobSpec.model_validate({"virtualCluster": "vc-a", "gpus": 2, "cpus": 1})
    held = book_gang(cluster, Gang(("n1",), (2,)), spec)  # a gang already running there
    assert held is not None
    book_cordoned(cluster, nodes)
    assert cluster.free_gpus.tolist() == [8, 0]
    assert cluster.free_cpu[1] == 0 and cluster.free_cpu[0] == 96_000
    assert cluster.capacity("vc-a") == 16  # still the VirtualCluster's nodes
    # a gang there preempted within a pass (its allocation released) leaves room nothing new may take
    trial = cluster.copy()
    trial.release(held)
    assert trial.free_gpus.tolist() == [8, 2]
    ask = PlacementRequest(gpus=2, vc="vc-a")
    placed = get_placer("first-fit").place(ask, trial)
    assert placed is not None and placed.nodes == (0,)
    trial.allocate(Allocation((NodeGrant(0, tuple(range(8))),)))
    assert get_placer("first-fit").place(ask, trial) is None
    assert cluster.emptied().fit_mask(ask, 2, 2).tolist() == [True, True]  # it may be usable again later


def test_gang_from_allocation_and_status_round_trip() -> None:
    cluster = ClusterState(core_nodes([node("n0"), node("n1")], {}))
    alloc = Allocation((NodeGrant(0, (0, 1, 2, 3, 4, 5, 6, 7)), NodeGrant(1, (0, 1, 2, 3))))
    gang = Gang.of_allocation(alloc, cluster)
    assert gang == Gang(("n0", "n1"), (8, 4)) and gang.uniform is None
    p = gang.placement()
    assert (p.nodes, p.gpus_per_node, p.gpus_by_node, p.shape) == (2, 8, [8, 4], "8+4")
    status = {"placement": p.model_dump(by_alias=True, exclude_none=True)}
    assert Gang.of_status(status) == gang
    even = Gang(("n0", "n1"), (2, 2))
    assert even.placement().shape == "2x2" and even.placement().gpus_by_node is None
    assert Gang.of_status({"placement": even.placement().model_dump(by_alias=True, exclude_none=True)}) == even
    assert Gang.of_status({}) is None


def test_carry_survives_the_annotation_with_times_shifted() -> None:
    cluster = ClusterState(core_nodes([node("n0"), node("n1")], {}))
    carry = Carry(HeadReservation("ns/h", 30.0, 45.0, Allocation((NodeGrant(1, (0, 1)),)), ("ns/b",)), 7)
    text = carry_to_json(carry, cluster, offset=1000.0)
    back = carry_from_json(text, cluster, offset=1010.0)  # the next pass, 10 s later
    assert back.max_queue_len == 7 and back.reservation is not None
    r = back.reservation
    assert (r.job_id, r.start, r.latest, r.backfilled) == ("ns/h", 20.0, 35.0, ("ns/b",))
    assert r.allocation is not None and r.allocation.grants[0].node == 1 and r.allocation.grants[0].gpu_ids == (0, 1)
    never = carry_from_json(carry_to_json(Carry(HeadReservation("h", math.inf, math.inf, None)), cluster), cluster)
    assert never.reservation is not None and math.isinf(never.reservation.start)
    # unreadable, or naming a node that is gone: start afresh
    assert carry_from_json("{not json", cluster) == Carry()
    gone = ClusterState(core_nodes([node("n0")], {}))
    assert carry_from_json(text, gone) == Carry()


def test_gang_pods_are_gated_owned_labelled_and_annotated() -> None:
    obj = dljob(
        gpus=4,
        gpusPerNode=2,
        cpus=2,
        memory="4Gi",
        gpuModels=["V100M32", "A100"],
        template={
            "metadata": {"labels": {"team": "vision"}, "annotations": {"qosmos.io/run-duration": "5s"}},
            "spec": {"containers": [{"name": "train", "image": "img"}]},
        },
    )
    pods = gang_pods(obj, Gang(("n0", "n1"), (2, 2)), attempt=3)
    assert [p["metadata"]["name"] for p in pods] == ["j-3-0", "j-3-1"]
    for i, p in enumerate(pods):
        m, s = p["metadata"], p["spec"]
        assert m["namespace"] == "team"
        assert m["labels"] == {
            "team": "vision",
            "qosmos.io/job": "j",
            "qosmos.io/vc": "vc-a",
            "qosmos.io/attempt": "3",
            "qosmos.io/replica-index": str(i),
        }
        assert m["annotations"]["qosmos.io/run-duration"] == "5s"
        assert m["annotations"][ANN_PLACEMENT] == "2x2" and m["annotations"][ANN_NODES] == "n0,n1"
        assert m["annotations"]["qosmos.io/gpu-models"] == "V100M32|A100"
        assert m["ownerReferences"][0]["uid"] == "u-1" and m["ownerReferences"][0]["controller"] is True
        assert s["schedulerName"] == "qosmos-scheduler" and s["schedulingGates"] == [{"name": GATE}]
        assert s["restartPolicy"] == "Never"
        res = s["containers"][0]["resources"]
        assert res["requests"] == {"nvidia.com/gpu": "2", "cpu": "2", "memory": "4Gi"}
        assert res["limits"] == {"nvidia.com/gpu": "2"}
    for i, p in enumerate(pods):  # pod i pinned to the core's node i
        terms = p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert [t["matchFields"][0]["values"] for t in terms["nodeSelectorTerms"]] == [[f"n{i}"]]
    # the extender reads the pods as the gang they are
    info = pod_info({**pods[0], "metadata": {**pods[0]["metadata"], "uid": "p"}})
    assert (info.gpus, info.vc, info.job, info.placement) == (2, "vc-a", "team/j", "2x2")
    assert obj["spec"]["template"]["spec"]["containers"][0] == {"name": "train", "image": "img"}  # not mutated


def test_a_gang_of_one_pod_needs_no_gate_but_keeps_the_templates_gates() -> None:
    gated = {"spec": {"schedulingGates": [{"name": "example.com/quota"}], "containers": [{"name": "c"}]}}
    (pod,) = gang_pods(dljob(gpus=2, template=gated), Gang(("n0",), (2,)), attempt=0)
    assert pod["spec"]["schedulingGates"] == [{"name": "example.com/quota"}]
    two = gang_pods(dljob(gpus=4, template=gated), Gang(("n0", "n1"), (2, 2)), attempt=0)
    assert all(p["spec"]["schedulingGates"] == [{"name": "example.com/quota"}, {"name": GATE}] for p in two)


def test_uneven_gang_pods_carry_no_shape_annotation() -> None:
    pods = gang_pods(dljob(gpus=12), Gang(("n0", "n1"), (8, 4)), attempt=0)
    assert [p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] for p in pods] == ["8", "4"]
    assert all(ANN_PLACEMENT not in p["metadata"]["annotations"] for p in pods)


def test_wait_codes_become_condition_reasons() -> None:
    assert [reason_of(c) for c in ("no-fit", "behind-head", "head", "quota", "reserved", "policy")] == [
        "NoFit",
        "BehindHead",
        "Head",
        "Quota",
        "Reserved",
        "Policy",
    ]


# ---- service (preemptive policies) -----------------------------------------------------------


def test_a_fresh_dljob_has_no_service_and_queues_since_its_creation() -> None:
    job = job_from_dljob(dljob())
    assert (job.attained, job.executed) == (0.0, 0.0)
    assert math.isnan(job.enqueued) and job.queued_since == job.submit_time


def test_the_status_service_becomes_the_jobs() -> None:
    obj = dljob(gpus=4)
    obj["status"] = {
        "phase": "Queued",
        "attainedServiceGpuSeconds": 480.5,
        "executedSeconds": 120.125,
        "queuedSince": "2026-01-02T03:10:00Z",
    }
    job = job_from_dljob(obj)
    assert (job.attained, job.executed) == (480.5, 120.125)
    assert job.enqueued == job.queued_since == parse_time("2026-01-02T03:10:00Z") == job.submit_time + 355


def test_the_current_segment_runs_from_start_time_of_an_admitted_dljob() -> None:
    st = {"phase": "Running", "startTime": "2026-01-02T03:05:00Z", "admittedAt": "2026-01-02T03:04:50Z"}
    assert segment_start(st) == parse_time("2026-01-02T03:05:00Z")
    assert segment_start({**st, "phase": "Admitted"}) == parse_time("2026-01-02T03:05:00Z")
    assert segment_start({"phase": "Admitted", "admittedAt": "2026-01-02T03:04:50Z"}) is None  # pods not running
    assert segment_start({**st, "phase": "Queued"}) is None and segment_start({**st, "phase": "Succeeded"}) is None
    assert segment_start(None) is None


def test_with_service_adds_the_current_segment_times_the_gpus() -> None:
    job = job_from_dljob({**dljob(gpus=4), "status": {"attainedServiceGpuSeconds": 100, "executedSeconds": 25}})
    now = job.submit_time + 1000
    j = with_service(job, now - 30, now)
    assert (j.attained, j.executed) == (100 + 30 * 4, 25 + 30)
    assert (job.attained, job.executed) == (100, 25)  # a copy: the pass's Job holds the finished segments
    for start in (None, now + 5):  # not running, or started after the instant asked about
        j = with_service(job, start, now)
        assert (j.attained, j.executed) == (100, 25) and j is not job


def test_a_folded_segment_reads_back_as_service_and_accumulates() -> None:
    """Status -> Job -> fold -> status: what a requeue writes is what the next pass reads, segment after
    segment (a restarted operator rebuilds the service from the object alone)."""
    obj = dljob(gpus=2)
    t0 = job_from_dljob(obj).submit_time
    obj["status"] = {"phase": "Running", "startTime": rfc3339(t0 + 10)}
    obj["status"].update(service_status(job_from_dljob(obj), segment_start(obj["status"]), t0 + 70))
    obj["status"].update(phase="Queued", startTime=None, queuedSince=rfc3339(t0 + 70))
    job = job_from_dljob(obj)
    assert (job.attained, job.executed, job.queued_since) == (120.0, 60.0, t0 + 70)
    obj["status"].update(phase="Running", startTime=rfc3339(t0 + 100))
    obj["status"].update(service_status(job_from_dljob(obj), segment_start(obj["status"]), t0 + 100.5))
    assert job_from_dljob(obj).attained == 121.0 and job_from_dljob(obj).executed == 60.5


def test_each_requeue_and_restart_is_a_new_gang_attempt() -> None:
    assert attempt_of(None) == 0 and attempt_of({"restarts": 1}) == 1
    st = {"restarts": 1, "preemptions": 2}
    assert attempt_of(st) == 3
    pods = gang_pods(dljob(gpus=2, gpusPerNode=1), Gang(("n0", "n1"), (1, 1)), attempt_of(st))
    assert [p["metadata"]["name"] for p in pods] == ["j-3-0", "j-3-1"]
    assert {p["metadata"]["labels"][LABEL_ATTEMPT] for p in pods} == {"3"}
